"""Group membership (protocol version 2): who is in a group, folded from the log.

A member announces itself (``AnnouncingMember``) every third of its heartbeat interval while
it runs, whatever it holds, and says ``LeavingGroup`` when it closes. Membership records of a
group all live in one coordination partition (``membership_partition``), so one world folds
a group's whole membership in one order and every replayer sees the same members.

Membership never changes ownership: claims, heartbeats and fencing still decide who holds a
partition. It only feeds the *target* each member computes (``logmarshal.core.assignment``),
so a late or wrong membership view can cost time, never safety.
"""

from __future__ import annotations

import attrs

from ._state import STALE, MemberState, freshness, stale_from
from ._verdict import ACCEPTED, REJECTED, Effect, Reason, Verdict

__all__ = ["Member", "MemberState", "announce", "export", "leave", "settle_ms"]

_JOINED = ACCEPTED[Effect.JOINED]
_ANNOUNCED = ACCEPTED[Effect.ANNOUNCED]
_LEFT = ACCEPTED[Effect.LEFT]
_NOT_MEMBER = REJECTED[Reason.NOT_HOLDER]
#: a bound no log time reaches: a group without members expires nothing
_NEVER = 1 << 62


def settle_ms(heartbeat_interval_ms: int) -> int:
    """How long a member must have been seen before it counts in the target: a quarter of
    its heartbeat interval, i.e. it announced at least twice (every third of HB). A process
    that announces once and dies at once never pulls partitions away from anyone."""
    return heartbeat_interval_ms // 4


@attrs.frozen
class Member:
    """Read-only view of one member of a group at log time ``now``."""

    group_id: str
    client_id: str
    instance_id: str
    #: log time of the announcement that made it a member (kept across restarts of the
    #: same client_id, renewed after it went stale or left)
    since: int
    #: log time of its last accepted announcement
    last: int
    heartbeat_interval_ms: int
    weight: int
    #: 0: no limit
    max_claims: int
    entire_topic: bool
    topics: tuple[tuple[str, int], ...]
    #: the version byte of its last announcement: 2 (a member of version 2 or 3), or the
    #: protocol version it speaks (4); records of version N go only into a group whose live
    #: members all announce N or later
    version: int = 2

    def live(self, now: int) -> bool:
        """Not stale at ``now``: its last announcement is at most 2·HB old."""
        return freshness(now - self.last, self.heartbeat_interval_ms) is not STALE

    def counted(self, now: int) -> bool:
        """Live, and seen for :func:`settle_ms` already: it has a share of the target."""
        return self.live(now) and self.last - self.since >= settle_ms(self.heartbeat_interval_ms)

    def expires_at(self) -> int:
        """First log time at which it is stale."""
        return stale_from(self.last, self.heartbeat_interval_ms)

    @property
    def subscribed(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.topics)


def _purge(members: dict[str, MemberState], now: int, group: str, expiry: dict[str, int]) -> bool:
    """Drop the group's stale members. ``expiry[group]`` is a time before which none of them
    can be stale (a lower bound of their :func:`stale_from`): until then there is nothing to
    look at, so an announcement costs O(1), not O(members), in a large group. Absent (a
    world restored from a snapshot), the members are looked at and it is computed."""
    due = expiry.get(group)
    if due is not None and now < due:
        return False
    stale = [c for c, m in members.items() if m.stale(now)]
    for client in stale:
        del members[client]
    expiry[group] = min((stale_from(m.last, m.hb) for m in members.values()), default=_NEVER)
    return bool(stale)


def _renewed(expiry: dict[str, int], group: str, now: int, hb: int) -> None:
    """A member announced at ``now``: the group's bound stays below its expiry too."""
    due = expiry.get(group)
    if due is not None:
        expiry[group] = min(due, stale_from(now, hb))


def announce(
    groups: dict[str, dict[str, MemberState]],
    expiry: dict[str, int],
    now: int,
    client: str,
    instance: str,
    group: str,
    topics: tuple[tuple[str, int], ...],
    hb: int,
    weight: int,
    max_claims: int,
    entire_topic: bool,
    version: int = 2,
) -> tuple[Verdict, bool]:
    """PROTOCOL.md rule 8, AnnouncingMember: always accepted (a fenced sender was refused by
    rule 1 before). A client_id that is not a live member ``JOINED`` (``since = now``); a
    live member is ``ANNOUNCED`` and keeps its ``since``, also under a new instance_id (a
    restart does not rejoin). Stale members of the group are dropped first. The flag says
    whether anything a target depends on changed (not a plain renewal). ``expiry`` is the
    world's bound on each group's first expiry (:func:`_purge`)."""
    members = groups.get(group)
    if members is None:
        members = groups[group] = {}
        expiry[group] = _NEVER
        purged = False
    else:
        purged = _purge(members, now, group, expiry)
    _renewed(expiry, group, now, hb)
    m = members.get(client)
    if m is None:
        members[client] = MemberState(
            instance, now, now, hb, weight, max_claims, entire_topic, topics, version
        )
        return _JOINED, True
    settle = settle_ms(m.hb)
    changed = (
        purged
        or (m.last - m.since < settle <= now - m.since)  # it starts to count
        or (m.weight, m.max_claims, m.entire_topic, m.hb) != (weight, max_claims, entire_topic, hb)
        or m.topics != topics
        or m.instance != instance
        or m.version != version
    )
    m.instance = instance
    m.last = now
    m.hb = hb
    m.weight = weight
    m.max_claims = max_claims
    m.entire_topic = entire_topic
    m.topics = topics
    m.version = version
    return _ANNOUNCED, changed


def leave(
    groups: dict[str, dict[str, MemberState]],
    expiry: dict[str, int],
    now: int,
    client: str,
    instance: str,
    group: str,
) -> tuple[Verdict, bool]:
    """PROTOCOL.md rule 9, LeavingGroup: from the instance the membership names → ``LEFT``,
    the member is gone at once; from anyone else → ``NOT_HOLDER`` (it is not the member)."""
    members = groups.get(group)
    purged = False
    if members is not None:
        purged = _purge(members, now, group, expiry)
        m = members.get(client)
        if m is not None and m.instance == instance:
            del members[client]
            if not members:
                del groups[group]
                expiry.pop(group, None)
            return _LEFT, True
        if not members:
            del groups[group]
            expiry.pop(group, None)
    return _NOT_MEMBER, purged


def export(group: str, client: str, m: MemberState) -> Member:
    return Member(
        group,
        client,
        m.instance,
        m.since,
        m.last,
        m.hb,
        m.weight,
        m.max_claims,
        m.entire_topic,
        m.topics,
        m.version,
    )
