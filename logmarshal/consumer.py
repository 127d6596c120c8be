"""Consumer: claims partitions through the coordination log and hands out their messages.

Three kinds of thread share the work:

- a *manager* thread does the coordination: claim passes, heartbeats, restart recovery,
  adopting claims whose verdict arrived late, noticing lost claims, releasing when behind;
- one *fetcher* thread per claimed partition long-polls it into a bounded buffer, so claimed
  partitions are fetched in parallel and a poll never waits for a round trip it can avoid;
- the caller's thread runs ``poll`` (like Kafka's consumer), which hands out a batch of one
  partition at a time, in offset order, and delivers the ``on_assigned`` / ``on_revoked``
  callbacks.

Two modes:

- ``"alo"`` (at least once): ``commit(msg)`` marks a message handled, in any order;
  heartbeats carry the highest *contiguous* committed offset, so a crash repeats at most
  the messages after it and never skips one.
- ``"amo"`` (at most once): before a batch is handed out it is reserved with
  ClaimingMessages; only once the replay has accepted that reservation, shows us still
  holding the claim and has accepted our heartbeat of that offset does the user see it.
  A crash loses at most that batch; nothing is handed out twice.

Every decision (did my claim win? am I still the holder?) is a verdict read from the replay.
The clock only predicts: when to heartbeat, when to try claiming, and when to stop handing
out because a claim might have lapsed without us seeing it (self-fencing).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import attrs

from rationalizer import FRESH, PartitionState, Reason, Verdict
from storage import NewRecord

from .cluster import Message
from .commits import CommitTracker
from .errors import (
    ClosedError,
    LogmarshalError,
    OffsetOutOfRange,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from .marshaler import COORDINATION_TOPIC, Marshaler, Written
from .retry import HandlerFailed, RetryPolicy

__all__ = ["Consumer", "NoPosition"]

log = logging.getLogger(__name__)

Mode = Literal["alo", "amo"]
OffsetReset = Literal["earliest", "latest", "error"]
TopicPartition = tuple[str, int]
PartitionsCallback = Callable[[list[TopicPartition]], None]

#: Heartbeats are sent after a random fraction of HB in this range, so the holder always
#: looks fresh (< HB) to others and a group's heartbeats do not march in step.
HEARTBEAT_JITTER = (0.5, 0.8)

_Writer = Callable[[], Written]


#: a Message's (topic, partition) and offset, as C-speed getters for the per-batch hot path
_TOPIC_PARTITION = operator.itemgetter(0, 1)
_OFFSET = operator.itemgetter(2)


class NoPosition(OffsetOutOfRange):
    """``auto_offset_reset="error"`` and the group has no usable position for a partition."""

    def __init__(self, topic: str, partition: int, offset: int, start: int, end: int) -> None:
        super().__init__(offset, start, end)
        self.topic = topic
        self.partition = partition
        self.args = (
            f"{topic}/{partition}: "
            + (
                "the group has no position"
                if offset < 0
                else f"position {offset} is outside the log ({start}..{end})"
            )
            + ' and auto_offset_reset="error"; seek() it or set the position with the admin',
        )


@attrs.define(eq=False)
class _Claim:
    """A partition this consumer holds, and everything it knows about handing it out."""

    topic: str
    partition: int
    next_fetch: int
    tracker: CommitTracker
    #: clock.monotonic() when we *sent* our newest accepted message; sending precedes its
    #: log time, so ages measured from here over-estimate the claim's real age (safe side).
    last_ok: float
    next_heartbeat: float
    #: AMO: last offset reserved by an accepted ClaimingMessages.
    claimed_through: int
    #: AMO: last offset an accepted heartbeat carried after its reservation: handed out freely.
    confirmed_through: int
    #: last offset handed out (both modes), for lag and release_if_behind
    handed_through: int
    space: threading.Condition
    buffer: deque[Message] = attrs.field(factory=deque)
    #: serialises writes that carry a position, so a stale one never lands after a newer one
    io_lock: threading.Lock = attrs.field(factory=threading.Lock)
    active: bool = True
    fence_logged: bool = False
    error: OffsetOutOfRange | None = None
    lag_sample: int | None = None

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def unpositioned(self) -> bool:
        """The group has no position here and our policy is "error": until ``seek()`` we
        write nothing that carries one (every Heartbeat and ReleasingPartition does)."""
        return isinstance(self.error, NoPosition) and self.error.offset < 0


class Consumer:
    """Consumes ``topics`` (names, or a compiled regex matched in full against the cluster's
    topics on every claim pass) as member ``marshaler.client_id`` of ``marshaler.group_id``.

    - ``batch_size``: the most messages one ``poll`` returns by default (and in AMO the most
      reserved at once, so at most that many are lost to a crash).
    - ``max_claims``: cap on partitions held (topics, with ``claim_entire_topic``).
    - ``greedy``: a claim pass takes as many partitions as allowed, not one.
    - ``claim_entire_topic``: partition 0 stands for its topic; whoever wins it claims every
      partition of the topic, the others leave the topic alone.
    - ``release_if_behind``: release the partition furthest behind when its lag (messages
      not handed out yet) exceeds this and is not shrinking, but only while another fresh
      member exists that could take it over; None disables.
    - ``reclaim_cooldown`` (default 2·HB): how long a partition this consumer released while
      running is left for others before it may claim it again.
    - ``auto_offset_reset``: where to start without a usable position (the group never
      consumed the partition, or its position is outside the log): "earliest", "latest",
      or "error" (``poll`` raises :class:`NoPosition` until :meth:`seek`).
    - ``retry``: what :meth:`run` does when the handler raises.
    - ``fast_reclaim``: take back claims still fresh from a previous instance of our
      client_id (restart recovery).
    - ``fence_margin`` (default HB/4): we stop handing out when nothing of ours was accepted
      for ``2·HB - fence_margin``.
    - ``on_assigned`` / ``on_revoked``: called in the thread that polls (or closes) with the
      partitions gained / lost. A revocation is reported after the fact (the log decided it),
      except on ``close()``, where it comes before the release so work in flight can commit.
    """

    def __init__(
        self,
        marshaler: Marshaler,
        topics: str | Iterable[str] | re.Pattern[str],
        *,
        mode: Mode = "alo",
        batch_size: int = 100,
        max_claims: int | None = None,
        greedy: bool = False,
        claim_entire_topic: bool = False,
        release_if_behind: int | None = None,
        reclaim_cooldown: float | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        retry: RetryPolicy | None = None,
        fast_reclaim: bool = True,
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        claim_interval: float | None = None,
        fence_margin: float | None = None,
        fetch_max_bytes: int = 1 << 20,
        fetch_wait: float = 0.2,
        prefetch: int | None = None,
        verdict_timeout: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._pattern: re.Pattern[str] | None = None
        if isinstance(topics, re.Pattern):
            self._pattern = topics
            self._topics: tuple[str, ...] = ()
        else:
            self._topics = (topics,) if isinstance(topics, str) else tuple(dict.fromkeys(topics))
            if not self._topics:
                raise ValueError("a consumer needs at least one topic (or a pattern)")
        if mode not in ("alo", "amo"):
            raise ValueError(f'mode must be "alo" or "amo", got {mode!r}')
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_claims is not None and max_claims < 1:
            raise ValueError(f"max_claims must be at least 1 (or None), got {max_claims}")
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise ValueError(
                'auto_offset_reset must be "earliest", "latest" or "error", '
                f"got {auto_offset_reset!r}"
            )
        if release_if_behind is not None and release_if_behind < 0:
            raise ValueError(f"release_if_behind must be >= 0 (or None), got {release_if_behind}")
        if fetch_wait <= 0:
            raise ValueError(f"fetch_wait must be positive, got {fetch_wait}")
        hb = marshaler.heartbeat_interval
        self._marshaler = marshaler
        self._cluster = marshaler.cluster
        self._clock = marshaler.clock
        self._metrics = marshaler.metrics  # its Prometheus series, if the Marshaler has them
        self._rng = rng if rng is not None else random.Random()
        self._mode: Mode = mode
        self._batch_size = batch_size
        self._max_claims = max_claims
        self._greedy = greedy
        self._entire_topic = claim_entire_topic
        self._behind = release_if_behind
        self._cooldown_s = 2 * hb if reclaim_cooldown is None else reclaim_cooldown
        self._hb = hb
        self._hb_ms = round(hb * 1000)
        self._claim_interval = hb / 4 if claim_interval is None else claim_interval
        margin = hb / 4 if fence_margin is None else fence_margin
        if not 0 <= margin < 2 * hb:
            raise ValueError(f"fence_margin must be in [0, 2*HB), got {margin}")
        self._fence_after = 2 * hb - margin
        self._reset: OffsetReset = auto_offset_reset
        self._retry = retry if retry is not None else RetryPolicy()
        self._fast_reclaim = fast_reclaim
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_wait = fetch_wait
        self._prefetch = max(2 * batch_size, 500) if prefetch is None else max(1, prefetch)
        self._verdict_timeout = max(hb, 1.0) if verdict_timeout is None else verdict_timeout
        self._tick = min(0.02, hb / 10)  # how soon a release or a due heartbeat is acted on

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # "something to hand out may have changed"
        self._version = 0
        self._poll_lock = threading.Lock()
        self._claims: dict[TopicPartition, _Claim] = {}
        self._paused: set[TopicPartition] = set()
        self._cooldown: dict[TopicPartition, float] = {}
        self._events: deque[tuple[str, list[TopicPartition]]] = deque()
        self._fetchers: list[threading.Thread] = []
        self._cursor = 0
        self._closed = False
        self._fenced = False
        self._stop = threading.Event()
        self._next_claim_pass = self._clock.monotonic()
        self._next_behind_check = self._clock.monotonic() + hb
        if self._pattern is not None:
            self._topics = self._match_topics()
        marshaler._register(self, self._topics)
        if self._metrics is not None:
            self._metrics.watch_consumer(self)
        self._thread = threading.Thread(
            target=self._run,
            name=f"logmarshal-consumer:{marshaler.group_id}:{marshaler.client_id}",
            daemon=True,
        )
        self._thread.start()

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
        with self._cond:
            return self._closed

    @property
    def fenced(self) -> bool:
        """True once a newer instance of our client_id took over: this one has stopped."""
        with self._cond:
            return self._fenced

    def claims(self) -> list[TopicPartition]:
        """The partitions this consumer holds, sorted."""
        with self._cond:
            return sorted(self._claims)

    def position(self, topic: str, partition: int) -> int | None:
        """The ``last_offset`` the next heartbeat would carry; None if not held."""
        with self._cond:
            claim = self._claims.get((topic, partition))
            return None if claim is None else self._position(claim)

    def uncommitted(self) -> dict[TopicPartition, int]:
        """Per held partition: messages handed out and not committed yet (always 0 in AMO,
        where handing out is committing)."""
        with self._cond:
            return {
                key: (claim.tracker.outstanding if self._mode == "alo" else 0)
                for key, claim in sorted(self._claims.items())
            }

    def lag(self) -> dict[TopicPartition, int]:
        """Per held partition: messages in the log after the position heartbeats carry
        (Kafka's consumer-group lag: log end minus the committed next offset)."""
        with self._cond:
            positions = {key: self._position(c) for key, c in self._claims.items()}
        out = {}
        for (topic, partition), position in sorted(positions.items()):
            try:
                end = self._cluster.latest_offset(topic, partition)
            except Exception:  # a partition we cannot see right now has no known lag
                log.debug("%s: no lag for %s/%d", self._name(), topic, partition, exc_info=True)
                continue
            out[(topic, partition)] = max(0, end - position - 1)
        return out

    def pause(self, *partitions: int | TopicPartition) -> None:
        """Stop handing out these partitions (they stay claimed and heartbeated)."""
        keys = self._keys(partitions)
        with self._cond:
            self._paused.update(keys)
            self._version += 1
            self._cond.notify_all()

    def resume(self, *partitions: int | TopicPartition) -> None:
        """Hand out these partitions again."""
        keys = self._keys(partitions)
        with self._cond:
            self._paused.difference_update(keys)
            self._version += 1
            self._cond.notify_all()

    def paused(self) -> list[TopicPartition]:
        with self._cond:
            return sorted(self._paused)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Move a held partition to ``offset`` (and clear a :class:`NoPosition` error).

        AMO can only move forward: the log refuses reservations below what it has reserved.
        """
        with self._cond:
            claim = self._claims.get((topic, partition))
            if claim is None:
                raise ValueError(f"{topic}/{partition} is not held by this consumer")
            if self._mode == "amo" and offset <= claim.claimed_through:
                raise ValueError(
                    f"AMO cannot seek {topic}/{partition} to {offset}: offsets up to "
                    f"{claim.claimed_through} are already reserved"
                )
            had_position = not claim.unpositioned
            self._move(claim, offset)
            claim.error = None
            if not had_position:  # the log learns the position with the next heartbeat
                claim.next_heartbeat = self._clock.monotonic()
            claim.space.notify_all()

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Message]:
        """Up to ``max_records`` (default ``batch_size``) messages of one partition, in order.

        Waits up to ``timeout`` seconds for some. Returns [] when there are none, or when
        the consumer is closed meanwhile. Raises :class:`NoPosition` for a partition left
        without a position under ``auto_offset_reset="error"``. Not for concurrent use from
        several threads (``commit`` is).
        """
        limit = self._batch_size if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be at least 1, got {limit}")
        if self._closed:  # a flag only ever set: reading it needs no lock
            raise ClosedError("poll() on a closed consumer")
        deadline = time.monotonic() + timeout  # real time: a ManualClock must not hang poll
        with self._poll_lock:
            while True:
                if self._events:  # peeked without the lock: one queued later waits a turn
                    self._deliver_events()
                batch, version = self._poll_once(limit)
                if batch:
                    if self._metrics is not None:
                        self._metrics.handed_out(self, batch[0].topic, len(batch))
                    return batch
                with self._cond:
                    if self._closed:
                        return []
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 and self._reserved_waiting():
                        # AMO: a batch is reserved but its heartbeat was not confirmed yet;
                        # leaving now could lose it to a close() (resume skips reservations)
                        remaining = deadline + self._verdict_timeout - time.monotonic()
                    if remaining <= 0:
                        return []
                    if self._version == version and not self._events:
                        # woken by fetchers, claim changes and accepted heartbeats; the cap
                        # only bounds the cost of a missed wake-up
                        self._cond.wait(min(remaining, self._hb))

    def _reserved_waiting(self) -> bool:
        """Under _cond: does a held partition have reserved messages not yet handed out?"""
        return self._mode == "amo" and any(
            c.claimed_through > c.handed_through and c.buffer and c.key not in self._paused
            for c in self._claims.values()
        )

    def __iter__(self) -> Iterator[Message]:
        """Messages until the consumer is closed (ALO: remember to ``commit`` each)."""
        while True:
            with self._cond:
                if self._closed:
                    return
            try:
                batch = self.poll(timeout=0.5)
            except ClosedError:
                return
            yield from batch

    def commit(self, *messages: Message) -> bool:
        """ALO: these messages are fully handled. Any order; thread-safe.

        ``commit(message)`` for one, ``commit(*batch)`` for a polled batch at once (one
        lock for all of them). Returns False when it changes nothing: AMO mode (handing out
        *is* committing), partitions no longer held, or offsets not outstanding.
        """
        if self._mode == "amo" or not messages:
            return False
        with self._cond:
            if len(messages) == 1:
                message = messages[0]
                claim = self._claims.get((message.topic, message.partition))
                done = int(claim is not None and claim.tracker.commit(message.offset))
                if done and self._metrics is not None:
                    self._metrics.committed(self, message.topic, 1)
                return bool(done)
            keys = set(map(_TOPIC_PARTITION, messages))  # C-speed: a batch is one partition
            done = 0
            for key in keys:
                claim = self._claims.get(key)
                if claim is not None:
                    offsets = (
                        map(_OFFSET, messages)
                        if len(keys) == 1
                        else [m.offset for m in messages if (m.topic, m.partition) == key]
                    )
                    n = claim.tracker.commit_many(offsets)
                    if n and self._metrics is not None:
                        self._metrics.committed(self, key[0], n)
                    done += n
            return done > 0

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
        messages handled once ``stop`` is set, ``max_messages`` were handled or the consumer
        was closed.
        """
        handled = 0
        while max_messages is None or handled < max_messages:
            if stop is not None and stop.is_set():
                break
            try:
                wanted = self._batch_size if max_messages is None else max_messages - handled
                batch = self.poll(poll_timeout, max_records=min(self._batch_size, wanted))
            except ClosedError:
                break
            for message in batch:
                if self._mode == "alo" and not self._holds(message):
                    break  # lost meanwhile: whoever took over handles the rest
                if not self._handle(handler, message, stop):
                    break
                handled += 1
        return handled

    def close(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop; with ``release``, write each claim's final position and give it up.

        ``release=False`` leaves the claims to go stale (or to be taken back by a restart of
        this client_id with ``fast_reclaim``), as a crash would.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._version += 1
            self._cond.notify_all()
        self._stop.set()
        in_manager = threading.current_thread() is self._thread
        if not in_manager:
            self._thread.join(timeout)
        if release and not in_manager:
            self._deliver_events(closing=True)
            keys = self.claims()
            if keys and self._on_revoked is not None:
                self._callback(self._on_revoked, keys)  # before the release: commits still count
        with self._cond:
            claims = list(self._claims.values())
            self._claims.clear()
            for claim in claims:
                claim.active = False
                claim.buffer.clear()
                claim.space.notify_all()
        if release and self._fenced:
            # A fenced instance stops altogether: its records are rejected where it is fenced
            # (writing releases there would only grow the log), and the newer instance of our
            # client_id takes back the claims it still has elsewhere (restart recovery).
            log.info("%s is fenced: closing without writing releases", self._name())
        elif release:
            for claim in claims:
                self._release(claim)
                if self._metrics is not None:
                    self._metrics.revoked(self, "released")
            self._release_untracked()
        for fetcher in list(self._fetchers):
            if fetcher is not threading.current_thread():
                fetcher.join(timeout if timeout is not None else self._fetch_wait + 5)
        self._marshaler._unregister(self)
        if self._metrics is not None:
            self._metrics.unwatch_consumer(self)
        log.info(
            "consumer %s closed (%d claims %s)",
            self._name(),
            len(claims),
            "released" if release else "abandoned",
        )

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        what = self._pattern.pattern if self._pattern is not None else list(self._topics)
        return f"Consumer({self._name()}, topics={what!r}, mode={self._mode!r})"

    # -- helpers ----------------------------------------------------------------------------

    def _name(self) -> str:
        m = self._marshaler
        return f"{m.group_id}/{m.client_id}/{m.instance_id}"

    def _keys(self, partitions: Iterable[int | TopicPartition]) -> list[TopicPartition]:
        out = []
        for item in partitions:
            if isinstance(item, tuple):
                out.append((str(item[0]), int(item[1])))
            elif self._pattern is None and len(self._topics) == 1:
                out.append((self._topics[0], int(item)))
            else:
                raise ValueError(
                    "this consumer reads several topics: name partitions as (topic, partition)"
                )
        return out

    def _match_topics(self) -> tuple[str, ...]:
        assert self._pattern is not None
        try:
            names = self._cluster.topics()
        except Exception:
            log.debug("%s: cannot list topics", self._name(), exc_info=True)
            return self._topics
        return tuple(sorted(t for t in names if self._wants_topic(t)))

    def _wants_topic(self, topic: str) -> bool:
        if self._pattern is not None:
            # internal topics (``__marshal``, ``__marshal_snapshots``) never match a pattern,
            # as Kafka's exclude.internal.topics does for ``__consumer_offsets``
            return not topic.startswith("__") and self._pattern.fullmatch(topic) is not None
        return topic in self._topics

    def _position(self, claim: _Claim) -> int:
        """Last offset fully handled: what heartbeats and the release report. Under _cond."""
        if self._mode == "amo":
            return claim.claimed_through
        return claim.tracker.position

    def _jitter(self) -> float:
        low, high = HEARTBEAT_JITTER
        return self._hb * self._rng.uniform(low, high)

    def _bump(self) -> None:
        """Under _cond: wake ``poll``, something it hands out may have changed."""
        self._version += 1
        self._cond.notify_all()

    def _holds(self, message: Message) -> bool:
        with self._cond:
            return (message.topic, message.partition) in self._claims

    def _callback(self, callback: PartitionsCallback, keys: list[TopicPartition]) -> None:
        try:
            callback(keys)
        except Exception:
            log.exception("%s: partition callback %r failed", self._name(), callback)

    def _deliver_events(self, closing: bool = False) -> None:
        """Run queued on_assigned / on_revoked callbacks in the calling thread."""
        while True:
            with self._cond:
                if not self._events:
                    return
                kind, keys = self._events.popleft()
                while self._events and self._events[0][0] == kind:
                    keys = keys + self._events.popleft()[1]
            callback = self._on_assigned if kind == "assigned" else self._on_revoked
            if callback is not None and not (closing and kind == "assigned"):
                self._callback(callback, sorted(keys))

    def _event(self, kind: str, key: TopicPartition) -> None:
        """Under _cond."""
        if (self._on_assigned if kind == "assigned" else self._on_revoked) is not None:
            self._events.append((kind, [key]))

    def _drop(self, claim: _Claim, why: str, verdict: Verdict | None = None) -> None:
        """Forget a claim the replay says is no longer ours; stop handing it out at once.

        A FENCED verdict means a newer instance of our client_id took over: this instance
        must stop altogether, so every claim goes and no new ones are tried.
        """
        if verdict is not None and verdict.reason is Reason.FENCED:
            self._become_fenced()
        with self._cond:
            if self._claims.get(claim.key) is claim:
                del self._claims[claim.key]
                claim.active = False
                log.warning(
                    "%s lost %s/%d: %s (%d buffered messages dropped)",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    why,
                    len(claim.buffer),
                )
                claim.buffer.clear()
                claim.space.notify_all()
                self._event("revoked", claim.key)
                self._bump()
                if self._metrics is not None:
                    self._metrics.revoked(self, "fenced" if self._fenced else "lost")

    def _become_fenced(self) -> None:
        with self._cond:
            if self._fenced:
                return
            self._fenced = True
            others = list(self._claims.values())
        log.error(
            "%s was fenced by a newer instance of its client_id; it stops consuming", self._name()
        )
        for other in others:
            self._drop(other, "this instance is fenced")

    def _current(self, claim: _Claim) -> bool:
        with self._cond:
            return self._claims.get(claim.key) is claim

    def _may_hand_out(self, claim: _Claim) -> bool:
        """Self-fencing: only while the replay says we hold it and it cannot have lapsed."""
        if not self._marshaler.is_holder(claim.topic, claim.partition):
            return False
        age = self._clock.monotonic() - claim.last_ok
        if age >= self._fence_after:
            if not claim.fence_logged:
                claim.fence_logged = True
                log.warning(
                    "%s: no accepted message on %s/%d for %.3f s; not handing it out until "
                    "a heartbeat is accepted",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    age,
                )
            return False
        return True

    def _accepted(self, claim: _Claim, sent: float, position: int | None = None) -> None:
        with self._cond:
            if sent > claim.last_ok:
                claim.last_ok = sent
            if position is not None and position > claim.confirmed_through:
                claim.confirmed_through = min(position, claim.claimed_through)
            if claim.fence_logged:
                claim.fence_logged = False
                log.info("%s: %s/%d confirmed again", self._name(), claim.topic, claim.partition)
            self._bump()

    def _start_position(self, topic: str, partition: int) -> tuple[int, NoPosition | None]:
        """Where a new claim starts: the group's position if it has one inside the log, else
        the reset policy, as Kafka applies ``auto.offset.reset`` to a group without a
        committed offset and to one whose offset is out of range.

        A claim alone records no position (``has_position`` is false), whereas a position of
        -1 *is* one: "resume at 0" (an admin reset to offset 0, or a holder that started at 0).
        The caller's first heartbeat carries the result minus one, so the log records where
        this claim really starts and a successor resumes there, whatever its own policy.
        """
        state = self._marshaler.partition_state(topic, partition)
        position = state.resume_offset if state is not None and state.has_position else None
        try:
            start = self._cluster.earliest_offset(topic, partition)
            end = self._cluster.latest_offset(topic, partition)
        except (LogmarshalError, StorageError, OSError):
            if position is None:
                raise
            return position, None  # the fetch loop applies the policy if it is out of range
        if position is not None:
            if start <= position <= end:
                return position, None
            if position > end and self._mode == "amo":
                # AMO cannot move below what the log reserved: the fetch loop waits for the
                # log to reach the position (_out_of_range)
                return position, None
            if self._reset == "error":
                return position, NoPosition(topic, partition, position, start, end)
        if self._reset == "earliest":
            return start, None
        if self._reset == "latest":
            return end, None
        # no position: offset 0, so our heartbeats record "nothing handled" (-1) until seek()
        return 0, NoPosition(topic, partition, -1, start, end)

    # -- fetching ---------------------------------------------------------------------------

    def _start_fetcher(self, claim: _Claim) -> None:
        thread = threading.Thread(
            target=self._fetch_loop,
            args=(claim,),
            name=f"logmarshal-consumer-fetch:{self._marshaler.client_id}:"
            f"{claim.topic}/{claim.partition}",
            daemon=True,
        )
        with self._cond:
            self._fetchers = [t for t in self._fetchers if t.is_alive()]
            self._fetchers.append(thread)
        thread.start()

    def _fetch_loop(self, claim: _Claim) -> None:
        """Keep ``claim.buffer`` filled (up to ``prefetch``) until the claim goes."""
        backoff = 0.02
        while True:
            with self._cond:
                while claim.active and (
                    len(claim.buffer) >= self._prefetch or claim.error is not None
                ):
                    claim.space.wait(self._fetch_wait)
                if not claim.active or self._stop.is_set():
                    return
                offset = claim.next_fetch
            try:
                messages = self._cluster.fetch(
                    claim.topic,
                    claim.partition,
                    offset,
                    max_bytes=self._fetch_max_bytes,
                    max_wait=self._fetch_wait,
                )
            except OffsetOutOfRange as exc:
                self._out_of_range(claim, offset, exc)
                continue
            except ClosedError:
                return
            except (UnknownTopic, UnknownPartition) as exc:
                log.warning(
                    "%s: cannot fetch %s/%d: %s", self._name(), claim.topic, claim.partition, exc
                )
                self._wait_claim(claim, self._fetch_wait)
                continue
            except Exception as exc:
                log.info(
                    "%s: fetching %s/%d failed (%s); retrying",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    exc,
                )
                self._wait_claim(claim, backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.02
            if not messages:
                continue
            with self._cond:
                if not claim.active or claim.next_fetch != offset:
                    continue  # dropped or moved while we fetched
                fresh = (
                    messages
                    if messages[0].offset >= offset  # offsets increase: the usual case
                    else [m for m in messages if m.offset >= offset]
                )
                if fresh:
                    claim.buffer.extend(fresh)
                    claim.next_fetch = fresh[-1].offset + 1
                    self._bump()

    def _wait_claim(self, claim: _Claim, seconds: float) -> None:
        with self._cond:
            if claim.active:
                claim.space.wait(seconds)

    def _out_of_range(self, claim: _Claim, offset: int, exc: OffsetOutOfRange) -> None:
        """Apply the reset policy to a position outside the log (never abandon the claim)."""
        start, end = exc.log_start_offset, exc.log_end_offset
        if self._reset == "error":
            error: OffsetOutOfRange | None = NoPosition(
                claim.topic, claim.partition, offset, start, end
            )
            target = None
        else:
            error = None
            target = start if self._reset == "earliest" else end
            if self._mode == "amo" and target <= claim.claimed_through:
                # the log refuses reservations below claimed_through: wait for it to grow
                log.error(
                    "%s: %s/%d position %d is beyond the log end %d; AMO waits for the log to "
                    "reach it (set the position with the admin to move back)",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    offset,
                    end,
                )
                self._wait_claim(claim, max(self._fetch_wait, 1.0))
                return
        log.warning(
            "%s: %s/%d position %d is outside the log (%d..%d); %s",
            self._name(),
            claim.topic,
            claim.partition,
            offset,
            start,
            end,
            "raising to the caller" if error else f"resetting to the {self._reset} offset {target}",
        )
        with self._cond:
            if not claim.active or claim.next_fetch != offset:
                return
            if error is not None:
                claim.error = error
            else:
                assert target is not None
                self._move(claim, target)
            self._bump()

    def _move(self, claim: _Claim, offset: int) -> None:
        """Under _cond: jump a claim to ``offset``; nothing before it will be handed out."""
        if offset < claim.next_fetch and self._mode == "alo":
            # backwards (the log is shorter than the position): earlier commits are void
            claim.tracker = CommitTracker(offset - 1)
            claim.handed_through = offset - 1
        claim.buffer.clear()
        claim.next_fetch = offset
        if self._mode == "amo":
            claim.claimed_through = max(claim.claimed_through, offset - 1)
            claim.confirmed_through = max(claim.confirmed_through, offset - 1)
        claim.space.notify_all()

    # -- poll -------------------------------------------------------------------------------

    def _poll_once(self, limit: int) -> tuple[list[Message], int]:
        """One turn over the partitions with something to hand out; also the version the
        turn saw (few lock round trips: with fetch threads busy, each one can wait for the
        GIL)."""
        with self._cond:
            version = self._version
            ready = [
                (claim, claim.error)
                for key, claim in sorted(self._claims.items())
                if key not in self._paused and (claim.buffer or claim.error is not None)
            ]
            if not ready:
                return [], version
            start = self._cursor % len(ready)
            self._cursor += 1
        for claim, error in ready[start:] + ready[:start]:
            if error is not None:
                raise error
            if not self._may_hand_out(claim):
                continue
            batch = (
                self._take_alo(claim, limit)
                if self._mode == "alo"
                else self._take_amo(claim, limit)
            )
            if batch:
                return batch, version
        return [], version

    def _lease_holds(self, claim: _Claim) -> bool:
        """Under _cond: our claim cannot have lapsed yet (by our own lease, no I/O).

        Checked again at the moment of handing out: a process stopped (SIGSTOP, a long GC)
        between :meth:`_may_hand_out` and the hand-out would otherwise give out messages
        it fetched before, after another member may have taken the partition over.
        """
        return self._clock.monotonic() - claim.last_ok < self._fence_after

    def _take_alo(self, claim: _Claim, limit: int) -> list[Message]:
        with self._cond:
            if self._claims.get(claim.key) is not claim or not self._lease_holds(claim):
                return []
            buffer = claim.buffer
            if len(buffer) <= limit:  # in bulk: this is the hot path of every ALO consumer
                out = list(buffer)
                buffer.clear()
            else:
                out = [buffer.popleft() for _ in range(limit)]
            claim.tracker.handed_out_many(list(map(_OFFSET, out)))
            if out:
                claim.handed_through = out[-1].offset
                claim.space.notify_all()
            return out

    def _take_amo(self, claim: _Claim, limit: int) -> list[Message]:
        """The AMO transaction: reserve, check, heartbeat, only then hand out."""
        with claim.io_lock:
            with self._cond:
                if self._claims.get(claim.key) is not claim:
                    return []
                messages = list(itertools.islice(claim.buffer, limit))
                reserved = claim.claimed_through
            if not messages:
                return []
            last = messages[-1].offset
            if last > reserved:
                sent = self._clock.monotonic()
                verdict = self._write_and_wait(
                    lambda: self._marshaler.claim_messages(claim.topic, claim.partition, last)
                )
                if verdict is None:
                    return []  # unknown: retried later (re-reserving the same range is allowed)
                if not verdict.accepted:
                    self._drop(claim, f"ClaimingMessages rejected ({_reason(verdict)})", verdict)
                    return []
                if not self._marshaler.is_holder(claim.topic, claim.partition):
                    self._drop(claim, "the replay shows another holder after our reservation")
                    return []
                with self._cond:
                    claim.claimed_through = max(claim.claimed_through, last)
                self._accepted(claim, sent)
            with self._cond:
                confirmed = claim.confirmed_through
            if last > confirmed:
                sent = self._clock.monotonic()
                verdict = self._write_and_wait(
                    lambda: self._marshaler.heartbeat(claim.topic, claim.partition, last)
                )
                if verdict is None:
                    return []  # reserved, kept buffered; handed out once a heartbeat confirms
                if not verdict.accepted:
                    self._drop(claim, f"heartbeat rejected ({_reason(verdict)})", verdict)
                    return []
                self._accepted(claim, sent, last)
                with self._cond:
                    claim.next_heartbeat = sent + self._jitter()
        if not self._may_hand_out(claim):
            return []
        with self._cond:
            if self._claims.get(claim.key) is not claim or not self._lease_holds(claim):
                return []
            out = []
            while (
                claim.buffer
                and len(out) < limit
                and claim.buffer[0].offset <= claim.confirmed_through
            ):
                out.append(claim.buffer.popleft())
            if out:
                claim.handed_through = out[-1].offset
                claim.space.notify_all()
            return out

    def _write_and_wait(self, write: _Writer) -> Verdict | None:
        """Write one coordination message and read its verdict; None if unknown."""
        try:
            written = write()
        except ClosedError:
            return None
        except Exception as exc:
            log.info("%s: coordination write failed: %s", self._name(), exc)
            return None
        verdict = self._marshaler.wait_verdict(written, self._verdict_timeout)
        if verdict is None and not self._marshaler.closed:
            log.warning(
                "%s: no verdict for %s within %.3f s", self._name(), written, self._verdict_timeout
            )
        return verdict

    # -- handler ----------------------------------------------------------------------------

    def _handle(
        self, handler: Callable[[Message], object], message: Message, stop: threading.Event | None
    ) -> bool:
        """Run the handler on one message with the retry policy; False: stop this batch."""
        policy = self._retry
        attempt = 0
        while True:
            attempt += 1
            try:
                handler(message)
            except Exception as exc:
                if attempt >= policy.max_attempts:
                    if policy.dead_letter_topic is not None:
                        self._dead_letter(message, exc, policy.dead_letter_topic)
                        self.commit(message)
                        return True
                    self.close()
                    raise HandlerFailed(message, attempt, exc) from exc
                delay = policy.delay(attempt, self._rng)
                log.warning(
                    "%s: handler failed on %s/%d@%d (attempt %d of %d): %r; retrying in %.3f s",
                    self._name(),
                    message.topic,
                    message.partition,
                    message.offset,
                    attempt,
                    policy.max_attempts,
                    exc,
                    delay,
                )
                if self._stop.wait(delay) or (stop is not None and stop.is_set()):
                    return False
                if self._mode == "alo" and not self._holds(message):
                    return False  # lost during the backoff: the new holder retries it
                continue
            self.commit(message)
            return True

    def _dead_letter(self, message: Message, exc: BaseException, topic: str) -> None:
        """Send a message its handler gave up on to ``topic`` (created like its source)."""
        try:
            count = self._cluster.partitions(topic)
        except UnknownTopic:
            with contextlib.suppress(TopicExists):  # another member created it first
                self._cluster.create_topic(topic, self._cluster.partitions(message.topic))
            count = self._cluster.partitions(topic)
        headers = (
            *message.headers,
            ("logmarshal.topic", message.topic.encode()),
            ("logmarshal.partition", str(message.partition).encode()),
            ("logmarshal.offset", str(message.offset).encode()),
            ("logmarshal.error", repr(exc).encode()[:1000]),
        )
        self._cluster.produce(
            topic,
            message.partition % count,
            [
                NewRecord(
                    value=message.value,
                    key=message.key,
                    headers=headers,
                    timestamp=self._marshaler.now_ms(),
                )
            ],
            durable=True,
        )
        log.warning(
            "%s: %s/%d@%d dead-lettered to %s after %r",
            self._name(),
            message.topic,
            message.partition,
            message.offset,
            topic,
            exc,
        )

    # -- the manager thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._marshaler.wait_caught_up(timeout=self._tick * 4):
                    break
            if self._fast_reclaim and not self._stop.is_set():
                self._reclaim()
            while not self._stop.is_set():
                try:
                    self._manage()
                except (LogmarshalError, StorageError, OSError) as exc:  # log unreachable for now
                    log.warning("%s: coordination pass failed (%s); retrying", self._name(), exc)
                except Exception:
                    log.exception("%s: coordination pass failed; retrying", self._name())
                self._stop.wait(self._tick)
        except Exception:
            log.exception("%s: the manager thread stopped", self._name())

    def _manage(self) -> None:
        now = self._clock.monotonic()
        if not self._fenced and self._marshaler.is_fenced():
            self._become_fenced()
        with self._cond:
            claims = list(self._claims.values())
            fenced = self._fenced
        if fenced:
            for claim in claims:
                self._drop(claim, "this instance is fenced")
            return
        held_zero = {c.topic for c in claims if c.partition == 0}
        for claim in claims:
            if self._stop.is_set():
                return
            if not self._marshaler.is_holder(claim.topic, claim.partition):
                self._drop(claim, "the replay shows another holder (or none)")
            elif self._entire_topic and claim.topic not in held_zero:
                self._give_up(claim, "partition 0 of its topic is no longer ours")
            elif now >= claim.next_heartbeat:
                self._heartbeat(claim)
        self._adopt_orphans()
        self._release_if_behind(now)
        released = not self._entire_topic and self._released_nearby(now)
        if (released or now >= self._next_claim_pass) and not self._stop.is_set():
            self._next_claim_pass = now + self._claim_interval * self._rng.uniform(0.5, 1.5)
            if self._pattern is not None:
                self._topics = self._match_topics()
            if self._entire_topic:
                self._claim_topics_pass(now)
            else:
                self._claim_pass(now, take_all=released)

    def _heartbeat(self, claim: _Claim) -> None:
        # AMO: a reservation under way renews the claim itself; do not queue behind it
        if not claim.io_lock.acquire(timeout=self._tick):
            return
        try:
            if not self._current(claim):
                return
            with self._cond:
                if claim.unpositioned:
                    claim.next_heartbeat = self._clock.monotonic() + self._tick
                    return
                position = self._position(claim)
            sent = self._clock.monotonic()
            verdict = self._write_and_wait(
                lambda: self._marshaler.heartbeat(claim.topic, claim.partition, position)
            )
            if verdict is None:
                with self._cond:
                    claim.next_heartbeat = self._clock.monotonic() + self._tick
                return
            if not verdict.accepted:
                self._drop(claim, f"heartbeat rejected ({_reason(verdict)})", verdict)
                return
            self._accepted(claim, sent, position)
            with self._cond:
                claim.next_heartbeat = sent + self._jitter()
        finally:
            claim.io_lock.release()

    def _wanted(self) -> int:
        with self._cond:
            if self._entire_topic:
                held = len({t for t, p in self._claims if p == 0})
            else:
                held = len(self._claims)
        if self._max_claims is None:
            return 1 << 30
        return max(0, self._max_claims - held)

    def _partitions_of(self, topic: str) -> int:
        try:
            return self._cluster.partitions(topic)
        except UnknownTopic:
            log.debug("%s: topic %s does not exist (yet)", self._name(), topic)
            return 0

    def _cooling(self, key: TopicPartition, now: float) -> bool:
        until = self._cooldown.get(key)
        if until is None:
            return False
        if now >= until:
            del self._cooldown[key]
            return False
        return True

    def _paused_group(self, now: float) -> bool:
        """Is the group inside a ReleaseGroup window (by our clock)? Then try at its end."""
        now_ms = self._marshaler.now_ms()
        paused_until = self._marshaler.paused_until()
        if paused_until is not None and now_ms < paused_until:
            # compared with our clock: the replay's time stands still without records
            self._next_claim_pass = min(
                self._next_claim_pass, now + (paused_until - now_ms) / 1000 + 0.001
            )
            return True
        return False

    def _scan(
        self, keys: Iterable[TopicPartition], now: float, now_ms: int
    ) -> list[TopicPartition]:
        """Those of ``keys`` claimable now; schedules a pass for when the next one goes stale,
        so a dead member's partitions are taken as soon as the log allows, not a pass later."""
        out = []
        soonest: int | None = None
        for key in keys:
            if self._cooling(key, now):
                continue
            if self._marshaler.claimable(*key, now_ms=now_ms):
                out.append(key)
                continue
            state = self._marshaler.partition_state(*key)
            if state is not None and state.holder is not None:
                stale_at = state.last_beat + 2 * self._lease_ms(state) + 1
                soonest = stale_at if soonest is None else min(soonest, stale_at)
        if soonest is not None:
            self._next_claim_pass = min(
                self._next_claim_pass, now + max(0.0, (soonest - now_ms) / 1000)
            )
        return out

    def _released_nearby(self, now: float) -> bool:
        """Has someone released a partition we could take? Then a pass runs at once and
        takes all of them: a clean handoff should cost one replay round trip, not a pass."""
        if self._fenced or self._wanted() == 0:
            return False
        with self._cond:
            held = set(self._claims)
        for state in self._marshaler.partitions():
            key = (state.topic, state.partition)
            if (
                state.holder is None
                and key not in held
                and self._wants_topic(state.topic)
                and not self._cooling(key, now)
                and self._marshaler.claimable(*key)
            ):
                return True
        return False

    def _claim_pass(self, now: float, take_all: bool = False) -> None:
        wanted = self._wanted()
        if wanted == 0 or self._fenced or self._paused_group(now):
            return
        with self._cond:
            held = set(self._claims)
        keys = [
            (topic, p)
            for topic in self._topics
            for p in range(self._partitions_of(topic))  # read afresh: growth is seen
            if (topic, p) not in held
        ]
        candidates = self._scan(keys, now, self._marshaler.now_ms())
        self._rng.shuffle(candidates)
        taken = 0
        for topic, partition in candidates:
            if taken >= (wanted if self._greedy or take_all else 1) or self._stop.is_set():
                break
            if self._try_claim(topic, partition):
                taken += 1

    def _claim_topics_pass(self, now: float) -> None:
        """claim_entire_topic: win partition 0, then claim the rest of the topic."""
        if self._fenced or self._paused_group(now):
            return
        with self._cond:
            held = set(self._claims)
        ours = [t for t in self._topics if (t, 0) in held]
        wanted = self._wanted()
        others = [t for t in self._topics if (t, 0) not in held]
        self._rng.shuffle(others)
        now_ms = self._marshaler.now_ms()
        for topic in others:
            if wanted == 0 or self._stop.is_set():
                break
            if (
                self._partitions_of(topic)
                and self._scan([(topic, 0)], now, now_ms)
                and self._try_claim(topic, 0)
            ):
                ours.append(topic)
                wanted -= 1
        for topic in ours:
            with self._cond:
                held = set(self._claims)
            if (topic, 0) not in held:
                continue
            rest = [
                (topic, p) for p in range(1, self._partitions_of(topic)) if (topic, p) not in held
            ]
            for key in self._scan(rest, now, self._marshaler.now_ms()):
                if self._stop.is_set():
                    return
                self._try_claim(*key)

    def _try_claim(self, topic: str, partition: int) -> bool:
        """Claim, read the verdict, heartbeat at once, start at the resume offset."""
        previous = self._marshaler.holder(topic, partition)  # a stale one stays until replaced
        taken_over = previous is not None and previous != self._marshaler.identity
        sent = self._clock.monotonic()
        verdict = self._write_and_wait(lambda: self._marshaler.claim_partition(topic, partition))
        if verdict is None or not verdict.accepted:
            log.debug(
                "%s: claim of %s/%d not won (%s)",
                self._name(),
                topic,
                partition,
                "no verdict yet" if verdict is None else _reason(verdict),
            )
            # a lost race never touches positions (Marshal #95); an unknown verdict that
            # turns out accepted is adopted by the next pass (_adopt_orphans)
            return False
        how = f"took over (from {previous[0]}/{previous[1]})" if taken_over else "claimed"
        return self._adopt(
            topic, partition, how, claim_sent=sent, kind="failover" if taken_over else "claimed"
        )

    def _adopt(
        self,
        topic: str,
        partition: int,
        how: str,
        claim_sent: float | None = None,
        kind: str = "claimed",
    ) -> bool:
        """We hold ``(topic, partition)`` in the log: heartbeat at once and start handing out.

        ``claim_sent`` is when the claim we know was accepted was sent; with it, a heartbeat
        whose verdict does not come in time still leaves the claim tracked (confirmed by the
        heartbeats that follow) rather than forgotten while the log says we hold it. ``kind``
        names the assignment in metrics (claimed, failover, recovered, took_back).
        """
        resume, error = self._start_position(topic, partition)
        last_offset = resume - 1
        beat_sent = self._clock.monotonic()
        if isinstance(error, NoPosition) and error.offset < 0:
            # No position and policy "error": a heartbeat would record one (-1, "resume at
            # 0") for every member after us. Hold the claim unrenewed until seek(); without
            # a claim of ours to hold (restart recovery), leave the partition alone.
            if claim_sent is None:
                return False
            verdict = None
        else:
            verdict = self._write_and_wait(
                lambda: self._marshaler.heartbeat(topic, partition, last_offset)
            )
        if verdict is not None and not verdict.accepted:
            log.warning(
                "%s: heartbeat after %s %s/%d rejected (%s)",
                self._name(),
                how,
                topic,
                partition,
                _reason(verdict),
            )
            if verdict.reason is Reason.FENCED:
                self._become_fenced()
            return False
        if verdict is None and claim_sent is None:
            return False  # not known to be ours yet; the next pass looks again
        if verdict is not None and self._mode == "amo":
            # The position was read before our heartbeat landed. In between, a previous
            # instance of our client (not fenced until that heartbeat) may have reserved more;
            # the replay, now past our heartbeat, shows every such reservation, and nobody
            # else's record is accepted after it. Start beyond all of them: never hand out
            # what another instance may have handed out already.
            state = self._marshaler.partition_state(topic, partition)
            if state is not None and state.has_position and state.claimed_through >= resume:
                log.warning(
                    "%s: %s/%d was reserved through %d meanwhile; resuming after it",
                    self._name(),
                    topic,
                    partition,
                    state.claimed_through,
                )
                resume = state.claimed_through + 1
                last_offset = resume - 1
        now = self._clock.monotonic()
        with self._cond:
            space = threading.Condition(self._lock)
        claim = _Claim(
            topic=topic,
            partition=partition,
            next_fetch=resume,
            tracker=CommitTracker(last_offset),
            last_ok=beat_sent if verdict is not None else claim_sent,  # type: ignore[arg-type]
            next_heartbeat=(
                beat_sent + self._jitter() if verdict is not None or error is not None else now
            ),
            claimed_through=last_offset,
            confirmed_through=last_offset,
            handed_through=last_offset,
            space=space,
            error=error,
        )
        with self._cond:
            closing = self._closed or self._fenced
            if not closing:
                self._claims[claim.key] = claim
                self._event("assigned", claim.key)
                self._bump()
        if closing:
            # close() raced us: give it straight back rather than leave it to go stale
            self._release(claim)
            return False
        self._start_fetcher(claim)
        if self._metrics is not None:
            self._metrics.assigned(self, kind)
        log.info("%s %s %s/%d, resuming at %d", self._name(), how, topic, partition, resume)
        return True

    def _adopt_orphans(self) -> None:
        """Claims the replay says this instance holds but we do not track (a verdict that
        came too late, or a claim whose answer was lost): take them up."""
        me = self._marshaler.identity
        with self._cond:
            held = set(self._claims)
        for claim in self._marshaler.claims():
            if self._stop.is_set() or self._fenced:
                return
            key = (claim.topic, claim.partition)
            if (claim.client_id, claim.instance_id) != me or key in held:
                continue
            if not self._wants_topic(claim.topic):
                continue
            if self._wanted() == 0:  # the pass went on claiming while this verdict was unknown
                self._release_orphan(claim.topic, claim.partition)
                continue
            self._adopt(claim.topic, claim.partition, "found our claim of", kind="recovered")

    def _reclaim(self) -> None:
        """Restart recovery: take back our client_id's still-fresh claims with this instance."""
        now_ms = self._marshaler.now_ms()
        me = self._marshaler.identity
        for old in self._marshaler.claims():
            if self._stop.is_set() or self._wanted() == 0:
                return
            if not self._wants_topic(old.topic) or (old.client_id, old.instance_id) == me:
                continue
            if self._marshaler.freshness(old.topic, old.partition, now_ms) != FRESH:
                continue
            if self._adopt(
                old.topic, old.partition, f"took back (from {old.instance_id})", kind="took_back"
            ):
                continue
            log.info("%s: could not take back %s/%d", self._name(), old.topic, old.partition)

    def _release_if_behind(self, now: float) -> None:
        """Give up the partition furthest behind, if it is not catching up and someone else
        is alive to take it (never release into the void: zorkian/marshal#41)."""
        if self._behind is None or self._entire_topic or now < self._next_behind_check:
            return
        self._next_behind_check = now + self._hb
        with self._cond:
            claims = [c for c in self._claims.values() if c.key not in self._paused]
        behind: list[tuple[int, _Claim]] = []
        for claim in claims:
            try:
                end = self._cluster.latest_offset(claim.topic, claim.partition)
            except Exception:
                continue
            with self._cond:
                lag = end - claim.handed_through - 1
                previous, claim.lag_sample = claim.lag_sample, lag
            if lag > self._behind and previous is not None and lag >= previous:
                behind.append((lag, claim))
        if not behind:
            return
        if not self._other_fresh_member():
            log.debug("%s: behind, but nobody else is alive to take over", self._name())
            return
        lag, claim = max(behind, key=lambda item: item[0])
        self._give_up(claim, f"{lag} messages behind and not catching up")

    def _other_fresh_member(self) -> bool:
        now_ms = self._marshaler.now_ms()
        me = self._marshaler.client_id
        return any(
            state.holder is not None
            and state.holder[0] != me
            and now_ms - state.last_beat < self._lease_ms(state)
            for state in self._marshaler.partitions()
        )

    def _lease_ms(self, state: PartitionState) -> int:
        """The holder's own HB (each claim carries it); ours if the replay does not say."""
        lease = getattr(state, "heartbeat_interval_ms", None)
        return lease if isinstance(lease, int) and lease > 0 else self._hb_ms

    def _give_up(self, claim: _Claim, why: str) -> None:
        """Release one claim while running; leave it to others for ``reclaim_cooldown``."""
        with self._cond:
            if self._claims.get(claim.key) is not claim:
                return
            del self._claims[claim.key]
            claim.active = False
            claim.buffer.clear()
            claim.space.notify_all()
            self._cooldown[claim.key] = self._clock.monotonic() + self._cooldown_s
            self._event("revoked", claim.key)
            self._bump()
        if self._metrics is not None:
            self._metrics.revoked(self, "gave_up")
        log.info("%s releases %s/%d: %s", self._name(), claim.topic, claim.partition, why)
        self._release(claim)

    def _release(self, claim: _Claim) -> None:
        """Write ReleasingPartition with the final position until the log has it (bounded)."""
        with claim.io_lock:
            with self._cond:
                if claim.unpositioned:
                    log.info(
                        "%s: %s/%d has no position; not releasing it (that would set one)",
                        self._name(),
                        claim.topic,
                        claim.partition,
                    )
                    return
                position = self._position(claim)
            self._release_at(claim.topic, claim.partition, position)

    def _release_at(self, topic: str, partition: int, position: int) -> bool:
        deadline = time.monotonic() + self._verdict_timeout
        me = self._marshaler.identity
        while True:
            verdict = self._write_and_wait(
                lambda: self._marshaler.release_partition(topic, partition, position)
            )
            if verdict is not None and verdict.accepted:
                log.info("%s released %s/%d at %d", self._name(), topic, partition, position)
                return True
            if verdict is not None:
                # A rejection is final: the same record would be rejected again (fenced,
                # paused group, not the holder). Writing it again only grows the log.
                log.warning(
                    "%s: release of %s/%d rejected (%s)",
                    self._name(),
                    topic,
                    partition,
                    _reason(verdict),
                )
                if verdict.reason is Reason.FENCED:
                    self._become_fenced()
                return False
            if verdict is None and not self._replayed_to_end(topic, partition, deadline):
                log.warning(
                    "%s: release of %s/%d not confirmed; it will go stale",
                    self._name(),
                    topic,
                    partition,
                )
                return False
            state = self._marshaler.partition_state(topic, partition)
            if state is not None and state.holder != me:
                if state.holder is None and state.last_offset == position:
                    return True  # an earlier attempt whose answer was lost did land
                why = "no verdict" if verdict is None else _reason(verdict)
                log.warning(
                    "%s: release of %s/%d not accepted (%s): no longer ours",
                    self._name(),
                    topic,
                    partition,
                    why,
                )
                return False
            if time.monotonic() >= deadline or self._marshaler.closed:
                log.warning(
                    "%s: release of %s/%d not confirmed; it will go stale",
                    self._name(),
                    topic,
                    partition,
                )
                return False

    def _replayed_to_end(self, topic: str, partition: int, deadline: float) -> bool:
        """Wait until the replay has applied the partition's coordination log as it is now.

        A write whose answer was lost (or whose verdict came too late) may have landed all
        the same. Writing the release again before the replay shows it would put a second
        ReleasingPartition, from an instance that no longer holds the partition, in the log
        (rejected, but a ``release_without_claim`` in the audit). False if that cannot be
        known before ``deadline``: then nothing more is written.
        """
        cp = self._marshaler.coordination_partition(topic, partition)
        try:
            end = self._cluster.latest_offset(COORDINATION_TOPIC, cp)
        except Exception as exc:
            log.info("%s: no end offset of %s/%d: %s", self._name(), COORDINATION_TOPIC, cp, exc)
            return False
        return self._marshaler.wait_applied(cp, end - 1, max(0.0, deadline - time.monotonic()))

    def _release_untracked(self) -> None:
        """On close: claims the log gives this instance that we never took up (late verdicts)."""
        me = self._marshaler.identity
        for claim in self._marshaler.claims():
            if (claim.client_id, claim.instance_id) != me or not self._wants_topic(claim.topic):
                continue
            self._release_orphan(claim.topic, claim.partition)

    def _release_orphan(self, topic: str, partition: int) -> None:
        """Give back a claim of ours we never took up, at the position a successor should
        resume from: the group's, else where our reset policy would have started (what our
        first heartbeat would have recorded). Under "error" with no position there is none
        to write: the claim is left to lapse, and "no position" stays so."""
        state = self._marshaler.partition_state(topic, partition)
        if state is None:
            return
        if state.has_position:
            self._release_at(topic, partition, state.resume_offset - 1)
            return
        try:
            resume, error = self._start_position(topic, partition)
        except (LogmarshalError, StorageError, OSError) as exc:
            log.info(
                "%s: no start position for %s/%d (%s); left to lapse",
                self._name(),
                topic,
                partition,
                exc,
            )
            return
        if not (isinstance(error, NoPosition) and error.offset < 0):
            self._release_at(topic, partition, resume - 1)


def _reason(verdict: Verdict) -> str:
    reason: Reason | None = verdict.reason
    return reason.value if reason is not None else "accepted"
