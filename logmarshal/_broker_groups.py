"""The broker's view of Marshal groups, for Kafka's tools: ``__marshal`` replayed in place.

``logmarshal broker start`` hands :class:`MarshalGroupView` to the broker
(:class:`storage.broker.groups.GroupViewProvider`), which answers ListGroups,
DescribeGroups and OffsetFetch from it. It keeps one :class:`rationalizer.WorldState` per
coordination partition and, on each query, applies the records appended since the last one,
read straight from the broker's data directory: the same rationalizer every consumer runs,
so kafka-consumer-groups and the admin clients see what the group sees.

What Kafka's tools are told:

- a group is every group the coordination log has partition state for;
- its members are its **fresh** holders (by the wall clock, the way the admin CLI and Burrow
  judge), each described with the partitions it holds, and its live announced members
  (protocol version 2), also those that hold nothing yet;
- its committed offset for a partition is the position a consumer would resume at
  (``max(last_offset, claimed_through) + 1``), only where a position was ever set.

On a cluster of several brokers each broker leads only some ``__marshal`` partitions: the
others are read over the Kafka protocol from the brokers that lead them (a confluent-kafka
connection opened on first use), so every broker can answer for every group.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from rationalizer import FRESH, WorldState
from storage import (
    DataDir,
    OffsetOutOfRange,
    PartitionLog,
    Record,
    UnknownPartition,
    UnknownTopic,
    decode_records,
)
from storage.broker.cluster_file import ClusterLayout
from storage.broker.groups import GroupMember, GroupSnapshot

from ._coordlog import SNAPSHOT_TOPIC, Restored, load_snapshot
from .cluster import Cluster
from .marshaler import COORDINATION_TOPIC

__all__ = ["MarshalGroupView"]

log = logging.getLogger(__name__)

_READ_BYTES = 4 << 20
#: reads of a coordination partition again when truncation moved its start meanwhile
_TRUNCATION_RETRIES = 2


def _read_on(plog: PartitionLog, offset: int) -> Iterator[tuple[list[Record], int]]:
    """A local log's records from ``offset`` to its end as it is now, a read at a time:
    each read's records at or past where it started, and the offset after them."""
    end = plog.log_end_offset
    while offset < end:
        records = decode_records(plog.read(offset, _READ_BYTES).data)
        if not records:
            return
        yield [r for r in records if r.offset >= offset], records[-1].offset + 1
        offset = records[-1].offset + 1


def _wall_ms() -> int:
    return int(time.time() * 1000)


