"""The audit's fold of version 7 MemberHeartbeats (PROTOCOL.md, "Version 7"): each entry is
folded and counted as its partition's Heartbeat with the entry's verdict. A mixin of
:class:`~.replay.PartitionAudit` (and so of the columnar fold), over its tracks and tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rationalizer import (
    MESSAGE_NAMES,
    Effect,
    Heartbeat,
    MemberHeartbeat,
    Reason,
    Verdict,
    encode,
    record_key,
)
from rationalizer._rules import RENEWED_KEPT, RENEWED_LATE_KEPT

if TYPE_CHECKING:
    from rationalizer import WorldState

    from .tracks import Track

__all__ = ["MemberBeatsFold"]

_RENEWED = Effect.RENEWED
#: what a rejected entry is listed as (a Heartbeat's kinds: PROTOCOL.md's rule 5)
_NOT_HOLDER = "heartbeat_without_claim"
_VIOLATION_KIND = {
    Reason.FENCED: "write_from_fenced_instance",
    Reason.GROUP_PAUSED: "write_during_pause",
}


class MemberBeatsFold:
    """The MemberHeartbeat part of a partition's audit (the attributes are the fold's)."""

    coord_partition: int
    _since: int
    _tracks: dict[bytes | None, Track]
    _fenced_at: dict[tuple[str, str], int]
    _violations: list[tuple[Any, ...]]
    _world: WorldState

    def _sync(self, t: Track) -> None: ...  # (the fold's)

    def _count(self, group: str | None, outcome: str, reason: str) -> None: ...  # (the fold's)

    def _rare(
        self, off: int, now: int, key: bytes | None, value: bytes | None, v: Verdict
    ) -> None: ...  # (the fold's)

    def _member_beats(
        self, off: int, now: int, key: bytes | None, value: bytes | None, v: Verdict
    ) -> None:
        """A version 7 MemberHeartbeat: each entry is folded and counted as its partition's
        Heartbeat with the entry's verdict (PROTOCOL.md, "Version 7"): an accepted one renews
        the partition's open interval (its position, unless property g kept it), or is a
        restart takeover (property h), folded as that Heartbeat's; a rejected one is counted
        and, as a Heartbeat's, listed (message type ``member_heartbeat``)."""
        read = self._world._read_beat(key, value)  # (what the replay decoded, not again)
        assert read is not None  # (it has entries: the world decoded it)
        client, instance, group, hb, rows = read
        counted = now >= self._since
        sender = (client, instance)
        for (_, topic, partition, _, last), ev in zip(rows, v.entries, strict=True):
            pkey = record_key(group, topic, partition)
            if not ev.accepted:
                self._reject_entry(off, now, group, sender, topic, partition, ev)
                continue
            if ev.effect is Effect.RESTART_TAKEOVER:  # (property h: a takeover's entry)
                beat = Heartbeat(
                    client_id=sender[0],
                    instance_id=sender[1],
                    group_id=group,
                    topic=topic,
                    partition=partition,
                    last_offset=last,
                    heartbeat_interval_ms=hb,
                )
                self._rare(off, now, *encode(beat), ev)  # folded as that Heartbeat's takeover
                continue
            t = self._tracks[pkey]  # (else a holder's renewal: its claim's)
            self._sync(t)
            c = t.open
            assert c is not None
            gap = now - c.last_ms
            if c.max_gap is None or gap > c.max_gap:
                c.max_gap = gap
                c.max_gap_end = now
            c.last_ms = now
            c.msgs += 1
            if ev is not RENEWED_KEPT and ev is not RENEWED_LATE_KEPT:  # (property g: kept)
                t.last_ref = last  # (the position itself: _number reads it as it is)
            if counted:
                if ev.effect is _RENEWED:
                    t.n_renewed += 1
                else:
                    t.n_late += 1

    def _reject_entry(
        self,
        off: int,
        now: int,
        group: str,
        sender: tuple[str, str],
        topic: str,
        partition: int,
        v: Verdict,
    ) -> None:
        """A rejected entry of a MemberHeartbeat: counted and listed as :meth:`_reject`
        does a Heartbeat's rejection."""
        if now < self._since:
            return
        reason = v.reason
        assert reason is not None
        self._count(group, "rejected", reason.value)
        if reason is Reason.GROUP_HALTED:
            return  # (only the halting record itself is a finding)
        if reason is Reason.NOT_HOLDER:
            kind = _NOT_HOLDER
        else:
            kind = _VIOLATION_KIND.get(reason, reason.value)
        holder: tuple[str | None, str | None] = (None, None)
        lost_at = None
        t = self._tracks.get(record_key(group, topic, partition))
        if t is not None:
            if t.open is not None:
                holder = (t.open.client, t.open.instance)
            lost_at = t.lost.get(sender)
        if reason is Reason.FENCED:
            lost_at = self._fenced_at.get(sender, lost_at)
        self._violations.append(
            (self.coord_partition, off, now, group, topic, partition, sender[0], sender[1],
             MESSAGE_NAMES[MemberHeartbeat], reason.value, kind, holder[0], holder[1], lost_at)
        )  # fmt: skip
