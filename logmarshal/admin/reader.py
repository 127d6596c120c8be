"""Read the whole coordination log of a cluster into replayed worlds, once.

The admin never keeps a replay running: each command reads every ``__marshal`` partition to
its end as of the call (with :func:`~logmarshal._coordlog.records_from_cluster`, the one
reader of the coordination log), folds it through one :class:`rationalizer.WorldState` per partition
(the very rationalizer every consumer runs, so the admin sees what the group sees) and keeps
besides the worlds only what they do not hold:

- a short history of positions per partition (the last ``history`` accepted records that
  carried one: holder heartbeats and releases, admin position heartbeats), for the
  Burrow-style status of :mod:`.status`;
- the heartbeat interval (lease) each partition's holders last declared, so a reset can
  pause the group for at least twice the longest lease even when nobody holds a claim now.

``on_record`` sees every record with its verdict, in log order per partition: that is how
``coord dump`` prints verdicts and how a reset confirms its own records.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from struct import Struct

import attrs

from rationalizer import (
    ClaimingPartition,
    Effect,
    GroupView,
    HeartbeatingTask,
    MemberHeartbeat,
    PartitionState,
    Reason,
    ReleasingPartition,
    ReleasingTask,
    Verdict,
    WorldState,
    decode,
    membership_partition,
)
from rationalizer._codec import (
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    VERSION_3,
    VERSION_4,
    VERSION_6,
    VERSION_7,
    VERSION_8,
)
from rationalizer._membership import Member
from rationalizer._messages import Message
from storage import CorruptBatch

from .._coordlog import (
    COORDINATION_TOPIC,
    Restored,
    group_of_record,
    iter_columns,
    load_snapshot,
    read_snapshots,
)
from ..cluster import Cluster
from .keys import AdminKeys

__all__ = [
    "HISTORY",
    "CoordRecord",
    "CoordinationState",
    "Sample",
    "group_of_record",
    "read_coordination",
]

log = logging.getLogger(__name__)

#: Burrow evaluates a window of the last 10 offset commits per partition; so do we.
HISTORY = 10

_I64 = Struct(">q")
_U32 = Struct(">I")
_NO_TIME = -(2**63)

#: accepted records that carry the partition's position: ``last_offset`` at a fixed place,
#: or (a task's records, version 3) a position vector whose scalar is the key's last_offset
_POSITION_EFFECTS = {
    Effect.RENEWED: "heartbeat",
    Effect.RENEWED_LATE: "heartbeat",
    Effect.RESTART_TAKEOVER: "heartbeat",
    Effect.RELEASED: "released",
    Effect.POSITION_SET: "admin",
}
_CLAIM_EFFECTS = frozenset({Effect.CLAIMED, Effect.TOOK_OVER_STALE})

PartitionKey = tuple[str, str, int]


@attrs.frozen
class Sample:
    """One accepted record that set a partition's position, at its (clamped) log time.

    ``position`` is the next offset the group would consume (``last_offset + 1``), the same
    quantity as a Kafka committed offset, so lag is ``log_end - position``.
    """

    time_ms: int
    position: int
    source: str  # heartbeat | released | admin


@attrs.frozen
class CoordRecord:
    """A coordination record as replay saw it; ``verdict`` None only for a re-delivery."""

    coord_partition: int
    offset: int
    timestamp_ms: int
    log_time_ms: int  # the clamped log time the rationalizer decided at
    key: bytes | None
    value: bytes | None
    verdict: Verdict | None

    def message(self) -> Message | None:
        """The decoded message, or None for an invalid record."""
        if self.key is None or self.value is None:
            return None  # (a null key or value is no coordination record)
        try:
            return decode(self.key, self.value)
        except Exception:  # DecodeError; decode raises nothing else, but never fail a dump
            return None


def _partition_of_key(key: bytes) -> PartitionKey:
    group, topic, partition = key.rsplit(b"/", 2)
    return group.decode("utf-8"), topic.decode("utf-8"), int(partition)


def _member_beats(
    key: bytes,
    value: bytes,
    verdict: Verdict,
    now: int,
    samples: dict[PartitionKey, deque[Sample]],
    leases: dict[PartitionKey, int],
    history: int,
) -> None:
    """An accepted version 7 MemberHeartbeat: each accepted entry is its partition's
    heartbeat (PROTOCOL.md, "Version 7"), as a version 1 Heartbeat's sample and lease."""
    beats = decode(key, value)
    assert isinstance(beats, MemberHeartbeat)  # (its version byte says so)
    for (topic, partition, _, last), v in zip(beats.entries, verdict.entries, strict=True):
        if not v.accepted:
            continue
        pk = (beats.group_id, topic, partition)
        leases[pk] = beats.heartbeat_interval_ms
        window = samples.get(pk)
        if window is None:
            window = samples[pk] = deque(maxlen=history)
        window.append(Sample(now, last + 1, "heartbeat"))


