"""Snapshot format of a WorldState (PROTOCOL.md, "Snapshots").

Canonical: sorted collections, minimal varints, no optional padding, so equal states give
equal bytes and ``from_bytes(b).to_bytes() == b``. Restore is strict (``SnapshotError``)
because a wrongly restored world would silently disagree with every other replayer.
Not pickle: a snapshot may come from another process or a Spark executor.

The format sees a world only as a ``state.WorldImage``: :func:`dump` writes the one
``WorldState.image`` gives, :func:`load` reads one back for ``WorldState.from_image``. So
this module never imports the world, and the world imports it.
"""

from __future__ import annotations

import re
from array import array
from itertools import pairwise

from ._codec import record_key
from ._messages import (
    FUTURE_VERSIONS,
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_ID_BYTES,
    MAX_MEMBER_TOPICS,
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_TASK_SOURCES,
    MAX_TOPIC_LENGTH,
    MAX_WEIGHT,
    task_last_offset,
    valid_id,
    valid_topic,
)
from ._state import NO_POSITION, NO_TIME, MemberState, PartitionEntry, WorldImage
from ._varint import append_svarint, append_uvarint, read_svarint, read_uvarint
from ._verdict import ACCEPTED, REJECTED, Effect, Reason, Verdict

__all__ = ["MAGIC", "SNAPSHOT_VERSION", "SnapshotError", "dump", "load"]

MAGIC = b"LMWS"
#: Version 2 adds the membership section, version 3 the task positions section, version 4
#: the tenure floors (a flag and a varint in a held partition's entry) and each member's
#: announced protocol version (a byte in its entry), version 5 the leases a restart takeover
#: or a ReleaseGroup took away early that may still run (a flag and a varint in a
#: partition's entry), version 6 the name of a holder's tenure (a flag and a varint: the
#: offset of the version 6 claim or the restart takeover that began it, which a version 6
#: release names), the groups a record of a version to come halted (a section), the
#: count of GROUP_HALTED rejections (an eighth count, verdict code 7) and an unheld
#: partition's last holder (a flag and its ids; another flag and a varint when a ReleaseGroup
#: voided it: audit only). A world is written in the oldest version that can hold it, byte
#: for byte as before (so older snapshots stay canonical).
SNAPSHOT_VERSION = 6
_SNAPSHOT_V5 = 5
_SNAPSHOT_V4 = 4
_SNAPSHOT_V1 = 1
_SNAPSHOT_V2 = 2
_SNAPSHOT_V3 = 3
_ENTIRE_TOPIC = 0x01  # member flags byte

# Stable codes: never reorder, only append.
REASON_CODES: tuple[Reason, ...] = (
    Reason.STILL_OWNED,
    Reason.NOT_HOLDER,
    Reason.FENCED,
    Reason.GROUP_PAUSED,
    Reason.OFFSET_REGRESSION,
    Reason.INVALID_RECORD,
    Reason.UNAUTHENTICATED,
    Reason.GROUP_HALTED,  # version 6
)
#: the rejection counts a snapshot of version 5 or before holds (GROUP_HALTED is 0 there)
_OLD_REASONS = 7
EFFECT_CODES: tuple[Effect, ...] = (
    Effect.CLAIMED,
    Effect.TOOK_OVER_STALE,
    Effect.RESTART_TAKEOVER,
    Effect.RENEWED,
    Effect.RENEWED_LATE,
    Effect.RELEASED,
    Effect.MESSAGES_CLAIMED,
    Effect.GROUP_PAUSED,
    Effect.POSITION_SET,
    Effect.JOINED,
    Effect.ANNOUNCED,
    Effect.LEFT,
    Effect.NAMED,  # version 9
)
_ACCEPTED_BASE = 0x10  # + effect code: shared accepted verdict
_DETAILED_BASE = 0x20  # + effect code: accepted with previous_holder / voided
_MAX_U64 = 2**64 - 1
# per-partition flags byte
_HELD = 0x01  # a holder follows (ids, heartbeat interval)
_POSITIONED = 0x02  # a position was set: last_offset+1 and claimed_through+1 follow
_FLOORED = 0x04  # version 4: the holder's tenure floor + 1 follows (held and positioned only)
_LEASED = 0x08  # version 5: fenced_until - now follows (a lease taken away early, still running)
_TENURED = 0x10  # version 6: the holder's tenure follows its heartbeat interval (held only)
_ENDED = 0x20  # version 6: the last holder's ids follow, at the end (unheld only)
_VOIDED = 0x40  # version 6, with _ENDED: a ReleaseGroup voided it; voided_at - beat follows
_MEMBER_VERSIONS = (2, 4)  # version 4: what a member's protocol byte may be


