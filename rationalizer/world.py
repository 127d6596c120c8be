"""The deterministic replay of one ``__marshal`` partition (docs/architecture.md, "Transitions").

``WorldState`` folds records in log order into: per (group, topic, partition) the holder,
``last_beat``, ``last_offset`` and ``claimed_through``; per group the pause window; the
fenced instances; and a verdict for every record. It never reads a clock: ``now`` is the
clamped log-append timestamp of the record being applied.

The rules themselves are in ``rules.py``, one function per rule of PROTOCOL.md, the
records the state is made of in ``state.py`` and the snapshot format in ``snapshot.py``
(which sees the world only through :meth:`WorldState.image` / :meth:`WorldState.from_image`);
this module holds the state, the queries and the replay loop, which finds the record's
identity and state and dispatches to the rules in their order. The loop is written for speed (it is what
every consumer runs all the time): decoded identities are cached by the identity bytes of
the value, verdicts are shared instances, and the loop keeps its state in locals.
``decode_fields`` is the single source of truth for what is a valid record; the fast path
only ever reuses what it accepted before.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from hmac import compare_digest
from struct import Struct

import attrs

from . import membership
from .auth import tag_for_value, validate_admin_keys
from .codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_LEAVING_GROUP,
    T_RELEASE_GROUP,
    T_RELEASING_PARTITION,
    T_RELEASING_TASK,
    VERSION_1,
    VERSION_3,
    VERSION_4,
    VERSION_5,
    VERSION_6,
    DecodeError,
    UnknownVersion,
    decode_fields,
    decode_member_fields,
    decode_reservation_fields,
    decode_task_fields,
    decode_v6_fields,
    envelope,
    record_key,
    unsigned_value,
)
from .messages import (
    FUTURE_VERSIONS,
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_OFFSET,
    MAX_PARTITION,
    Positions,
    task_last_offset,
    valid_topic,
)

# The rules of PROTOCOL.md, one function each; see the table in rules.py.
from .rules import claim as rule_claim
from .rules import claim_messages as rule_claim_messages
from .rules import fenced as rule_fenced
from .rules import heartbeat as rule_heartbeat
from .rules import paused as rule_paused
from .rules import release as rule_release
from .rules import release_group as rule_release_group
from .snapshot import dump, load
from .state import (
    FRESH,
    NO_POSITION,
    NO_TIME,
    STALE,
    UNKNOWN,
    PartitionEntry,
    WorldImage,
    fence_key,
)
from .state import freshness as classify_freshness
from .varint import read_uvarint
from .vectors import NATIVE as NATIVE_VECTORS
from .vectors import Layout
from .vectors import learn as learn_layout
from .verdict import REJECTED, Effect, Reason, Verdict

MIN_INT64 = -(2**63)

__all__ = [
    "FRESH",
    "STALE",
    "UNKNOWN",
    "Claim",
    "PartitionState",
    "Record",
    "UnknownVersion",
    "WorldState",
]

#: The version 4 properties a simulator experiment may switch off (``WorldState(_without=)``):
#: a restart takeover needs a current position (a), a release gives back only its own
#: tenure's reservations (b), a version 4 reservation starts at the resume point (c); and
#: the version 5 one: a version 5 claim waits out a lease the log took away early (e); and
#: the version 6 ones: a version 6 release ends only the tenure it names (f), a holder's
#: late heartbeat does not move its named tenure's position back (g).
RULE_SWITCHES = frozenset(
    {
        "takeover_position",
        "release_floor",
        "reservation_start",
        "fenced_lease",
        "release_tenure",
        "late_heartbeat",
    }
)

#: ``apply_many``'s own code for a version 5 ClaimingPartition (a type byte is below 256)
_T_CLAIM_V5 = 0x100 | T_CLAIMING_PARTITION
#: ... and for the version 6 ClaimingPartition (its offset names the tenure it begins) and
#: ReleasingPartition (it names the tenure it ends)
_T_CLAIM_V6 = 0x600 | T_CLAIMING_PARTITION
_T_RELEASE_V6 = 0x600 | T_RELEASING_PARTITION
_T_RELEASE_TASK_V6 = 0x600 | T_RELEASING_TASK

MIN_TIMESTAMP = -(2**63)

DEFAULT_VERDICT_WINDOW = 65_536
_CACHE_LIMIT = 1 << 17

_I64 = Struct(">q")
_U32 = Struct(">I")
_HB_HEAD = Struct(">qIB")  # Heartbeat: last_offset, heartbeat_interval_ms, tag length
_NUMBERED_TYPES = frozenset({T_RELEASING_PARTITION, T_CLAIMING_MESSAGES})
Record = tuple[int, int, "bytes | None", "bytes | None"]

_INVALID = REJECTED[Reason.INVALID_RECORD]
_GROUP_HALTED = Reason.GROUP_HALTED
_HALTED = REJECTED[Reason.GROUP_HALTED]
_RESTART_TAKEOVER = Effect.RESTART_TAKEOVER
#: What the key cache answers for an unknown key: an entry no value can match.
_NO_ENTRY: list = [None] * 10 + [-1, None, 0, None]


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


class WorldState:
    """Replay state of one coordination partition; see PROTOCOL.md for every rule.

    There is no heartbeat interval here: every ClaimingPartition and Heartbeat carries its
    sender's, and a holder's freshness is judged with the holder's own, so every replayer
    reaches the same verdicts whatever its own configuration. ``admin_keys`` (group id ->
    key) switches on authenticated admin for those groups; every replayer of a group must be
    given the same keys (they are configuration, not state: snapshots do not contain them).
    """

    def __init__(
        self,
        *,
        verdict_window: int = DEFAULT_VERDICT_WINDOW,
        admin_keys: Mapping[str, bytes] | None = None,
        _without: frozenset[str] = frozenset(),
        _python_vectors: bool = False,
    ) -> None:
        if type(verdict_window) is not int or verdict_window <= 0:
            raise ValueError(f"verdict_window must be a positive int, got {verdict_window!r}")
        if not RULE_SWITCHES.issuperset(_without):
            raise ValueError(f"unknown rule switches {sorted(set(_without) - RULE_SWITCHES)}")
        # private: the simulator's experiments switch version 4 properties off to show what
        # each one prevents; every replayer of a log must use the same set
        self._without = frozenset(_without)
        self._current = "takeover_position" not in _without
        self._floored = "release_floor" not in _without
        self._exact = "reservation_start" not in _without
        self._leases = "fenced_lease" not in _without
        self._tenures = "release_tenure" not in _without
        self._monotone = "late_heartbeat" not in _without
        # private: read task vectors by the pure-Python layouts even where the C reader is
        # built (tests check both against the strict decoder); never changes a verdict
        self._python_vectors = _python_vectors or not NATIVE_VECTORS
        # group -> (offset, version) of the well-formed record of a protocol version to come
        # that halted it (version 6): nothing of the group is judged any more
        self._halted_groups: dict[str, tuple[int, int]] = {}
        self._keys = validate_admin_keys(admin_keys)
        self._window = verdict_window
        self._applied = -1
        self._now = NO_TIME
        self._parts: dict[bytes, PartitionEntry] = {}
        self._groups: dict[str, list[PartitionEntry]] = {}
        self._fenced: dict[str, tuple[str, str]] = {}
        # fence key -> the RESTART_TAKEOVER verdict that fenced it (a restarted client takes
        # over each of its partitions with the same verdict; shared, like the others)
        self._takeovers: dict[str, Verdict] = {}
        # group -> (expires_at, admin). Entries whose window has passed may linger until the
        # group's next record removes them; they are invisible to queries and snapshots.
        self._paused: dict[str, tuple[int, tuple[str, str]]] = {}
        self._rejections: dict[Reason, int] = dict.fromkeys(Reason, 0)
        # group -> client_id -> its membership (version 2); stale entries linger until the
        # group's next membership record drops them and are invisible to ``members``
        self._members: dict[str, dict[str, membership.MemberState]] = {}
        #: group -> a log time before which none of its members can be stale (not in a
        #: snapshot: a restored world recomputes it at the group's next announcement)
        self._member_expiry: dict[str, int] = {}
        # bumped whenever a holder or a member's share-relevant state changes (not by
        # renewals): lets a member recompute its target only when it may have changed
        self._epoch = 0
        self._woff = array("q")
        self._wv: list[Verdict] = []
        # identity part of a value (ids, topic, partition: the same bytes for the four
        # partition types) -> [key, (client, instance), fence key, group,
        # PartitionEntry|None, topic, partition, admin_ok, len(identity), identity, len(last
        # heartbeat), its bytes after the int64, its heartbeat interval, the layout of the
        # vector of its last task record (vectors.learn) or None]; admin_ok: the record may
        # act as the pausing admin (the group has no key, or the record is validly tagged;
        # tagged records are never cached). _kcache: record key -> the entry last used with
        # it.
        self._pcache: dict[bytes, list] = {}
        self._kcache: dict[bytes, list] = {}
        # for _miss: the three ids (with their length bytes) -> ((client, instance), fence
        # key, group, admin_ok); topic (with its length byte) -> topic
        self._scache: dict[bytes, tuple] = {}
        self._tcache: dict[bytes, str] = {}
        # task name (the topic field) -> the layout by sources of its last strictly decoded
        # vector: the first task record of a key tries it (a task's partitions have the same
        # sources)
        self._layouts: dict[str, Layout] = {}

    # ------------------------------------------------------------------ replay

    def apply(
        self, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None
    ) -> Verdict | None:
        """Apply the record at ``offset``; return its verdict.

        An ``offset <= applied_through`` is a re-delivery: it changes nothing and returns the
        verdict recorded for it (``None`` if it was never applied or left the window).
        Never raises because of ``key``/``value``; raises ValueError/TypeError for an
        offset or timestamp that is not an int64.
        """
        return self.apply_many([(offset, timestamp_ms, key, value)])[0]

    def apply_many(self, records: Iterable[Record]) -> list[Verdict | None]:
        """Apply ``(offset, timestamp_ms, key, value)`` records in order; same as ``apply`` each.

        A well-formed record of a protocol version to come (``FUTURE_VERSIONS``, its envelope
        checked) halts the group it names: it and every later record of that group are
        GROUP_HALTED (this code does not know its rules, and judging the group's records
        without it could decide differently from the replayers that do); the other groups of
        this coordination partition go on. Version-shaped bytes without a valid envelope are
        INVALID_RECORD, as any record that does not decode."""
        parts = self._parts
        halted = self._halted_groups
        kcache = self._kcache
        kget = kcache.get
        pcache = self._pcache
        fenced = self._fenced
        takeovers = self._takeovers
        paused = self._paused
        unpack_i64 = _I64.unpack_from
        unpack_u32 = _U32.unpack_from
        unpack_hb = _HB_HEAD.unpack_from
        max_hb = MAX_HEARTBEAT_INTERVAL_MS
        new_part = self._new_part
        rejections = self._rejections
        layouts = self._layouts
        current, floored, exact = self._current, self._floored, self._exact
        leases = self._leases
        tenures = self._tenures
        monotone = self._monotone
        nxt = self._applied + 1  # the next offset: applied_through + 1, always
        now = self._now
        out: list[Verdict | None] = []
        push = out.append
        # Verdicts out[base:] of offsets seg..nxt-1 are not in the window yet: the window is
        # extended per contiguous segment, not per record.
        base = 0
        seg = nxt
        try:
            for offset, ts, key, value in records:
                if offset != nxt or offset.__class__ is not int:
                    # re-delivery, a gap, or not an int: close the pending segment
                    self._window_add(out, base, seg, nxt)
                    base = len(out)
                    if offset < nxt:
                        push(self.verdict(offset))
                        base += 1
                        # the next segment starts at the next new offset: its verdicts
                        # follow this one in ``out`` but not in the window
                        seg = nxt
                        continue
                    if offset.__class__ is not int or offset > MAX_OFFSET:
                        raise ValueError(f"offset must be an int64, got {offset!r}")
                    seg = offset
                # Bad timestamps raise here, before anything changed, also the ones that do not
                # move time forward (a float, a bool or a huge negative int never applies).
                if ts.__class__ is not int:
                    raise ValueError(f"timestamp_ms must be an int64, got {ts!r}")
                if ts > now:
                    if ts > MAX_OFFSET:
                        raise ValueError(f"timestamp_ms must be an int64, got {ts!r}")
                    now = ts
                elif ts < MIN_INT64:
                    raise ValueError(f"timestamp_ms must be an int64, got {ts!r}")
                nxt = offset + 1
                try:
                    ent = kget(key, _NO_ENTRY)
                except TypeError:  # unhashable key: the slow path will say why it is invalid
                    ent = _NO_ENTRY
                if (
                    value.__class__ is bytes
                    and len(value) == ent[10]
                    and value.endswith(ent[11])
                    and value[0] == VERSION_1 == value[1]
                    and (num := unpack_i64(value, 2)[0]) >= -1
                ):
                    # Heartbeat lane: the same sender, partition and heartbeat interval as
                    # this key's last heartbeat (everything after the int64 is identical, and
                    # was validated then); only the position is new.
                    part = ent[4]
                    if (
                        part is not None
                        and part.holder is ent[1]
                        and not paused
                        and not (fenced and ent[2] in fenced)
                        and monotone  # (the experiment without property g: general path)
                        and not halted
                    ):
                        # Rules 1 and 3 cannot fire (these gates only choose the lane: a
                        # fenced sender or any pause window takes the general path below,
                        # where the rules decide), so straight to rule 5, which renews (the
                        # sender holds the partition: never rejected, nothing to count).
                        # This call (and freshness() inside it) is what the lane pays for
                        # having rule 5 in one place: about 14% of apply_many's instructions
                        # on bench/rationalizer.py's log (~8% the call, ~3% freshness(), the
                        # rest the general path's calls); --baseline-ref REF measures it.
                        push(rule_heartbeat(part, ent[1], now, num, ent[12], fenced, takeovers))
                        continue
                    typ = T_HEARTBEAT
                    hb = ent[12]
                elif (
                    (
                        (lay := ent[13]) is not None
                        or (layouts and (lay := layouts.get(ent[5])) is not None)
                    )
                    and value.__class__ is bytes
                    and len(value) > 6
                    and value[0] == VERSION_3
                ):
                    # Task lane (PROTOCOL.md, "Tasks (version 3)"): a HeartbeatingTask or
                    # ReleasingTask on a key whose last task record was decoded (by anyone),
                    # or the first of a key of a task decoded before: the header is checked
                    # here as decode would, the vector read by that record's layout (the same
                    # sources; see vectors.py), the identity part after it found as for the
                    # version 1 types; the rules judge it as always.
                    typ = value[1]
                    got = None
                    if typ == T_HEARTBEATING_TASK:
                        hl = 6
                        hb = unpack_u32(value, 2)[0]
                        if not 0 < hb <= max_hb:
                            typ = 0
                    else:
                        hl = 2
                        hb = 0
                        if typ != T_RELEASING_TASK:
                            typ = 0
                    if typ and len(value) > hl + lay[0]:  # (typ 0: not a task type)
                        got = lay[1](lay, value, hl)
                    if got is None:
                        ent = None
                    else:
                        vector, num, end = got
                        if len(value) - ent[8] != end or not value.endswith(ent[9]):
                            # another sender on this key: a claim's winner, a restart
                            ent = self._sender(key, value, end)
                    if ent is not None:
                        ent[13] = lay
                        if (
                            typ == T_HEARTBEATING_TASK
                            and (part := ent[4]) is not None
                            and part.holder is ent[1]
                            and not paused
                            and not (fenced and ent[2] in fenced)
                            and not halted
                        ):
                            # as in the heartbeat lane: rules 1 and 3 cannot fire, rule 5
                            # renews
                            push(
                                rule_heartbeat(
                                    part, ent[1], now, num, hb, fenced, takeovers, vector,
                                    current, -1, monotone,
                                )
                            )
                            continue
                elif (
                    value.__class__ is bytes
                    and key.__class__ is bytes
                    and len(value) >= 15
                    and value[0] == VERSION_1
                ):
                    # Fast path: check the fixed-width header exactly as decode would, then
                    # find the identity part (ids, topic, partition) accepted before for this
                    # key: by the key (checked with endswith, no copy), else by its bytes,
                    # else parse it (_miss, strict; the generic decoder if in doubt).
                    if ent is _NO_ENTRY:
                        ent = None
                    typ = value[1]
                    vector = None  # (version 1: no first offset of a reservation)
                    hl = 0
                    if typ == T_HEARTBEAT:
                        num, hb, tagged = unpack_hb(value, 2)
                        if not tagged and num >= -1 and 0 < hb <= max_hb:
                            hl = 15
                    elif typ == T_CLAIMING_PARTITION:
                        num = 0
                        hb = unpack_u32(value, 2)[0]
                        if 0 < hb <= max_hb:
                            hl = 6
                    elif typ in _NUMBERED_TYPES:
                        hb = 0
                        num = unpack_i64(value, 2)[0]
                        if num >= -1:
                            hl = 10
                    if not hl:
                        ent = None
                    elif ent is None or ent[8] != len(value) - hl or not value.endswith(ent[9]):
                        lay = None if ent is None else ent[13]
                        ent = pcache.get(value[hl:])
                        if ent is None:
                            ent = self._miss(key, value, hl)
                        elif ent[0] == key:
                            kcache[key] = ent
                            if ent[13] is None:
                                ent[13] = lay  # (the key's vector layout, for the task lane)
                        else:
                            ent = None
                    if ent is not None and typ == T_HEARTBEAT:
                        # open the lane for this sender's next heartbeats
                        ent[10] = len(value)
                        ent[11] = value[10:]
                        ent[12] = hb
                else:
                    ent = None
                if ent is None:
                    ent, typ, num, hb, v, vector = self._slow(key, value, now, offset)
                    if v is not None:  # decided there (invalid record, ReleaseGroup)
                        push(v)
                        continue
                # The rules in PROTOCOL.md's order: 0 (invalid) and 2 (ReleaseGroup) were
                # decided in _slow; then the group halted (version 6), 1 (fenced), 3
                # (paused), and 4-7 by type.
                if halted and ent[3] in halted:
                    rejections[_GROUP_HALTED] += 1
                    push(_HALTED)
                    continue
                ident = ent[1]
                if fenced and (v := rule_fenced(fenced, ent[2])) is not None:
                    rejections[v.reason] += 1
                    push(v)
                    continue
                part = ent[4]
                if part is None:
                    part = ent[4] = parts.get(ent[0])
                if paused and ent[3] in paused:  # the group has a pause window
                    v = rule_paused(
                        paused,
                        ent[3],
                        now,
                        part,
                        partial(new_part, ent, None, now),
                        ident,
                        typ,
                        ent[7],
                        num,
                    )
                    if v is not None:
                        if not v.accepted:
                            rejections[v.reason] += 1
                        push(v)
                        continue
                # (ownership_epoch moves with every change of holder, not with renewals)
                if typ == T_HEARTBEAT:
                    v = rule_heartbeat(
                        part, ident, now, num, hb, fenced, takeovers, None, current, offset,
                        monotone,
                    )
                    if v.effect is _RESTART_TAKEOVER:
                        self._epoch += 1
                elif typ in (T_CLAIMING_PARTITION, _T_CLAIM_V5, _T_CLAIM_V6):
                    # (only _slow hands a version 5 or 6 claim here; it waits out a kept
                    # lease; a version 6 one's offset names the tenure it begins)
                    v = rule_claim(
                        part,
                        partial(new_part, ent, None, now),
                        ident,
                        now,
                        hb,
                        fenced,
                        leases and typ != T_CLAIMING_PARTITION,
                        offset if typ == _T_CLAIM_V6 else -1,
                    )
                    if v.accepted:
                        self._epoch += 1
                elif typ == T_RELEASING_PARTITION:
                    v = rule_release(part, ident, now, num, None, floored)
                    if v.accepted:
                        self._epoch += 1
                elif typ == _T_RELEASE_V6:
                    # (only _slow hands it here, with the tenure it names in ``vector``)
                    v = rule_release(
                        part, ident, now, num, None, floored, vector if tenures else None
                    )
                    if v.accepted:
                        self._epoch += 1
                elif typ == T_CLAIMING_MESSAGES:
                    # version 4 (only _slow hands it here) names its first offset in ``vector``
                    v = rule_claim_messages(part, ident, now, num, vector, exact)
                # version 3 tasks (only _slow hands them here, with their vector): rules 5
                # and 6 as for a Heartbeat and a ReleasingPartition, num their scalar
                elif typ == T_HEARTBEATING_TASK:
                    v = rule_heartbeat(
                        part, ident, now, num, hb, fenced, takeovers, vector, current, offset,
                        monotone,
                    )
                    if v.effect is _RESTART_TAKEOVER:
                        self._epoch += 1
                elif typ == T_RELEASING_TASK:
                    v = rule_release(part, ident, now, num, vector, floored)
                    if v.accepted:
                        self._epoch += 1
                elif typ == _T_RELEASE_TASK_V6:
                    # (only _slow hands it here, with its vector and the tenure it names)
                    vector, named = vector
                    v = rule_release(
                        part, ident, now, num, vector, floored, named if tenures else None
                    )
                    if v.accepted:
                        self._epoch += 1
                else:  # the fast path and _slow only hand the six partition types here
                    raise AssertionError(f"record type {typ}")
                if not v.accepted:
                    rejections[v.reason] += 1
                push(v)
        finally:
            self._window_add(out, base, seg, nxt)
            self._applied = nxt - 1
            self._now = now
        return out

    def _window_add(self, out: list, base: int, first: int, end: int) -> None:
        """Put the verdicts ``out[base:]`` of offsets ``first..end-1`` into the window.

        The window keeps what adding them one at a time would: whenever it reaches 2W+1
        verdicts it is cut to the last W. So its content depends only on how many records were
        applied, never on how they were chunked (snapshots are canonical)."""
        n = len(out) - base
        if n <= 0:
            return
        # n == end - first unless an exception (KeyboardInterrupt...) hit between a record's
        # offset bookkeeping and its verdict: that last record then has no verdict.
        wv = self._wv
        woff = self._woff
        if n == 1:  # apply(): one record per call
            wv.append(out[-1])
            woff.append(first)
        else:
            wv.extend(out[base:] if base else out)
            woff.extend(range(first, first + min(n, end - first)))
        total = len(wv)
        w = self._window
        if total > 2 * w:
            cut = total - (w + (total - (2 * w + 1)) % (w + 1))
            del wv[:cut]
            del woff[:cut]

    def _miss(self, key: bytes, value: bytes, hl: int) -> list | None:
        """Cache miss on a partition record whose header (``hl`` bytes) is valid: parse the
        identity part for the common shape (every length in one byte), strictly; a known
        sender (its three ids) comes from a cache. None when anything is unusual: the
        generic decoder then decides (it accepts exactly what this accepts, and more)."""
        try:
            n = value[hl]
            e1 = hl + 1 + n
            m = value[e1]
            e2 = e1 + 1 + m
            o = value[e2]
            e3 = e2 + 1 + o
            t = value[e3]
            e4 = e3 + 1 + t
        except IndexError:
            return None
        if not (0 < n < 0x80 and 0 < m < 0x80 and 0 < o < 0x80 and 0 < t < 0x80):
            return None
        size = len(value)
        if e4 + 1 == size:  # one-byte partition
            partition = value[e4]
            if partition >= 0x80:
                return None
        elif e4 + 1 < size:
            try:
                partition, end = read_uvarint(value, e4, MAX_PARTITION, "partition", DecodeError)
            except DecodeError:
                return None
            if end != size:
                return None
        else:
            return None
        scache = self._scache
        sender = scache.get(value[hl:e3])
        if sender is None:
            try:
                client = value[hl + 1 : e1].decode("utf-8")
                instance = value[e1 + 1 : e2].decode("utf-8")
                group = value[e2 + 1 : e3].decode("utf-8")
            except UnicodeDecodeError:
                return None
            ident = (client, instance)
            sender = (ident, fence_key(client, instance), group, group not in self._keys)
            scache[value[hl:e3]] = sender
        tcache = self._tcache
        topic = tcache.get(value[e3:e4])
        if topic is None:
            try:
                topic = value[e3 + 1 : e4].decode("utf-8")
            except UnicodeDecodeError:
                return None
            if not valid_topic(topic):
                return None
            tcache[value[e3:e4]] = topic
        ident, fkey, group, admin_ok = sender
        canonical = record_key(group, topic, partition)
        if canonical != key:
            return None
        ident_bytes = value[hl:]
        ent = [
            canonical,
            ident,
            fkey,
            group,
            self._parts.get(canonical),
            topic,
            partition,
            admin_ok,
            len(ident_bytes),
            ident_bytes,
            -1,
            None,
            0,
            None,
        ]
        self._cache(ident_bytes, canonical, ent)
        return ent

    def _sender(self, key: bytes, value: bytes, start: int) -> list | None:
        """The entry of the identity part ``value[start:]`` of a task record whose key's
        entry (from the key cache) is another sender's: a claim's winner, a restarted
        instance. By its bytes, else parsed strictly (``_miss``); None if it is not a valid
        identity part naming ``key`` (the strict decoder then decides)."""
        if key.__class__ is not bytes:
            return None
        ent = self._pcache.get(value[start:])
        if ent is None:
            return self._miss(key, value, start)
        if ent[0] != key:
            return None
        self._kcache[key] = ent
        return ent

    def _cache(self, ident_bytes: bytes, key: bytes, ent: list) -> None:
        pcache = self._pcache
        if len(pcache) >= _CACHE_LIMIT:
            pcache.clear()
            self._kcache.clear()
            self._scache.clear()
            self._tcache.clear()
            self._layouts.clear()
        pcache[ident_bytes] = ent
        kcache = self._kcache
        if ent[13] is None and (prev := kcache.get(key)) is not None:
            ent[13] = prev[13]  # the key's vector layout: the task lane tries it first
        kcache[key] = ent

    def _slow(
        self, key: object, value: object, now: int, offset: int
    ) -> tuple[list | None, int, int, int, Verdict | None, Positions | int | None]:
        """Cache miss: strict decode. Decides rule 0 here (a record that does not decode is
        INVALID_RECORD), a ReleaseGroup completely (``_release_group``: rules 1 and 2) and the
        membership records (``_membership``: rules 0, 1, 8 and 9). Version 3 task records
        (``_task``) and version 4 reservations (``_reservation``) are decoded here and judged
        like the partition types; the last item is a task's position vector or a
        reservation's first offset (None for the other types). A record of a version to come
        (at ``offset``) halts its group if its envelope is well-formed (``_future``)."""
        if isinstance(value, bytes | bytearray | memoryview) and value:
            version = value[0]
            if version == 2 and value.__class__ is bytes:
                return None, 0, 0, 0, self._membership(key, value, now), None
            if version == 3:
                return self._task(key, value)
            if version == VERSION_4:
                if value[1:2] == b"\x04":
                    return self._reservation(key, value)
                return None, 0, 0, 0, self._membership(key, value, now), None
            if version == VERSION_6:
                return self._v6(key, value)
            if version in FUTURE_VERSIONS:
                return None, 0, 0, 0, self._future(value, offset), None
        try:
            fields = decode_fields(key, value)
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return None, 0, 0, 0, _INVALID, None
        typ, client, instance, group, topic, partition, num, start, hb, tag = fields
        ident = (client, instance)
        fkey = fence_key(client, instance)
        admin_key = self._keys.get(group)
        if admin_key is None:
            admin_ok = True
        elif tag is None:
            admin_ok = False
        else:
            unsigned = unsigned_value(bytes(value))  # type: ignore[arg-type]
            admin_ok = compare_digest(tag_for_value(admin_key, unsigned), tag)
        if typ == T_RELEASE_GROUP:
            assert num is not None
            if group in self._halted_groups:
                self._rejections[_GROUP_HALTED] += 1
                return None, typ, 0, 0, _HALTED, None
            v = self._release_group(fkey, ident, group, num, now, admin_key is not None, admin_ok)
            return None, typ, 0, 0, v, None
        if value[0] == VERSION_5:  # type: ignore[index]
            typ = _T_CLAIM_V5  # (decode_fields has no other type under byte 5)
        canonical = record_key(group, topic, partition)
        ent = [
            canonical,
            ident,
            fkey,
            group,
            self._parts.get(canonical),
            topic,
            partition,
            admin_ok,
            -1,
            None,
            -1,
            None,
            0,
            None,
        ]
        if tag is None and value.__class__ is bytes and key.__class__ is bytes:
            ident_bytes = value[start:]  # type: ignore[index]
            ent[8:10] = (len(ident_bytes), ident_bytes)
            if typ == T_HEARTBEAT:
                ent[10:13] = (len(value), value[10:], hb)  # type: ignore[arg-type, index]
            self._cache(ident_bytes, canonical, ent)
        return ent, typ, -1 if num is None else num, hb or 0, None, None

    def _reservation(
        self, key: object, value: bytes | bytearray | memoryview
    ) -> tuple[list | None, int, int, int, Verdict | None, int | None]:
        """A version 4 ClaimingMessages: strict decode (rule 0), then the identity entry of
        its key (shared with the version 1 types, like a task record's), for ``apply_many``
        to judge by rules 1, 3 and 7 with its first offset."""
        try:
            client, instance, group, topic, partition, first, last, start = (
                decode_reservation_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return None, 0, 0, 0, _INVALID, None
        ent = self._entry(key, value, start, client, instance, group, topic, partition)
        return ent, T_CLAIMING_MESSAGES, last, 0, None, first

    def _future(self, value: bytes | bytearray | memoryview, offset: int) -> Verdict:
        """A record whose byte 0 is a version to come (7..15): with a well-formed envelope
        (its check matches, its group id is valid) it halts the group it names, for good (the
        first such record is remembered: offset and version); anything else is junk that
        happens to start with such a byte, INVALID_RECORD."""
        try:
            version, _, group, _ = envelope(value)
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        if group not in self._halted_groups:
            self._halted_groups[group] = (offset, version)
            self._epoch += 1  # the group's members stop acting here
        self._rejections[_GROUP_HALTED] += 1
        return _HALTED

    def _v6(
        self, key: object, value: bytes | bytearray | memoryview
    ) -> tuple[list | None, int, int, int, Verdict | None, int | None]:
        """A version 6 record (ClaimingPartition, ReleasingPartition): strict decode (rule 0,
        the envelope's check included), then the identity entry of its key (shared with the
        version 1 types), for ``apply_many`` to judge by rules 1, 3 and 4 (a claim, with its
        heartbeat interval) or 6 (a release, with the tenure it names as the last item)."""
        try:
            typ, client, instance, group, topic, partition, number, start, last, vector = (
                decode_v6_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return None, 0, 0, 0, _INVALID, None
        ent = self._entry(key, value, start, client, instance, group, topic, partition)
        if typ == T_CLAIMING_PARTITION:
            return ent, _T_CLAIM_V6, -1, number, None, None
        if vector is not None:
            return ent, _T_RELEASE_TASK_V6, last, 0, None, (vector, number)  # type: ignore[return-value]
        return ent, _T_RELEASE_V6, last, 0, None, number

    def _entry(
        self,
        key: object,
        value: bytes | bytearray | memoryview,
        start: int,
        client: str,
        instance: str,
        group: str,
        topic: str,
        partition: int,
    ) -> list:
        """The identity entry of a decoded record of version 3 or 4: its identity part is
        byte for byte that of the version 1 partition types, so it shares their entry."""
        canonical = record_key(group, topic, partition)
        cacheable = value.__class__ is bytes and key.__class__ is bytes
        ident_bytes = bytes(value[start:])
        ent = self._pcache.get(ident_bytes) if cacheable else None
        if ent is None:
            ent = [
                canonical,
                (client, instance),
                fence_key(client, instance),
                group,
                self._parts.get(canonical),
                topic,
                partition,
                group not in self._keys,  # untagged: the pausing admin only without a key
                len(ident_bytes),
                ident_bytes,
                -1,
                None,
                0,
                None,
            ]
            if cacheable:
                self._cache(ident_bytes, canonical, ent)
        elif ent[0] == key:
            self._kcache[key] = ent  # (so the task lane finds the sender's entry by its key)
        return ent

    def _task(
        self, key: object, value: bytes | bytearray | memoryview
    ) -> tuple[list | None, int, int, int, Verdict | None, Positions | None]:
        """A version 3 record (HeartbeatingTask, ReleasingTask): strict decode (rule 0), then
        the identity entry of its key — the identity part is byte for byte that of the
        version 1 partition types, so it shares their cache entry — for ``apply_many`` to
        judge it by rules 1, 3 and 5 or 6 with its vector and the vector's scalar."""
        try:
            typ, client, instance, group, topic, partition, hb, vector, start = (
                decode_task_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return None, 0, 0, 0, _INVALID, None
        ent = self._entry(key, value, start, client, instance, group, topic, partition)
        if ent[9] is not None:  # cached: the sender's next records may take the task lane
            lay = ent[13] = learn_layout(
                value,  # type: ignore[arg-type]
                6 if typ == T_HEARTBEATING_TASK else 2,
                start,
                vector,
                self._python_vectors,
            )
            if lay is not None and not self._python_vectors:
                # (a layout by low bytes pins a key's upper offset bytes: rarely another's)
                self._layouts[topic] = lay
        return ent, typ, task_last_offset(vector), hb, None, vector

    def _release_group(
        self,
        fkey: str,
        sender: tuple[str, str],
        group: str,
        expiry: int,
        now: int,
        keyed: bool,
        authentic: bool,
    ) -> Verdict:
        """A decoded ReleaseGroup: rules 1 and 2, and the rejection count."""
        v = rule_fenced(self._fenced, fkey)
        if v is None:
            v = rule_release_group(
                self._groups.get(group, ()),
                self._paused,
                group,
                sender,
                expiry,
                now,
                keyed,
                authentic,
            )
        if not v.accepted:
            self._rejections[v.reason] += 1
        self._epoch += len(v.voided)  # one per holder voided
        return v

    def _membership(self, key: object, value: object, now: int) -> Verdict:
        """A version 2 record: rule 1 (fenced), then rule 8 (announce) or 9 (leave); group
        pauses do not apply (membership is not ownership)."""
        try:
            typ, client, instance, group, topics, hb, weight, cap, entire, version = (
                decode_member_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        if group in self._halted_groups:
            self._rejections[_GROUP_HALTED] += 1
            return _HALTED
        v = rule_fenced(self._fenced, fence_key(client, instance))
        if v is not None:
            self._rejections[Reason.FENCED] += 1
            return v
        if typ == T_LEAVING_GROUP:
            v, changed = membership.leave(self._members, self._member_expiry, now, client, instance, group)
            if not v.accepted:
                self._rejections[Reason.NOT_HOLDER] += 1
        else:
            v, changed = membership.announce(
                self._members, self._member_expiry, now, client, instance, group, topics, hb,
                weight, cap, entire,
                version,
            )
        if changed:
            self._epoch += 1
        return v

    def _new_part(
        self, ent: list, holder: tuple[str, str] | None, now: int, hb: int = 0
    ) -> PartitionEntry:
        part = PartitionEntry(ent[3], ent[5], ent[6], holder, now, hb=hb)
        self._parts[ent[0]] = part
        self._groups.setdefault(part.group, []).append(part)
        ent[4] = part
        return part

    # ------------------------------------------------------------------ queries

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
        if self._leases and now_ms < part.fenced_until and self._now < part.fenced_until:
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

    # ------------------------------------------------------------------ snapshots

    def image(self) -> WorldImage:
        """The world's contents as its snapshot holds them (PROTOCOL.md, "Snapshots"): the
        snapshot writer's one view of this world. Not a copy (see :class:`WorldImage`); its
        halted groups are part of it (a restored world keeps them halted)."""
        now = self._now
        return WorldImage(
            verdict_window=self._window,
            applied_through=self._applied,
            now=now,
            rejections=self._rejections,
            fenced=self._fenced.values(),
            pauses={g: p for g, p in self._paused.items() if now < p[0]},
            partitions=self._parts.values(),
            members=self._members,
            verdict_offsets=self._woff,
            verdicts=self._wv,
            halted_groups=self._halted_groups,
        )

    @classmethod
    def from_image(
        cls,
        image: WorldImage,
        *,
        admin_keys: Mapping[str, bytes] | None = None,
        _without: frozenset[str] = frozenset(),
    ) -> WorldState:
        """A world holding ``image`` (which it takes over: hand it to one world only), as
        the snapshot reader validated it; keys and switches as in the constructor."""
        w = cls(verdict_window=image.verdict_window, admin_keys=admin_keys, _without=_without)
        w._applied = image.applied_through
        w._now = image.now
        w._rejections.update(image.rejections)
        w._fenced = {fence_key(c, i): (c, i) for c, i in image.fenced}
        w._paused = dict(image.pauses)
        for part in image.partitions:
            w._parts[record_key(part.group, part.topic, part.partition)] = part
            w._groups.setdefault(part.group, []).append(part)
        w._members = image.members
        w._woff = image.verdict_offsets
        w._wv = image.verdicts
        w._halted_groups = dict(image.halted_groups)
        return w

    def to_bytes(self) -> bytes:
        """Deterministic snapshot (format in PROTOCOL.md); equal states give equal bytes."""
        return dump(self.image())

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        admin_keys: Mapping[str, bytes] | None = None,
        _without: frozenset[str] = frozenset(),
    ) -> WorldState:
        """Restore a snapshot; raises ``SnapshotError`` on anything but a valid one.

        Admin keys are configuration, not state: pass the same ``admin_keys`` the world was
        replaying with (a ``ValueError`` for invalid keys, as in the constructor)."""
        keys = validate_admin_keys(admin_keys)  # configuration errors first: ValueError
        return cls.from_image(load(data), admin_keys=keys, _without=_without)


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
