"""The audit's pure fold: one coordination partition's records in, explained history out.

The same :class:`rationalizer.WorldState` the consumers run decides every record; this
module only *reads* its verdicts (``effect``, ``previous_holder``, ``voided``) and turns
them into ownership intervals, failovers, violations, heartbeat gaps and final positions.
So the audit's conclusions are the runtime's conclusions by construction. What the fold
keeps of each partition is :mod:`.tracks`' (claims, positions), of each group's members
:mod:`.members`'.

Pure Python (rationalizer + attrs). The engines run :mod:`.columnar`, which shares this
fold's state and its code for every record but the renewals and lost races, and keeps the
per-record fold as its reference (and the fallback without numpy and pyarrow).

Speed: most records are heartbeats of the holder. For those the verdict alone says who sent
it (the holder) and the key says which partition, so the hot path never decodes a record;
only ownership changes and rejected records are decoded: with the codec's field decoder
where the world already validated the record (no message object), else with the public
:func:`rationalizer.decode`. A data offset carried by a heartbeat is needed only when an
ownership change asks for a position, so the fold keeps a reference to the record that set
it and reads it then (where PROTOCOL.md puts it in a version 1 record, else decoded). A task's records (version 3: HeartbeatingTask, ReleasingTask) have
the verdicts of a heartbeat and a release of the task's key, so they are folded as such;
their data offset is the scalar of their position vector, as in the world.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rationalizer import (
    MESSAGE_NAMES,
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Effect,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    Message,
    NamingTenure,
    Reason,
    ReleasingPartition,
    ReleasingTask,
    Verdict,
    WorldState,
    decode,
    encode,
    record_key,
)
from rationalizer._codec import (
    T_CLAIMING_MESSAGES,
    T_HEARTBEAT,
    T_RELEASING_PARTITION,
    VERSION_1,
    decode_fields,
)
from rationalizer._rules import RENEWED_KEPT, RENEWED_LATE_KEPT

from .beats import MemberBeatsFold
from .members import MemberFold
from .schema import TABLES
from .tracks import Interval, Track, ended_before

__all__ = [
    "AuditRows",
    "PartitionAudit",
    "ReplayConfig",
    "new_world",
]

log = logging.getLogger(__name__)

#: ``now`` before any record (the rationalizer's convention: time is clamped from here).
_NO_TIME = -(2**63)
_DECODE_MEMO_LIMIT = 1 << 16
_NUMBER_MEMO_LIMIT = 1 << 16
#: version 1 types whose value is version, type, then the int64 this fold wants
#: (PROTOCOL.md: last_offset, last_offset, proposed_last_offset)
_NUMBERED = frozenset({T_HEARTBEAT, T_RELEASING_PARTITION, T_CLAIMING_MESSAGES})
_I64 = struct.Struct(">q")

_RENEWED = Effect.RENEWED
_RENEWED_LATE = Effect.RENEWED_LATE
#: a holder's late heartbeat (version 6, property g): renewed, but it sets no position
_KEPT = RENEWED_KEPT
_KEPT_LATE = RENEWED_LATE_KEPT
_MESSAGES_CLAIMED = Effect.MESSAGES_CLAIMED

#: effects that give the sender a claim; the interval's start_cause is the effect's value
_STARTS = frozenset({Effect.CLAIMED, Effect.TOOK_OVER_STALE, Effect.RESTART_TAKEOVER})

#: end reason of the previous claim -> cause of the failover to the next holder
_FAILOVER_CAUSE = {
    "released": "released",
    "stale_taken": "stale_takeover",
    "fenced_new_instance": "restart",
    "group_reset": "group_reset",
    "unexplained": "unexplained",
}

#: rejected records that show a client misbehaving (lost races are normal and not listed)
_VIOLATION_KIND = {
    Reason.FENCED: "write_from_fenced_instance",
    Reason.GROUP_PAUSED: "write_during_pause",
    Reason.OFFSET_REGRESSION: "offset_regression",
    Reason.INVALID_RECORD: "invalid_record",
}
#: NOT_HOLDER of a message class (or of a subclass: a new version of a message keeps its
#: kind); any other class gives "not_holder"
_NOT_HOLDER_KIND: dict[type, str] = {
    Heartbeat: "heartbeat_without_claim",
    ReleasingPartition: "release_without_claim",
    ClaimingMessages: "claim_messages_without_claim",
    ClaimingPartition: "claim_without_right",
    LeavingGroup: "leave_without_membership",
    # a task's heartbeat and release are a heartbeat and a release of the task's key
    HeartbeatingTask: "heartbeat_without_claim",
    ReleasingTask: "release_without_claim",
    # version 9: a holder naming a tenure that has a name, or anyone else naming one
    NamingTenure: "name_without_unnamed_tenure",
}

_MEMBERSHIP_EFFECTS = frozenset({Effect.JOINED, Effect.ANNOUNCED, Effect.LEFT})

#: the message types that name a partition (or a task's key), and those that carry a
#: ``last_offset`` (a task's: the scalar of its vector)
_KEYED = (
    Heartbeat
    | ClaimingPartition
    | ReleasingPartition
    | ClaimingMessages
    | HeartbeatingTask
    | ReleasingTask
)
_POSITIONED = Heartbeat | ReleasingPartition | HeartbeatingTask | ReleasingTask

AuditRows = dict[str, list[tuple[Any, ...]]]


def _not_holder_kind(cls: type) -> str:
    for base in cls.__mro__:
        kind = _NOT_HOLDER_KIND.get(base)
        if kind is not None:
            return kind
    return "not_holder"


@attrs.frozen
class ReplayConfig:
    """How to replay, the same for every coordination partition (pickled to executors).

    ``admin_keys`` (group -> key) authenticates the admin records of those groups
    (``--admin-key-file``), as every member of such a group does. There is no heartbeat
    interval: each claim and heartbeat carries its holder's (PROTOCOL.md, D2).
    ``since_ms``/``until_ms`` bound what is reported (replay always starts at the beginning
    of the log, and stops after ``until_ms``). ``log_end`` maps data partitions to their
    log-end offsets, for lag.
    """

    admin_keys: Any = None
    since_ms: int | None = None
    until_ms: int | None = None
    log_end: Mapping[tuple[str, int], int] = attrs.field(factory=dict)
    #: coordination partition -> (covered offset, world bytes) of the verified snapshot the
    #: replay starts from when the log was truncated (see :mod:`.genesis`)
    genesis: Mapping[int, tuple[int, bytes]] = attrs.field(factory=dict)
    #: coordination partition -> published snapshots to compare the replayed world with,
    #: ``(covered offset, snapshot record offset, digest hex)`` sorted (:mod:`.rewind`)
    snapshot_checks: Mapping[int, tuple[tuple[int, int, str], ...]] = attrs.field(factory=dict)


def new_world(config: ReplayConfig) -> WorldState:
    """The one place the audit builds a WorldState (the fold and the cross-check's reference)."""
    return WorldState(admin_keys=config.admin_keys)


class PartitionAudit(MemberBeatsFold):
    """Fold over one coordination partition; feed records in offset order, then finish."""

    def __init__(self, coord_partition: int, config: ReplayConfig) -> None:
        self.coord_partition = coord_partition
        self._config = config
        self._world = new_world(config)
        self._since = _NO_TIME if config.since_ms is None else config.since_ms
        self._until = config.until_ms
        self._stopped = False
        self._now = _NO_TIME
        self._last_offset = -1
        self._first_offset: int | None = None
        self._first_ms: int | None = None
        self._records = 0
        #: by record key; looked up with a record's key as it came (None: a keyless record,
        #: which no track has)
        self._tracks: dict[bytes | None, Track] = {}
        self._intervals: list[tuple[Track, Interval]] = []
        self._counts: dict[tuple[str | None, str, str], int] = {}
        self._failovers: list[tuple[Any, ...]] = []
        self._violations: list[tuple[Any, ...]] = []
        self._fenced_at: dict[tuple[str, str], int] = {}
        self._memo: dict[tuple[bytes | None, bytes | None], Message | None] = {}
        self._unknown_effects: set[Effect] = set()  # already logged
        #: the header (version 1, type) of a value -> the message class it decodes to
        self._classes: dict[bytes, type] = {}
        #: message class -> (its message_type: rationalizer.MESSAGE_NAMES, its NOT_HOLDER
        #: violation kind)
        self._type_names: dict[type, tuple[str, str]] = {}
        #: value of an accepted record -> the data offset it carries (see _number)
        self._numbers: dict[bytes, int] = {}
        #: the groups' members and their history (the membership table)
        self._members = MemberFold(coord_partition)
        self.genesis: int | None = None  # the offset the starting snapshot covers
        #: snapshots still to compare with the world, by ascending covered offset
        self._checks: list[tuple[int, int, str]] = sorted(
            config.snapshot_checks.get(coord_partition, ())
        )
        self._check_rows: list[tuple[Any, ...]] = []
        if coord_partition in config.genesis:
            self._start_from(*config.genesis[coord_partition])

    @property
    def world(self) -> WorldState:
        return self._world

    def _start_from(self, covered: int, data: bytes) -> None:
        """Start from a snapshot: its world, and for each partition it knows a track whose
        position is the world's and, if held, an interval opened at the holder's last
        accepted message with cause ``snapshot`` (its real start is before the history); if
        unheld, the claim that ended last (the world's ``last_holder``: released or voided by
        a group reset, version 6), so that the next claim's failover names it as the full
        history's does."""
        world = WorldState.from_bytes(data, admin_keys=self._config.admin_keys)
        self._world = world
        self.genesis = covered
        self._last_offset = covered
        self._now = world.now
        self._members.start_from(world)
        for s in world.partitions():
            key = record_key(s.group_id, s.topic, s.partition)
            t = self._tracks[key] = Track(key, s.group_id, s.topic, s.partition)
            holder = s.holder or ("snapshot", "genesis")
            if s.has_position:
                client, instance = holder
                t.last_ref = encode(
                    Heartbeat(client_id=client, instance_id=instance, group_id=s.group_id,
                              topic=s.topic, partition=s.partition, last_offset=s.last_offset,
                              heartbeat_interval_ms=1)
                )[1]  # fmt: skip
                t.claimed_ref = encode(
                    ClaimingMessages(client_id=client, instance_id=instance, group_id=s.group_id,
                                     topic=s.topic, partition=s.partition,
                                     proposed_last_offset=s.claimed_through)
                )[1]  # fmt: skip
            t.floor = s.tenure_floor
            if s.holder is not None:
                c = Interval(
                    s.holder[0],
                    s.holder[1],
                    s.last_beat,
                    covered,
                    "snapshot",
                    self._resume(t),
                    s.heartbeat_interval_ms or 0,
                )
                t.open = c
                self._intervals.append((t, c))
            elif s.last_holder is not None:
                assert s.last_holder_end_ms is not None  # (the world dates the tenure it names)
                t.ended = ended_before(s)
                t.lost[s.last_holder] = s.last_holder_end_ms

    # ------------------------------------------------------------------ snapshot checks

    def _check_cuts(self, first: int, offsets: Any) -> list[int]:
        """Positions in ``offsets`` (ascending, from ``first``) before which the world must be
        compared with a pending snapshot: after the last record at or below its covered
        offset, when more records follow in this batch."""
        cuts: list[int] = []
        last = offsets[-1]
        for covered, _offset, _digest in self._checks:
            if covered >= last:
                break
            cut = bisect.bisect_right(offsets, covered, first)
            if cut > first and (not cuts or cut > cuts[-1]):
                cuts.append(cut)
        return cuts

    def _run_checks(self, limit: int) -> None:
        """Compare the world with every pending snapshot covering an offset below ``limit``
        (the next record to apply: the world holds exactly the records before it).

        Only where the replay is complete (from offset 0, or from a genesis at or below the
        covered offset) and has not passed the covered offset; the rest stay unchecked."""
        checks = self._checks
        while checks and checks[0][0] < limit:
            covered, offset, digest = checks.pop(0)
            world = self._world
            complete = (self.genesis is not None and covered >= self.genesis) or (
                self.genesis is None and self._first_offset == 0
            )
            if not complete or world.applied_through > covered:
                log.debug("snapshot %d covering %d: not comparable here", offset, covered)
                continue
            mine = hashlib.sha256(world.to_bytes()).hexdigest()
            same = mine == digest and world.applied_through == covered
            if same and covered == self.genesis:
                continue  # the snapshot the replay started from: no comparison at all
            self._check_rows.append(
                (self.coord_partition, offset, covered, world.applied_through, digest, mine,
                 "matches" if same else "world_differs")
            )  # fmt: skip

    # ------------------------------------------------------------------ feeding

    def feed(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
    ) -> None:
        """Apply the next records (ascending offsets; columns of equal length), stopping at
        each pending snapshot's covered offset to compare the world with it."""
        if self._stopped or not offsets:
            return
        if not self._checks or self._checks[0][0] >= offsets[-1]:
            self._feed(offsets, timestamps, keys, values)  # no snapshot to compare inside it
            return
        lo = 0
        for hi in [*self._check_cuts(0, offsets), len(offsets)]:
            if self._stopped:
                return
            self._run_checks(offsets[lo])
            self._feed(offsets[lo:hi], timestamps[lo:hi], keys[lo:hi], values[lo:hi])
            lo = hi

    def _feed(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
    ) -> None:
        if self._stopped or not offsets:
            return
        n = len(offsets)
        if self._until is not None:
            now, until = self._now, self._until
            for i, ts in enumerate(timestamps):
                if ts > now:
                    now = ts
                if now > until:  # log time is clamped, so nothing later is in the window
                    n = i
                    self._stopped = True
                    break
            if n == 0:
                return
            if n < len(offsets):
                offsets, timestamps, keys, values = (
                    offsets[:n],
                    timestamps[:n],
                    keys[:n],
                    values[:n],
                )
        verdicts = self._world.apply_many(zip(offsets, timestamps, keys, values, strict=True))
        if self._first_offset is None:
            for o, ts in zip(offsets, timestamps, strict=True):
                if o > self._last_offset:  # after a genesis snapshot, what it did not cover
                    self._first_offset = o
                    self._first_ms = max(self._now, ts)
                    break
        tracks = self._tracks
        since = self._since
        now = self._now
        last_off = self._last_offset
        records = 0
        try:
            for off, ts, key, value, v in zip(
                offsets, timestamps, keys, values, verdicts, strict=True
            ):
                if v is None or off <= last_off:  # a re-delivery (no verdict) changes nothing
                    continue
                last_off = off
                records += 1
                if ts > now:
                    now = ts
                e = v.effect
                if (e is _RENEWED or e is _MESSAGES_CLAIMED or e is _RENEWED_LATE) and not (
                    v.entries  # (a MemberHeartbeat's sum: its entries are folded in _rare)
                ):
                    t = tracks[key]
                    c = t.open
                    assert c is not None  # (only a holder's records renew)
                    gap = now - c.last_ms
                    if c.max_gap is None or gap > c.max_gap:
                        c.max_gap = gap
                        c.max_gap_end = now
                    c.last_ms = now
                    c.msgs += 1
                    if e is _MESSAGES_CLAIMED:
                        t.claimed_ref = value
                        if now >= since:
                            t.n_messages += 1
                    else:
                        if v is not _KEPT and v is not _KEPT_LATE:  # (property g: kept)
                            t.last_ref = value
                        if now >= since:
                            if e is _RENEWED:
                                t.n_renewed += 1
                            else:
                                t.n_late += 1
                else:
                    self._rare(off, now, key, value, v)
        finally:
            self._now = now
            self._last_offset = last_off
            self._records += records

    # ------------------------------------------------------------------ rare records

    def _decode(self, key: bytes | None, value: bytes | None) -> Message | None:
        """Strict decode (None if invalid), memoised: lost races repeat identical records."""
        memo = self._memo
        k = (key, value)
        try:
            return memo[k]
        except KeyError:
            hashable = True
        except TypeError:  # unhashable junk; decode says what it is
            hashable = False
        msg: Message | None = None
        if key is not None and value is not None:  # (else decode refuses it too)
            try:
                msg = decode(key, value)
            except DecodeError:
                msg = None
        if hashable:
            if len(memo) >= _DECODE_MEMO_LIMIT:
                memo.clear()
            memo[k] = msg
        return msg

    def _fields(
        self, key: bytes | None, value: bytes | None, reason: Reason
    ) -> tuple[type, str, str, str, str | None, int | None] | None:
        """Class, client, instance, group, topic and partition of a rejected record (None if
        it does not decode). A record a rule rejected was decoded by the world, so a version 1
        one whose header (version, type) decoded to a class before goes through the codec's
        field decoder, without a message object; any other through ``decode`` (memoised)."""
        if reason is not Reason.INVALID_RECORD and value.__class__ is bytes and key is not None:
            cls = self._classes.get(value[:2])
            if cls is not None:
                try:
                    f = decode_fields(key, value)
                except DecodeError:  # not what the world saw, then: decode says what it is
                    pass
                else:
                    return cls, f[1], f[2], f[3], f[4], f[5]
        msg = self._decode(key, value)
        if msg is None:
            return None
        if value is not None and value[0] == VERSION_1:  # (it decoded: value is not None)
            self._classes[value[:2]] = type(msg)
        return (
            type(msg),
            msg.client_id,
            msg.instance_id,
            msg.group_id,
            getattr(msg, "topic", None),
            getattr(msg, "partition", None),
        )

    def _sender(self, key: bytes, value: bytes) -> tuple[str, str, str, str, int, int]:
        """Client, instance, group, topic, partition and lease of an accepted claim or
        restart: a version 1 record through the codec's own field decoder (no message
        object, half the cost of ``decode``), any other through ``decode``."""
        if value[0] == VERSION_1:
            _, client, instance, group, topic, partition, _, _, hb, _ = decode_fields(key, value)
            # (a claim's and a heartbeat's fields: a topic, a partition and a lease)
            assert topic is not None and partition is not None and hb is not None
            return client, instance, group, topic, partition, hb
        msg = decode(key, value)
        assert isinstance(msg, ClaimingPartition | Heartbeat | HeartbeatingTask)  # (see _STARTS)
        return (
            msg.client_id,
            msg.instance_id,
            msg.group_id,
            msg.topic,
            msg.partition,
            msg.heartbeat_interval_ms,
        )

    def _track(self, key: bytes, msg: Message) -> Track:
        t = self._tracks.get(key)
        if t is None:
            assert isinstance(msg, _KEYED)  # (a record with a partition key names one)
            t = self._tracks[key] = Track(key, msg.group_id, msg.topic, msg.partition)
        return t

    def _count(self, group: str | None, outcome: str, reason: str) -> None:
        k = (group, outcome, reason)
        self._counts[k] = self._counts.get(k, 0) + 1

    def _number(self, key: bytes, value: bytes | int | None) -> int:
        """The data offset an accepted record carried (it decoded once already): for a task
        record (version 3) the scalar of its vector, which is what the world records.

        A version 1 record with one is read where PROTOCOL.md puts it (the world validated
        it); anything else is decoded, memoised by value."""
        if value is None:
            return -1
        if isinstance(value, int):  # a MemberHeartbeat's entry: its position itself
            return value
        if value[0] == VERSION_1 and value[1] in _NUMBERED:
            return _I64.unpack_from(value, 2)[0]
        numbers = self._numbers
        n = numbers.get(value)
        if n is None:
            msg = decode(key, value)
            # a reservation (any version of ClaimingMessages) carries proposed_last_offset
            if isinstance(msg, ClaimingMessages):
                n = msg.proposed_last_offset
            else:
                assert isinstance(msg, _POSITIONED)  # (an accepted record that set a position)
                n = msg.last_offset
            if len(numbers) >= _NUMBER_MEMO_LIMIT:
                numbers.clear()
            numbers[value] = n
        return n

    def _sync(self, t: Track) -> None:
        """Bring ``t`` up to the record being handled before it is read or changed.

        Nothing to do here: this fold applies every record as it comes. The columnar fold
        (:mod:`.columnar`) defers its tracks' heartbeats and folds them in here."""

    def _resume(self, t: Track) -> int | None:
        """``max(last_offset, claimed_through) + 1`` as the replay has it right now; None while
        no accepted record set a position (``WorldState.resume_offset`` agrees)."""
        self._sync(t)
        if t.last_ref is None and t.claimed_ref is None:
            return None
        return max(self._number(t.key, t.last_ref), self._number(t.key, t.claimed_ref)) + 1

    def _end(self, t: Track, reason: str, now: int, offset: int) -> Interval | None:
        self._sync(t)
        c = t.open
        if c is None:
            return None
        c.end_ms = now
        c.end_offset = offset
        c.end_reason = reason
        c.end_position = self._resume(t)
        t.open = None
        t.ended = c
        t.lost[(c.client, c.instance)] = now
        return c

    def _rare(self, off: int, now: int, key: bytes | None, value: bytes | None, v: Verdict) -> None:
        if v.entries:  # a MemberHeartbeat (version 7): one heartbeat per entry
            self._member_beats(off, now, key, value, v)
            return
        if not v.accepted:
            self._reject(off, now, key, value, v)
            return
        e = v.effect
        assert e is not None
        counted = now >= self._since
        if e in _STARTS:
            assert key is not None and value is not None, "an accepted record decodes"
            client, instance, group, topic, partition, hb = self._sender(key, value)
            t = self._tracks.get(key)
            if t is None:
                t = self._tracks[key] = Track(key, group, topic, partition)
            self._sync(t)
            new = (client, instance)
            prev = v.previous_holder
            resume = self._resume(t)
            t.floor = None if resume is None else resume - 1
            if e is Effect.RESTART_TAKEOVER:
                self._end(t, "fenced_new_instance", now, off)
                assert prev is not None
                self._fenced_at[prev] = now
                t.last_ref = value
            elif e is Effect.TOOK_OVER_STALE:
                self._end(t, "stale_taken", now, off)
                assert prev is not None
                if prev[0] == new[0] and prev[1] != new[1]:  # PROTOCOL.md deviation D1
                    self._fenced_at[prev] = now
            elif t.open is not None:  # cannot happen if the fold mirrors the world
                self._end(t, "unexplained", now, off)
            c = Interval(
                new[0],
                new[1],
                now,
                off,
                e.value,
                self._resume(t),
                hb,
            )
            t.open = c
            self._intervals.append((t, c))
            before = t.ended
            t.ended = None
            if before is not None and now >= self._since:
                self._failovers.append(
                    (
                        t.group,
                        t.topic,
                        t.partition,
                        self.coord_partition,
                        before.client,
                        before.instance,
                        c.client,
                        c.instance,
                        _FAILOVER_CAUSE.get(before.end_reason, before.end_reason),
                        before.last_ms,
                        before.end_ms,
                        now,
                        now - before.last_ms,
                        off,
                        c.start_position,
                        c.hb_ms,
                    )
                )
            if counted:
                self._count(t.group, "accepted", e.value)
        elif e is Effect.RELEASED:
            assert key is not None, "an accepted record decodes"
            t = self._tracks[key]
            self._sync(t)
            held = t.open
            assert held is not None
            gap = now - held.last_ms
            if held.max_gap is None or gap > held.max_gap:
                held.max_gap, held.max_gap_end = gap, now
            held.last_ms = now
            held.msgs += 1
            # the release sets both: its own tenure's reservations beyond it are given back,
            # never below the tenure's floor (PROTOCOL.md rule 6 and property b)
            t.last_ref = t.claimed_ref = value
            if t.floor is not None and self._number(key, value) < t.floor:
                t.claimed_ref = encode(
                    ClaimingMessages(
                        client_id=held.client,
                        instance_id=held.instance,
                        group_id=t.group,
                        topic=t.topic,
                        partition=t.partition,
                        proposed_last_offset=t.floor,
                    )
                )[1]
            t.floor = None
            self._end(t, "released", now, off)
            if counted:
                self._count(t.group, "accepted", e.value)
        elif e is Effect.GROUP_PAUSED:
            msg = self._decode(key, value)
            assert msg is not None
            group = msg.group_id
            for topic, partition, _client, _instance in v.voided:
                vt = self._tracks.get(record_key(group, topic, partition))
                if vt is not None:
                    self._end(vt, "group_reset", now, off)
            if counted:
                self._count(group, "accepted", e.value)
        elif e is Effect.POSITION_SET:
            assert key is not None, "an accepted record decodes"
            t = self._tracks.get(key)
            if t is None:
                msg = self._decode(key, value)
                assert msg is not None
                t = self._track(key, msg)
            self._sync(t)
            t.last_ref = t.claimed_ref = value
            if counted:
                self._count(t.group, "accepted", e.value)
        elif e in _MEMBERSHIP_EFFECTS:
            msg = self._decode(key, value)
            assert msg is not None, "an accepted record decodes"
            self._members.apply(off, now, msg, e)
            if counted:
                self._count(msg.group_id, "accepted", e.value)
        else:  # counted, nothing moves: NAMED (version 9: the holder named its tenure), or
            # an effect this fold does not know yet (said once)
            if e is not Effect.NAMED and e not in self._unknown_effects:
                self._unknown_effects.add(e)
                log.warning(
                    "coordination partition %d: effect %r is new to the audit: counted in "
                    "the verdicts table, ownership and positions left as they were",
                    self.coord_partition,
                    e.value,
                )
            msg = self._decode(key, value)
            if counted:
                self._count(None if msg is None else msg.group_id, "accepted", e.value)

    def _reject(
        self, off: int, now: int, key: bytes | None, value: bytes | None, v: Verdict
    ) -> None:
        if now < self._since:
            return
        reason = v.reason
        assert reason is not None
        if reason is Reason.GROUP_HALTED:
            self._halted(off, now, key, value)
            return
        fields = self._fields(key, value, reason)
        group = None if fields is None else fields[3]
        self._count(group, "rejected", reason.value)
        if reason is Reason.STILL_OWNED:  # a lost race: normal
            return
        names = None if fields is None else self._type_names.get(fields[0])
        if names is None and fields is not None:
            cls = fields[0]
            names = self._type_names[cls] = (MESSAGE_NAMES[cls], _not_holder_kind(cls))
        mtype = None if names is None else names[0]
        if reason is Reason.NOT_HOLDER:
            kind = "not_holder" if names is None else names[1]
        else:
            kind = _VIOLATION_KIND.get(reason, reason.value)
        topic = None if fields is None else fields[4]
        partition = None if fields is None else fields[5]
        holder: tuple[str | None, str | None] = (None, None)
        lost_at = None
        ident = None if fields is None else (fields[1], fields[2])
        if fields is not None and topic is not None:
            t = self._tracks.get(record_key(fields[3], topic, partition))
            if t is not None:
                if t.open is not None:
                    holder = (t.open.client, t.open.instance)
                lost_at = t.lost.get((fields[1], fields[2]))
        if reason is Reason.FENCED and ident is not None:
            lost_at = self._fenced_at.get(ident, lost_at)
        self._violations.append(
            (
                self.coord_partition,
                off,
                now,
                group,
                topic,
                partition,
                None if ident is None else ident[0],
                None if ident is None else ident[1],
                mtype,
                reason.value,
                kind,
                holder[0],
                holder[1],
                lost_at,
            )
        )

    def _halted(self, off: int, now: int, key: bytes | None, value: bytes | None) -> None:
        """A record of a group that a record of a protocol version to come halted
        (PROTOCOL.md, "Version 6"): the halting record itself is a finding (kind
        ``group_halted``, its version as the message type: this audit cannot judge the
        group's records after it); the group's later records are only counted."""
        for group, (at, version) in self._world.halted_groups.items():
            if at == off:
                self._count(group, "rejected", Reason.GROUP_HALTED.value)
                self._violations.append(
                    (self.coord_partition, off, now, group, None, None, None, None,
                     f"version_{version}", Reason.GROUP_HALTED.value, "group_halted", None,
                     None, None)
                )  # fmt: skip
                log.warning(
                    "coordination partition %d: group %r is halted at offset %d by a record of "
                    "protocol version %d; its records after it are not judged",
                    self.coord_partition, group, off, version,
                )  # fmt: skip
                return
        fields = self._fields(key, value, Reason.GROUP_HALTED)
        self._count(None if fields is None else fields[3], "rejected", Reason.GROUP_HALTED.value)

    # ------------------------------------------------------------------ results

    @staticmethod
    def _claim(t: Track, c: Interval, cp: int) -> tuple[Any, ...]:
        """The columns that name a claim, first in its ownership and heartbeat-gap rows."""
        return (t.group, t.topic, t.partition, cp, c.client, c.instance, c.start_ms, c.start_offset)

    @classmethod
    def _ownership_row(
        cls, t: Track, c: Interval, cp: int, end_position: int | None, state: Any
    ) -> tuple[Any, ...]:
        return (
            *cls._claim(t, c, cp),
            c.start_cause,
            c.start_position,
            c.end_ms,
            c.end_offset,
            c.end_reason,
            end_position,
            c.last_ms,
            c.msgs,
            c.hb_ms,
            state,
        )

    def finish(self) -> AuditRows:
        """Rows of every table for this coordination partition (see :mod:`.schema`)."""
        world = self._world
        now = self._now
        since = self._since
        cp = self.coord_partition
        rows: AuditRows = {name: [] for name in TABLES}
        own, gaps = rows["ownership"], rows["heartbeat_gaps"]
        # of each partition, the last claim that ended before ``since``: the moves table
        # explains the first move in the window by it (who had it, how it ended), then the
        # engines drop it from the ownership table (:func:`.moves.ownership_since`)
        before: dict[tuple[str, str, int], tuple[Track, Interval]] = {}
        reported: set[tuple[str, str, int]] = set()
        for t, c in self._intervals:
            key = (t.group, t.topic, t.partition)
            if c.end_ms is not None and c.end_ms < since:
                last = before.get(key)
                if last is None or (last[1].end_ms or 0) <= c.end_ms:
                    before[key] = (t, c)
            else:
                reported.add(key)
        for t, c in self._intervals:
            state = None
            end_position = c.end_position
            if c.end_ms is None:
                state = world.freshness(t.group, t.topic, t.partition, now)
                end_position = self._resume(t)
            elif c.end_ms < since:
                key = (t.group, t.topic, t.partition)
                if key in reported and before[key][1] is c:
                    own.append(self._ownership_row(t, c, cp, c.end_position, None))
                continue
            own.append(self._ownership_row(t, c, cp, end_position, state))
            gaps.append(
                (
                    *self._claim(t, c, cp),
                    c.msgs,
                    c.max_gap,
                    c.max_gap_end,
                    c.hb_ms,
                    None if c.max_gap is None or not c.hb_ms else c.max_gap / c.hb_ms,
                )
            )
        rows["failovers"] = list(self._failovers)
        rows["violations"] = list(self._violations)
        counts = dict(self._counts)
        for t in self._tracks.values():
            for n, effect in (
                (t.n_renewed, Effect.RENEWED),
                (t.n_late, Effect.RENEWED_LATE),
                (t.n_messages, Effect.MESSAGES_CLAIMED),
            ):
                if n:
                    k = (t.group, "accepted", effect.value)
                    counts[k] = counts.get(k, 0) + n
        rows["verdicts"] = [
            (g, o, r, n)
            for (g, o, r), n in sorted(counts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1:]))
        ]
        log_end = self._config.log_end
        for s in world.partitions():
            end = log_end.get((s.topic, s.partition))
            holder = s.holder
            resume = s.resume_offset if s.has_position else None
            rows["positions"].append(
                (
                    s.group_id,
                    s.topic,
                    s.partition,
                    cp,
                    None if holder is None else holder[0],
                    None if holder is None else holder[1],
                    world.freshness(s.group_id, s.topic, s.partition, now),
                    s.last_offset,
                    s.claimed_through,
                    resume,
                    s.last_beat,
                    end,
                    None if end is None or resume is None else end - resume,
                )
            )
        rows["membership"] = self._members.rows(now)
        # a snapshot covering the last record applied: the world is its world now
        self._run_checks(world.applied_through + 1)
        rows["snapshot_checks"] = list(self._check_rows)
        if self._records:
            rows["coordination"].append(
                (cp, self._records, self._first_offset, self._last_offset, self._first_ms, now)
            )
        return rows