class MarshalGroupView:
    """Groups of ``__marshal`` in a data directory, replayed incrementally; thread-safe."""

    def __init__(
        self,
        data_dir: DataDir,
        layout: ClusterLayout | None = None,
        *,
        clock: Callable[[], int] = _wall_ms,
        topic: str = COORDINATION_TOPIC,
        connect_remote: Callable[[str], Cluster] | None = None,
    ) -> None:
        self._dir = data_dir
        self._layout = layout if layout is not None and len(layout.brokers) > 1 else None
        self._clock = clock
        self._topic = topic
        self._connect_remote = connect_remote
        self._remote: Cluster | None = None
        self._lock = threading.Lock()
        self._worlds: list[WorldState] = []
        self._next: list[int] = []

    def _peers(self) -> Cluster:
        """The whole cluster over the network (for partitions other brokers lead)."""
        if self._remote is None:
            assert self._layout is not None
            bootstrap = ",".join(f"{b.host}:{b.port}" for b in self._layout.sorted_brokers)
            if self._connect_remote is None:
                from .connect import connect

                self._remote = connect(bootstrap=bootstrap)
            else:
                self._remote = self._connect_remote(bootstrap)
        return self._remote

    def close(self) -> None:
        with self._lock:
            if self._remote is not None:
                self._remote.close()
                self._remote = None

    def refresh(self) -> None:
        """Apply what was appended to each coordination partition since the last call."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> list[WorldState]:
        try:
            if self._layout is None:
                count = self._dir.describe(self._topic).partitions
            else:
                count = self._peers().partitions(self._topic)
        except UnknownTopic:
            self._worlds, self._next = [], []
            return []
        while len(self._worlds) < count:
            self._worlds.append(WorldState())
            self._next.append(0)
        for cp in range(count):
            self._catch_up(cp)
        return list(self._worlds)

    def _catch_up(self, cp: int) -> None:
        """Apply what ``cp`` holds past what was applied. A truncation that lands between
        reading the log start and reading the records (OFFSET_OUT_OF_RANGE) is met once more
        from the new start: it would otherwise fail this query (COORDINATOR_NOT_AVAILABLE)."""
        for attempt in range(_TRUNCATION_RETRIES, -1, -1):
            try:
                if self._layout is not None and not self._layout.leads(self._topic, cp):
                    self._catch_up_remote(cp)
                else:
                    self._catch_up_local(cp)
                return
            except OffsetOutOfRange:
                if not attempt:
                    raise
                log.debug("%s/%d: truncated while read; reading again", self._topic, cp)

    def _behind_start(self, cp: int, start: int, restore: Callable[[], Restored | None]) -> None:
        """``cp``'s records below ``start`` were deleted before this view read them: the
        newest snapshot holds what they said (idle partitions' positions live only there),
        as a Marshaler restores it; with none stored the view starts over at ``start``.
        Snapshots that cannot be read now (their broker away, their topic truncated under
        the read) fail this query and leave the view as it was, so the next one restores:
        started over, it would have shown the group without those positions for good."""
        if self._next[cp] >= start:
            return
        restored = restore()
        if restored is not None:
            self._worlds[cp] = restored.world
            self._next[cp] = restored.covered + 1
            return
        if self._next[cp] > 0:
            log.warning(
                "%s/%d: records up to %d were deleted before they were read, and no "
                "snapshot covers them; the group view restarts from the earliest offset",
                self._topic,
                cp,
                start,
            )
        self._worlds[cp] = WorldState()
        self._next[cp] = start

    def _catch_up_local(self, cp: int) -> None:
        plog = self._dir.partition(self._topic, cp)
        start = plog.log_start_offset
        self._behind_start(cp, start, lambda: self._restore(cp, start))
        world = self._worlds[cp]
        for records, following in _read_on(plog, self._next[cp]):
            world.apply_many([(r.offset, r.timestamp, r.key, r.value) for r in records])
            self._next[cp] = following

    def _restore(self, cp: int, earliest: int) -> Restored | None:
        """The newest valid snapshot of ``cp`` (this view has no admin keys) whose tail
        ``__marshal`` still holds, read from this broker's own snapshot partition, or over
        the network when another broker leads it (each topic's leaders are placed apart);
        None when there is no snapshot topic. A read that fails raises (``_behind_start``)."""
        if self._layout is not None and not self._layout.leads(SNAPSHOT_TOPIC, cp):
            return self._restore_remote(self._peers(), cp, earliest)
        try:
            plog = self._dir.partition(SNAPSHOT_TOPIC, cp)
        except (UnknownTopic, UnknownPartition):
            return None
        snapshots = [
            (r.offset, r.key, r.value)
            for records, _ in _read_on(plog, plog.log_start_offset)
            for r in records
        ]
        return load_snapshot(None, cp, {}, earliest=earliest, snapshots=snapshots)

    def _catch_up_remote(self, cp: int) -> None:
        """As :meth:`_catch_up_local`, over the network from the broker leading ``cp`` (its
        snapshots from the one leading the snapshot topic's ``cp``)."""
        peers = self._peers()
        start = peers.earliest_offset(self._topic, cp)
        self._behind_start(cp, start, lambda: self._restore_remote(peers, cp, start))
        end = peers.latest_offset(self._topic, cp)
        while self._next[cp] < end:
            messages = peers.fetch(self._topic, cp, self._next[cp], max_bytes=_READ_BYTES)
            if not messages:
                break
            self._worlds[cp].apply_many((m.offset, m.timestamp, m.key, m.value) for m in messages)
            self._next[cp] = messages[-1].offset + 1

    def _restore_remote(self, peers: Cluster, cp: int, earliest: int) -> Restored | None:
        """:meth:`_restore` over the network (no snapshot topic: None; read_snapshots)."""
        try:
            return load_snapshot(peers, cp, {}, earliest=earliest)
        except (UnknownTopic, UnknownPartition):  # (deleted since read_snapshots looked)
            return None

    # ------------------------------------------------------------------ GroupViewProvider

    def group_ids(self) -> list[str]:
        groups: set[str] = set()
        with self._lock:  # worlds are read while no other thread applies records
            for world in self._refresh():
                groups.update(s.group_id for s in world.partitions())
                groups.update(world.member_groups())
        return sorted(groups)

    def group(self, group_id: str) -> GroupSnapshot | None:
        now = self._clock()
        positions = {}
        held: dict[tuple[str, str], dict[str, list[int]]] = {}
        with self._lock:  # worlds are read while no other thread applies records
            worlds = self._refresh()
            states = [(w, s) for w in worlds for s in w.partitions(group_id)]
            announced = [m for w in worlds for m in w.members(group_id, now)]
            for m in announced:
                held.setdefault((m.client_id, m.instance_id), {})
            for world, s in states:
                if s.has_position:
                    positions[(s.topic, s.partition)] = s.resume_offset
                if s.holder is not None and (
                    world.freshness(group_id, s.topic, s.partition, now) == FRESH
                ):
                    held.setdefault(s.holder, {}).setdefault(s.topic, []).append(s.partition)
        if not states and not announced:
            return None
        members = tuple(
            GroupMember(
                member_id=f"{client_id}/{instance_id}",
                client_id=client_id,
                assignment=tuple(
                    (topic, tuple(sorted(parts))) for topic, parts in sorted(by_topic.items())
                ),
            )
            for (client_id, instance_id), by_topic in sorted(held.items())
        )
        return GroupSnapshot(
            group_id=group_id,
            members=members,
            positions=positions,
            topics=tuple(sorted({s.topic for _, s in states})),
        )
