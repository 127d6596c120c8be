"""The live replay of ``__marshal``: each coordination partition tailed into a
:class:`rationalizer.WorldState`, by one thread long-polling them all in one request where
the cluster can (:class:`~logmarshal.cluster.MultiBatchFetcher`: the network and the
embedded cluster), else by one thread per partition.

A :class:`~logmarshal.marshaler.Marshaler` composes one :class:`Tailer`; the Spark audit's
batch replay is :mod:`logmarshal.audit.replay`, and reading the coordination log's storage
(fetching, snapshots, truncation) is :mod:`logmarshal._coordlog`, which this module calls.

Each partition's world and the offset its replay reached are guarded by that partition's
lock (:meth:`Tailer.locks`), which the replay thread holds only while it applies a fetched
chunk. A cold start first announces the replay configuration (key configuration and rules)
in the snapshot topic, and goes on announcing it while it runs, so that no truncator deletes
what that configuration still needs; it then restores the newest valid published snapshot of
that configuration and replays the tail. A tailer whose own record lands on a snapshot point
publishes the next snapshot and then truncates; one whose configuration has fewer than
``KEEP_SNAPSHOTS`` valid snapshots (or only old ones) publishes one once caught up, and
again after the next snapshot interval (PROTOCOL.md, "Bounded coordination log";
docs/bounded-log.md).

The :class:`Tailer` here fetches and applies; one partition's state is
:mod:`logmarshal._tail_state`, the bounded log's announcements, snapshots and truncation are
:mod:`logmarshal._tail_snapshots`, and the checks for a log that lost records are
:mod:`logmarshal._tail_losses` (mixins of the Tailer; every line they log is the
``logmarshal._tailer`` logger's).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from rationalizer import UnknownVersion, Verdict, WorldState
from storage import CorruptBatch

from . import _coordlog as coordlog
from ._coordlog import COORDINATION_TOPIC
from ._tail_losses import LossChecking, _Rewound
from ._tail_snapshots import RETRIABLE_OR_CLOSED, SnapshotKeeping
from ._tail_state import Halt, HaltListener, Tail
from .cluster import Cluster, Columns, MultiBatchFetcher, PastMarkers, check_max_bytes
from .errors import RETRIABLE, ClosedError, OffsetOutOfRange

__all__ = ["Applied", "AppliedMany", "Halt", "HaltListener", "Tailer"]

#: a fetch that took this much longer than its long poll may have met a broker restart or a
#: leader change its reader retried by itself: the replay reads back what it applied last
#: before applying more (the log may have gone back; PROTOCOL.md, "A coordination log that
#: loses records"). A second, not 0.1 s: on a busy machine fetches run 0.1 s late all the
#: time, and read-backs of every partition then delayed the replay into more late fetches
#: (the demo over the broker stopped balancing a join within 12 s)
_SLOW_FETCH = 1.0
#: an answer with this many records or more is a backlog's (a cold start catching up, a
#: replay that fell behind): the next fetch follows at once, without the linger
_LINGER_BELOW = 1000
#: while stopping, how long a join waits before waking the fetches again (seconds)
_WAKE_AGAIN = 0.05
#: without a ``snapshot_ms``, how often (wall ms) a tailer looks whether its configuration
#: has snapshots of its own that bound the truncation closely enough
_KEEP_CURRENT_MS = 3_600_000

log = logging.getLogger(__name__)


class _Again:
    """``_AGAIN``: a cold start the log could not answer for now (try it again)."""


_AGAIN = _Again()

#: ``applied(cp, applied_through, verdicts)``: called by the tail thread of ``cp`` after
#: each chunk, outside the replay's lock
Applied = Callable[[int, int, list[Verdict | None]], None]
#: ``applied_many([(cp, applied_through, verdicts), ...])``: the chunks of several
#: partitions that one answer brought, once they are all applied (the one replay thread of
#: every partition; outside the replays' locks)
AppliedMany = Callable[[list[tuple[int, int, list[Verdict | None]]]], None]


class _Worlds(Sequence[WorldState]):
    """A live view of the tails' worlds (a restored snapshot replaces a tail's world)."""

    def __init__(self, tails: list[Tail]) -> None:
        self._tails = tails

    def __len__(self) -> int:
        return len(self._tails)

    def __getitem__(self, index: int) -> WorldState:  # type: ignore[override]  # an int index only: no slice of worlds is ever asked for
        return self._tails[index].world


class Tailer(SnapshotKeeping, LossChecking):
    """Replays coordination partitions ``0..partitions-1`` of ``cluster`` until :meth:`stop`:
    one thread and one long poll for them all where the cluster can fetch them together,
    else a thread each.

    ``applied`` hears of every applied chunk (a Marshaler's listeners and metrics);
    ``applied_many``, if given, of the chunks one answer brought for several partitions
    together (instead of ``applied`` for each).
    ``fetch_linger``: after an answer that carried records, how long to let pass before
    asking again (the appends of that time then come in one answer), unless a record of
    this process is awaited (:meth:`hurry`) or the answer was a backlog's.
    ``snapshot_records`` / ``snapshot_ms`` set the snapshot points (None disables either),
    ``now_ms`` stamps a published snapshot, ``truncate`` deletes what the kept snapshots
    cover, ``restore`` starts from a snapshot instead of the log's start. ``admin_keys``
    authenticate admin records (PROTOCOL.md): every replayer must be given the same.
    ``announce_ttl_ms``: how long each announcement of this replay's configuration holds
    (wall clock, ``now_ms``); it is renewed every quarter of it, and made before a cold start
    reads the log (None: never announced; only the tests that show what announcing
    prevents do that).
    ``halted`` hears of a coordination partition whose replay stopped being a fold of the
    log (a log that went back below what the replay applied, or records deleted before the
    replay saw them with no snapshot covering them: :class:`Halt`); ``_check_rewind=False``
    turns the check for a log that went back off (only a test that shows what it prevents
    does that).
    """

    def __init__(
        self,
        cluster: Cluster,
        partitions: int,
        *,
        admin_keys: Mapping[str, bytes] | None,
        applied: Applied,
        applied_many: AppliedMany | None = None,
        now_ms: Callable[[], int],
        thread_name: str,
        fetch_wait: float,
        max_partition_fetch_bytes: int,
        fetch_linger: float = 0.0,
        snapshot_records: int | None,
        snapshot_ms: int | None,
        truncate: bool,
        restore: bool,
        halted: HaltListener | None = None,
        announce_ttl_ms: int | None = coordlog.DEFAULT_ANNOUNCE_TTL_MS,
        _check_rewind: bool = True,
    ) -> None:
        if announce_ttl_ms is not None and announce_ttl_ms < 4:
            raise ValueError(f"announce_ttl_ms must be at least 4, got {announce_ttl_ms}")
        # (the Marshaler's setting: refused before a thread starts, not by every fetch)
        check_max_bytes(max_partition_fetch_bytes, "max_partition_fetch_bytes")
        self._cluster = cluster
        self._announce_ttl_ms = announce_ttl_ms
        self._topic_problems: list[str] = []
        self._halted = halted
        self._check_rewind = _check_rewind
        self._n = partitions
        self._admin_keys = dict(admin_keys or {})
        self._applied = applied
        self._applied_many = applied_many
        self._now_ms = now_ms
        self._thread_name = thread_name
        self._fetch_wait = fetch_wait
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._snapshot_records = snapshot_records
        self._snapshot_ms = snapshot_ms
        self._truncate = truncate
        self._restore = restore
        self._stopped = threading.Event()
        self._hurry = threading.Event()  # the shared replay's: a record of ours is awaited
        self._tails = [Tail(cp, WorldState(admin_keys=admin_keys)) for cp in range(partitions)]
        #: how often a publishing tailer looks whether its configuration's snapshots bound
        #: the truncation closely enough
        self._keep_current_ms = snapshot_ms if snapshot_ms is not None else _KEEP_CURRENT_MS
        if snapshot_records is not None or snapshot_ms is not None:
            for tail in self._tails:
                tail.keep_current_at = 0  # once caught up
        self._fetch_linger = fetch_linger
        #: the one replay thread of every partition (None: a thread each)
        self._together: threading.Thread | None = None

    # -- lifetime ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start replaying: one thread long-polling every partition in one request when the
        cluster can (:class:`~logmarshal.cluster.MultiBatchFetcher`), else (or once it
        cannot) one thread per coordination partition."""
        if isinstance(self._cluster, MultiBatchFetcher):
            self._together = threading.Thread(
                target=self._guarded,
                args=(self._run_together, self._tails),
                name=f"{self._thread_name}:all",
                daemon=True,
            )
            self._together.start()
            return
        for tail in self._tails:
            tail.thread = threading.Thread(
                target=self._guarded,
                args=(self._run, [tail], tail),
                name=f"{self._thread_name}:{tail.partition}",
                daemon=True,
            )
            tail.thread.start()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop every tail thread (waiters wake up and get False) and join them."""
        self._stopped.set()
        self._hurry.set()
        for tail in self._tails:
            tail.hurry.set()
            with tail.cond:
                tail.cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wake_fetches()
        if self._together is not None:
            self._join(self._together, deadline)  # before the tails: it may start their threads
        for tail in self._tails:
            if tail.thread is not None:
                self._join(tail.thread, deadline)

    def _wake_fetches(self) -> None:
        """End the tails' long polls now, where the cluster can (a ``FetchWaker``: the
        embedded one; a ``FetchCanceller``: the network one, which ends our replay threads'
        fetches only), so a close does not wait out ``fetch_wait``."""
        wake = getattr(self._cluster, "wake_fetches", None)
        cancel = getattr(self._cluster, "cancel_fetches", None)
        try:
            if wake is not None:
                wake(COORDINATION_TOPIC, [tail.partition for tail in self._tails])
            elif cancel is not None:
                threads = [self._together, *(tail.thread for tail in self._tails)]
                cancel([t.ident for t in threads if t is not None and t.ident is not None])
        except Exception as exc:  # a wrapper's own failure: the joins still end
            log.debug("could not wake the replay's fetches: %s", exc)

    def _join(self, thread: threading.Thread, deadline: float | None) -> None:
        """Join ``thread`` by ``deadline``, waking the fetches again while it lives (one
        that began its wait just after the first wake would otherwise wait it out)."""
        while thread.is_alive():
            left = (
                _WAKE_AGAIN if deadline is None else min(_WAKE_AGAIN, deadline - time.monotonic())
            )
            if left <= 0:
                return
            thread.join(left)
            if thread.is_alive():
                self._wake_fetches()

    # -- what the replay reached ------------------------------------------------------------

    @property
    def partitions(self) -> int:
        return self._n

    def worlds(self) -> Sequence[WorldState]:
        """The replayed worlds, one per coordination partition; read them under
        :meth:`locks` (a tail thread may otherwise be applying)."""
        return _Worlds(self._tails)

    def locks(self) -> tuple[threading.Condition, ...]:
        """One lock per coordination partition, guarding its world and replay offset."""
        return tuple(tail.cond for tail in self._tails)

    @contextlib.contextmanager
    def world(self, cp: int) -> Iterator[WorldState]:
        """The world of coordination partition ``cp``, its replay held still meanwhile."""
        tail = self._tails[cp]
        with tail.cond:
            yield tail.world

    def next_offsets(self) -> dict[int, int]:
        """Per coordination partition, the next offset its replay will apply."""
        return {tail.partition: tail.next_offset for tail in self._tails}

    @property
    def skipped_batches(self) -> int:
        """Corrupt stored coordination batches the replay skipped (each logged as an error)."""
        return sum(tail.skipped_batches for tail in self._tails)

    def wait_applied(self, cp: int, offset: int, timeout: float) -> bool:
        """Wait until the replay of ``cp`` has applied ``offset``.

        False on timeout, after :meth:`stop`, or if that partition's replay stopped.
        """
        tail = self._tails[cp]
        deadline = time.monotonic() + timeout
        with tail.cond:
            if tail.next_offset <= offset:
                self.hurry(cp)
            while tail.next_offset <= offset:
                if self._stopped.is_set() or tail.error is not None or self._frozen(tail):
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                tail.cond.wait(remaining)
            return True

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every partition is replayed up to its end as of this call."""
        return self.wait_reached(self.log_ends(), timeout)

    def log_ends(self) -> dict[int, int]:
        """The end of every partition whose replay goes on, as the log shows it now (one
        look-up each; raises what the cluster raises)."""
        return {
            tail.partition: self._cluster.latest_offset(COORDINATION_TOPIC, tail.partition)
            for tail in self._tails
            if not self._frozen(tail)  # its replay stopped for good: acted on no more
        }

    def wait_reached(self, ends: Mapping[int, int], timeout: float) -> bool:
        """Wait until the replay of each partition in ``ends`` has applied what precedes its
        end there (:meth:`log_ends`). A caller that waits in several tries keeps the ends
        of its first: ends looked up afresh each try may stay ahead of a replay that
        follows a busy log, however close it follows."""
        deadline = time.monotonic() + timeout
        for cp, end in ends.items():
            if self._frozen(self._tails[cp]):
                continue  # it stopped for good since (core.rewind)
            if not self.wait_applied(cp, end - 1, max(0.0, deadline - time.monotonic())):
                return False
        return True

    def halts(self) -> dict[int, Halt]:
        """The halted coordination partitions (:class:`Halt`), by partition."""
        out = {}
        for tail in self._tails:
            with tail.cond:
                if tail.halt is not None:
                    out[tail.partition] = tail.halt
        return out

    def regained(self, cp: int, group: str) -> tuple[int, frozenset[tuple[str, int]]]:
        """After a gap in ``cp``: the offset the gap ended at and the partitions of ``group``
        the records since determine again (:class:`~logmarshal.core.rewind.Regained`), read
        together (a second gap may come between two reads); none after a rewind."""
        tail = self._tails[cp]
        with tail.cond:
            if tail.regained is None:
                return -1, frozenset()
            return tail.regained.trusted_from, tail.regained.trusted(group, tail.world.now)

    @staticmethod
    def _frozen(tail: Tail) -> bool:
        halt = tail.halt
        return halt is not None and halt.why == "rewound"

    def hurry(self, cp: int) -> None:
        """A record just written to ``cp`` is awaited (its verdict): the replay fetches it
        without lingering."""
        self._tails[cp].hurry.set()
        self._hurry.set()

    def mark_own(self, cp: int, offsets: Iterable[int]) -> None:
        """Offsets of records this process wrote to ``cp``: if one lands on a snapshot point,
        this tailer publishes the snapshot (PROTOCOL.md, "Who publishes")."""
        if self._snapshot_records is None and self._snapshot_ms is None:
            return
        tail = self._tails[cp]
        with tail.cond:
            # even if the replay already passed them (it raced the write's answer): the next
            # chunk then publishes, covering a little more
            tail.own.update(offsets)

    # -- the tail threads -------------------------------------------------------------------

    def _start(self, tail: Tail) -> int:
        """Cold start of one partition: the newest valid snapshot, else the log's start.

        Returns the next offset to fetch. The configuration is announced before the log is
        read: a truncator that reads the announcement keeps what this replay needs (one that
        computed its bound before it landed may delete it: then no snapshot of ours covers
        the gap and :meth:`_gap` refuses the world, PROTOCOL.md "Bounded coordination
        log")."""
        cp = tail.partition
        self._announce_config(tail, starting=True)
        earliest = self._cluster.earliest_offset(COORDINATION_TOPIC, cp)
        restored = None
        if self._restore:
            restored = coordlog.load_snapshot(
                self._cluster, cp, self._admin_keys, earliest=earliest
            )
        if restored is not None:
            with tail.cond:
                tail.world = restored.world
                tail.next_offset = restored.covered + 1
                # a waiter must not sleep until its timeout when the snapshot covers the
                # whole log (no record follows to wake it)
                tail.cond.notify_all()
            log.info(
                "%s/%d: starting from the snapshot covering %d",
                COORDINATION_TOPIC,
                cp,
                restored.covered,
            )
            return restored.covered + 1
        if earliest > 0:
            # the halt first, told to every listener (a consumer's core steps it now), and only
            # then the start: a catch-up waiting for this partition (wait_reached) must not
            # see it replayed while its halt is unknown, or the member acts on it (announces,
            # claims) and the halt that follows finds it wrote there: stopped as fenced
            self._gap(tail, 0, earliest)
        with tail.cond:
            tail.next_offset = earliest
            tail.cond.notify_all()
        return earliest

    def _begin(self, tail: Tail) -> int | None:
        """:meth:`_start` of one partition, retried while the log is unreachable; None if
        its replay cannot start (the error is on the tail)."""
        backoff = 0.05
        while True:
            offset = self._begin_once(tail)
            if not isinstance(offset, _Again):
                return offset
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, 1.0)

    def _begin_all(self) -> dict[int, int]:
        """:meth:`_begin` of every partition, for the one replay thread: each tried in turn,
        and those the log could not answer for now tried again after one backoff shared by
        all (a coordination topic its brokers do not all know yet, right after its
        creation, then costs a backoff a round, not one per partition in a row). The next
        offset of each partition whose replay starts."""
        offsets: dict[int, int] = {}
        pending = list(self._tails)
        backoff = 0.05
        while pending and not self._stopped.is_set():
            again = []
            for tail in pending:
                offset = self._begin_once(tail)
                if isinstance(offset, _Again):
                    again.append(tail)
                elif offset is not None:
                    offsets[tail.partition] = offset
            pending = again
            if pending:
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
        return offsets

    def _begin_once(self, tail: Tail) -> int | _Again | None:
        """One try of :meth:`_start`: the next offset, ``_AGAIN`` when the log (or the
        snapshot topic) is unreachable for now, None if the replay cannot start (the error
        is on the tail)."""
        cp = tail.partition
        try:
            return self._start(tail)
        except RETRIABLE_OR_CLOSED as exc:
            # the log (or the snapshot topic) is unreachable for now: never fall back to
            # a replay that would miss what a snapshot holds, retry instead
            if self._stopped.is_set() or isinstance(exc, ClosedError):
                with tail.cond:
                    tail.error = exc
                    tail.cond.notify_all()
                return None
            log.warning("cannot start replaying %s/%d (%s); retrying", COORDINATION_TOPIC, cp, exc)
            return _AGAIN
        except Exception as exc:
            log.exception("cannot start replaying %s/%d", COORDINATION_TOPIC, cp)
            with tail.cond:
                tail.error = exc
                tail.cond.notify_all()
            return None

    def _written_lost_locked(self, tail: Tail, offset: int, got: Columns) -> int | None:
        """``_written_lost`` under the partition's lock: the writer's ``mark_written`` adds
        to ``tail.written`` (a dict that changed size during the scan stopped the replay)."""
        with tail.cond:
            return self._written_lost(tail, offset, got)

    def _guarded(self, run: Callable[..., None], tails: Sequence[Tail], *args: Any) -> None:
        """A replay thread's body. A failure nothing expected (a bug) stops it, said once,
        and becomes each of its partitions' error, so whoever waits on them learns at once
        (before, the thread died with nothing logged and waits ran out their timeouts)."""
        try:
            run(*args)
        except Exception as exc:
            log.exception("the replay of %s stopped", COORDINATION_TOPIC)
            for tail in tails:
                with tail.cond:
                    if tail.error is None:
                        tail.error = exc
                    tail.cond.notify_all()

    def _run(self, tail: Tail, offset: int | None = None) -> None:
        """Feed one WorldState from its partition until stopped (from ``offset`` if given,
        else from its cold start)."""
        cp = tail.partition
        if offset is None:
            offset = self._begin(tail)
            if offset is None:
                return
        backoff = 0.05
        while not self._stopped.is_set():
            tail.hurry.clear()  # what was written before this fetch, it brings
            asked = time.monotonic()
            try:
                # (a damaged batch is raised: _advance skips it, the position moves past it)
                got: Columns | PastMarkers | Exception = coordlog.fetch_replay(
                    self._cluster,
                    cp,
                    offset,
                    max_bytes=self._max_partition_fetch_bytes,
                    max_wait=self._fetch_wait,
                )
            except Exception as exc:
                got = exc
            answered = time.monotonic()
            if answered - asked > self._fetch_wait + _SLOW_FETCH:
                tail.suspect = True  # a reconnect the reader retried by itself, maybe
            moved, pause = self._advance(tail, offset, got, backoff)
            if moved is None:
                return
            if pause:
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                offset = moved
                continue
            backoff = 0.05
            self._housekeeping(tail)
            if moved != offset:
                offset = moved
                records = 0 if isinstance(got, (Exception, PastMarkers)) else len(got[0])
                self._linger(answered, records, tail.hurry)
        with tail.cond:
            tail.cond.notify_all()

    def _run_together(self) -> None:
        """Feed every WorldState from one long poll of all the partitions (one request a
        fetch: an append to any of them answers it, and one answer carries the records of
        all). Falls back to a thread per partition if the cluster cannot fetch them
        together (any more)."""
        offsets = self._begin_all()
        if self._stopped.is_set():
            return
        backoff = 0.05
        while offsets and not self._stopped.is_set():
            self._hurry.clear()  # what was written before this fetch, it brings
            asked = time.monotonic()
            try:
                got: Mapping[int, Columns | PastMarkers | Exception] | None = (
                    coordlog.fetch_columns_many(
                        self._cluster,
                        COORDINATION_TOPIC,
                        offsets,
                        max_bytes=self._max_partition_fetch_bytes,
                        max_wait=self._fetch_wait,
                    )
                )
            except Exception as exc:
                got = dict.fromkeys(offsets, exc)
            if got is None:
                log.info(
                    "%s: the partitions cannot be fetched together; a replay thread each",
                    COORDINATION_TOPIC,
                )
                self._split(offsets)
                return
            answered = time.monotonic()
            if answered - asked > self._fetch_wait + _SLOW_FETCH:
                for cp in offsets:  # a reconnect the reader retried by itself, maybe
                    self._tails[cp].suspect = True
            pause = moved_any = False
            batch: list[tuple[int, int, list[Verdict | None], Tail | None]] = []
            for cp, offset in list(offsets.items()):
                moved, wait = self._advance(self._tails[cp], offset, got[cp], backoff, batch)
                if moved is None:
                    del offsets[cp]  # this partition's replay ended (its error is kept)
                    continue
                offsets[cp] = moved
                pause = pause or wait
                moved_any = moved_any or moved != offset
            if batch:
                self._announce(batch)
            now = self._now_ms()
            for cp in offsets:
                self._housekeeping(self._tails[cp], now)
            if pause:
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.05
            if moved_any:
                records = sum(
                    len(g[0]) for g in got.values() if not isinstance(g, (Exception, PastMarkers))
                )
                self._linger(answered, records, self._hurry)
        for tail in self._tails:
            with tail.cond:
                tail.cond.notify_all()

    def _announce(self, batch: list[tuple[int, int, list[Verdict | None], Tail | None]]) -> None:
        """Tell the listeners what one answer brought (all at once if they take it so), then
        publish the snapshots it made due."""
        if self._applied_many is not None:
            self._applied_many([(cp, applied, verdicts) for cp, applied, verdicts, _ in batch])
        else:
            for cp, applied, verdicts, _ in batch:
                self._applied(cp, applied, verdicts)
        for *_, snapshot in batch:
            if snapshot is not None:
                self._snapshot(snapshot)

    def _split(self, offsets: Mapping[int, int]) -> None:
        """A thread per partition from here on, each from where the shared replay stopped."""
        for cp, offset in offsets.items():
            tail = self._tails[cp]
            tail.thread = threading.Thread(
                target=self._guarded,
                args=(self._run, [tail], tail, offset),
                name=f"{self._thread_name}:{cp}",
                daemon=True,
            )
            tail.thread.start()

    def _linger(self, answered: float, records: int, hurry: threading.Event) -> None:
        """After an answer that carried ``records``, let ``fetch_linger`` pass (from when it
        arrived) before asking again: the appends meanwhile come in one answer, not one
        each (a group's members all wake at every append to ``__marshal``). Not after a
        backlog's answer (a cold start catching up), and cut short by ``hurry`` (a record of
        ours is awaited) or stop."""
        if self._fetch_linger > 0 and records < _LINGER_BELOW:
            left = answered + self._fetch_linger - time.monotonic()
            if left > 0:
                hurry.wait(left)

    def _advance(
        self,
        tail: Tail,
        offset: int,
        got: Columns | PastMarkers | Exception,
        backoff: float,
        batch: list[tuple[int, int, list[Verdict | None], Tail | None]] | None = None,
    ) -> tuple[int | None, bool]:
        """Apply what one fetch of ``tail`` from ``offset`` brought (its columns, or what it
        raised): returns the offset to fetch next (None: this partition's replay ends) and
        whether to back off before fetching it. With ``batch``, what was applied is noted
        there (with the tail if it is to publish a snapshot) instead of announced."""
        cp = tail.partition
        if self._frozen(tail):
            return None, False  # a write of ours found the log went back (mark_written)
        if isinstance(got, PastMarkers):
            # transaction markers only (a foreign transactional writer): no record, but the
            # position moves past them, or a catch-up to the log's end waits at the last one
            tail.caught_up = True
            with tail.cond:
                tail.next_offset = got.next_offset
                tail.cond.notify_all()
            return got.next_offset, False
        if not isinstance(got, Exception) and not got[0]:
            # nothing new (most partitions of the one replay thread, most of the time):
            # answered before the checks for each kind of error
            tail.caught_up = True
            return offset, False
        if isinstance(got, OffsetOutOfRange):
            if self._check_rewind and 0 <= got.log_end_offset < offset:
                # the log ends below what this replay applied: it went back
                end = got.log_end_offset
                self._rewound(tail, offset, end, f"the log now ends at {end}")
                return None, False
            log.warning(
                "%s/%d: offset %d is out of range (%s); restarting from a snapshot or the earliest",
                COORDINATION_TOPIC,
                cp,
                offset,
                got,
            )
            try:
                return self._recover(tail, offset), False
            except _Rewound:
                return None, False
            except ClosedError:
                return offset, False  # the loop condition or the next fetch decides
            except Exception as again:
                # unanswered here must not end the replay: its world would stop forever
                log.warning("%s/%d: no earliest offset (%s)", COORDINATION_TOPIC, cp, again)
                return offset, True
        if isinstance(got, CorruptBatch):
            if got.next_offset is None or got.next_offset <= offset:
                log.error(
                    "%s/%d: %s; cannot tell where it ends, retrying", COORDINATION_TOPIC, cp, got
                )
                return offset, True
            # as the rationalizer does for a bad record: count it, skip it, keep going
            log.error(
                "%s/%d: %s; skipped (its coordination messages are lost)",
                COORDINATION_TOPIC,
                cp,
                got,
            )
            offset = got.next_offset
            with tail.cond:
                tail.skipped_batches += 1
                tail.next_offset = offset
                tail.cond.notify_all()
            return offset, False
        if isinstance(got, ClosedError):
            if not self._stopped.is_set():
                log.error("the cluster closed under the marshaler; replay of %d stops", cp)
                with tail.cond:
                    tail.error = ClosedError("the cluster was closed")
                    tail.cond.notify_all()
            return None, False
        if isinstance(got, Exception):
            tail.suspect = True  # before applying more, check the log still holds ours
        if isinstance(got, RETRIABLE):
            # the log is unreachable for now (a broker restarting): one line per retry,
            # not a traceback; librdkafka reconnects and the replay resumes at ``offset``
            log.warning(
                "fetching %s/%d failed (%s); retrying in %.2f s",
                COORDINATION_TOPIC,
                cp,
                got,
                backoff,
            )
            return offset, True
        if isinstance(got, Exception):
            log.error("fetching %s/%d failed; retrying", COORDINATION_TOPIC, cp, exc_info=got)
            return offset, True
        offsets = got[0]
        tail.caught_up = len(offsets) < _LINGER_BELOW
        if tail.suspect and self._check_rewind:
            try:
                gone = self._still_there(tail, offset)
            except Exception as exc:
                log.warning(
                    "%s/%d: cannot check the log still holds what was applied (%s); retrying",
                    COORDINATION_TOPIC,
                    cp,
                    exc,
                )
                return offset, True
            tail.suspect = False
            if gone is not None:
                self._rewound(tail, offset, *gone)
                return None, False
        if tail.written:
            lost = self._written_lost_locked(tail, offset, got)
            if lost is not None:
                self._rewound(
                    tail, offset, lost, f"the record this process wrote at {lost} is not there"
                )
                return None, False
        before = tail.world.now
        with tail.cond:
            try:
                verdicts = tail.world.apply_many(zip(offsets, got[1], got[2], got[3], strict=True))
            except UnknownVersion as exc:
                # a record of a protocol version this code does not know: its rules may
                # decide otherwise than a skip would, so this partition's replay stops
                # (members then lose their leases here instead of guessing)
                log.error("%s/%d: %s", COORDINATION_TOPIC, cp, exc)
                tail.next_offset = exc.offset
                tail.error = exc
                tail.cond.notify_all()
                return None, False
            offset = offsets[-1] + 1
            tail.next_offset = offset
            tail.last = (offsets[-1], got[1][-1], got[2][-1], got[3][-1])
            tail.recent = (offsets, got[2], got[3])
            if tail.regained is not None:
                tail.regained.note(tail.world, offsets, got[2], verdicts)
            mine = [o for o in tail.own if o < offset] if tail.own else None
            if mine:
                tail.own.difference_update(mine)
            tail.cond.notify_all()
        due = mine is not None and bool(mine) and self._snapshot_due(mine, offsets, got[1], before)
        if batch is not None:
            batch.append((cp, offset - 1, verdicts, tail if due else None))
            return offset, False
        # outside the replay's lock: listeners take their own
        self._applied(cp, offset - 1, verdicts)
        if due:
            self._snapshot(tail)
        return offset, False
