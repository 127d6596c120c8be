"""What a group is doing: members, holders, positions, lag and a Burrow-style status.

Members (docs/rebalancing.md) are the group's live announced members (``AnnouncingMember``, read from
the group's membership partition at the admin's ``now_ms``) plus fresh holders that never
announced (protocol version 1 clients, ``rebalance="none"``). For announced members the
*target* is the one every member computes (:func:`logmarshal.core.assignment.target`,
"balanced", over the counted members and the current holders), so ``describe`` shows what
the group is converging to and how far it still is: ``balanced`` when every unit of the
target is held by its target owner.

Everything here is an observation at the admin's clock (``now_ms``), the way Burrow judges
consumers by its own clock: freshness and heartbeat ages are predictions, only the
coordination log decides. Log ends and the time index come from the cluster; the group's
state comes from a :class:`~.reader.CoordinationState` replayed once per command.
"""

from __future__ import annotations

import logging

import attrs

from rationalizer import FRESH, STALE, coordination_partition
from rationalizer._membership import Member

from ..cluster import Cluster
from ..core import assignment
from ..errors import UnknownTopic
from .errors import AdminError
from .reader import CoordinationState
from .status import LagSample, Status, evaluate_partition, worst

__all__ = [
    "Balance",
    "GroupDescription",
    "GroupSummary",
    "MemberView",
    "PartitionView",
    "balance",
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
    lag: int | None  # below 0: the position is past the log end (status PAST_END)
    status: Status | None  # None for a partition the group never consumed
    #: a task's (version 3) last_offset per source topic, whose scalar is ``last_offset``;
    #: None for anything but a task key whose last position record was a task record
    positions: tuple[tuple[str, int], ...] | None = None
    #: until when (log time, exclusive) a lease the log took away early may still run
    #: (protocol version 5: a holder fenced by a restart takeover or voided by a reset);
    #: no member's claim is accepted before it. None when no such lease runs at now_ms
    fenced_until_ms: int | None = None


Unit = assignment.Unit


@attrs.frozen
class MemberView:
    """One member of a group: an announced member (version 2), or a fresh holder that never
    announced (``announced`` False: only ``current`` is known of it)."""

    client_id: str
    instance_id: str
    announced: bool
    since_ms: int | None  # log time of the announcement that made it a member
    last_seen_ms: int | None  # log time of its last announcement
    heartbeat_interval_ms: int | None
    weight: int | None
    max_claims: int | None  # 0: no limit
    entire_topic: bool | None
    topics: tuple[tuple[str, int], ...]  # (topic, partition count) as it announced them
    counted: bool  # has a share of the target (live and settled)
    #: units the target gives it: (topic, partition), or (topic, -1) for a whole topic
    target: tuple[Unit, ...]
    current: tuple[tuple[str, int], ...]  # partitions it holds now (any instance)


@attrs.frozen
class Balance:
    """The group's target against its holders. ``balanced`` is None without counted members
    (nothing to compare: no member announced, or none has settled yet)."""

    target: dict[str, frozenset[Unit]]
    #: units of the target held by someone else than their target owner (or by nobody)
    to_move: tuple[Unit, ...]

    @property
    def balanced(self) -> bool | None:
        if not self.target:
            return None
        return not self.to_move


def balance(members: list[Member], holders: dict[tuple[str, int], str], now_ms: int) -> Balance:
    """The target of the members counted at ``now_ms`` (``assignment.target("balanced")``,
    with the current ``holders``: (topic, partition) -> client_id, as every member computes
    it) and the units not yet where the target puts them. A whole-topic unit is held by the
    holder of its partition 0."""
    counted = [m for m in members if m.counted(now_ms)]
    if not counted:
        return Balance({}, ())
    unit_holders: dict[Unit, str] = {}
    for topic, partition in assignment.units_of(counted):
        p = 0 if partition == assignment.WHOLE_TOPIC else partition
        h = holders.get((topic, p))
        if h is not None:
            unit_holders[(topic, partition)] = h
    target = assignment.target("balanced", counted, unit_holders)
    to_move = sorted(
        u for client, units in target.items() for u in units if unit_holders.get(u) != client
    )
    return Balance(target, tuple(to_move))


@attrs.frozen
class GroupDescription:
    group: str
    now_ms: int
    status: Status
    paused_until_ms: int | None
    pause_admin: tuple[str, str] | None
    #: announced live members and fresh holders that never announced, (client, instance)
    members: tuple[tuple[str, str], ...]
    partitions: tuple[PartitionView, ...]
    member_views: tuple[MemberView, ...] = ()
    #: None: no counted member, so no target to compare with
    balanced: bool | None = None
    to_move: tuple[Unit, ...] = ()

    @property
    def paused(self) -> bool:
        return self.paused_until_ms is not None and self.now_ms < self.paused_until_ms


@attrs.frozen
class GroupSummary:
    group: str
    #: announced live members and fresh holders that never announced, (client, instance)
    members: tuple[tuple[str, str], ...]
    owned: int  # partitions held by a holder that is not stale
    known: int  # partitions the log has state for
    paused_until_ms: int | None
    paused: bool
    #: (coordination partition, offset, version) of the record of a version to come that
    #: halted the group (its figures are as of before it), or None
    halted: tuple[int, int, int] | None = None


def require_group(state: CoordinationState, group: str) -> None:
    """One clear error for a group the coordination log never mentioned, or one a record of
    a protocol version to come halted (this admin does not know its rules)."""
    if state.has_group(group):
        halted = state.halted(group)
        if halted is not None:
            cp, offset, version = halted
            raise AdminError(
                f"group {group!r} is halted: the record at __marshal/{cp} offset {offset} is of "
                f"protocol version {version}, which this admin does not know; upgrade it"
            )
        return
    if not state.groups:
        raise AdminError(f"unknown group {group!r}: __marshal has no groups yet")
    known = ", ".join(state.groups[:10]) + (" ..." if len(state.groups) > 10 else "")
    raise AdminError(f"unknown group {group!r} (groups in __marshal: {known})")


def _with_announced(
    holders: set[tuple[str, str]], announced: list[Member]
) -> tuple[tuple[str, str], ...]:
    """Announced members, plus the holders whose client_id never announced."""
    names = {m.client_id for m in announced}
    out = {(m.client_id, m.instance_id) for m in announced}
    out |= {h for h in holders if h[0] not in names}
    return tuple(sorted(out))


def list_groups(state: CoordinationState, now_ms: int) -> list[GroupSummary]:
    out = []
    for group in state.groups:
        parts = state.partitions(group)
        members: set[tuple[str, str]] = set()
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
                _with_announced(members, state.members(group, now_ms)),
                owned,
                len(parts),
                until,
                until is not None and now_ms < until,
                state.halted(group),
            )
        )
    return out


