"""The deterministic replay of one ``__marshal`` partition (docs/architecture.md, "Transitions").

``WorldState`` folds records in log order into: per (group, topic, partition) the holder,
``last_beat``, ``last_offset`` and ``claimed_through``; per group the pause window; the
fenced instances; and a verdict for every record. It never reads a clock: ``now`` is the
clamped log-append timestamp of the record being applied.

The rules themselves are in ``rules.py`` (the rule table: one method per rule of
PROTOCOL.md, and the table that sends each record type to its rule), the records the
state is made of in ``state.py``, the queries in ``queries.py``, the identity cache and the
lanes that read a record without the strict decoder in ``identity.py``, and the snapshot
format in ``snapshot.py`` (which sees the world only through :meth:`WorldState.image` /
:meth:`WorldState.from_image`). This module holds the state and the replay loop, which finds
the record's identity and state and dispatches to the rules in their order. The loop is
written for speed (it is what every consumer runs all the time): decoded identities are
cached by the identity bytes of the value, verdicts are shared instances, and the loop keeps
its state in locals. ``decode_fields`` is the single source of truth for what is a valid
record; the lanes only ever reuse what it accepted before.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from functools import partial
from hmac import compare_digest
from struct import Struct
from typing import Any

from . import _membership as membership
from ._auth import tag_for_value, validate_admin_keys
from ._beat_read import BeatRead, read_v7
from ._codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_LEAVING_GROUP,
    T_RELEASE_GROUP,
    VERSION_1,
    VERSION_4,
    VERSION_5,
    VERSION_6,
    VERSION_7,
    VERSION_8,
    VERSION_9,
    DecodeError,
    UnknownVersion,
    decode_fields,
    decode_member_fields,
    decode_reservation_fields,
    decode_task_fields,
    decode_v6_fields,
    decode_v8_fields,
    decode_v9_fields,
    envelope,
    record_key,
    unsigned_value,
)
from ._identity import NO_IDENTITY, Decoded, Identity, IdentityCache
from ._messages import FUTURE_VERSIONS, MAX_OFFSET, Positions, task_last_offset
from ._queries import Claim, PartitionState, WorldQueries
from ._rules import (
    HOLDER_MOVES,
    RULES,
    T_CLAIM_V5,
    T_CLAIM_V6,
    T_MEMBER_BEAT,
    T_NAME_V9,
    T_RELEASE_TASK_V6,
    T_RELEASE_V6,
    T_TASK_BEAT_V8,
    Rules,
)
from ._snapshot import dump, load
from ._state import FRESH, NO_TIME, STALE, UNKNOWN, PartitionEntry, WorldImage, fence_key
from ._task_vectors import NATIVE as NATIVE_VECTORS
from ._task_vectors import learn as learn_layout
from ._verdict import ACCEPTED, REJECTED, Effect, Reason, Verdict, of_entries

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

MIN_TIMESTAMP = -(2**63)

DEFAULT_VERDICT_WINDOW = 65_536

_I64 = Struct(">q")
Record = tuple[int, int, "bytes | None", "bytes | None"]

_INVALID = REJECTED[Reason.INVALID_RECORD]
#: MemberHeartbeat values remembered read (``WorldState._beats``), starting anew beyond
BEAT_CACHE_LIMIT = 1 << 14


_RENEWED = ACCEPTED[Effect.RENEWED]  # (the rules' shared renewal, compared by identity)
_GROUP_HALTED = Reason.GROUP_HALTED
_HALTED = REJECTED[Reason.GROUP_HALTED]


def _no_create() -> PartitionEntry:
    """The ``create`` of a transition whose partition exists (no rule calls it then)."""
    raise AssertionError("the partition exists")


class WorldState(WorldQueries):
    """Replay state of one coordination partition; see PROTOCOL.md for every rule.

    There is no heartbeat interval here: every ClaimingPartition and Heartbeat carries its
    sender's, and a holder's freshness is judged with the holder's own, so every replayer
    reaches the same verdicts whatever its own configuration. ``admin_keys`` (group id ->
    key) switches on authenticated admin for those groups; every replayer of a group must be
    given the same keys (they are configuration, not state: snapshots do not contain them).
    ``rules`` is the rule table (``rules.RULES``, the protocol's, by default; the
    simulator's experiments hand a variant); every replayer of a log must use the same.
    """

    def __init__(
        self,
        *,
        verdict_window: int = DEFAULT_VERDICT_WINDOW,
        admin_keys: Mapping[str, bytes] | None = None,
        rules: Rules = RULES,
        _python_vectors: bool = False,
    ) -> None:
        if type(verdict_window) is not int or verdict_window <= 0:
            raise ValueError(f"verdict_window must be a positive int, got {verdict_window!r}")
        if not isinstance(rules, Rules):
            raise TypeError(f"rules must be a rules.Rules, got {rules!r}")
        self._rules = rules
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
        # record type -> its rule (rules 4 to 7), bound to this world's fenced instances
        self._transitions = rules.transitions(self._fenced, self._takeovers)
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
        # the identity parts accepted before, and the lanes that read records by them
        self._ids = IdentityCache(self._parts, self._keys)
        # MemberHeartbeat value -> its key and what reading it gave (``_read_beat``): a
        # member's next pass repeats its record byte for byte while its positions stand
        self._beats: dict[bytes, tuple[bytes, BeatRead]] = {}
        # n -> the sum of n entries that are all the shared RENEWED verdict: verdicts are
        # immutable, so a MemberHeartbeat whose entries all renewed shares it with every
        # other of its length (at most MAX_BEAT_ENTRIES of them)
        self._renewed_sums: dict[int, Verdict] = {}

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
        halted = self._halted_groups
        kget = self._ids.by_key.get
        read = self._ids.read
        fenced = self._fenced
        takeovers = self._takeovers
        paused = self._paused
        unpack_i64 = _I64.unpack_from
        heartbeat = self._rules.heartbeat
        in_tenure = self._rules.task_beats_in_tenure
        judge = self._judge
        nxt = self._applied + 1  # the next offset: applied_through + 1, always
        now = self._now
        out: list[Verdict | None] = []
        push = out.append
        # Verdicts out[base:] of offsets seg..nxt-1 are not in the window yet: the window is
        # extended per contiguous segment, not per record.
        base = 0
        seg = nxt
        key: Any  # (any object: what is not a record is INVALID_RECORD, never an exception)
        value: Any
        extra: Any  # what a record's type carries besides its number (``rules.Transition``)
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
                    ent = kget(key, NO_IDENTITY)
                except TypeError:  # unhashable key: the slow path will say why it is invalid
                    ent = NO_IDENTITY
                if (
                    value.__class__ is bytes
                    and len(value) == ent.beat_size
                    and value.endswith(ent.beat_tail)
                    and value[0] == VERSION_1 == value[1]
                    and (num := unpack_i64(value, 2)[0]) >= -1
                ):
                    # Heartbeat lane: the same sender, partition and heartbeat interval as
                    # this key's last heartbeat (everything after the int64 is identical, and
                    # was validated then); only the position is new. A renewal (see below)
                    # is decided here, the hottest path of all.
                    part = ent.part
                    if (
                        part is not None
                        and part.holder is ent.sender
                        and not paused
                        and not (fenced and ent.fkey in fenced)
                        and not halted
                    ):
                        push(heartbeat(part, ent.sender, now, num, ent.beat_hb, fenced, takeovers))
                        continue
                    typ, hb, extra = T_HEARTBEAT, ent.beat_hb, None
                elif (got := read(key, value, ent)) is not None:
                    ent, typ, num, hb, extra = got
                else:
                    slow = self._slow(key, value, now, offset)
                    if isinstance(slow, Verdict):  # decided there (invalid, ReleaseGroup...)
                        push(slow)
                        continue
                    ent, typ, num, hb, extra = slow
                part = ent.part
                if (
                    part is not None
                    and part.holder is ent.sender
                    and not paused
                    and not (fenced and ent.fkey in fenced)
                    and not halted
                ):
                    # A renewal (the lanes' common case): rules 1 and 3 cannot fire (these
                    # gates only choose the lane: a fenced sender or any pause window takes
                    # the general path below, where the rules decide), so straight to rule 5,
                    # which renews (the sender holds the partition: never rejected, nothing
                    # to count). A version 8 task heartbeat only in the tenure it names
                    # (property i, the rule table's, as ``task_beat`` asks it).
                    if typ in (T_HEARTBEAT, T_HEARTBEATING_TASK):
                        push(heartbeat(part, ent.sender, now, num, hb, fenced, takeovers, extra))
                        continue
                    if typ == T_TASK_BEAT_V8 and in_tenure(part, extra[1]):
                        vector = extra[0]
                        push(heartbeat(part, ent.sender, now, num, hb, fenced, takeovers, vector))
                        continue
                push(judge(ent, typ, num, hb, extra, now, offset))
        finally:
            self._window_add(out, base, seg, nxt)
            self._applied = nxt - 1
            self._now = now
        return out

    def _judge(
        self, ent: Identity, typ: int, num: int, hb: int, extra: object, now: int, offset: int
    ) -> Verdict:
        """A partition record read (``identity.Decoded``) that is no renewal the loop could
        decide: the rules in PROTOCOL.md's order. 0 (invalid) and 2 (ReleaseGroup) were
        decided in ``_slow``; then the group halted (version 6), 1 (fenced), 3 (paused), and
        4-7 by type (the rule table's transitions); the rejection counted, ``ownership_epoch``
        moved with the holder."""
        halted = self._halted_groups
        if halted and ent.group in halted:
            self._rejections[_GROUP_HALTED] += 1
            return _HALTED
        fenced = self._fenced
        if fenced and (v := self._rules.fenced(fenced, ent.fkey)) is not None:
            self._rejections[v.reason] += 1  # type: ignore[index]  # rejected: it has a reason
            return v
        part = ent.part
        if part is None:
            part = ent.part = self._parts.get(ent.key)
        create = _no_create if part is not None else partial(self._new_part, ent, None, now)
        paused = self._paused
        if paused and ent.group in paused:  # the group has a pause window: rule 3
            v = self._rules.paused(
                paused, ent.group, now, part, create, ent.sender, typ, ent.admin_ok, num
            )
            if v is not None:
                if not v.accepted:
                    self._rejections[v.reason] += 1  # type: ignore[index]  # rejected: it has a reason
                return v
        v = self._transitions[typ](part, create, ent.sender, now, num, hb, extra, offset)
        if not v.accepted:
            self._rejections[v.reason] += 1  # type: ignore[index]  # rejected: it has a reason
        elif v.effect in HOLDER_MOVES:  # (ownership_epoch: not with renewals)
            self._epoch += 1
        return v

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

    def _slow(self, key: object, value: object, now: int, offset: int) -> Decoded | Verdict:
        """Cache miss: strict decode. Decides rule 0 here (a record that does not decode is
        INVALID_RECORD), a ReleaseGroup completely (``_release_group``: rules 1 and 2) and the
        membership records (``_membership``: rules 0, 1, 8 and 9): their verdict. Version 3
        task records (``_task``), version 4 reservations (``_reservation``) and version 6
        records (``_v6``) are decoded here and judged like the partition types: the record
        read (``identity.Decoded``). A record of a version to come (at ``offset``) halts its
        group if its envelope is well-formed (``_future``)."""
        if isinstance(value, bytes | bytearray | memoryview) and value:
            version = value[0]
            if version == 2 and value.__class__ is bytes:
                return self._membership(key, value, now)
            if version == 3:
                return self._task(key, value)
            if version == VERSION_4:
                if value[1:2] == b"\x04":
                    return self._reservation(key, value)
                return self._membership(key, value, now)
            if version == VERSION_6:
                return self._v6(key, value)
            if version == VERSION_7:
                return self._member_beat(key, value, now, offset)
            if version == VERSION_8:
                return self._v8(key, value)
            if version == VERSION_9:
                return self._v9(key, value)
            if version in FUTURE_VERSIONS:
                return self._future(value, offset)
        try:
            fields = decode_fields(key, value)
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        typ, client, instance, group, topic, partition, num, start, hb, tag = fields
        assert isinstance(value, bytes | bytearray | memoryview)  # (decode_fields took it)
        sender = (client, instance)
        fkey = fence_key(client, instance)
        admin_key = self._keys.get(group)
        if admin_key is None:
            admin_ok = True
        elif tag is None:
            admin_ok = False
        else:
            unsigned = unsigned_value(bytes(value))
            admin_ok = compare_digest(tag_for_value(admin_key, unsigned), tag)
        if typ == T_RELEASE_GROUP:
            assert num is not None
            if group in self._halted_groups:
                self._rejections[_GROUP_HALTED] += 1
                return _HALTED
            return self._release_group(
                fkey, sender, group, num, now, admin_key is not None, admin_ok
            )
        assert topic is not None and partition is not None  # (a partition type)
        if value[0] == VERSION_5:
            typ = T_CLAIM_V5  # (decode_fields has no other type under byte 5)
        canonical = record_key(group, topic, partition)
        cacheable = tag is None and value.__class__ is bytes and key.__class__ is bytes
        ident_bytes = bytes(value[start:]) if cacheable else b""
        ent = Identity(
            canonical,
            sender,
            fkey,
            group,
            self._parts.get(canonical),
            topic,
            partition,
            admin_ok,
            ident_bytes,
        )
        if cacheable:
            if typ == T_HEARTBEAT:
                ent.beat_size = len(value)
                ent.beat_tail = bytes(value[10:])
                ent.beat_hb = hb or 0
            self._ids.put(ident_bytes, canonical, ent)
        return ent, typ, -1 if num is None else num, hb or 0, None

    def _reservation(self, key: object, value: bytes | bytearray | memoryview) -> Decoded | Verdict:
        """A version 4 ClaimingMessages: strict decode (rule 0), then the identity of its
        key (shared with the version 1 types, like a task record's), for ``apply_many`` to
        judge by rules 1, 3 and 7 with its first offset."""
        try:
            client, instance, group, topic, partition, first, last, start = (
                decode_reservation_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        ent = self._ids.shared(key, value, start, client, instance, group, topic, partition)
        return ent, T_CLAIMING_MESSAGES, last, 0, first

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

    def _v6(self, key: object, value: bytes | bytearray | memoryview) -> Decoded | Verdict:
        """A version 6 record (ClaimingPartition, ReleasingPartition, ReleasingTask): strict
        decode (rule 0, the envelope's check included), then the identity of its key (shared
        with the version 1 types), for ``apply_many`` to judge by rules 1, 3 and 4 (a claim,
        with its heartbeat interval) or 6 (a release, with the tenure it names; a task's
        also with its vector)."""
        try:
            typ, client, instance, group, topic, partition, number, start, last, vector = (
                decode_v6_fields(key, value)
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        ent = self._ids.shared(key, value, start, client, instance, group, topic, partition)
        if typ == T_CLAIMING_PARTITION:
            return ent, T_CLAIM_V6, -1, number, None
        if vector is not None:
            return ent, T_RELEASE_TASK_V6, last, 0, (vector, number)
        return ent, T_RELEASE_V6, last, 0, number

    def _v8(self, key: object, value: bytes | bytearray | memoryview) -> Decoded | Verdict:
        """A version 8 HeartbeatingTask: strict decode (rule 0, the envelope's check
        included), then the identity of its key (shared with the version 1 and 3 types), for
        ``apply_many`` to judge by rules 1, 3 and 5 with property i (its vector and the
        tenure it names)."""
        try:
            client, instance, group, topic, partition, hb, tenure, vector, start = decode_v8_fields(
                key, value
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        ent = self._ids.shared(key, value, start, client, instance, group, topic, partition)
        self._learn(ent, value, envelope(value)[3] + 12, start, vector)  # (after hb, tenure)
        return ent, T_TASK_BEAT_V8, task_last_offset(vector), hb, (vector, tenure)

    def _v9(self, key: object, value: bytes | bytearray | memoryview) -> Decoded | Verdict:
        """A version 9 NamingTenure: strict decode (rule 0, the envelope's check included),
        then the identity of its key (shared with the version 1 types), for ``apply_many``
        to judge by rules 0', 1 and 3, then property j (:meth:`Rules.name`)."""
        try:
            client, instance, group, topic, partition, start = decode_v9_fields(key, value)
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        ent = self._ids.shared(key, value, start, client, instance, group, topic, partition)
        return ent, T_NAME_V9, -1, 0, None

    def _member_beat(
        self, key: object, value: bytes | bytearray | memoryview, now: int, offset: int
    ) -> Verdict:
        """A version 7 MemberHeartbeat: strict decode (rule 0: the whole record is invalid or
        none of it is), then every entry judged in entry order as the Heartbeat of its
        partition would be, by rules 0' (halted group), 1, 3 and 5 with property h
        (``_judge``; rejections counted per entry); its verdict holds one per entry
        (``Verdict.entries``). Each entry's identity is the one a version 1 record of that
        sender and partition has (the same cache entry, built from the same bytes). A value
        met before is not decoded again (``_read_beat``)."""
        read = self._read_beat(key, value)
        if read is None:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        client, instance, group, hb, rows = read
        ids = self._ids
        cached = ids.by_bytes.get
        judge = self._judge
        # a renewal (the sender holds the partition in the tenure the entry names; rules 0',
        # 1 and 3 cannot fire) goes straight to rule 5, as the heartbeat lane's does; any
        # other entry through every rule (``_judge``)
        halted, fenced, paused = self._halted_groups, self._fenced, self._paused
        lane = not (
            (halted and group in halted)
            or (paused and group in paused)
            or (fenced and fence_key(client, instance) in fenced)
        )
        heartbeat = self._rules.heartbeat
        takeovers = self._takeovers
        parts = self._parts
        verdicts: list[Verdict] = []
        push = verdicts.append
        for ident, topic, partition, tenure, last in rows:
            ent = cached(ident)
            if ent is None:
                ent = ids.entry(ident, client, instance, group, topic, partition)
            part = ent.part
            if part is None:
                part = ent.part = parts.get(ent.key)
            if lane and part is not None and part.holder is ent.sender and part.tenure == tenure:
                push(heartbeat(part, ent.sender, now, last, hb, fenced, takeovers))
            else:
                push(judge(ent, T_MEMBER_BEAT, last, hb, tenure, now, offset))
        for v in verdicts:
            if v is not _RENEWED:
                return of_entries(tuple(verdicts))
        n = len(verdicts)  # every entry the shared RENEWED: the common sum, one per length
        summed = self._renewed_sums.get(n)
        if summed is None:
            summed = self._renewed_sums[n] = of_entries(tuple(verdicts))
        return summed

    def _read_beat(self, key: object, value: object) -> BeatRead | None:
        """A version 7 MemberHeartbeat strictly decoded (None: it does not decode), with each
        entry's identity part (``codec.BeatRow``). Remembered by value: a member's next pass
        repeats its record byte for byte while its positions stand, and the same bytes decode
        the same. (The audit's fold reads the entries of what it replayed here too.)"""
        vb = value if type(value) is bytes else None  # (exactly bytes: hashed as bytes)
        kb = key if type(key) is bytes else None
        if vb is not None and kb is not None:
            hit = self._beats.get(vb)
            if hit is not None and hit[0] == kb:
                return hit[1]
        try:
            read = read_v7(key, value, native=not self._python_vectors)
        except DecodeError:
            return None
        if vb is not None and kb is not None:
            if len(self._beats) >= BEAT_CACHE_LIMIT:
                self._beats.clear()
            self._beats[vb] = (kb, read)
        return read

    def _task(self, key: object, value: bytes | bytearray | memoryview) -> Decoded | Verdict:
        """A version 3 record (HeartbeatingTask, ReleasingTask): strict decode (rule 0), then
        the identity of its key — the identity part is byte for byte that of the version 1
        partition types, so it shares their cache entry — for ``apply_many`` to judge it by
        rules 1, 3 and 5 or 6 with its vector and the vector's scalar. The vector's layout is
        learnt for the task lane."""
        try:
            typ, client, instance, group, topic, partition, hb, vector, start = decode_task_fields(
                key, value
            )
        except DecodeError:
            self._rejections[Reason.INVALID_RECORD] += 1
            return _INVALID
        ent = self._ids.shared(key, value, start, client, instance, group, topic, partition)
        self._learn(ent, value, 6 if typ == T_HEARTBEATING_TASK else 2, start, vector)
        return ent, typ, task_last_offset(vector), hb, vector

    def _learn(
        self,
        ent: Identity,
        value: bytes | bytearray | memoryview,
        at: int,
        end: int,
        vector: Positions,
    ) -> None:
        """Learn the layout of a task record's vector (``value[at:end]``) for the task lane:
        the sender's next records of the key, and (layouts by sources) the first record of
        the task's other keys, are read by it. Only for a cached identity."""
        if ent.size < 0:
            return
        lay = ent.layout = learn_layout(bytes(value), at, end, vector, self._python_vectors)
        if lay is not None and not self._python_vectors:
            # (a layout by low bytes pins a key's upper offset bytes: rarely another's)
            self._ids.layouts[ent.topic] = lay

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
        v = self._rules.fenced(self._fenced, fkey)
        if v is None:
            v = self._rules.release_group(
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
            self._rejections[v.reason] += 1  # type: ignore[index]  # rejected: it has a reason
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
        v = self._rules.fenced(self._fenced, fence_key(client, instance))
        if v is not None:
            self._rejections[Reason.FENCED] += 1
            return v
        if typ == T_LEAVING_GROUP:
            v, changed = membership.leave(
                self._members, self._member_expiry, now, client, instance, group
            )
            if not v.accepted:
                self._rejections[Reason.NOT_HOLDER] += 1
        else:
            v, changed = membership.announce(
                self._members,
                self._member_expiry,
                now,
                client,
                instance,
                group,
                topics,
                hb,
                weight,
                cap,
                entire,
                version,
            )
        if changed:
            self._epoch += 1
        return v

    def _new_part(
        self, ent: Identity, holder: tuple[str, str] | None, now: int, hb: int = 0
    ) -> PartitionEntry:
        """The state of a partition first seen (a rule's ``create``), held by the world and
        its identity ``ent``."""
        part = PartitionEntry(ent.group, ent.topic, ent.partition, holder, now, hb=hb)
        self._parts[ent.key] = part
        self._groups.setdefault(part.group, []).append(part)
        ent.part = part
        return part

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
        rules: Rules = RULES,
    ) -> WorldState:
        """A world holding ``image`` (which it takes over: hand it to one world only), as
        the snapshot reader validated it; keys and switches as in the constructor."""
        w = cls(verdict_window=image.verdict_window, admin_keys=admin_keys, rules=rules)
        w._applied = image.applied_through
        w._now = image.now
        w._rejections.update(image.rejections)
        w._fenced.update((fence_key(c, i), (c, i)) for c, i in image.fenced)  # (its rules' own)
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
        rules: Rules = RULES,
    ) -> WorldState:
        """Restore a snapshot; raises ``SnapshotError`` on anything but a valid one.

        Admin keys are configuration, not state: pass the same ``admin_keys`` the world was
        replaying with (a ``ValueError`` for invalid keys, as in the constructor)."""
        keys = validate_admin_keys(admin_keys)  # configuration errors first: ValueError
        return cls.from_image(load(data), admin_keys=keys, rules=rules)
