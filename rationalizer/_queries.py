"""What a world answers: the queries of a ``WorldState`` and the read-only copies they give.

Queries never change the state and never read a clock: they judge at the log time they
are given (or the world's ``now``) with the same classifier and properties as the rules
(``state.freshness``, the world's rule table). :class:`WorldQueries` is the part of
``WorldState`` that holds them (world.py holds the replay and the snapshots).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Container, Iterable, Iterator

import attrs

from . import _membership as membership
from ._codec import record_key
from ._messages import Positions
from ._rules import Rules
from ._state import NO_POSITION, STALE, MemberState, PartitionEntry, fence_key
from ._state import freshness as classify_freshness
from ._verdict import Reason, Verdict

__all__ = ["Claim", "PartitionState", "WorldQueries"]


@attrs.frozen
class PartitionState:
    """Read-only copy of one partition's coordination state."""

    group_id: str
    topic: str
    partition: int
    holder: tuple[str, str] | None
    last_beat: int
    last_offset: int
    claimed_through: int
    #: The holder's heartbeat interval (its lease), None when nobody holds the partition.
    heartbeat_interval_ms: int | None = None
    #: Whether an accepted record ever set a position (a Heartbeat, a ReleasingPartition, a
    #: ClaimingMessages or an admin POSITION_SET; a claim alone sets none). Without one,
    #: ``last_offset`` and ``claimed_through`` are -1 and the group has no position at all:
    #: a consumer applies its reset policy, as Kafka does for a group without an offset.
    has_position: bool = True
    #: A task's position vector, ``(source topic, last_offset)`` sorted by topic, as its
    #: holder's last accepted HeartbeatingTask or ReleasingTask gave it (``last_offset`` is
    #: then its scalar, ``sum(last_offset + 1) - 1``); None when the last accepted record
    #: that set a position was not a task record (or none ever did).
    positions: Positions | None = None
    #: The position the holder's tenure started from (version 4): its release gives back
    #: nothing below it. None without a holder, or when the tenure started without one.
    tenure_floor: int | None = None
    #: Until when (log time, exclusive) a lease the log took away early may still run: a
    #: holder fenced by a restart takeover or voided by a ReleaseGroup (version 5, property
    #: e); a version 5 claim is refused before it. None when there is no such lease.
    fenced_until: int | None = None
    #: The log offset of the accepted claim or restart takeover that began the holder's
    #: tenure, which a version 6 release names (version 6). None without a holder, or when
    #: the world was restored from a snapshot older than version 6.
    tenure: int | None = None
    #: While nobody holds the partition: the holder whose named tenure ended last, by its
    #: release or voided by a ReleaseGroup (``last_holder_voided``), at log time
    #: ``last_holder_end_ms`` (version 6). Audit only, no rule reads it: the audit of a log
    #: that starts from a snapshot names with it the failover the next claim makes. None
    #: while held, when no named tenure ended since the last claim (a version 1 or 5 claim
    #: names none), or when the world was restored from a snapshot older than version 6,
    #: which did not hold it (unknown).
    last_holder: tuple[str, str] | None = None
    last_holder_end_ms: int | None = None
    last_holder_voided: bool = False

    @property
    def resume_offset(self) -> int:
        """``max(last_offset, claimed_through) + 1``: 0 without a position, so check
        :attr:`has_position` (``WorldState.resume_offset`` says None then)."""
        return max(self.last_offset, self.claimed_through) + 1


@attrs.frozen
class Claim:
    """A partition some instance of a client holds (for restart recovery)."""

    topic: str
    partition: int
    client_id: str
    instance_id: str
    last_beat: int
    #: The holder's heartbeat interval: the claim is fresh until ``last_beat + this``.
    heartbeat_interval_ms: int


