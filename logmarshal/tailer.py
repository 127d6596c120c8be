"""The live replay of ``__marshal``: one thread per coordination partition tails it into a
:class:`rationalizer.WorldState`.

A :class:`~logmarshal.marshaler.Marshaler` composes one :class:`Tailer`; the Spark audit's
batch replay is :mod:`logmarshal.audit.replay`, and reading the coordination log's storage
(fetching, snapshots, truncation) is :mod:`logmarshal.coordlog`, which this module calls.

Each partition's world and the offset its replay reached are guarded by that partition's
lock (:meth:`Tailer.locks`), which the tail thread holds only while it applies a fetched
chunk. A cold start restores the newest valid published snapshot and replays the tail; a
tailer whose own record lands on a snapshot point publishes the next snapshot and then
truncates (PROTOCOL.md, "Bounded coordination log"; docs/bounded-log.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from rationalizer import UnknownVersion, Verdict, WorldState
from rationalizer.world import NO_TIME
from storage import CorruptBatch

from . import coordlog
from .cluster import Cluster
from .coordlog import COORDINATION_TOPIC
from .errors import RETRIABLE, ClosedError, OffsetOutOfRange

__all__ = ["Applied", "Tailer"]

log = logging.getLogger(__name__)

#: ``applied(cp, applied_through, verdicts)``: called by the tail thread of ``cp`` after
#: each chunk, outside the replay's lock
Applied = Callable[[int, int, list[Verdict | None]], None]


class _Tail:
    """One coordination partition: its WorldState and the thread that feeds it."""

    def __init__(self, partition: int, world: WorldState) -> None:
        self.partition = partition
        self.world = world
        self.cond = threading.Condition()
        self.next_offset = 0  # the next log offset to apply
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.skipped_batches = 0  # corrupt stored batches the replay skipped
        # offsets of this tailer's own records not applied yet: the writer of a record at
        # a snapshot point publishes the snapshot (PROTOCOL.md, "Who publishes")
        self.own: set[int] = set()


class _Worlds(Sequence[WorldState]):
    """A live view of the tails' worlds (a restored snapshot replaces a tail's world)."""

    def __init__(self, tails: list[_Tail]) -> None:
        self._tails = tails

    def __len__(self) -> int:
        return len(self._tails)

    def __getitem__(self, index: int) -> WorldState:  # type: ignore[override]
        return self._tails[index].world


class Tailer:
    """Replays coordination partitions ``0..partitions-1`` of ``cluster``, each on its own
    thread, until :meth:`stop`.

    ``applied`` hears of every applied chunk (a Marshaler's listeners and metrics).
    ``snapshot_records`` / ``snapshot_ms`` set the snapshot points (None disables either),
    ``now_ms`` stamps a published snapshot, ``truncate`` deletes what the kept snapshots
    cover, ``restore`` starts from a snapshot instead of the log's start. ``admin_keys``
    authenticate admin records (PROTOCOL.md): every replayer must be given the same.
    """

    def __init__(
        self,
        cluster: Cluster,
        partitions: int,
        *,
        admin_keys: Mapping[str, bytes] | None,
        applied: Applied,
        now_ms: Callable[[], int],
        thread_name: str,
        fetch_wait: float,
        fetch_max_bytes: int,
        snapshot_records: int | None,
        snapshot_ms: int | None,
        truncate: bool,
        restore: bool,
    ) -> None:
        self._cluster = cluster
        self._n = partitions
        self._admin_keys = dict(admin_keys or {})
        self._applied = applied
        self._now_ms = now_ms
        self._thread_name = thread_name
        self._fetch_wait = fetch_wait
        self._fetch_max_bytes = fetch_max_bytes
        self._snapshot_records = snapshot_records
        self._snapshot_ms = snapshot_ms
        self._truncate = truncate
        self._restore = restore
        self._stopped = threading.Event()
        self._tails = [_Tail(cp, WorldState(admin_keys=admin_keys)) for cp in range(partitions)]

    # -- lifetime ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start one tail thread per coordination partition."""
        for tail in self._tails:
            tail.thread = threading.Thread(
                target=self._run,
                args=(tail,),
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
        for tail in self._tails:
            with tail.cond:
                tail.cond.notify_all()
        for tail in self._tails:
            if tail.thread is not None:
                tail.thread.join(timeout)

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
            while tail.next_offset <= offset:
                if self._stopped.is_set() or tail.error is not None:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                tail.cond.wait(remaining)
            return True

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every partition is replayed up to its end as of this call."""
        deadline = time.monotonic() + timeout
        for tail in self._tails:
            end = self._cluster.latest_offset(COORDINATION_TOPIC, tail.partition)
            if not self.wait_applied(
                tail.partition, end - 1, max(0.0, deadline - time.monotonic())
            ):
                return False
        return True

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

    def _start(self, tail: _Tail) -> int:
        """Cold start of one partition: the newest valid snapshot, else the log's start.

        Returns the next offset to fetch."""
        cp = tail.partition
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
            log.warning(
                "%s/%d starts at offset %d and no valid snapshot covers what is gone: "
                "positions older records held are unknown",
                COORDINATION_TOPIC,
                cp,
                earliest,
            )
        with tail.cond:
            tail.next_offset = earliest
            tail.cond.notify_all()
        return earliest

    def _run(self, tail: _Tail) -> None:
        """Feed one WorldState from its partition until stopped."""
        cp = tail.partition
        backoff = 0.05
        while True:
            try:
                offset = self._start(tail)
                break
            except (*RETRIABLE, ClosedError) as exc:
                # the log (or the snapshot topic) is unreachable for now: never fall back to
                # a replay that would miss what a snapshot holds, retry instead
                if self._stopped.is_set() or isinstance(exc, ClosedError):
                    with tail.cond:
                        tail.error = exc
                        tail.cond.notify_all()
                    return
                log.warning(
                    "cannot start replaying %s/%d (%s); retrying", COORDINATION_TOPIC, cp, exc
                )
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception as exc:
                log.exception("cannot start replaying %s/%d", COORDINATION_TOPIC, cp)
                with tail.cond:
                    tail.error = exc
                    tail.cond.notify_all()
                return
        backoff = 0.05
        while not self._stopped.is_set():
            try:
                cols = coordlog.fetch_columns(
                    self._cluster,
                    COORDINATION_TOPIC,
                    cp,
                    offset,
                    max_bytes=self._fetch_max_bytes,
                    max_wait=self._fetch_wait,
                    skip_damaged=False,  # skipped below: the position moves past it
                )
            except OffsetOutOfRange as exc:
                log.error(
                    "%s/%d: offset %d is out of range (%s); restarting from a snapshot or "
                    "the earliest",
                    COORDINATION_TOPIC,
                    cp,
                    offset,
                    exc,
                )
                try:
                    offset = self._recover(tail, offset)
                except ClosedError:
                    continue  # the loop condition or the next fetch decides
                except Exception as again:
                    # unanswered here must not end the thread: its world would stop forever
                    log.warning("%s/%d: no earliest offset (%s)", COORDINATION_TOPIC, cp, again)
                    self._stopped.wait(backoff)
                    backoff = min(backoff * 2, 1.0)
                continue
            except CorruptBatch as exc:
                if exc.next_offset is None or exc.next_offset <= offset:
                    log.error("%s/%d: %s; cannot tell where it ends, retrying",
                              COORDINATION_TOPIC, cp, exc)
                    self._stopped.wait(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                # as the rationalizer does for a bad record: count it, skip it, keep going
                log.error("%s/%d: %s; skipped (its coordination messages are lost)",
                          COORDINATION_TOPIC, cp, exc)
                offset = exc.next_offset
                with tail.cond:
                    tail.skipped_batches += 1
                    tail.next_offset = offset
                    tail.cond.notify_all()
                continue
            except ClosedError:
                if not self._stopped.is_set():
                    log.error("the cluster closed under the marshaler; replay of %d stops", cp)
                    with tail.cond:
                        tail.error = ClosedError("the cluster was closed")
                        tail.cond.notify_all()
                return
            except RETRIABLE as exc:
                # the log is unreachable for now (a broker restarting): one line per retry,
                # not a traceback; librdkafka reconnects and the replay resumes at ``offset``
                log.warning(
                    "fetching %s/%d failed (%s); retrying in %.2f s",
                    COORDINATION_TOPIC,
                    cp,
                    exc,
                    backoff,
                )
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            except Exception:
                log.exception("fetching %s/%d failed; retrying", COORDINATION_TOPIC, cp)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.05
            offsets = cols[0]
            if not offsets:
                continue
            before = tail.world.now
            with tail.cond:
                try:
                    verdicts = tail.world.apply_many(
                        zip(offsets, cols[1], cols[2], cols[3], strict=True)
                    )
                except UnknownVersion as exc:
                    # a record of a protocol version this code does not know: its rules may
                    # decide otherwise than a skip would, so this partition's replay stops
                    # (members then lose their leases here instead of guessing)
                    log.error("%s/%d: %s", COORDINATION_TOPIC, cp, exc)
                    tail.next_offset = exc.offset
                    tail.error = exc
                    tail.cond.notify_all()
                    return
                offset = offsets[-1] + 1
                tail.next_offset = offset
                mine = [o for o in tail.own if o < offset] if tail.own else None
                if mine:
                    tail.own.difference_update(mine)
                tail.cond.notify_all()
            # outside the replay's lock: listeners take their own
            self._applied(cp, offset - 1, verdicts)
            if mine and self._snapshot_due(mine, offsets, cols[1], before):
                self._snapshot(tail)
        with tail.cond:
            tail.cond.notify_all()

    def _recover(self, tail: _Tail, offset: int) -> int:
        """After OffsetOutOfRange (the log was truncated past us): a snapshot that reaches at
        least where we are, else the earliest offset (positions may be lost: warned)."""
        cp = tail.partition
        earliest = self._cluster.earliest_offset(COORDINATION_TOPIC, cp)
        restored = coordlog.load_snapshot(self._cluster, cp, self._admin_keys, earliest=earliest)
        if restored is not None and restored.covered + 1 >= offset:
            with tail.cond:
                tail.world = restored.world
                tail.next_offset = restored.covered + 1
                tail.cond.notify_all()
            return restored.covered + 1
        log.warning(
            "%s/%d: continuing at %d; records %d..%d were deleted before this replay saw them",
            COORDINATION_TOPIC,
            cp,
            earliest,
            offset,
            earliest - 1,
        )
        return earliest

    def _snapshot_due(
        self, mine: list[int], offsets: list[int], timestamps: list[int], before: int
    ) -> bool:
        """Did one of our records land on a snapshot point? A multiple of
        ``snapshot_records``, or the first record of a new ``snapshot_ms`` of log time
        (clamped, as replay sees it)."""
        n = self._snapshot_records
        if n is not None and any(o > 0 and o % n == 0 for o in mine):
            return True
        t = self._snapshot_ms
        if t is None:
            return False
        wanted = set(mine)
        now = before
        for o, ts in zip(offsets, timestamps, strict=True):
            prev = now
            if ts > now:
                now = ts
            if o in wanted and prev != NO_TIME and now // t > prev // t:
                return True
        return False

    def _snapshot(self, tail: _Tail) -> None:
        """Publish the world of ``tail`` and truncate what the kept snapshots cover.

        Runs on the tail's own thread, the only one that changes its world, so the world is
        read without the lock. A failure costs this snapshot only; the next point retries."""
        cp = tail.partition
        try:
            # created on first use, so a group that never reaches a snapshot point (the demo,
            # tests) has no extra topic
            coordlog.ensure_snapshot_topic(self._cluster, self._n)
            coordlog.publish_snapshot(
                self._cluster, cp, tail.world, self._admin_keys, timestamp_ms=self._now_ms()
            )
            if self._truncate:
                coordlog.truncate(self._cluster, cp, self._admin_keys)
        except ClosedError:
            return
        except Exception as exc:
            log.warning("%s/%d: snapshot or truncation failed: %s", COORDINATION_TOPIC, cp, exc)