class SnapshotError(ValueError):
    """The bytes are not a valid snapshot of this format version."""


# ---------------------------------------------------------------------- writing


# the writer below calls these for nearly every field: short local names
_uv = append_uvarint
_sv = append_svarint


def _s(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    _uv(out, len(b))
    out += b


def _verdict(out: bytearray, v: Verdict) -> None:
    if not v.accepted:
        assert v.reason is not None
        out.append(REASON_CODES.index(v.reason))
        return
    assert v.effect is not None
    code = EFFECT_CODES.index(v.effect)
    if v.previous_holder is None and not v.voided:
        out.append(_ACCEPTED_BASE + code)
        return
    out.append(_DETAILED_BASE + code)
    if v.previous_holder is None:
        out.append(0)
    else:
        out.append(1)
        _s(out, v.previous_holder[0])
        _s(out, v.previous_holder[1])
    _uv(out, len(v.voided))
    for topic, partition, client, instance in v.voided:
        _s(out, topic)
        _uv(out, partition)
        _s(out, client)
        _s(out, instance)


def dump(w: WorldImage) -> bytes:
    """The snapshot of a world's image (``WorldState.to_bytes`` writes its own)."""
    members = sorted(
        (group, client, m) for group, entries in w.members.items() for client, m in entries.items()
    )
    parts = sorted(w.partitions, key=lambda p: (p.group, p.topic, p.partition))
    tasks = [(p, vector) for p in parts if (vector := p.positions) is not None]
    now = w.now
    leased = any(p.fenced_until > now for p in parts)
    halted = sorted(w.halted_groups.items())
    tenured = any(p.tenure >= 0 or p.last_holder is not None for p in parts) or bool(halted)
    v4 = any(p.floor is not None for p in parts) or any(m.version != 2 for _, _, m in members)
    out = bytearray(MAGIC)
    if tenured:
        version = SNAPSHOT_VERSION
    elif leased:
        version = _SNAPSHOT_V5
    elif v4:
        version = _SNAPSHOT_V4
    elif tasks:
        version = _SNAPSHOT_V3
    else:
        version = _SNAPSHOT_V2 if members else _SNAPSHOT_V1
    out.append(version)
    _uv(out, w.verdict_window)
    _uv(out, w.applied_through + 1)
    _sv(out, w.now)
    for r in REASON_CODES if version >= SNAPSHOT_VERSION else REASON_CODES[:_OLD_REASONS]:
        _uv(out, w.rejections[r])
    fenced = sorted(w.fenced)
    _uv(out, len(fenced))
    for client, instance in fenced:
        _s(out, client)
        _s(out, instance)
    pauses = sorted(w.pauses.items())
    _uv(out, len(pauses))
    for group, (expires, (client, instance)) in pauses:
        _s(out, group)
        _sv(out, expires)
        _s(out, client)
        _s(out, instance)
    _uv(out, len(parts))
    for p in parts:
        _s(out, p.group)
        _s(out, p.topic)
        _uv(out, p.partition)
        positioned = p.last != NO_POSITION
        out.append(
            (_HELD if p.holder is not None else 0)
            | (_POSITIONED if positioned else 0)
            | (_FLOORED if p.floor is not None else 0)
            | (_LEASED if p.fenced_until > now else 0)
            | (_TENURED if p.tenure >= 0 else 0)
            | (_ENDED if p.last_holder is not None else 0)
            | (_VOIDED if p.voided_at is not None else 0)
        )
        if p.holder is not None:
            _s(out, p.holder[0])
            _s(out, p.holder[1])
            _uv(out, p.hb)
            if p.tenure >= 0:
                _uv(out, p.tenure)
        _sv(out, p.beat)
        if positioned:
            _uv(out, p.last + 1)
            _uv(out, p.claimed + 1)
        if p.floor is not None:
            _uv(out, p.floor + 1)
        if p.fenced_until > now:
            _uv(out, p.fenced_until - now)
        if p.last_holder is not None:
            _s(out, p.last_holder[0])
            _s(out, p.last_holder[1])
            if p.voided_at is not None:
                _uv(out, p.voided_at - p.beat)
    if version >= _SNAPSHOT_V2:  # versions 3 to 6: the count may be 0
        _uv(out, len(members))
        for group, client, m in members:
            _s(out, group)
            _s(out, client)
            _s(out, m.instance)
            _sv(out, m.since)
            _sv(out, m.last)
            _uv(out, m.hb)
            _uv(out, m.weight)
            _uv(out, m.max_claims)
            out.append(_ENTIRE_TOPIC if m.entire_topic else 0)
            if version >= _SNAPSHOT_V4:
                out.append(m.version)
            _uv(out, len(m.topics))
            for topic, count in m.topics:
                _s(out, topic)
                _uv(out, count)
    if version >= _SNAPSHOT_V3:  # versions 4 to 6: the count may be 0
        _uv(out, len(tasks))
        for p, vector in tasks:
            _s(out, p.group)
            _s(out, p.topic)
            _uv(out, p.partition)
            _uv(out, len(vector))
            for topic, offset in vector:
                _s(out, topic)
                _uv(out, offset + 1)
    if version >= SNAPSHOT_VERSION:  # the halted groups (the count may be 0)
        _uv(out, len(halted))
        for group, (offset, protocol) in halted:
            _s(out, group)
            _uv(out, offset)
            out.append(protocol)
    woff = w.verdict_offsets
    _uv(out, len(woff))
    prev = -1
    for off in woff:
        _uv(out, off - prev)
        prev = off
    for v in w.verdicts:
        _verdict(out, v)
    return bytes(out)


# ---------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise SnapshotError("truncated snapshot")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def uv(self, limit: int = _MAX_U64) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos, limit, "snapshot number", SnapshotError)
        return n

    def sv(self) -> int:
        n, self.pos = read_svarint(self.buf, self.pos, _MAX_U64, "snapshot number", SnapshotError)
        return n

    def s(self, limit: int) -> str:
        n = self.uv(limit)
        end = self.pos + n
        if end > len(self.buf):
            raise SnapshotError("truncated string")
        try:
            out = self.buf[self.pos : end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SnapshotError("invalid UTF-8") from exc
        self.pos = end
        return out

    def ident(self) -> str:
        s = self.s(MAX_ID_BYTES)
        if not valid_id(s):
            raise SnapshotError(f"invalid id {s!r}")
        return s

    def topic(self) -> str:
        s = self.s(MAX_TOPIC_LENGTH)
        if not valid_topic(s):
            raise SnapshotError(f"invalid topic {s!r}")
        return s

    def flag(self) -> bool:
        b = self.byte()
        if b > 1:
            raise SnapshotError(f"bad flag byte {b}")
        return b == 1


def _read_verdict(r: _Reader) -> Verdict:
    code = r.byte()
    if code < len(REASON_CODES):
        return REJECTED[REASON_CODES[code]]
    if _ACCEPTED_BASE <= code < _ACCEPTED_BASE + len(EFFECT_CODES):
        return ACCEPTED[EFFECT_CODES[code - _ACCEPTED_BASE]]
    if not _DETAILED_BASE <= code < _DETAILED_BASE + len(EFFECT_CODES):
        raise SnapshotError(f"unknown verdict code {code}")
    effect = EFFECT_CODES[code - _DETAILED_BASE]
    prev = (r.ident(), r.ident()) if r.flag() else None
    voided = tuple((r.topic(), r.uv(MAX_PARTITION), r.ident(), r.ident()) for _ in range(r.uv()))
    if (prev is None and not voided) or list(voided) != sorted(voided):
        raise SnapshotError("non-canonical verdict")
    return Verdict(True, effect=effect, previous_holder=prev, voided=voided)


#: verdict code -> the shared verdict it stands for (None: detailed or invalid: slow path)
_SIMPLE: tuple[Verdict | None, ...] = tuple(
    REJECTED[REASON_CODES[c]]
    if c < len(REASON_CODES)
    else ACCEPTED[EFFECT_CODES[c - _ACCEPTED_BASE]]
    if _ACCEPTED_BASE <= c < _ACCEPTED_BASE + len(EFFECT_CODES)
    else None
    for c in range(256)
)


_SIMPLE_RUN = re.compile(
    b"[%s]+" % b"".join(re.escape(bytes([c])) for c in range(256) if _SIMPLE[c] is not None)
)


def _read_verdicts(r: _Reader, n: int) -> list[Verdict]:
    """``n`` verdicts; runs of one-byte shared ones by table lookup in C (restoring a full
    window of 65,536+ verdicts is most of a snapshot's restore time)."""
    out: list[Verdict] = []
    buf = r.buf
    simple = _SIMPLE
    run = _SIMPLE_RUN.match
    pos = r.pos
    while len(out) < n:
        m = run(buf, pos, pos + n - len(out))
        if m is not None:
            out.extend(map(simple.__getitem__, buf[pos : m.end()]))  # type: ignore[arg-type]  # a run holds only codes of shared verdicts: never None
            pos = m.end()
            continue
        r.pos = pos
        out.append(_read_verdict(r))  # detailed, invalid or truncated: the strict reader
        pos = r.pos
    r.pos = pos
    return out


def _sorted_strictly(items: list) -> bool:
    return all(a < b for a, b in pairwise(items))


def _read_members(r: _Reader, version: int) -> dict[str, dict[str, MemberState]]:
    members: dict[str, dict[str, MemberState]] = {}
    count = r.uv()
    if count == 0 and version == _SNAPSHOT_V2:
        raise SnapshotError("a version 2 snapshot without members (version 1 has none)")
    prev = None
    for _ in range(count):
        group, client, instance = r.ident(), r.ident(), r.ident()
        since, last = r.sv(), r.sv()
        hb = r.uv(MAX_HEARTBEAT_INTERVAL_MS)
        weight = r.uv(MAX_WEIGHT)
        max_claims = r.uv(MAX_PARTITION)
        flags = r.byte()
        if hb == 0 or weight == 0 or flags & ~_ENTIRE_TOPIC or not since <= last:
            raise SnapshotError("invalid member entry")
        protocol = r.byte() if version >= _SNAPSHOT_V4 else 2
        if protocol not in _MEMBER_VERSIONS:
            raise SnapshotError(f"invalid member protocol version {protocol}")
        topics = tuple((r.topic(), r.uv(MAX_PARTITION + 1)) for _ in range(r.uv(MAX_MEMBER_TOPICS)))
        if not _sorted_strictly([t for t, _ in topics]):
            raise SnapshotError("member topics not strictly sorted")
        if prev is not None and not prev < (group, client):
            raise SnapshotError("members not strictly sorted")
        prev = (group, client)
        entry = MemberState(
            instance, since, last, hb, weight, max_claims, bool(flags), topics, protocol
        )
        members.setdefault(group, {})[client] = entry
    return members


def _read_positions(r: _Reader, parts: dict[bytes, PartitionEntry], version: int) -> None:
    """The version 3 section: the position vector of every task key that has one, set on
    its entry in ``parts`` (record key -> entry)."""
    count = r.uv()
    if count == 0 and version == _SNAPSHOT_V3:
        raise SnapshotError("a version 3 snapshot without task positions (older ones have none)")
    prev = None
    for _ in range(count):
        group, topic, partition = r.ident(), r.topic(), r.uv(MAX_PARTITION)
        if prev is not None and not prev < (group, topic, partition):
            raise SnapshotError("task positions not strictly sorted")
        prev = (group, topic, partition)
        n = r.uv(MAX_TASK_SOURCES)
        if n == 0:
            raise SnapshotError("task position vector without sources")
        vector = tuple((r.topic(), r.uv(MAX_OFFSET + 1) - 1) for _ in range(n))
        if not _sorted_strictly([t for t, _ in vector]):
            raise SnapshotError("task sources not strictly sorted")
        part = parts.get(record_key(group, topic, partition))
        # the partition's scalar is the vector's: both were set by the same record
        if part is None or part.last != task_last_offset(vector):
            raise SnapshotError("task positions that do not match their partition")
        part.positions = vector


def _read_partition(r: _Reader, version: int, applied: int, now: int) -> PartitionEntry:
    """One partition's entry of a snapshot of ``version`` (the world's ``applied_through``
    and ``now`` bound what it may hold)."""
    group, topic, partition = r.ident(), r.topic(), r.uv(MAX_PARTITION)
    flags = r.byte()
    allowed = (
        _HELD
        | _POSITIONED
        | (_FLOORED if version >= _SNAPSHOT_V4 else 0)
        | (_LEASED if version >= _SNAPSHOT_V5 else 0)
        | (_TENURED | _ENDED | _VOIDED if version >= SNAPSHOT_VERSION else 0)
    )
    if (
        flags & ~allowed
        or (flags & _FLOORED and flags & (_HELD | _POSITIONED) != 3)
        or (flags & _TENURED and not flags & _HELD)
        or (flags & _ENDED and flags & _HELD)
        or (flags & _VOIDED and not flags & _ENDED)
    ):
        raise SnapshotError(f"bad partition flags {flags}")
    holder = hb = None
    tenure = -1
    if flags & _HELD:
        holder = (r.ident(), r.ident())
        hb = r.uv(MAX_HEARTBEAT_INTERVAL_MS)
        if hb == 0:
            raise SnapshotError("heartbeat interval out of range")
        if flags & _TENURED:
            tenure = r.uv(MAX_OFFSET)
            if tenure > applied:
                raise SnapshotError("a tenure that begins after applied_through")
    beat = r.sv()
    if beat > now:
        raise SnapshotError("a partition's last beat after the world's now")
    last, claimed = NO_POSITION, -1
    if flags & _POSITIONED:
        last = r.uv(MAX_OFFSET + 1) - 1
        claimed = r.uv(MAX_OFFSET + 1) - 1
    floor = r.uv(MAX_OFFSET + 1) - 1 if flags & _FLOORED else None
    fenced_until = NO_TIME
    if flags & _LEASED:
        # (a lease ends at most 2·HB + 1 after its last beat, which is at most now)
        ahead = r.uv(2 * MAX_HEARTBEAT_INTERVAL_MS + 1)
        if ahead == 0:
            raise SnapshotError("a lease end that is not ahead of now")
        fenced_until = now + ahead
        # every lease the log keeps ends within 2·HB + 1 of a beat at or before the
        # partition's last one (the removed holder's; a takeover or release only
        # moves last_beat on)
        if fenced_until > beat + 2 * MAX_HEARTBEAT_INTERVAL_MS + 1:
            raise SnapshotError("a lease end no log could give")
    last_holder = None
    voided_at = None
    if flags & _ENDED:
        last_holder = (r.ident(), r.ident())
        if flags & _VOIDED:
            voided_at = beat + r.uv()
            if voided_at > now:
                raise SnapshotError("a holder voided after the world's now")
    return PartitionEntry(
        group,
        topic,
        partition,
        holder,
        beat,
        last,
        claimed,
        hb or 0,
        None,
        floor,
        fenced_until,
        tenure,
        last_holder,
        voided_at,
    )


def _read_partitions(
    r: _Reader, version: int, applied: int, now: int
) -> dict[bytes, PartitionEntry]:
    """The partitions section: record key -> entry, strictly sorted by (group, topic,
    partition)."""
    parts: dict[bytes, PartitionEntry] = {}
    prev_key = None
    for _ in range(r.uv()):
        part = _read_partition(r, version, applied, now)
        sort_key = (part.group, part.topic, part.partition)
        if prev_key is not None and not prev_key < sort_key:
            raise SnapshotError("partitions not strictly sorted")
        prev_key = sort_key
        parts[record_key(part.group, part.topic, part.partition)] = part
    return parts


def _read_halted(
    r: _Reader,
    applied: int,
    parts: dict[bytes, PartitionEntry],
    rejections: dict[Reason, int],
) -> dict[str, tuple[int, int]]:
    """The halted groups section (version 6), checked against what else the snapshot
    holds: a version 6 snapshot must need version 6."""
    halted: dict[str, tuple[int, int]] = {}
    for _ in range(r.uv()):
        group = r.ident()
        offset = r.uv(MAX_OFFSET)
        protocol = r.byte()
        if offset > applied or protocol not in FUTURE_VERSIONS:
            raise SnapshotError("a halted group no log could give")
        if halted and max(halted) >= group:
            raise SnapshotError("halted groups not strictly sorted")
        halted[group] = (offset, protocol)
    if not halted and not any(p.tenure >= 0 or p.last_holder is not None for p in parts.values()):
        raise SnapshotError("a version 6 snapshot of a world an older version holds")
    if bool(halted) != bool(rejections[Reason.GROUP_HALTED]):
        raise SnapshotError("halted groups without their rejections, or the other way")
    return halted


def _read_verdict_offsets(r: _Reader, n: int, applied: int) -> array:
    """The ``n`` offsets of the verdict window, ascending, the last ``applied``."""
    buf = r.buf
    offsets = array("q")
    prev = -1
    i = 0
    while i < n:
        delta = r.uv()
        if delta == 0:
            raise SnapshotError("verdict offsets not increasing")
        prev += delta
        i += 1
        # fast path: a run of consecutive offsets is a run of 0x01 bytes
        run = min(n - i, len(buf) - r.pos)
        if run and buf[r.pos] == 1:
            k = 0
            while k < run and buf[r.pos + k] == 1:
                k += 1
            offsets.append(prev)
            offsets.extend(range(prev + 1, prev + 1 + k))
            prev += k
            r.pos += k
            i += k
        else:
            offsets.append(prev)
        if prev > applied:
            raise SnapshotError("verdict offset beyond applied_through")
    if (offsets[-1] if n else -1) != applied:
        raise SnapshotError("verdict offsets out of range")
    return offsets


def load(data: bytes) -> WorldImage:
    """The image of a world in a snapshot (``WorldState.from_bytes`` restores it); strict:
    ``SnapshotError`` on anything but a canonical snapshot of a supported version."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SnapshotError("snapshot must be bytes")
    buf = bytes(data)
    if buf[:4] != MAGIC:
        raise SnapshotError("not a WorldState snapshot (bad magic)")
    r = _Reader(buf)
    r.pos = 4
    version = r.byte()
    if version not in (
        _SNAPSHOT_V1,
        _SNAPSHOT_V2,
        _SNAPSHOT_V3,
        _SNAPSHOT_V4,
        _SNAPSHOT_V5,
        SNAPSHOT_VERSION,
    ):
        raise SnapshotError(f"unsupported snapshot version {version}")
    window = r.uv()
    if window == 0:
        raise SnapshotError("verdict window must be positive")
    applied = r.uv(MAX_OFFSET + 1) - 1
    now = r.sv()
    if not NO_TIME <= now <= MAX_OFFSET:
        raise SnapshotError("now out of range")
    counted = REASON_CODES if version >= SNAPSHOT_VERSION else REASON_CODES[:_OLD_REASONS]
    rejections = dict.fromkeys(REASON_CODES, 0)
    rejections.update((reason, r.uv()) for reason in counted)
    fenced = [(r.ident(), r.ident()) for _ in range(r.uv())]
    if not _sorted_strictly(fenced):
        raise SnapshotError("fenced instances not strictly sorted")
    pauses = []
    for _ in range(r.uv()):
        group = r.ident()
        expires = r.sv()
        pauses.append((group, expires, (r.ident(), r.ident())))
        if expires <= now:
            raise SnapshotError("expired pause window in snapshot")
    if not _sorted_strictly([p[0] for p in pauses]):
        raise SnapshotError("pauses not strictly sorted")
    parts = _read_partitions(r, version, applied, now)
    members = _read_members(r, version) if version >= _SNAPSHOT_V2 else {}
    if version >= _SNAPSHOT_V3:
        _read_positions(r, parts, version)
    halted = _read_halted(r, applied, parts, rejections) if version >= SNAPSHOT_VERSION else {}
    if version == _SNAPSHOT_V5 and not any(p.fenced_until > now for p in parts.values()):
        raise SnapshotError("a version 5 snapshot of a world an older version holds")
    if version == _SNAPSHOT_V4 and not (
        any(p.floor is not None for p in parts.values())
        or any(m.version != 2 for ms in members.values() for m in ms.values())
    ):
        raise SnapshotError("a version 4 snapshot of a world an older version holds")
    n = r.uv(2 * window)
    offsets = _read_verdict_offsets(r, n, applied)
    verdicts = _read_verdicts(r, n)
    if version < SNAPSHOT_VERSION and REJECTED[Reason.GROUP_HALTED] in verdicts:
        raise SnapshotError("a GROUP_HALTED verdict in a snapshot older than version 6")
    if r.pos != len(buf):
        raise SnapshotError(f"{len(buf) - r.pos} trailing bytes")
    return WorldImage(
        verdict_window=window,
        applied_through=applied,
        now=now,
        rejections=rejections,
        fenced=fenced,
        pauses={g: (e, a) for g, e, a in pauses},
        partitions=list(parts.values()),
        members=members,
        verdict_offsets=offsets,
        verdicts=verdicts,
        halted_groups=halted,
    )