class WorldQueries:
    """The queries of a ``WorldState`` (its state is declared here for them; the world's
    constructor sets it)."""

    _rules: Rules
    _halted_groups: dict[str, tuple[int, int]]
    _keys: dict[str, bytes]
    _window: int
    _applied: int
    _now: int
    _parts: dict[bytes, PartitionEntry]
    _groups: dict[str, list[PartitionEntry]]
    _fenced: dict[str, tuple[str, str]]
    _paused: dict[str, tuple[int, tuple[str, str]]]
    _rejections: dict[Reason, int]
    _members: dict[str, dict[str, MemberState]]
    _epoch: int
    _woff: array
    _wv: list[Verdict]

    def has_admin_key(self, group: str) -> bool:
        """True if this world authenticates the admin records of ``group``."""
        return group in self._keys

    @property
    def verdict_window(self) -> int:
        return self._window

    @property
    def halted(self) -> tuple[int, int] | None:
        """Always None since version 6: a record of a protocol version to come no longer
        stops the whole replay, it halts its own group (:attr:`halted_groups`)."""
        return None

    @property
    def halted_groups(self) -> dict[str, tuple[int, int]]:
        """Group -> ``(offset, version)`` of the well-formed record of a protocol version to
        come that halted it (version 6): none of the group's records after it (nor it) is
        judged (``GROUP_HALTED``), its state stays as it was, and none of its partitions is
        claimable. Other groups of the coordination partition go on."""
        return dict(self._halted_groups)

    def is_halted(self, group: str) -> bool:
        """True if a record of a protocol version to come halted ``group`` here."""
        return group in self._halted_groups

    @property
    def applied_through(self) -> int:
        """Offset of the last applied record; -1 before any."""
        return self._applied

    @property
    def now(self) -> int:
        """Clamped log time of the last applied record (NO_TIME before any)."""
        return self._now

    @property
    def skipped(self) -> int:
        """Records skipped because they did not decode (INVALID_RECORD)."""
        return self._rejections[Reason.INVALID_RECORD]

    def rejections(self) -> dict[Reason, int]:
        """Count of rejected records by reason, since the beginning of the log."""
        return dict(self._rejections)

    def verdict(self, offset: int) -> Verdict | None:
        """Verdict of the record at ``offset`` if it is among the last ``verdict_window``
        applied records (at least; up to twice as many are kept), else None."""
        woff = self._woff
        i = bisect_left(woff, offset)
        if i < len(woff) and woff[i] == offset:
            return self._wv[i]
        return None

    def _part(self, group: str, topic: str, partition: int) -> PartitionEntry | None:
        return self._parts.get(record_key(group, topic, partition))

    def holder(self, group: str, topic: str, partition: int) -> tuple[str, str] | None:
        """``(client_id, instance_id)`` holding the partition, or None. A stale holder is
        still the holder until someone's claim is accepted (its late heartbeat renews)."""
        part = self._part(group, topic, partition)
        return None if part is None else part.holder

    def freshness(self, group: str, topic: str, partition: int, now_ms: int) -> str | None:
        """ "fresh" / "unknown" / "stale" for the holder's last accepted message at ``now_ms``,
        judged with the holder's own heartbeat interval; None if nobody holds the partition."""
        part = self._part(group, topic, partition)
        if part is None or part.holder is None:
            return None
        return classify_freshness(now_ms - part.beat, part.hb)

    def claimable(self, group: str, topic: str, partition: int, now_ms: int) -> bool:
        """Would a ClaimingPartition of this release (version 6) at log time ``now_ms`` be
        accepted (given no other record before it)? Never in a halted group."""
        if group in self._halted_groups:
            return False
        p = self._paused.get(group)
        if p is not None and now_ms < p[0]:
            return False
        part = self._part(group, topic, partition)
        if part is None:
            return True
        if self._rules.lease_runs(part, now_ms) and self._now < part.fenced_until:
            # (a lease over by the world's own time is no lease: a restored world has none)
            return False
        return part.holder is None or classify_freshness(now_ms - part.beat, part.hb) is STALE

    def resume_offset(self, group: str, topic: str, partition: int) -> int | None:
        """``max(last_offset, claimed_through) + 1``; None if no accepted record ever set a
        position for the partition (a claim alone sets none): the consumer then applies its
        own reset policy, like Kafka's ``auto.offset.reset``."""
        part = self._part(group, topic, partition)
        if part is None or part.last == NO_POSITION:
            return None
        return max(part.last, part.claimed) + 1

    def resume_positions(self, group: str, topic: str, partition: int) -> dict[str, int] | None:
        """For a task's key (version 3): ``{source topic: next offset to read}``
        (``last_offset + 1`` of each source) as the last accepted HeartbeatingTask or
        ReleasingTask gave them; None if the key has no position vector (never a task record,
        or a later Heartbeat, ReleasingPartition, ClaimingMessages or admin POSITION_SET
        replaced it: then only :meth:`resume_offset` describes the position)."""
        part = self._part(group, topic, partition)
        if part is None or part.positions is None:
            return None
        return {source: offset + 1 for source, offset in part.positions}

    def partition_state(self, group: str, topic: str, partition: int) -> PartitionState | None:
        part = self._part(group, topic, partition)
        return None if part is None else _export(part, self._now)

    def partitions(self, group: str | None = None) -> list[PartitionState]:
        """All partitions this world knows (of ``group`` if given), sorted."""
        src: Iterable[PartitionEntry]
        src = self._parts.values() if group is None else self._groups.get(group, ())
        now = self._now
        return sorted(
            (_export(p, now) for p in src), key=lambda s: (s.group_id, s.topic, s.partition)
        )

    def claims_of(self, group: str, client_id: str) -> list[Claim]:
        """Partitions of ``group`` held by any instance of ``client_id``, sorted."""
        return sorted(
            (
                Claim(p.topic, p.partition, p.holder[0], p.holder[1], p.beat, p.hb)
                for p in self._groups.get(group, ())
                if p.holder is not None and p.holder[0] == client_id
            ),
            key=lambda c: (c.topic, c.partition),
        )

    def claims_of_instance(
        self, group: str, holder: tuple[str, str], skip: Container[tuple[str, int]] = ()
    ) -> list[Claim]:
        """Partitions of ``group`` held by exactly ``holder`` (client_id, instance_id), but
        those in ``skip`` (topic, partition), sorted: a member's look for claims of its own
        it does not track, every claim pass, at a test per partition and no object for the
        ones it does track (:meth:`claims_of` builds one for each)."""
        return sorted(
            (
                Claim(p.topic, p.partition, holder[0], holder[1], p.beat, p.hb)
                for p in self._groups.get(group, ())
                if p.holder == holder and (p.topic, p.partition) not in skip
            ),
            key=lambda c: (c.topic, c.partition),
        )

    def held_by(self, group: str, holder: tuple[str, str]) -> set[tuple[str, int]]:
        """(topic, partition) of every partition of ``group`` that ``holder`` (client_id,
        instance_id) holds: what a member checks its own view against after each replay
        step, without a look-up per partition."""
        return {(p.topic, p.partition) for p in self._groups.get(group, ()) if p.holder == holder}

    def paused_until(self, group: str) -> int | None:
        """End (log ms, exclusive) of the group's pause if it is paused at ``now``, else None."""
        p = self._paused.get(group)
        return p[0] if p is not None and self._now < p[0] else None

    def pause_end(self, group: str) -> int | None:
        """End (log ms, exclusive) of the group's latest pause, over or not; None if it
        never paused. For a reader handed a whole chunk of records, whose ``now`` may have
        passed the end of a pause the chunk began."""
        p = self._paused.get(group)
        return None if p is None else p[0]

    def pause_admin(self, group: str) -> tuple[str, str] | None:
        """The admin whose ReleaseGroup pauses ``group`` at ``now``, else None."""
        p = self._paused.get(group)
        return p[1] if p is not None and self._now < p[0] else None

    def members(self, group: str, now_ms: int | None = None) -> list[membership.Member]:
        """The live members of ``group`` at log time ``now_ms`` (default: the world's
        ``now``), sorted by client_id. Only the group's membership partition has any."""
        at = self._now if now_ms is None else now_ms
        entries = self._members.get(group)
        if not entries:
            return []
        return [
            membership.export(group, client, m)
            for client, m in sorted(entries.items())
            if not m.stale(at)
        ]

    @property
    def ownership_epoch(self) -> int:
        """A counter that moves whenever a holder changes (claim, takeover, release, void)
        or a membership changes in a way the target depends on (join, leave, expiry, new
        subscription, weight or cap, a member starting to count). Renewals leave it alone.
        Not part of the state's meaning: a restored snapshot starts it anew."""
        return self._epoch

    def member_groups(self) -> list[str]:
        """Groups with membership state in this world, sorted."""
        return sorted(self._members)

    def is_fenced(self, client_id: str, instance_id: str) -> bool:
        return fence_key(client_id, instance_id) in self._fenced

    def fenced(self) -> list[tuple[str, str]]:
        return sorted(self._fenced.values())

    def _iter_parts(self) -> Iterator[PartitionEntry]:
        return iter(self._parts.values())


def _export(p: PartitionEntry, now: int) -> PartitionState:
    positioned = p.last != NO_POSITION
    return PartitionState(
        p.group,
        p.topic,
        p.partition,
        p.holder,
        p.beat,
        p.last if positioned else -1,
        p.claimed,
        p.hb or None,
        positioned,
        p.positions,
        p.floor,
        p.fenced_until if p.fenced_until > now else None,
        p.tenure if p.tenure >= 0 else None,
        p.last_holder,
        None if p.last_holder is None else p.beat if p.voided_at is None else p.voided_at,
        p.voided_at is not None,
    )