class CoordinationState:
    """Every coordination partition replayed to the end it had when it was read."""

    def __init__(
        self,
        worlds: Iterable[WorldState],
        ends: Mapping[int, int],
        history: Mapping[PartitionKey, Iterable[Sample]],
        leases: Mapping[PartitionKey, int],
        groups: Iterable[str],
        skipped_batches: int = 0,
        gaps: Mapping[int, int] | None = None,
    ) -> None:
        self.worlds = tuple(worlds)
        #: stored batches of the coordination log that did not decode, skipped whole
        self.skipped_batches = skipped_batches
        #: coordination partition -> its first offset, where records before it were deleted
        #: and no valid snapshot covers them: what they held is missing from this view
        self.gaps = dict(gaps or {})
        self.view = GroupView(self.worlds) if self.worlds else None
        self.ends = dict(ends)
        self.history = {k: tuple(v) for k, v in history.items()}
        self.leases = dict(leases)
        self.groups = sorted(set(groups))

    @property
    def n(self) -> int:
        """Number of coordination partitions (0 when ``__marshal`` does not exist)."""
        return len(self.worlds)

    @property
    def log_time_ms(self) -> int | None:
        """The latest log time any partition reached (None for an empty log)."""
        times = [w.now for w in self.worlds if w.now != _NO_TIME]
        return max(times) if times else None

    def has_group(self, group: str) -> bool:
        return group in self.groups

    def gap_warnings(self) -> list[str]:
        """One line per coordination partition whose deleted records this view misses (a
        member started now halts there: docs/bounded-log.md, "A gap")."""
        return [
            f"{COORDINATION_TOPIC}/{cp}: records before offset {first} were deleted and no valid "
            "snapshot covers them: this view misses what they held, and a member started now "
            "halts there until a reset (docs/bounded-log.md)"
            for cp, first in sorted(self.gaps.items())
        ]

    def halted(self, group: str) -> tuple[int, int, int] | None:
        """``(coordination partition, offset, version)`` of a record of a protocol version
        to come that halted ``group`` (PROTOCOL.md "Version 6"), the first; None if none."""
        found = [
            (cp, *w.halted_groups[group])
            for cp, w in enumerate(self.worlds)
            if group in w.halted_groups
        ]
        return min(found, key=lambda h: (h[1], h[0])) if found else None

    def partitions(self, group: str) -> list[PartitionState]:
        """Partitions of ``group`` the log mentions, sorted by topic and partition."""
        return [] if self.view is None else self.view.partitions(group)

    def topics(self, group: str) -> list[str]:
        return sorted({s.topic for s in self.partitions(group)})

    def samples(self, group: str, topic: str, partition: int) -> tuple[Sample, ...]:
        return self.history.get((group, topic, partition), ())

    def lease_ms(self, group: str, topic: str, partition: int) -> int | None:
        """The heartbeat interval the partition's holders declared last (None: never held)."""
        return self.leases.get((group, topic, partition))

    def hb_max_ms(self, group: str) -> int | None:
        """The longest lease any holder of the group declared (a reset's pause is >= 2x it)."""
        values = [hb for (g, _t, _p), hb in self.leases.items() if g == group]
        values += [
            s.heartbeat_interval_ms for s in self.partitions(group) if s.heartbeat_interval_ms
        ]
        return max(values) if values else None

    def paused_until(self, group: str) -> int | None:
        return None if self.view is None else self.view.paused_until(group)

    def members(self, group: str, now_ms: int | None = None) -> list[Member]:
        """The group's live announced members (protocol version 2) at ``now_ms`` (default:
        the log time its membership partition reached), sorted by client_id."""
        if not self.worlds:
            return []
        world = self.worlds[membership_partition(group, len(self.worlds))]
        return world.members(group, now_ms)

    def pause_admin(self, group: str) -> tuple[str, str] | None:
        for world in self.worlds:
            admin = world.pause_admin(group)
            if admin is not None:
                return admin
        return None


