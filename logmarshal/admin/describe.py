"""What a group is doing: members, holders, positions, lag and a Burrow-style status.

Everything here is an observation at the admin's clock (``now_ms``), the way Burrow judges
consumers by its own clock: freshness and heartbeat ages are predictions, only the
coordination log decides. Log ends and the time index come from the cluster; the group's
state comes from a :class:`~.reader.CoordinationState` replayed once per command.
"""

from __future__ import annotations

import logging

import attrs

from rationalizer import FRESH, STALE, coordination_partition

from ..cluster import Cluster
from ..errors import UnknownTopic
from .errors import AdminError
from .reader import CoordinationState
from .status import LagSample, Status, evaluate_partition, worst

__all__ = [
    "GroupDescription",
    "GroupSummary",
    "PartitionView",
    "describe_group",
    "list_groups",
    "require_group",
]

log = logging.getLogger(__name__)


@attrs.frozen
class PartitionView:
    """One data partition of a group. Positions are Kafka-style: the next offset to consume."""

    topic: str
    partition: int
    coord_partition: int
    client_id: str | None
    instance_id: str | None
    freshness: str | None  # fresh / unknown / stale at now_ms; None without a holder
    heartbeat_age_ms: int | None  # now_ms - the holder's last accepted message
    lease_ms: int | None  # the holder's (or last holder's) heartbeat interval
    last_offset: int | None  # last offset fully handled; None: the log never mentioned it
    position: int | None  # resume offset = max(last_offset, claimed_through) + 1
    earliest: int | None
    log_end: int | None
    lag: int | None
    status: Status | None  # None for a partition the group never consumed


@attrs.frozen
class GroupDescription:
    group: str
    now_ms: int
    status: Status
    paused_until_ms: int | None
    pause_admin: tuple[str, str] | None
    members: tuple[tuple[str, str], ...]  # fresh holders
    partitions: tuple[PartitionView, ...]

    @property
    def paused(self) -> bool:
        return self.paused_until_ms is not None and self.now_ms < self.paused_until_ms


@attrs.frozen
class GroupSummary:
    group: str
    members: tuple[tuple[str, str], ...]
    owned: int  # partitions held by a holder that is not stale
    known: int  # partitions the log has state for
    paused_until_ms: int | None
    paused: bool


def require_group(state: CoordinationState, group: str) -> None:
    """One clear error for a group the coordination log never mentioned."""
    if state.has_group(group):
        return
    if not state.groups:
        raise AdminError(f"unknown group {group!r}: __marshal has no groups yet")
    known = ", ".join(state.groups[:10]) + (" ..." if len(state.groups) > 10 else "")
    raise AdminError(f"unknown group {group!r} (groups in __marshal: {known})")


def list_groups(state: CoordinationState, now_ms: int) -> list[GroupSummary]:
    out = []
    for group in state.groups:
        parts = state.partitions(group)
        members = set()
        owned = 0
        assert state.view is not None
        for s in parts:
            if s.holder is None:
                continue
            fresh = state.view.freshness(group, s.topic, s.partition, now_ms)
            if fresh != STALE:
                owned += 1
            if fresh == FRESH:
                members.add(s.holder)
        until = state.paused_until(group)
        out.append(
            GroupSummary(
                group,
                tuple(sorted(members)),
                owned,
                len(parts),
                until,
                until is not None and now_ms < until,
            )
        )
    return out


class _LogEnds:
    """Log-end offsets now and at past times (the time index), cached per command."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._at: dict[tuple[str, int, int], int] = {}
        self._now: dict[tuple[str, int], tuple[int, int]] = {}

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        key = (topic, partition)
        if key not in self._now:
            try:
                self._now[key] = (
                    self._cluster.earliest_offset(topic, partition),
                    self._cluster.latest_offset(topic, partition),
                )
            except UnknownTopic:
                return None
            except Exception as exc:  # UnknownPartition and friends: the partition is gone
                log.warning("no offsets for %s/%d: %s", topic, partition, exc)
                return None
        return self._now[key]

    def end_at(self, topic: str, partition: int, time_ms: int, latest: int) -> int:
        """The log end as it was at ``time_ms``: the first offset stamped after it."""
        key = (topic, partition, time_ms)
        if key not in self._at:
            found = self._cluster.offset_for_time(topic, partition, time_ms + 1)
            self._at[key] = latest if found is None else found
        return self._at[key]


def describe_group(
    cluster: Cluster, state: CoordinationState, group: str, now_ms: int
) -> GroupDescription:
    """Per partition of every topic the group consumes: holder, position, lag, status."""
    require_group(state, group)
    assert state.view is not None
    ends = _LogEnds(cluster)
    known = {(s.topic, s.partition): s for s in state.partitions(group)}
    keys = set(known)
    for topic in state.topics(group):
        try:
            keys.update((topic, p) for p in range(cluster.partitions(topic)))
        except UnknownTopic:
            log.warning("topic %s of group %s no longer exists", topic, group)
    hb_max = state.hb_max_ms(group) or 0
    views = []
    members = set()
    for topic, partition in sorted(keys):
        s = known.get((topic, partition))
        bounds = ends.bounds(topic, partition)
        earliest, latest = bounds if bounds is not None else (None, None)
        holder = s.holder if s is not None else None
        fresh = state.view.freshness(group, topic, partition, now_ms) if holder else None
        if fresh == FRESH:
            members.add(holder)
        lease = state.lease_ms(group, topic, partition)
        # A partition only claimed, never consumed, has no position (and so no lag or status).
        position = s.resume_offset if s is not None and s.has_position else None
        lag = None if position is None or latest is None else max(0, latest - position)
        status = None
        if position is not None and latest is not None:
            window = [
                LagSample(
                    x.time_ms,
                    x.position,
                    ends.end_at(topic, partition, x.time_ms, latest) - x.position,
                )
                for x in state.samples(group, topic, partition)
            ]
            stop_after = 2 * (lease or hb_max)
            status = evaluate_partition(window, latest - position, now_ms, stop_after)
        views.append(
            PartitionView(
                topic=topic,
                partition=partition,
                coord_partition=coordination_partition(topic, partition, state.n),
                client_id=holder[0] if holder else None,
                instance_id=holder[1] if holder else None,
                freshness=fresh,
                heartbeat_age_ms=now_ms - s.last_beat if holder and s is not None else None,
                lease_ms=lease,
                last_offset=s.last_offset if s is not None else None,
                position=position,
                earliest=earliest,
                log_end=latest,
                lag=lag,
                status=status,
            )
        )
    return GroupDescription(
        group=group,
        now_ms=now_ms,
        status=worst(v.status for v in views if v.status is not None),
        paused_until_ms=state.paused_until(group),
        pause_admin=state.pause_admin(group),
        members=tuple(sorted(members)),  # type: ignore[arg-type]
        partitions=tuple(views),
    )
