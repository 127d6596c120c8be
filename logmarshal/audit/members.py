"""The audit fold's view of group membership (protocol version 2): the ``membership`` table.

:class:`MemberFold` follows each group's live members of one coordination partition as the
world does (an accepted ``AnnouncingMember`` joins or renews, a ``LeavingGroup`` leaves, a
member whose last announcement went stale by its own heartbeat interval expires) and lists
every change as a row (:mod:`.schema`, table ``membership``). Only accepted records reach it:
the world already judged them (:class:`.replay.PartitionAudit` feeds it).
"""

from __future__ import annotations

from typing import Any

from rationalizer import AnnouncingMember, Effect, Message, WorldState
from rationalizer._rules import STALE, freshness, stale_from

__all__ = ["MemberFold", "Membership"]


class Membership:
    """One live member as the fold tracks it (the world keeps the same, privately)."""

    __slots__ = ("hb", "instance", "last", "topics")

    def __init__(
        self, instance: str, last: int, hb: int, topics: tuple[tuple[str, int], ...]
    ) -> None:
        self.instance = instance
        self.last = last
        self.hb = hb
        self.topics = topics


def _stale(m: Membership, now: int) -> bool:
    """The member's last announcement is stale at ``now`` by its own heartbeat interval."""
    return freshness(now - m.last, m.hb) is STALE


class MemberFold:
    """The members of every group of one coordination partition, and their history as rows
    of the ``membership`` table."""

    def __init__(self, coord_partition: int) -> None:
        self.coord_partition = coord_partition
        #: group -> client_id -> its membership as this fold tracks it (mirrors the world's)
        self._members: dict[str, dict[str, Membership]] = {}
        self._events: list[tuple[Any, ...]] = []

    def start_from(self, world: WorldState) -> None:
        """The live members of a snapshot's world; their joins are before the history, so
        they are dated (when they joined) without a record."""
        for group in world.member_groups():
            live = world.members(group)
            self._members[group] = {
                m.client_id: Membership(m.instance_id, m.last, m.heartbeat_interval_ms, m.topics)
                for m in live
            }
            for m in sorted(live, key=lambda m: (m.since, m.client_id)):
                self._event(
                    group,
                    m.since,
                    None,
                    m.client_id,
                    m.instance_id,
                    "joined",
                    "before the snapshot",
                    m.heartbeat_interval_ms,
                )

    def apply(self, off: int, now: int, msg: Message, e: Effect) -> None:
        """An accepted AnnouncingMember (JOINED, ANNOUNCED) or LeavingGroup (LEFT)."""
        group = msg.group_id
        members = self._members.setdefault(group, {})
        self._expire(group, members, now)
        client, instance = msg.client_id, msg.instance_id
        if e is Effect.LEFT:
            m = members.pop(client, None)
            self._event(group, now, off, client, instance, "left", None, 0 if m is None else m.hb)
            if not members:
                del self._members[group]
            return
        assert isinstance(msg, AnnouncingMember)
        hb = msg.heartbeat_interval_ms
        before: dict[str, int] = {}
        for m in members.values():
            for topic, count in m.topics:
                before[topic] = max(before.get(topic, 0), count)
        if e is Effect.JOINED or client not in members:
            members[client] = Membership(instance, now, hb, msg.topics)
            self._event(group, now, off, client, instance, "joined", None, hb)
        else:
            m = members[client]
            m.instance, m.last, m.hb, m.topics = instance, now, hb, msg.topics
        for topic, count in msg.topics:
            old = before.get(topic, 0)
            if 0 < old < count:
                self._event(
                    group, now, off, client, instance, "partitions_added",
                    f"{topic} {old}->{count}", hb,
                )  # fmt: skip

    def rows(self, now: int) -> list[tuple[Any, ...]]:
        """Every change so far, then the members that expired by ``now`` (the end of the
        replay, in the partition's own log time)."""
        events = list(self._events)
        for group, members in sorted(self._members.items()):
            for client in sorted(c for c, m in members.items() if _stale(m, now)):
                m = members[client]
                events.append(
                    (group, self.coord_partition, stale_from(m.last, m.hb), None, client,
                     m.instance, "expired", None, m.hb)
                )  # fmt: skip
        return events

    def _expire(self, group: str, members: dict[str, Membership], now: int) -> None:
        """Members of ``group`` stale at ``now`` leave the fold's view, as they leave the
        world's; the event is dated at the first log time each was stale."""
        for client in sorted(c for c, m in members.items() if _stale(m, now)):
            m = members.pop(client)
            self._event(
                group, stale_from(m.last, m.hb), None, client, m.instance, "expired", None, m.hb
            )

    def _event(
        self,
        group: str,
        time_ms: int,
        offset: int | None,
        client: str,
        instance: str,
        event: str,
        detail: str | None,
        hb: int,
    ) -> None:
        self._events.append(
            (group, self.coord_partition, time_ms, offset, client, instance, event, detail, hb)
        )