def _restore(
    cluster: Cluster, cp: int, earliest: int, admin_keys: AdminKeys | Mapping[str, bytes] | None
) -> Restored | None:
    """The newest valid published snapshot of ``cp`` (PROTOCOL.md, "Bounded coordination
    log"), restored with the keys its members use: given keys as they are; with an
    :class:`AdminKeys` (possibly a wildcard) the keys of exactly the groups a snapshot was
    published for, as the members of those groups hold them."""
    if not isinstance(admin_keys, AdminKeys):
        return load_snapshot(cluster, cp, dict(admin_keys or {}), earliest=earliest)
    from rationalizer import SnapshotError
    from rationalizer._snapshot_record import parse_snapshot_record

    snapshots = read_snapshots(cluster, cp)
    configs: list[tuple[str, ...]] = []
    for _offset, key, value in snapshots:
        try:
            names = parse_snapshot_record(key, value).keyed_groups
        except SnapshotError:
            continue
        if names not in configs:
            configs.append(names)
    best = None
    for names in configs:
        keys = admin_keys.for_groups(names)
        if sorted(keys) != list(names):
            continue  # we lack a key of one of its groups
        found = load_snapshot(cluster, cp, keys, earliest=earliest, snapshots=snapshots)
        if found is not None and (best is None or found.covered > best.covered):
            best = found
    return best