def _task_lag(ends: _LogEnds, positions: tuple[tuple[str, int], ...], partition: int) -> int | None:
    """A task's lag: the records after its position in each of its sources, summed; where a
    position is past its source's log end, how far past (below 0, status PAST_END), the
    sources behind it aside: records lost or read again outweigh a backlog."""
    lags = []
    for source, last in positions:
        bounds = ends.bounds(source, partition)
        if bounds is None:
            return None
        lags.append(bounds[1] - last - 1)
    past = [lag for lag in lags if lag < 0]
    return sum(past) if past else sum(lags)


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
    announced = state.members(group, now_ms)
    subscribed = {t for m in announced for t, _ in m.topics}
    # a task's name (streams) is no topic: its partition count is the one members announce
    announced_counts: dict[str, int] = {}
    for m in announced:
        for t, n in m.topics:
            announced_counts[t] = max(n, announced_counts.get(t, 0))
    tasks = {s.topic for s in known.values() if s.positions is not None}
    for topic in sorted(set(state.topics(group)) | subscribed):
        try:
            keys.update((topic, p) for p in range(cluster.partitions(topic)))
        except UnknownTopic:
            if topic in tasks or topic in announced_counts:
                keys.update((topic, p) for p in range(announced_counts.get(topic, 0)))
            else:
                log.warning("topic %s of group %s no longer exists", topic, group)
    hb_max = state.hb_max_ms(group) or 0
    views = []
    members: set[tuple[str, str]] = set()
    for topic, partition in sorted(keys):
        s = known.get((topic, partition))
        bounds = ends.bounds(topic, partition)
        earliest, latest = bounds if bounds is not None else (None, None)
        holder = s.holder if s is not None else None
        fresh = state.view.freshness(group, topic, partition, now_ms) if holder else None
        if fresh == FRESH and holder is not None:  # (fresh is None without a holder)
            members.add(holder)
        lease = state.lease_ms(group, topic, partition)
        # A partition only claimed, never consumed, has no position (and so no lag or status).
        position = s.resume_offset if s is not None and s.has_position else None
        # below 0 past the log end, as Kafka's consumer-groups tool shows it (status PAST_END)
        lag = None if position is None or latest is None else latest - position
        status = None
        if s is not None and s.positions is not None:
            lag = _task_lag(ends, s.positions, partition)
            status = Status.PAST_END if lag is not None and lag < 0 else None
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
                positions=s.positions if s is not None else None,
                fenced_until_ms=(
                    s.fenced_until
                    if s is not None and s.fenced_until is not None and s.fenced_until > now_ms
                    else None
                ),
            )
        )
    holders = {(s.topic, s.partition): s.holder[0] for s in known.values() if s.holder is not None}
    bal = balance(announced, holders, now_ms)
    held: dict[str, list[tuple[str, int]]] = {}
    for (topic, partition), client in sorted(holders.items()):
        held.setdefault(client, []).append((topic, partition))
    member_views = [
        MemberView(
            client_id=m.client_id,
            instance_id=m.instance_id,
            announced=True,
            since_ms=m.since,
            last_seen_ms=m.last,
            heartbeat_interval_ms=m.heartbeat_interval_ms,
            weight=m.weight,
            max_claims=m.max_claims,
            entire_topic=m.entire_topic,
            topics=m.topics,
            counted=m.counted(now_ms),
            target=tuple(sorted(bal.target.get(m.client_id, ()))),
            current=tuple(held.get(m.client_id, ())),
        )
        for m in announced
    ]
    names = {m.client_id for m in announced}
    for client, instance in sorted(members):
        if client in names:
            continue
        member_views.append(
            MemberView(
                client_id=client,
                instance_id=instance,
                announced=False,
                since_ms=None,
                last_seen_ms=None,
                heartbeat_interval_ms=None,
                weight=None,
                max_claims=None,
                entire_topic=None,
                topics=(),
                counted=False,
                target=(),
                current=tuple(held.get(client, ())),
            )
        )
    return GroupDescription(
        group=group,
        now_ms=now_ms,
        status=worst(v.status for v in views if v.status is not None),
        paused_until_ms=state.paused_until(group),
        pause_admin=state.pause_admin(group),
        members=_with_announced(members, announced),
        partitions=tuple(views),
        member_views=tuple(member_views),
        balanced=bal.balanced,
        to_move=bal.to_move,
    )
