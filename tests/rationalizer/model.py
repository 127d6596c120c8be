"""A deliberately plain re-statement of the transition rules, used as a test oracle."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Effect,
    Heartbeat,
    HeartbeatingTask,
    MemberHeartbeat,
    NamingTenure,
    Reason,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    verify,
)


@attrs.frozen
class Future:
    """A well-formed record of a protocol version to come (its envelope names ``group``)."""

    group: str
    version: int


class Model:
    """Per partition: holder, beat, last, claimed, ``hb``, the holder's own heartbeat
    interval (None without a holder; there is no reader HB anywhere), ``pos``: whether
    an accepted record ever set a position (every accepted record but a claim does), and
    ``vec``: a task's position vector (version 3), set by the task records, cleared by every
    other record that sets a position; its scalar is ``sum(last_offset + 1) - 1``.
    Version 4: ``floor``, the position a tenure started from (claim or restart takeover),
    below which its release gives nothing back; a restart takeover needs a position at
    least the partition's; a version 4 reservation starts at the resume point.
    Version 5: ``lease_end``, when the lease of a holder removed by a restart takeover or a
    ReleaseGroup is over (its last beat + 2·its hb, inclusive); a version 5 claim is
    refused until after it.
    Version 6: ``tenure``, the offset of the version 6 claim or restart takeover that began
    the holder's tenure (None: a tenure begun by an older claim has no name, and a takeover
    of it names none); a version 6 claim is judged as a version 5 one; a version 6 release
    is the holder's only if it names that tenure (property f); in a named tenure, the
    holder's heartbeat below the partition's ``last`` renews but sets no position
    (property g); a record of a version to come (:class:`Future`) halts its group: it and
    every later record of the group are GROUP_HALTED (``halted``: group -> (offset,
    version) of the first); ``ended``, while unheld, ``(holder, end time, voided)`` of the
    last named tenure that a release or a ReleaseGroup ended (audit only), cleared by a
    claim.
    Version 7: a MemberHeartbeat's entries are judged one by one, each as its sender's
    Heartbeat of that partition (a renewal, or a restart takeover from a newer instance of the
    holder's client), but only in the tenure it names (property h); ``entries`` holds the
    last one's per-entry outcomes, and :meth:`apply` answers the sum (accepted RENEWED if
    all were, else the first rejection).
    Version 8: a HeartbeatingTask that names its tenure is judged as a version 3 one, but
    only in that tenure (property i).
    Version 9: a NamingTenure from the holder (that very instance) of a tenure without a
    name names it by its offset and changes nothing else (property j); from anyone else, or
    in a named tenure, NOT_HOLDER."""

    def __init__(self, admin_keys: Mapping[str, bytes] | None = None) -> None:
        self.keys = dict(admin_keys or {})
        self.now: int | None = None
        self.parts: dict[tuple[str, str, int], dict] = {}
        self.fenced: set[tuple[str, str]] = set()
        self.paused: dict[str, tuple[int, tuple[str, str]]] = {}
        self.halted: dict[str, tuple[int, int]] = {}
        self.entries: tuple[tuple[bool, Reason | None, Effect | None], ...] = ()

    def tick(self, ts: int) -> int:
        self.now = ts if self.now is None else max(self.now, ts)
        return self.now

    def _authentic(self, msg) -> bool:
        key = self.keys.get(msg.group_id)
        return key is None or verify(msg, key)

    def resume_offset(self, key: tuple[str, str, int]) -> int | None:
        st = self.parts.get(key)
        return max(st["last"], st["claimed"]) + 1 if st and st["pos"] else None

    def resume_positions(self, key: tuple[str, str, int]) -> dict[str, int] | None:
        st = self.parts.get(key)
        if not st or st.get("vec") is None:
            return None
        return {topic: offset + 1 for topic, offset in st["vec"]}

    def lease_end(self, key: tuple[str, str, int]) -> int | None:
        st = self.parts.get(key)
        return st.get("lease_end") if st else None

    @staticmethod
    def _lease_taken(st: dict) -> None:
        end = st["beat"] + 2 * st["hb"]
        st["lease_end"] = max(end, st.get("lease_end", end))

    def _entry(
        self, t: int, msg: MemberHeartbeat, topic: str, p: int, tenure: int, last: int, offset: int
    ) -> tuple[bool, Reason | None, Effect | None]:
        """One entry of a MemberHeartbeat: rules 0', 1, 3, then h and 5."""
        if msg.group_id in self.halted:
            return False, Reason.GROUP_HALTED, None
        if (msg.client_id, msg.instance_id) in self.fenced:
            return False, Reason.FENCED, None
        pause = self.paused.get(msg.group_id)
        if pause is not None and t < pause[0]:
            return False, Reason.GROUP_PAUSED, None
        st = self.parts.get((msg.group_id, topic, p))
        me = (msg.client_id, msg.instance_id)
        if st is None or st.get("tenure") != tenure:  # (property h: in the tenure it names)
            return False, Reason.NOT_HOLDER, None
        beat = Heartbeat(
            client_id=me[0],
            instance_id=me[1],
            group_id=msg.group_id,
            topic=topic,
            partition=p,
            last_offset=last,
            heartbeat_interval_ms=msg.heartbeat_interval_ms,
        )
        return self.apply(t, beat, offset)

    def apply(
        self, ts: int, msg: object, offset: int = 0
    ) -> tuple[bool, Reason | None, Effect | None]:
        """Judge ``msg`` at log time ``ts``, the record at ``offset``."""
        t = self.tick(ts)
        if msg is None:
            return False, Reason.INVALID_RECORD, None
        if isinstance(msg, Future):
            self.halted.setdefault(msg.group, (offset, msg.version))
            return False, Reason.GROUP_HALTED, None
        if isinstance(msg, MemberHeartbeat):
            self.entries = tuple(self._entry(t, msg, *e, offset) for e in msg.entries)
            for ok, reason, _ in self.entries:
                if not ok:
                    return False, reason, None
            return True, None, Effect.RENEWED
        if msg.group_id in self.halted:
            return False, Reason.GROUP_HALTED, None
        me = (msg.client_id, msg.instance_id)
        if me in self.fenced:
            return False, Reason.FENCED, None
        g = msg.group_id
        if isinstance(msg, ReleaseGroup):
            if not self._authentic(msg):
                return False, Reason.UNAUTHENTICATED, None
            if g in self.keys and msg.msg_expire_time <= t:
                return False, Reason.UNAUTHENTICATED, None
            for (pg, _, _), st in self.parts.items():
                if pg == g:
                    if st["holder"] is not None:
                        self._lease_taken(st)
                        if st.get("tenure") is not None:
                            st["ended"] = (st["holder"], t, True)
                    st.update(holder=None, hb=None, floor=None, tenure=None)
            if msg.msg_expire_time > t:
                self.paused[g] = (msg.msg_expire_time, me)
            else:
                self.paused.pop(g, None)
            return True, None, Effect.GROUP_PAUSED
        key = (g, msg.topic, msg.partition)
        st = self.parts.get(key)
        pause = self.paused.get(g)
        if pause is not None and t < pause[0]:
            if isinstance(msg, Heartbeat) and me == pause[1]:
                if not self._authentic(msg):
                    return False, Reason.UNAUTHENTICATED, None
                if st is None:
                    st = self.parts[key] = {
                        "holder": None,
                        "hb": None,
                        "beat": t,
                        "last": -1,
                        "claimed": -1,
                    }
                st.update(last=msg.last_offset, claimed=msg.last_offset, pos=True, vec=None)
                return True, None, Effect.POSITION_SET
            return False, Reason.GROUP_PAUSED, None
        holder = st["holder"] if st else None
        age = t - st["beat"] if st else None
        hb = st["hb"] if st else None  # the holder's lease, judged before any update
        position = max(st["last"], st["claimed"]) if st and st.get("pos") else None
        if isinstance(msg, NamingTenure):
            if holder != me or st.get("tenure") is not None:
                return False, Reason.NOT_HOLDER, None
            st["tenure"] = offset
            return True, None, Effect.NAMED
        if isinstance(msg, ClaimingPartition):
            if msg.version >= 5 and st is not None and t <= st.get("lease_end", t - 1):
                return False, Reason.STILL_OWNED, None
            new = {
                "holder": me,
                "beat": t,
                "hb": msg.heartbeat_interval_ms,
                "floor": position,
                "tenure": offset if msg.version == 6 else None,
                "ended": None,
            }
            if st is None:
                self.parts[key] = {**new, "last": -1, "claimed": -1, "pos": False}
                return True, None, Effect.CLAIMED
            if holder is None:
                st.update(new)
                return True, None, Effect.CLAIMED
            if age > 2 * hb:
                if holder[0] == me[0] and holder != me:
                    self.fenced.add(holder)
                st.update(new)
                return True, None, Effect.TOOK_OVER_STALE
            return False, Reason.STILL_OWNED, None
        vec = None
        last = None
        if isinstance(msg, HeartbeatingTask | ReleasingTask):
            vec = msg.positions
            last = sum(offset + 1 for _, offset in vec) - 1
        elif isinstance(msg, Heartbeat | ReleasingPartition):
            last = msg.last_offset
        named = isinstance(msg, HeartbeatingTask) and msg.tenure is not None
        if named and (st is None or st.get("tenure") != msg.tenure):
            return False, Reason.NOT_HOLDER, None  # property i: in the tenure it names
        if isinstance(msg, Heartbeat | HeartbeatingTask):
            if holder == me:
                effect = Effect.RENEWED if age <= 2 * hb else Effect.RENEWED_LATE
                floor = st.get("floor")
                if (
                    st.get("tenure") is not None
                    and st["pos"]
                    and last < st["last"]
                    and (floor is None or last >= floor)
                ):
                    # a late heartbeat of a named tenure: renews, keeps the position (g)
                    st.update(beat=t, hb=msg.heartbeat_interval_ms)
                    return True, None, effect
                st.update(beat=t, last=last, hb=msg.heartbeat_interval_ms, pos=True, vec=vec)
                return True, None, effect
            current = position is None or last >= position
            if holder is not None and holder[0] == me[0] and age < hb and current:
                self.fenced.add(holder)
                self._lease_taken(st)
                st.update(
                    holder=me, beat=t, last=last, hb=msg.heartbeat_interval_ms, pos=True, vec=vec
                )
                st["floor"] = position
                if st.get("tenure") is not None:  # only a named tenure's successor is named
                    st["tenure"] = offset
                return True, None, Effect.RESTART_TAKEOVER
            return False, Reason.NOT_HOLDER, None
        if holder != me:
            return False, Reason.NOT_HOLDER, None
        if isinstance(msg, ReleasingPartition | ReleasingTask):
            if getattr(msg, "tenure", None) is not None and msg.tenure != st.get("tenure"):
                return False, Reason.NOT_HOLDER, None  # another tenure's release
            floor = st.get("floor")
            claimed = last if floor is None else max(last, floor)
            if st.get("tenure") is not None:
                st["ended"] = (me, t, False)
            st.update(holder=None, hb=None, beat=t, last=last, claimed=claimed, pos=True, vec=vec)
            st["floor"] = st["tenure"] = None
            return True, None, Effect.RELEASED
        assert isinstance(msg, ClaimingMessages)
        starts_elsewhere = position is not None and msg.first_offset != position + 1
        if msg.first_offset is not None and starts_elsewhere:
            return False, Reason.OFFSET_REGRESSION, None
        if msg.proposed_last_offset >= st["claimed"]:
            st.update(claimed=msg.proposed_last_offset, beat=t, pos=True, vec=None)
            return True, None, Effect.MESSAGES_CLAIMED
        return False, Reason.OFFSET_REGRESSION, None