def read_coordination(
    cluster: Cluster,
    *,
    admin_keys: AdminKeys | Mapping[str, bytes] | None = None,
    history: int = HISTORY,
    on_record: Callable[[CoordRecord], None] | None = None,
    topic: str = COORDINATION_TOPIC,
) -> CoordinationState:
    """Replay all of ``topic`` (``__marshal``) as it is now.

    ``admin_keys`` makes the replay authenticate admin records exactly as members given the
    same keys do (an :class:`AdminKeys` wildcard is expanded to the groups of each
    partition). Without ``__marshal`` the state is empty (no group ever coordinated).
    """
    if topic not in cluster.topics():
        return CoordinationState((), {}, {}, {}, ())
    worlds: dict[int, WorldState] = {}
    ends: dict[int, int] = {}
    samples: dict[PartitionKey, deque[Sample]] = {}
    leases: dict[PartitionKey, int] = {}
    gaps: dict[int, int] = {}
    groups: set[str] = set()
    keyparts: dict[bytes, PartitionKey] = {}
    skipped: list[CorruptBatch] = []
    for po in cluster.describe_topic(topic).offsets:
        cp = po.partition
        restored = (
            _restore(cluster, cp, po.earliest, admin_keys) if topic == COORDINATION_TOPIC else None
        )
        start = po.earliest if restored is None else restored.covered + 1
        if restored is None and po.earliest > 0 and topic == COORDINATION_TOPIC:
            gaps[cp] = po.earliest
        records = [
            r
            for cols in iter_columns(cluster, cp, start, po.latest, topic, skipped.append)
            for r in zip(*cols, strict=True)
        ]
        named = [group_of_record(k, v) for _o, _t, k, v in records]
        if restored is not None:
            world = restored.world
            groups.update(world.member_groups())  # groups known only by their members
            for s in world.partitions():
                groups.add(s.group_id)
                if s.heartbeat_interval_ms:
                    leases[(s.group_id, s.topic, s.partition)] = s.heartbeat_interval_ms
        else:
            if isinstance(admin_keys, AdminKeys):
                here = {g for g in named if g is not None}
                keys: Mapping[str, bytes] = admin_keys.for_groups(here)
            else:
                keys = dict(admin_keys or {})
            world = WorldState(admin_keys=keys)
        now = world.now  # the log time the snapshot (or nothing) leaves off at
        verdicts = world.apply_many(records)
        # a group is one a record that decodes names (or one of a version to come, which
        # halts it): a junk record's key named a group that `group list` showed and a
        # reset or a pause went ahead for
        groups.update(
            g
            for g, verdict in zip(named, verdicts, strict=True)
            if g is not None and (verdict is None or verdict.reason is not Reason.INVALID_RECORD)
        )
        for (offset, ts, key, value), verdict in zip(records, verdicts, strict=True):
            now = max(now, ts)
            if on_record is not None:
                on_record(CoordRecord(cp, offset, ts, now, key, value, verdict))
            if verdict is None or not verdict.accepted or verdict.effect is None:
                continue
            effect = verdict.effect
            source = _POSITION_EFFECTS.get(effect)
            if source is None and effect not in _CLAIM_EFFECTS:
                continue
            assert key is not None and value is not None  # accepted records decode
            if value[0] == VERSION_7:  # a MemberHeartbeat: a heartbeat per accepted entry
                _member_beats(key, value, verdict, now, samples, leases, history)
                continue
            pk = keyparts.get(key)
            if pk is None:
                pk = keyparts[key] = _partition_of_key(key)
            if effect in _CLAIM_EFFECTS and value[1] == T_CLAIMING_PARTITION:
                if value[0] == VERSION_6:  # (in the envelope: the group id comes first)
                    claim = decode(key, value)
                    assert isinstance(claim, ClaimingPartition)  # (its type byte says so)
                    leases[pk] = claim.heartbeat_interval_ms
                else:
                    leases[pk] = _U32.unpack_from(value, 2)[0]
                continue
            assert source is not None  # (only claims, gone on above, set no position)
            if value[0] in (VERSION_3, VERSION_6, VERSION_8):  # a task's, a v6 release: decode
                task = decode(key, value)
                assert isinstance(task, HeartbeatingTask | ReleasingTask | ReleasingPartition)
                last_offset = task.last_offset
                if source == "heartbeat":
                    assert isinstance(task, HeartbeatingTask)  # (a task's renewal)
                    leases[pk] = task.heartbeat_interval_ms
            else:  # (a version 4 reservation: first_offset, then proposed_last_offset)
                last_offset = _I64.unpack_from(value, 10 if value[0] == VERSION_4 else 2)[0]
                if value[1] == T_HEARTBEAT and source == "heartbeat":
                    leases[pk] = _U32.unpack_from(value, 10)[0]
            window = samples.get(pk)
            if window is None:
                window = samples[pk] = deque(maxlen=history)
            window.append(Sample(now, last_offset + 1, source))
        worlds[cp] = world
        ends[cp] = records[-1][0] + 1 if records else cluster.latest_offset(topic, cp)
    log.debug("replayed %s: %d partitions, groups %s", topic, len(worlds), sorted(groups))
    ordered = [worlds[cp] for cp in sorted(worlds)]
    if sorted(worlds) != list(range(len(ordered))):
        raise ValueError(f"{topic} partitions are not 0..N-1: {sorted(worlds)}")
    return CoordinationState(ordered, ends, samples, leases, groups, len(skipped), gaps)
