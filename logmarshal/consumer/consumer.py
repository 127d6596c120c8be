"""Consumer: claims partitions through the coordination log and hands out their messages.

Every decision is made by a :class:`logmarshal.core.MemberCore` (no I/O, no clock), the same
core the deterministic simulator runs. This module is its edge: it feeds the core events
(the replay moved, a write landed, a fetch returned, the user polls, time passed) under one
lock, and carries its actions out without blocking:

- coordination writes go to :class:`.writer.CoordinationWriter` (a thread per coordination
  partition, or one for all on the embedded cluster; a step's writes to one partition in
  one call), their answers come back as events;
- fetches go to one :class:`.fetcher.MemberFetcher` (one thread, one reader of every held
  partition: docs/architecture.md, "Consumer core: decisions apart from threads");
- the Marshaler's replay threads report progress as events;
- events that arrive together from several threads are stepped together (one pass of the
  core for all of them), so a heartbeat pass's answers cost one pass, not one each;
- a *driver* thread ticks the core (heartbeats, claim passes, lease expiry) and does the
  edge's own look-ups: which topics match, how many partitions they have, how far behind
  a held partition is;
- ``poll`` (the caller's thread, like Kafka's consumer) asks the core for a batch of one
  partition, and runs the ``on_assigned`` / ``on_revoked`` callbacks.

Two modes: ``"alo"`` (at least once: ``commit`` marks messages handled, in any order;
heartbeats carry the highest *contiguous* committed offset) and ``"amo"`` (at most once: a
batch is reserved with ClaimingMessages and confirmed by a heartbeat before the user sees
it). The clock only predicts; ownership is read from the replay.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Unpack, cast

from .._config import configure
from .._seconds import seconds
from .._tailer import Halt
from ..clock import SystemClock
from ..cluster import Message, check_max_bytes
from ..core import (
    Action,
    Assigned,
    CatchUp,
    Close,
    Closed,
    Event,
    Fetch,
    HandOut,
    LogEnds,
    LookUp,
    MemberCore,
    NoStart,
    Poll,
    Replayed,
    Revoke,
    Tick,
    Topics,
    Write,
)
from ..errors import RETRIABLE, ClosedError, ConsumerFailed, NoPosition
from ..marshaler import Marshaler
from ..retry import RetryPolicy
from .callbacks import PartitionCallbacks, PollLock
from .catchup import CatchingUp
from .committing import OFFSET, GivenBack, commit_messages, refuse_non_messages, take_back
from .config import (
    DEFAULT_CONFIG,
    RENAMED,
    ConsumerConfig,
    Mode,
    TopicPartition,
    TopicSelection,
    check_edge_settings,
    checked_max_records,
    core_options,
    partition_keys,
    task_sources,
    topic_names,
)
from .failstop import FailStop
from .fetcher import MemberFetcher
from .halts import Halts
from .handler import iterate, run_handler
from .mirror import OffsetMirror, lag_of, open_mirror, positions_held
from .patterns import PatternTopics
from .topics import log_ends, read_subscription, tasks_and_sources
from .writer import CoordinationWriter

__all__ = ["Consumer", "NoPosition"]

log = logging.getLogger(__name__)


class Consumer:
    """Consumes ``topics`` (names, or a compiled regex matched in full against the cluster's
    topics on every claim pass) as member ``marshaler.client_id`` of ``marshaler.group_id``.
    One consumer per topic, task or task source per Marshaler: a second one naming one is
    refused, and a pattern leaves out what another consumer of its Marshaler has.

    Settings are keywords, kafka-python style: :attr:`DEFAULT_CONFIG` lists every one with
    its default and what it means (an unknown name is refused, naming the known ones). Those
    of the member's decisions go into one :class:`~logmarshal.core.CoreOptions` under the
    same names (seconds here are its milliseconds under the name with ``_ms``), which
    validates them and derives the defaults given as None; HB is the Marshaler's
    (:attr:`Marshaler.heartbeat_interval_ms`).
    """

    #: every setting, name -> default (:data:`logmarshal.consumer.config.DEFAULT_CONFIG`)
    DEFAULT_CONFIG: ClassVar[Mapping[str, Any]] = DEFAULT_CONFIG
    #: old name -> the setting's name: taken with a DeprecationWarning
    RENAMED: ClassVar[Mapping[str, str]] = RENAMED

    def __init__(
        self,
        marshaler: Marshaler,
        topics: TopicSelection,
        **configs: Unpack[ConsumerConfig],
    ) -> None:
        config = configure(type(self).__name__, self.DEFAULT_CONFIG, configs, self.RENAMED)
        if not isinstance(marshaler, Marshaler):
            raise TypeError(f"a Consumer needs a Marshaler, got {marshaler!r}")
        check_edge_settings(config)
        self._config: Mapping[str, Any] = MappingProxyType(config)
        #: tasks: task name -> its source topics (sorted)
        self._tasks = task_sources(config["tasks"])
        self._pattern: PatternTopics | None = None
        self._topics: tuple[str, ...] = ()
        if isinstance(topics, re.Pattern):
            self._pattern = PatternTopics(topics, marshaler.cluster, _name_of(marshaler))
        else:
            self._topics = topic_names(topics, self._tasks)
        fetch_wait: float = config["fetch_wait"]
        check_max_bytes(config["max_partition_fetch_bytes"], "max_partition_fetch_bytes")
        self._marshaler = marshaler
        self._cluster = marshaler.cluster
        self._clock = marshaler.clock
        self._metrics = marshaler.metrics  # its Prometheus series, if the Marshaler has them
        rng: random.Random | None = config["rng"]
        self._rng = rng if rng is not None else random.Random()
        # one consumer per topic, task or source per Marshaler (consumer.patterns)
        matched = self._pattern.match(()) if self._pattern is not None else ()
        free = marshaler.reserve(self, (*self._topics, *tasks_and_sources(self._tasks)), matched)
        if self._pattern is not None:
            self._topics = self._pattern.kept(matched, free)
        try:
            self._start(config, fetch_wait)
        except BaseException:
            self._abandon()
            raise

    def _start(self, config: Mapping[str, Any], fetch_wait: float) -> None:
        """The rest of the constructor, once our names are reserved: the core, the edge's
        threads, and attached to the Marshaler (which closes us when it closes) last."""
        marshaler = self._marshaler
        self._subscribed = self._subscription()
        options = core_options(marshaler, config, self._subscribed, self._tasks)
        self._core = MemberCore(options, marshaler.worlds(), offset_of=OFFSET)
        # the edge's own timing, in seconds of its waits, read from the options
        hb = options.heartbeat_interval_ms / 1000
        self._mode = cast(Mode, options.mode)
        self._batch_size = options.batch_size
        self._hb = hb
        self._behind = options.release_if_behind is not None
        retry: RetryPolicy | None = config["retry"]
        self._retry = retry if retry is not None else RetryPolicy()
        self._fetch_wait = fetch_wait
        verdict_timeout: float | None = config["verdict_timeout"]
        self._verdict_timeout = max(hb, 1.0) if verdict_timeout is None else verdict_timeout
        self._tick = min(0.02, hb / 10)  # how soon a due heartbeat or a release is acted on
        self._polls: dict[int, Poll] = {}
        self._ticks = 0  # driver passes so far (tests wait for some instead of sleeping)

        self._lock = threading.Lock()  # the core and everything below
        self._cond = threading.Condition(self._lock)  # "something may be ready to hand out"
        self._poll_lock = PollLock()  # (a poll from a callback is refused)
        self._events = PartitionCallbacks(
            self._cond,
            self._name(),
            on_assigned=config["on_assigned"],
            on_revoked=config["on_revoked"],
            on_lost=config["on_lost"],
        )
        self._no_start: NoPosition | None = None
        self._handout = 0  # the number of the last batch poll returned (HandOut.handout)
        self._returned: deque[tuple[Sequence[Message], int]] = deque()  # (_give_back)
        self._given_back = GivenBack()  # (for the metrics: a message handed out counts once)
        self._inbox: deque[Event] = deque()  # events from other threads, stepped together
        self._closed = False
        self._released = False  # close() released, or the core failed: commits count no more
        self._close_done = threading.Event()
        self._closer: threading.Thread | None = None
        self._finished = threading.Event()  # the core closed (all releases answered)
        self._catch_up = CatchingUp(marshaler, self._now)  # the start-up replay, then CatchUp's
        self._catch_up.ask()
        self._stop = threading.Event()
        # the driver sleeps until the core's next due time on the real clock, woken early
        # when an event leaves it work (a manual clock moves by hand: it ticks instead)
        self._wake = threading.Event()
        self._sleeps = isinstance(self._clock, SystemClock)
        self._sleeping = False  # the driver waits longer than a tick
        name = f"logmarshal-consumer:{marshaler.group_id}:{marshaler.client_id}"
        self._name_prefix = name
        self._fail = FailStop(
            self._name(), functools.partial(self.close, release=False), f"{name}:failed"
        )
        # before any thread starts: a refused group leaves nothing running
        self._mirror: OffsetMirror | None = open_mirror(
            *(marshaler.group_id, self._cluster, config["mirror_offsets"]),
            self._mirror_positions,
            interval=hb,
            clock=self._clock.monotonic,
            name=f"logmarshal-consumer-mirror:{marshaler.group_id}:{marshaler.client_id}",
            epoch_of=lambda key, offset: self._fetcher.epoch_of(key, offset),
        )
        self._writer = CoordinationWriter(
            marshaler,
            self._feed_many,
            name,
            together=marshaler.writes_together,
            asynchronous=marshaler.writes_async,
            on_closed=self._cluster_closed,
        )
        self._fetcher = MemberFetcher(
            self._cluster,
            self._feed_many,
            max_bytes=config["max_partition_fetch_bytes"],
            max_wait=fetch_wait,
            name=f"logmarshal-consumer-fetch:{marshaler.group_id}:{marshaler.client_id}",
            committed_epochs=None if self._mirror is None else self._mirror.committed_epochs,
        )
        if self._metrics is not None:
            self._metrics.watch_consumer(self)
        self._halts = Halts(marshaler, self._name())
        marshaler.add_batch_listener(self._replayed)
        marshaler.add_halt_listener(self._halted)
        for halt in self._halts.found():  # before we listened, and what stopped the instance
            self._halted(halt)
        self._thread = threading.Thread(target=self._drive, name=name, daemon=True)
        self._thread.start()
        if self._mirror is not None:
            self._mirror.start()
        marshaler.attach(self, ())  # running: the Marshaler's close closes us from now on
        with self._lock:  # a core that failed meanwhile (the replay stepped it) fails us
            self._fail.started = True  # (if it did not, a later failure closes us instead)
            self._fail.raise_if_failed()

    def _abandon(self) -> None:
        """The constructor failed after reserving our names: stop what it started (a
        running consumer closes as a crash would) and give the names back."""
        thread = getattr(self, "_thread", None)
        if thread is not None and thread.is_alive():
            self.close(release=False)
        else:
            self._marshaler.remove_batch_listener(self._replayed)
            self._marshaler.remove_halt_listener(self._halted)
            if hasattr(self, "_fetcher"):
                self._fetcher.stop()
                self._fetcher.thread.join(self._fetch_wait + 5)
            if hasattr(self, "_writer"):
                self._writer.stop(self._fetch_wait + 5)
            mirror: OffsetMirror | None = getattr(self, "_mirror", None)
            if mirror is not None:
                mirror.close(None)
            if self._metrics is not None:
                self._metrics.unwatch_consumer(self)
        self._marshaler.detach(self)

    # -- public API -------------------------------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics consumed (for a pattern: those it matched at the last claim pass)."""
        return self._topics

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def marshaler(self) -> Marshaler:
        return self._marshaler

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fenced(self) -> bool:
        """True once a newer instance of our client_id took over (or may have, in records
        the coordination log lost after this instance wrote there: :meth:`Marshaler.lost`,
        whichever of its consumers wrote): this one has stopped for good; :meth:`poll`
        returns nothing, and :meth:`run` and a loop over it end. Restart it (a new
        Marshaler: a new instance)."""
        with self._lock:
            return self._core.fenced

    @property
    def failure(self) -> ConsumerFailed | None:
        """What stopped this consumer as a crash would (its core failed: a bug), raised by
        :meth:`poll`, :meth:`run` and a loop over it; None if nothing did."""
        return self._fail.failed

    def claims(self) -> list[TopicPartition]:
        """The partitions this consumer holds, sorted (from the moment the log has its
        position, as our first heartbeat carried it)."""
        with self._lock:
            return self._core.assigned()

    def position(self, topic: str, partition: int) -> int | None:
        """The ``last_offset`` the next heartbeat would carry; None if not held."""
        with self._lock:
            return self._core.position(topic, partition)

    def epoch(self, topic: str, partition: int) -> int | None:
        """The fencing epoch of our claim on the partition (None if not held): higher for
        every later holder, so what we write under it can be told from a successor's work
        (the streams layer tags changelog commits with it)."""
        with self._lock:
            return self._core.epoch(topic, partition)

    def uncommitted(self) -> dict[TopicPartition, int]:
        """Per held partition: messages handed out and not committed yet (always 0 in AMO,
        where handing out is committing)."""
        with self._lock:
            return self._core.uncommitted()

    def lag(self) -> dict[TopicPartition, int]:
        """Per held partition: messages in the log after the position heartbeats carry
        (Kafka's consumer-group lag: log end minus the committed next offset)."""
        with self._lock:
            positions = {key: self._core.position(*key) for key in self._core.uncommitted()}
        return lag_of(self._cluster, positions, self._name())

    def reader_renewals(self) -> int:
        """How often this consumer's fetch loop replaced its librdkafka consumer after one
        stopped fetching a partition that had records (0 off the network)."""
        return self._fetcher.renewals

    def pause(self, *partitions: int | TopicPartition) -> None:
        """Stop handing out these partitions (they stay claimed and heartbeated): numbers of
        a consumer of one topic, or (topic, partition) pairs. One of ours that another member
        holds now is paused for when we hold it (claims move without the caller); what is
        none of ours raises (TypeError, ValueError) and pauses nothing."""
        self._refuse_closed("pause")
        keys = self._keys(partitions)
        with self._cond:
            self._command(self._core.pause, keys)
            self._cond.notify_all()
        self._wake.set()

    def resume(self, *partitions: int | TopicPartition) -> None:
        """Hand out these partitions again (named and checked as for :meth:`pause`)."""
        self._refuse_closed("resume")
        keys = self._keys(partitions)
        with self._cond:
            self._command(self._core.resume, keys)
            self._cond.notify_all()
        self._wake.set()

    def paused(self) -> list[TopicPartition]:
        with self._lock:
            return self._core.paused()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Move a held partition to ``offset`` (and clear a :class:`NoPosition` error).
        ValueError: not assigned yet (seek from ``on_assign`` on), or AMO not past what was
        handed out. AMO: the log learns it with the next reservation or release. ALO: as
        Kafka's seek, it commits nothing: forward, the position passes what was handed out
        only once that is committed, and what was sought past with the next commit after it;
        back to what was handed out, from the target (it is handed out again).
        :class:`ClosedError` once :meth:`close` has released (``on_revoked`` may seek);
        :class:`ConsumerFailed` once the consumer failed."""
        self._refuse_closed("seek")
        with self._cond:
            seek = self._core.seek
            self._command(seek, self._now(), topic, partition, offset, mine=(TypeError, ValueError))
            self._step(Tick())
            self._cond.notify_all()

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Message]:
        """Up to ``max_records`` (default ``batch_size``) messages of one partition, in order.

        Waits up to ``timeout`` seconds for some (AMO: up to ``verdict_timeout`` more while a
        reservation the log holds awaits our heartbeat's confirmation). Returns [] when there
        are none, or when the consumer is closed meanwhile. Raises :class:`NoPosition` for a
        partition left without a position under ``auto_offset_reset="error"``. Not for
        concurrent use from several threads (``commit`` is)."""
        limit = self._batch_size if max_records is None else max_records
        if type(limit) is not int or limit < 1:  # (2.5 failed the core: ConsumerFailed)
            limit = checked_max_records(limit)
        if type(timeout) is not float or timeout != timeout:  # (the hot path: one test)
            seconds("timeout", timeout, at_least=-math.inf, at_most=math.inf)  # (not nan)
        if self._closed:  # a flag only ever set: reading it needs no lock
            self._fail.raise_if_failed()
            raise ClosedError("poll() on a closed consumer")
        # real time, not the injected clock: a ManualClock must not hang a poll
        deadline = time.monotonic() + timeout
        extended = False
        # the caller reads records itself while they flow (MemberFetcher.pump), before waiting
        pump = self._fetcher.pumps
        with self._poll_lock:
            while True:
                if self._events:  # peeked without the lock: one queued later waits a turn
                    self._events.deliver()
                with self._cond:
                    if self._closed or self._fail.failed is not None:
                        self._fail.raise_if_failed()
                        return []
                    self._no_start = None
                    if self._returned:
                        self._take_back()
                    batch = self._step(self._polls.get(limit) or self._poll_event(limit))
                    if batch:
                        if self._metrics is not None:
                            self._metrics.handed_out(self, *self._given_back.first(batch))
                        return batch
                    if self._no_start is not None:
                        raise self._no_start
                    self._fail.raise_if_failed()  # (this poll's own step failed)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 and not extended and self._core.reserved_waiting():
                        # AMO: a batch is reserved but not confirmed yet; give it a verdict's
                        # time rather than leave it reserved and unhanded
                        extended = True
                        deadline += self._verdict_timeout
                        remaining = deadline - time.monotonic()
                    if remaining <= 0 and not pump:
                        return []
                    if not pump:
                        # woken by every event; the cap only bounds a missed wake-up
                        self._cond.wait(min(remaining, self._hb))
                        pump = self._fetcher.pumps
                        continue
                # outside the lock: the pass steps what it reads into the core (_feed_many);
                # then the core is asked again, and only a pass that read nothing waits
                pump = self._fetcher.pump(max(0.0, deadline - time.monotonic()))

    def __iter__(self) -> Iterator[Message]:
        """Messages until the consumer is closed or fenced (ALO: ``commit`` each): a fenced
        one never hands out again, so a loop ends, as :meth:`run` returns. AMO: a loop left
        early gives the rest of its polled batch back (for the next poll, or holder)."""
        return iterate(self)

    def commit(self, *messages: Message) -> bool:
        """ALO: these messages are fully handled. Any order; thread-safe.

        ``commit(message)`` for one, ``commit(*batch)`` for a polled batch at once (one
        lock for all of them). Returns False when it changes nothing: AMO mode (handing out
        *is* committing), partitions no longer held, or offsets not outstanding. Raises
        :class:`ClosedError` once :meth:`close` has released (``on_revoked``'s commits count);
        :class:`ConsumerFailed` once the consumer failed."""
        if self._released:  # (a flag only ever set: read without the lock, as poll does)
            self._refuse_closed("commit")
        if self._mode == "amo" or not messages:
            return False
        try:
            return commit_messages(self, self._core, self._lock, self._metrics, messages)
        except Exception as exc:
            refuse_non_messages(messages)  # (TypeError naming one, if one is no Message)
            with self._cond:
                self._core_failed(exc)  # they were messages: the core failed
            self._fail.raise_if_failed()
            raise

    def _give_back(self, messages: Sequence[Message], handout: int) -> None:
        """AMO (``run``, ``__iter__``): the end of hand-out ``handout`` never reached user code:
        queued for :func:`.committing.take_back` (from any thread, even mid-step)."""
        if self._mode == "amo" and messages:
            self._returned.append((messages, handout))

    def _take_back(self) -> None:  # (under the lock)
        self._given_back.add(take_back(self._core, self._command, self._returned, self._name()))

    def run(
        self,
        handler: Callable[[Message], object],
        *,
        stop: threading.Event | None = None,
        max_messages: int | None = None,
        poll_timeout: float = 0.2,
    ) -> int:
        """Call ``handler`` on every message, committing each after it returns.

        A failing message is retried per the ``retry`` policy, in place (the partition's
        later messages wait). When its attempts are used up it goes to the dead-letter topic
        if one is configured; otherwise the consumer closes (releasing its claims, the failed
        message uncommitted) and :class:`HandlerFailed` is raised. Returns the number of
        messages handled once ``stop`` is set, ``max_messages`` were handled, the consumer
        was closed, or it was fenced (:attr:`fenced`: it will never hand out again; restart
        it, as a new instance). AMO: what of a polled batch never reached the handler goes
        back, to a later poll or, released by the close, to the next holder.
        """
        if not callable(handler):  # (5 waited on an empty topic, then failed each message)
            raise TypeError(f"handler must be callable, got {handler!r}")
        return run_handler(
            self,
            handler,
            self._retry,
            self._rng,
            stop=stop,
            max_messages=max_messages,
            poll_timeout=poll_timeout,
            batch_size=self._batch_size,
            closing=self._stop,
        )

    def close(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop; with ``release``, write each claim's final position and give it up.

        ``release=False`` leaves the claims to go stale (or to be taken back by a restart of
        this client_id with ``fast_reclaim``), as a crash would.
        """
        if timeout is not None:  # (before anything: a nan raised half-way through closing)
            seconds("timeout", timeout, at_least=0)
        with self._cond:
            closing, self._closed = self._closed, True
            if not closing:
                self._closer = threading.current_thread()
            self._cond.notify_all()
        if closing:  # returns once the close under way has (not our own threads: they wait)
            if threading.current_thread() not in (self._closer, self._thread, self._fetcher.thread):
                bound = (
                    self._verdict_timeout + self._fetch_wait + 10 if timeout is None else timeout
                )
                if not self._close_done.wait(bound):
                    log.warning("%s: the close under way did not end in %g s", self._name(), bound)
            return
        try:
            self._close(release, timeout)
        finally:
            self._close_done.set()
        self._events.raise_deferred()  # (an on_revoked's KeyboardInterrupt, once closed)

    def _close(self, release: bool, timeout: float | None) -> None:
        release = release and self._fail.failed is None  # (a failed core releases nothing)
        self._stop.set()
        self._wake.set()
        # nothing is handed out from here on: the fetch loop stops now, while the claims are
        # released (an idle reader's wait in librdkafka, readers._IDLE_SLICE, ends meanwhile)
        self._fetcher.stop()
        in_driver = threading.current_thread() is self._thread
        if not in_driver:
            self._thread.join(timeout)
        with self._cond:
            held = self._core.assigned()
        if release and not in_driver:
            self._events.deliver(closing=True)
            if held and self._events.on_revoked is not None:
                self._events.call(self._events.on_revoked, held, closing=True)  # (commits)
        with self._cond:
            release = release and self._fail.failed is None  # (on_revoked may have failed it)
            fenced = self._core.fenced
            # what Kafka's tools should show once we let go: the positions we release with
            final = (
                self._positions_held(releasing=True)
                if self._mirror is not None and release and not fenced
                else None
            )
            self._take_back()  # (run's, before its close: the release gives them back)
            self._released = True
            self._step(Close(release=release))
        if release and fenced:
            # A fenced instance stops altogether (its releases would be rejected: the log only
            # grows); the newer instance of our client_id takes back the claims (restart recovery)
            log.info("%s is fenced: closing without writing releases", self._name())
        limit = self._verdict_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self._fail.failed is None and not self._finished.wait(
            min(self._tick, max(0.0, deadline - time.monotonic()))
        ):
            if time.monotonic() >= deadline:
                log.warning("%s: releases not confirmed in time; they will go stale", self._name())
                break
            with self._cond:  # releases whose outcome is unknown are written again (bounded)
                self._step(Tick())
        self._marshaler.remove_batch_listener(self._replayed)
        self._marshaler.remove_halt_listener(self._halted)
        if self._mirror is not None:
            self._mirror.close(final, timeout=5.0 if timeout is None else timeout)
        self._writer.stop(timeout if timeout is not None else self._fetch_wait + 5)
        if self._fetcher.thread is not threading.current_thread():
            self._fetcher.thread.join(timeout if timeout is not None else self._fetch_wait + 5)
        self._marshaler.detach(self)
        if self._metrics is not None:
            self._metrics.unwatch_consumer(self)
        log.info(
            "consumer %s closed (%d claims %s)",
            self._name(),
            len(held),
            "released" if release and not fenced else "abandoned",
        )

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        what = self._pattern.pattern.pattern if self._pattern else list(self._topics)
        return f"Consumer({self._name()}, topics={what!r}, mode={self._mode!r})"

    # -- the edge: events in ----------------------------------------------------------------

    def _now(self) -> int:
        return round(self._clock.monotonic() * 1000)

    def _wall(self) -> int:
        return self._marshaler.now_ms()

    def _step(self, event: Event) -> list[Message]:
        """Under the lock: step the core (the replay held still while it reads the worlds)
        and carry its actions out; returns what a HandOut gives the caller."""
        if self._fail.failed is not None:
            return []  # (a failed core is stepped no more: it writes nothing, hands out nothing)
        try:
            if type(event) is Poll:
                # the hot path reads one holder of one world: a single dict look-up, atomic
                # under the GIL, so the replay need not be held still for it
                actions = self._core.step(self._now(), event)
            else:
                with self._marshaler.replay_paused():
                    actions = self._core.step(self._now(), event, wall=self._wall())
            return self._carry(actions) if actions else []
        except Exception as exc:
            self._core_failed(exc)
            return []

    def _poll_event(self, limit: int) -> Poll:
        poll = self._polls[limit] = Poll(limit)
        return poll

    def _feed(self, event: Event) -> None:
        """Step the core with an event from another thread (writer, fetcher, replay)."""
        self._feed_many((event,))

    def _feed_many(self, events: Sequence[Event]) -> None:
        """Step the core with events from another thread, together with any that other
        threads queued meanwhile: whoever gets the lock steps them all in one pass. Each is
        stepped when this returns (by this thread or the one that held the lock)."""
        inbox = self._inbox
        inbox.extend(events)
        with self._cond:
            batch = []
            while inbox:
                batch.append(inbox.popleft())
            if not batch or self._fail.failed is not None:
                return
            if len(batch) == 1:
                self._step(batch[0])
            else:
                try:
                    with self._marshaler.replay_paused():
                        actions = self._core.step_many(self._now(), batch, wall=self._wall())
                    if actions:
                        self._carry(actions)
                except Exception as exc:
                    self._core_failed(exc)
            self._cond.notify_all()
            if self._sleeping and self._fail.failed is None:
                now = self._now()
                due = self._due(now)
                if due is not None and due <= now:
                    self._wake.set()  # the event left work for the next pass: now, not later

    def _due(self, now: int) -> int | None:
        """Under the lock: when the core has work next; None if asking it failed."""
        try:
            return self._core.due(now, self._wall())
        except Exception as exc:
            self._core_failed(exc)
            return None

    def _core_failed(self, exc: Exception) -> None:
        """Under the lock: stepping the core failed (a bug): :mod:`.failstop`."""
        if self._fail.fail(exc):
            self._cond.notify_all()
        self._released = True  # (commits count no more; after: its readers see the failure)

    def _cluster_closed(self, exc: ClosedError) -> None:
        """A write met the cluster closed under us (not by our close): stop as a crash would."""
        with self._cond:
            if not self._closed and self._fail.fail(exc, "its cluster was closed under it"):
                self._released = True
                self._cond.notify_all()

    def _command(self, call: Callable[..., object], *args: Any, mine: tuple = ()) -> None:
        """Under the lock: a command of the caller's to the core. What it raises but by
        design (``mine``: the caller's errors) is the core failing, and so the call fails."""
        try:
            call(*args)
        except mine:
            raise
        except Exception as exc:
            self._core_failed(exc)
            self._fail.raise_if_failed()
            raise

    def _replayed(self, reached: list[tuple[int, int]]) -> None:
        """The replay reached these offsets (several partitions at once: stepped together)."""
        events: list[Event] = [Replayed(cp, applied) for cp, applied in reached]
        if self._halts:
            events.extend(self._halts.regained(cp for cp, _ in reached))
        self._feed_many(events)

    def _halted(self, halt: Halt) -> None:
        """A coordination partition's replay is not the log's any more (core.rewind)."""
        self._feed(self._halts.halted(halt))
        self._halts.told(halt)

    def _drive(self) -> None:
        """The driver thread: start-up replay, then ticks and the edge's own look-ups."""
        try:
            looked_at = self._catch_up.first(self._stop, self._tick, self._name())
            if looked_at is None:
                return
            self._report_caught_up(looked_at)
            next_topics = next_behind = time.monotonic()
            while not self._stop.is_set():
                self._wake.clear()
                self._wake.wait(self._pause())
                self._sleeping = False
                if self._stop.is_set():
                    break
                now = time.monotonic()
                try:
                    if self._catch_up.wanted:
                        looked_at = self._catch_up.again(self._tick, self._name())
                        if looked_at is not None:
                            self._report_caught_up(looked_at)
                    if now >= next_topics:
                        # once per HB (a metadata request): growth seen within an HB
                        next_topics = now + self._hb
                        self._refresh_topics()
                    if self._behind and now >= next_behind:
                        next_behind = now + self._hb
                        self._report_log_ends()
                    if self._halts:  # an admin's pause may end while the log is idle
                        regained = self._halts.regained()
                        if regained:
                            self._feed_many(regained)
                    self._feed(Tick())
                    self._ticks += 1
                except Exception:
                    log.exception("%s: a coordination pass failed; retrying", self._name())
        except Exception:
            log.exception("%s: the driver thread stopped", self._name())

    def _pause(self) -> float:
        """Seconds until the next driver pass: a tick while the core has work in flux (or
        on a manual clock), else until its next due time, at most HB/4 (the claim pass's
        pace, which bounds a missed wake-up). An idle member wakes a few times per HB, not
        fifty times a second."""
        if not self._sleeps:
            return self._tick
        with self._lock:
            now = self._now()
            due = self._due(now)
            if due is None:
                return self._tick
            pause = min(max(self._tick, (due - now) / 1000), self._hb / 4)
            self._sleeping = pause > self._tick
        return pause

    def _report_caught_up(self, looked_at: int) -> None:
        """Tell the core the replay reached the log's ends looked up at ``looked_at``."""
        for event in self._catch_up.replayed(looked_at):
            self._feed(event)

    def _subscription(self, timeout: float | None = None) -> tuple[tuple[str, int], ...]:
        return read_subscription(self._cluster, self._topics, self._tasks, self._name(), timeout)

    def _refresh_topics(self) -> None:
        """Patterns matched afresh and partition counts read again: growth is seen. A pattern
        leaves out a topic another consumer of our Marshaler reads (one instance, one
        consumer per topic: :meth:`Marshaler.take_topics`)."""
        if self._pattern is not None:
            matched = self._pattern.match(self._topics)
            free = self._marshaler.take_topics(self, matched, tasks_and_sources(self._tasks))
            self._topics = self._pattern.kept(matched, free)
        try:  # bounded: this thread answers catch-ups (a count not read now is read next HB)
            subscription = self._subscription(timeout=max(2.0, 2 * self._hb))
        except RETRIABLE as exc:
            log.warning("%s: cannot read partition counts (%s)", self._name(), exc)
            return
        with self._cond:
            if subscription != self._subscribed:
                self._subscribed = subscription
                self._step(Topics(subscription))

    def _mirror_positions(self) -> dict[TopicPartition, int]:
        """The mirror thread's read of :meth:`_positions_held` (none of a failed core's)."""
        with self._lock:
            return {} if self._fail.failed is not None else self._positions_held()

    def _positions_held(self, releasing: bool = False) -> dict[TopicPartition, int]:
        """Under the lock: :func:`~.mirror.positions_held` of our core."""
        return positions_held(self._core, self._tasks, releasing and self._mode == "amo")

    def _report_log_ends(self) -> None:
        with self._lock:
            held = self._core.held()
        self._feed(LogEnds(log_ends(self._cluster, held)))

    # -- the edge: actions out --------------------------------------------------------------

    def _carry(self, actions: list[Action]) -> list[Message]:
        """Under the lock: carry out the core's actions without blocking; returns what a
        HandOut gives the caller."""
        handed: list[Message] = []
        writes = []
        for action in actions:
            if isinstance(action, Write):
                writes.append(action)
            elif isinstance(action, Fetch | LookUp):
                self._fetcher.request(action)
            elif isinstance(action, HandOut):
                handed = list(action.records)
                self._handout = action.handout
            elif isinstance(action, Assigned):
                self._assigned(action)
            elif isinstance(action, Revoke):
                self._revoked(action)
            elif isinstance(action, NoStart):
                self._no_start = NoPosition(
                    action.topic, action.partition, action.offset, action.start, action.end
                )
            elif isinstance(action, CatchUp):
                self._catch_up.ask()  # the driver replays to the log end, then says so
            elif isinstance(action, Closed):
                self._finished.set()
        if writes:
            self._writer.write(writes)
        return handed

    def _assigned(self, action: Assigned) -> None:
        key = (action.topic, action.partition)
        self._events.queue("assigned", key)
        if self._metrics is not None:
            self._metrics.assigned(self, action.how)
        log.info(
            "%s %s %s/%d, resuming at %s",
            self._name(),
            action.how,
            action.topic,
            action.partition,
            "the reset policy's offset" if action.start is None else action.start,
        )

    def _revoked(self, action: Revoke) -> None:
        key = (action.topic, action.partition)
        self._fetcher.drop(action.sources or (key,))
        gone = "fenced" if self._core.fenced else "lost"
        why = gone if action.lost else "released" if self._core.closing else "gave_up"
        if not self._core.closing:
            lost = action.lost and self._events.on_lost is not None
            self._events.queue("lost" if lost else "revoked", key)
        if action.lost:
            log.warning(
                "%s lost %s/%d: %s", self._name(), action.topic, action.partition, action.why
            )
        if self._metrics is not None:
            self._metrics.revoked(self, why)

    def _give_up(self, key: TopicPartition, why: str) -> None:
        """Release one held partition while running (release_if_behind's move; tests)."""
        with self._cond:
            self._carry(self._core.give_up(self._now(), key[0], key[1], why))

    # -- helpers ----------------------------------------------------------------------------

    def _name(self) -> str:
        return _name_of(self._marshaler)

    def _refuse_closed(self, what: str) -> None:
        if self._released:
            self._fail.raise_if_failed()  # (a failed consumer: said as poll says it)
            raise ClosedError(f"{what}() on a closed consumer")

    def _keys(self, partitions: Iterable[int | TopicPartition]) -> list[TopicPartition]:
        """What ``pause``/``resume`` name, checked (:func:`~.config.partition_keys`)."""
        one = self._topics if self._pattern is None else ()
        return partition_keys(partitions, one, dict(self._subscribed), self._partitions_now)

    def _partitions_now(self, topic: str) -> int:
        try:
            return self._cluster.partitions(topic, timeout=max(2.0, 2 * self._hb))
        except Exception:  # (a task's name, or the cluster away: the count we had stands)
            return 0


def _name_of(marshaler: Marshaler) -> str:
    return f"{marshaler.group_id}/{marshaler.client_id}/{marshaler.instance_id}"
