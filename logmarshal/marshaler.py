"""The Marshaler: one process's window onto a group's coordination log.

It replays every ``__marshal`` partition into its own :class:`rationalizer.WorldState`
(one tailing thread per partition, long-polling the log), writes this process's
coordination messages durably, and answers "did my message win?" by waiting until the
replay has reached the offset the write returned (read-your-writes) and reading that
offset's verdict. Consumers build their claim, heartbeat and fencing logic on top of it.

Decisions come only from the replay. The injected clock is for predictions (is a partition
likely claimable yet?), so a wrong clock costs at most a rejected claim, never a double
owner.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from rationalizer import (
    Claim,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    Message,
    PartitionState,
    ReleaseGroup,
    ReleasingPartition,
    Verdict,
    WorldState,
    coordination_partition,
    encode,
)
from rationalizer.messages import valid_id
from rationalizer.world import NO_TIME
from storage import CorruptBatch, NewRecord

from . import coordlog
from .clock import SYSTEM_CLOCK, Clock
from .cluster import Cluster
from .coordlog import (
    COORDINATION_TOPIC,
    CoordinationTopicError,
    coordination_topic_config,
    ensure_coordination_topic,
)
from .errors import RETRIABLE, ClosedError, OffsetOutOfRange

if TYPE_CHECKING:
    from .consumer import Consumer
    from .metrics import MarshalerMetrics

__all__ = [
    "COORDINATION_TOPIC",
    "DEFAULT_SNAPSHOT_INTERVAL",
    "DEFAULT_SNAPSHOT_RECORDS",
    "CoordinationTopicError",
    "Marshaler",
    "Written",
    "coordination_topic_config",
]

log = logging.getLogger(__name__)

#: Publish a snapshot of a coordination partition every this many records (the writer of
#: each multiple of it does). A cold start replays on average half of it per coordination
#: partition (bench/coldstart.py: 25,000 keeps a 2,000-partition group's cold start well
#: under a second); the writer pays one dump (~30 ms for such a world) per point.
DEFAULT_SNAPSHOT_RECORDS = 25_000
#: ... and at least every this many seconds of log time while records arrive.
DEFAULT_SNAPSHOT_INTERVAL = 3600.0


@attrs.frozen
class Written:
    """Where a coordination message landed: the offset whose verdict decides it."""

    coordination_partition: int
    offset: int


class _Worlds(Sequence[WorldState]):
    """A live view of the tails' worlds (a restored snapshot replaces a tail's world)."""

    def __init__(self, tails: list[_Tail]) -> None:
        self._tails = tails

    def __len__(self) -> int:
        return len(self._tails)

    def __getitem__(self, index: int) -> WorldState:  # type: ignore[override]
        return self._tails[index].world


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
        # offsets of this marshaler's own records not applied yet: the writer of a record at
        # a snapshot point publishes the snapshot (PROTOCOL.md, "Who publishes")
        self.own: set[int] = set()


class Marshaler:
    """Replays ``__marshal`` for ``group_id`` and writes this client's coordination messages.

    ``heartbeat_interval`` (seconds, at most one hour) is this member's HB, its lease: it is
    written into every claim and heartbeat, and every replayer judges a holder's freshness
    with the holder's own HB, so members may use different values. ``instance_id`` is random
    per Marshaler (per process start) and drawn from ``rng``, so a restart of the same
    ``client_id`` is told apart from the instance it replaces. ``fetch_wait`` bounds each long
    poll (and so how long :meth:`close` may take). ``admin_keys`` (group id -> key bytes, read
    from a file by the caller) makes the replay reject unauthenticated admin records of those
    groups; every member and the audit must be given the same keys (PROTOCOL.md).

    Bounded log (PROTOCOL.md, "Bounded coordination log"): a cold start restores each
    partition's newest valid published snapshot and replays only the tail
    (``restore_snapshots``); this marshaler publishes a snapshot when its own record lands on
    a snapshot point (every ``snapshot_records`` records, or the first record of each
    ``snapshot_interval`` seconds of log time; None disables either) and then, if
    ``truncate``, deletes what the two newest snapshots of every key configuration cover.
    """

    def __init__(
        self,
        cluster: Cluster,
        client_id: str,
        group_id: str,
        heartbeat_interval: float,
        *,
        clock: Clock = SYSTEM_CLOCK,
        coordination_partitions: int = 8,
        rng: random.Random | None = None,
        fetch_wait: float = 0.5,
        fetch_max_bytes: int = 1 << 20,
        admin_keys: Mapping[str, bytes] | None = None,
        metrics: MarshalerMetrics | None = None,
        snapshot_records: int | None = DEFAULT_SNAPSHOT_RECORDS,
        snapshot_interval: float | None = DEFAULT_SNAPSHOT_INTERVAL,
        truncate: bool = True,
        restore_snapshots: bool = True,
    ) -> None:
        if not valid_id(client_id):
            raise ValueError(f"client_id must be a non-empty str, got {client_id!r}")
        if not valid_id(group_id):
            raise ValueError(f"group_id must be a non-empty str, got {group_id!r}")
        hb_ms = round(heartbeat_interval * 1000)
        if hb_ms <= 0:
            raise ValueError(f"heartbeat_interval must be positive, got {heartbeat_interval}")
        if coordination_partitions < 1:
            raise ValueError(
                f"coordination_partitions must be at least 1, got {coordination_partitions}"
            )
        if fetch_wait <= 0:
            raise ValueError(f"fetch_wait must be positive, got {fetch_wait}")
        if snapshot_records is not None and snapshot_records < 1:
            raise ValueError(f"snapshot_records must be positive, got {snapshot_records}")
        if snapshot_interval is not None and snapshot_interval <= 0:
            raise ValueError(f"snapshot_interval must be positive, got {snapshot_interval}")
        self._admin_keys = dict(admin_keys or {})
        self._snapshot_records = snapshot_records
        self._snapshot_ms = None if snapshot_interval is None else round(snapshot_interval * 1000)
        self._truncate = truncate
        self._restore = restore_snapshots
        self._cluster = cluster
        self._client_id = client_id
        self._group_id = group_id
        self._hb = hb_ms / 1000.0
        self._hb_ms = hb_ms
        self._clock = clock
        self._rng = rng if rng is not None else random.SystemRandom()
        self._instance_id = f"{self._rng.getrandbits(64):016x}"
        self._fetch_wait = fetch_wait
        self._fetch_max_bytes = fetch_max_bytes
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._consumers: list[Consumer] = []
        self._listeners: tuple[Callable[[int, int], None], ...] = ()
        self._metrics = metrics  # Prometheus series (logmarshal.metrics), or None
        self._n = ensure_coordination_topic(cluster, coordination_partitions)
        self._tails = [_Tail(cp, WorldState(admin_keys=admin_keys)) for cp in range(self._n)]
        for tail in self._tails:
            tail.thread = threading.Thread(
                target=self._tail,
                args=(tail,),
                name=f"logmarshal-tail:{group_id}:{client_id}:{tail.partition}",
                daemon=True,
            )
            tail.thread.start()
        if metrics is not None:
            metrics.watch(self)
        log.info(
            "marshaler %s/%s (instance %s) replaying %d coordination partitions, HB %.3f s",
            group_id,
            client_id,
            self._instance_id,
            self._n,
            self._hb,
        )

    # -- identity ---------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def instance_id(self) -> str:
        return self._instance_id

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def identity(self) -> tuple[str, str]:
        """``(client_id, instance_id)``, the form WorldState reports holders in."""
        return (self._client_id, self._instance_id)

    @property
    def heartbeat_interval(self) -> float:
        return self._hb

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def coordination_partitions(self) -> int:
        return self._n

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def now_ms(self) -> int:
        """This client's *estimate* of log time, for predictions only."""
        return round(self._clock.time() * 1000)

    # -- the coordination topic -------------------------------------------------------------

    def coordination_partition(self, topic: str, partition: int) -> int:
        return coordination_partition(topic, partition, self._n)

    # -- replay -----------------------------------------------------------------------------

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

    def _tail(self, tail: _Tail) -> None:
        """Feed one WorldState from its partition until closed."""
        cp = tail.partition
        backoff = 0.05
        while True:
            try:
                offset = self._start(tail)
                break
            except (*RETRIABLE, ClosedError) as exc:
                # the log (or the snapshot topic) is unreachable for now: never fall back to
                # a replay that would miss what a snapshot holds, retry instead
                if self._closed.is_set() or isinstance(exc, ClosedError):
                    with tail.cond:
                        tail.error = exc
                        tail.cond.notify_all()
                    return
                log.warning(
                    "cannot start replaying %s/%d (%s); retrying", COORDINATION_TOPIC, cp, exc
                )
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception as exc:
                log.exception("cannot start replaying %s/%d", COORDINATION_TOPIC, cp)
                with tail.cond:
                    tail.error = exc
                    tail.cond.notify_all()
                return
        backoff = 0.05
        while not self._closed.is_set():
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
                    self._closed.wait(backoff)
                    backoff = min(backoff * 2, 1.0)
                continue
            except CorruptBatch as exc:
                if exc.next_offset is None or exc.next_offset <= offset:
                    log.error("%s/%d: %s; cannot tell where it ends, retrying",
                              COORDINATION_TOPIC, cp, exc)
                    self._closed.wait(backoff)
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
                if not self._closed.is_set():
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
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            except Exception:
                log.exception("fetching %s/%d failed; retrying", COORDINATION_TOPIC, cp)
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.05
            offsets = cols[0]
            if not offsets:
                continue
            before = tail.world.now
            with tail.cond:
                verdicts = tail.world.apply_many(
                    zip(offsets, cols[1], cols[2], cols[3], strict=True)
                )
                offset = offsets[-1] + 1
                tail.next_offset = offset
                mine = [o for o in tail.own if o < offset] if tail.own else None
                if mine:
                    tail.own.difference_update(mine)
                tail.cond.notify_all()
            self._replayed(cp)  # outside the replay's lock: listeners take their own
            if self._metrics is not None:
                self._metrics.count_verdicts(self, cp, verdicts)
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
        ``snapshot_records``, or the first record of a new ``snapshot_interval`` of log time
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
                self._cluster, cp, tail.world, self._admin_keys, timestamp_ms=self.now_ms()
            )
            if self._truncate:
                coordlog.truncate(self._cluster, cp, self._admin_keys)
        except ClosedError:
            return
        except Exception as exc:
            log.warning("%s/%d: snapshot or truncation failed: %s", COORDINATION_TOPIC, cp, exc)

    def wait_applied(self, coord_partition: int, offset: int, timeout: float) -> bool:
        """Wait until the replay of ``coord_partition`` has applied ``offset``.

        False on timeout, after :meth:`close`, or if that partition's replay stopped.
        """
        tail = self._tails[coord_partition]
        deadline = time.monotonic() + timeout
        with tail.cond:
            while tail.next_offset <= offset:
                if self._closed.is_set() or tail.error is not None:
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

    def verdict(self, written: Written) -> Verdict | None:
        """The verdict of a record already applied (None if not applied or too old)."""
        tail = self._tails[written.coordination_partition]
        with tail.cond:
            return tail.world.verdict(written.offset)

    def wait_verdict(self, written: Written, timeout: float) -> Verdict | None:
        """Read-your-writes: the verdict of ``written`` once replay reaches it; None on timeout."""
        if not self.wait_applied(written.coordination_partition, written.offset, timeout):
            return None
        return self.verdict(written)

    # -- writes -----------------------------------------------------------------------------

    def send(self, message: Message) -> Written:
        """Write ``message`` durably to its coordination partition.

        ReleaseGroup goes to every partition and is the admin's business; use the admin API.
        """
        if self._closed.is_set():
            raise ClosedError("the marshaler is closed")
        if isinstance(message, ReleaseGroup):
            raise TypeError("ReleaseGroup is written to every coordination partition by the admin")
        key, value = encode(message)
        return self.send_encoded(
            self.coordination_partition(message.topic, message.partition), key, value
        )

    def send_encoded(self, cp: int, key: bytes, value: bytes) -> Written:
        """Write an encoded coordination record durably to partition ``cp``."""
        return self.send_encoded_many(cp, [(key, value)])[0]

    def send_encoded_many(self, cp: int, records: Sequence[tuple[bytes, bytes]]) -> list[Written]:
        """Write encoded ``(key, value)`` coordination records durably to partition ``cp``, in
        order, in one call (one flush): a consumer core's Write actions, which encoded the
        messages themselves (an AMO reservation and the heartbeat right behind it)."""
        if self._closed.is_set():
            raise ClosedError("the marshaler is closed")
        now = self.now_ms()
        result = self._cluster.produce(
            COORDINATION_TOPIC,
            cp,
            [NewRecord(value=value, key=key, timestamp=now) for key, value in records],
            durable=True,
        )
        offsets = result.offsets
        if self._snapshot_records is not None or self._snapshot_ms is not None:
            tail = self._tails[cp]
            with tail.cond:
                # even if the replay already passed them (it raced this answer): the next
                # batch then publishes, covering a little more
                tail.own.update(offsets)
        return [Written(cp, offset) for offset in offsets]

    def _ids(self) -> dict[str, str]:
        return {
            "client_id": self._client_id,
            "instance_id": self._instance_id,
            "group_id": self._group_id,
        }

    def claim_partition(self, topic: str, partition: int) -> Written:
        return self.send(
            ClaimingPartition(
                **self._ids(), topic=topic, partition=partition, heartbeat_interval_ms=self._hb_ms
            )
        )

    def heartbeat(self, topic: str, partition: int, last_offset: int) -> Written:
        return self.send(
            Heartbeat(
                **self._ids(),
                topic=topic,
                partition=partition,
                last_offset=last_offset,
                heartbeat_interval_ms=self._hb_ms,
            )
        )

    def release_partition(self, topic: str, partition: int, last_offset: int) -> Written:
        return self.send(
            ReleasingPartition(
                **self._ids(), topic=topic, partition=partition, last_offset=last_offset
            )
        )

    def claim_messages(self, topic: str, partition: int, proposed_last_offset: int) -> Written:
        return self.send(
            ClaimingMessages(
                **self._ids(),
                topic=topic,
                partition=partition,
                proposed_last_offset=proposed_last_offset,
            )
        )

    # -- queries (as of what each partition's replay has applied) ---------------------------

    def _tail_for(self, topic: str, partition: int) -> _Tail:
        return self._tails[self.coordination_partition(topic, partition)]

    def holder(self, topic: str, partition: int) -> tuple[str, str] | None:
        tail = self._tail_for(topic, partition)
        with tail.cond:
            return tail.world.holder(self._group_id, topic, partition)

    def is_holder(self, topic: str, partition: int) -> bool:
        """True if the replay says this very instance holds the partition."""
        return self.holder(topic, partition) == self.identity

    def freshness(self, topic: str, partition: int, now_ms: int | None = None) -> str | None:
        tail = self._tail_for(topic, partition)
        now = self.now_ms() if now_ms is None else now_ms
        with tail.cond:
            return tail.world.freshness(self._group_id, topic, partition, now)

    def claimable(self, topic: str, partition: int, now_ms: int | None = None) -> bool:
        """Prediction: would a claim written now be accepted (given nothing else before it)?"""
        tail = self._tail_for(topic, partition)
        now = self.now_ms() if now_ms is None else now_ms
        with tail.cond:
            return tail.world.claimable(self._group_id, topic, partition, now)

    def resume_offset(self, topic: str, partition: int) -> int | None:
        """``max(last_offset, claimed_through) + 1``; None while no accepted record set a position."""
        tail = self._tail_for(topic, partition)
        with tail.cond:
            return tail.world.resume_offset(self._group_id, topic, partition)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        tail = self._tail_for(topic, partition)
        with tail.cond:
            return tail.world.partition_state(self._group_id, topic, partition)

    def claims(self, client_id: str | None = None) -> list[Claim]:
        """Partitions of the group held by any instance of ``client_id`` (default: ours)."""
        client = self._client_id if client_id is None else client_id
        out: list[Claim] = []
        for tail in self._tails:
            with tail.cond:
                out.extend(tail.world.claims_of(self._group_id, client))
        return sorted(out, key=lambda c: (c.topic, c.partition))

    def partitions(self) -> list[PartitionState]:
        """Every partition of the group the coordination log mentions."""
        out: list[PartitionState] = []
        for tail in self._tails:
            with tail.cond:
                out.extend(tail.world.partitions(self._group_id))
        return sorted(out, key=lambda s: (s.topic, s.partition))

    @property
    def skipped_batches(self) -> int:
        """Corrupt stored coordination batches the replay skipped (each logged as an error)."""
        return sum(tail.skipped_batches for tail in self._tails)

    def paused_until(self) -> int | None:
        """End (log ms) of the group's pause, latest over the partitions that have seen it."""
        ends = []
        for tail in self._tails:
            with tail.cond:
                end = tail.world.paused_until(self._group_id)
            if end is not None:
                ends.append(end)
        return max(ends) if ends else None

    def is_fenced(self) -> bool:
        """True if some replay has fenced this instance (a newer one of our client took over)."""
        for tail in self._tails:
            with tail.cond:
                if tail.world.is_fenced(self._client_id, self._instance_id):
                    return True
        return False

    # -- consumers and lifetime -------------------------------------------------------------

    def worlds(self) -> Sequence[WorldState]:
        """The replayed worlds, one per coordination partition, for a consumer core to read
        while it holds :meth:`replay_paused` (a tail thread may otherwise be applying)."""
        return _Worlds(self._tails)

    def replay_locks(self) -> Sequence[threading.Condition]:
        """The replay's locks, one per coordination partition: holding all of them (in this
        order) holds every replay still, so a consumer core can read the worlds."""
        return tuple(tail.cond for tail in self._tails)

    @contextlib.contextmanager
    def replay_paused(self) -> Iterator[None]:
        """Hold every partition's replay still (their locks, in partition order)."""
        locks = self.replay_locks()
        for lock in locks:
            lock.acquire()
        try:
            yield
        finally:
            for lock in reversed(locks):
                lock.release()

    def add_listener(self, listener: Callable[[int, int], None]) -> None:
        """Call ``listener(cp, applied_through)`` from the replay thread after each batch of
        coordination partition ``cp`` is applied (outside the replay's lock)."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Callable[[int, int], None]) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)

    def _replayed(self, cp: int) -> None:
        applied = self._tails[cp].next_offset - 1
        for listener in self._listeners:
            try:
                listener(cp, applied)
            except Exception:
                log.exception("a replay listener failed")

    def _register(self, consumer: Consumer, topics: Iterable[str]) -> None:
        """One consumer per topic per marshaler: two would share (and fight over) its claims."""
        wanted = set(topics)
        with self._lock:
            if self._closed.is_set():
                raise ClosedError("the marshaler is closed")
            for other in self._consumers:
                overlap = wanted & set(other.topics)
                if overlap:
                    raise ValueError(
                        f"this marshaler already has a consumer of {sorted(overlap)}; "
                        "use another Marshaler (client_id) for a second consumer"
                    )
            self._consumers.append(consumer)

    @property
    def metrics(self) -> MarshalerMetrics | None:
        """The Prometheus series this Marshaler (and its Consumers) report to, if any."""
        return self._metrics

    def replay_offsets(self) -> dict[int, int]:
        """Per coordination partition, the next offset the replay will apply (for metrics)."""
        return {tail.partition: tail.next_offset for tail in self._tails}

    def log_end_offset(self, coord_partition: int) -> int:
        """The coordination partition's end now (the replay lags it by the difference)."""
        return self._cluster.latest_offset(COORDINATION_TOPIC, coord_partition)

    def _unregister(self, consumer: Consumer) -> None:
        with self._lock:
            if consumer in self._consumers:
                self._consumers.remove(consumer)

    def close(self, timeout: float | None = None) -> None:
        """Close this marshaler's consumers (releasing their claims), then stop replaying."""
        with self._lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            consumer.close()
        if self._closed.is_set():
            return
        self._closed.set()
        if self._metrics is not None:
            self._metrics.unwatch(self)
        for tail in self._tails:
            with tail.cond:
                tail.cond.notify_all()
        for tail in self._tails:
            if tail.thread is not None:
                tail.thread.join(timeout)
        log.info("marshaler %s/%s closed", self._group_id, self._client_id)

    def __enter__(self) -> Marshaler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Marshaler(group={self._group_id!r}, client={self._client_id!r}, "
            f"instance={self._instance_id!r})"
        )
