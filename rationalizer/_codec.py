"""Binary codec for coordination records (layout: PROTOCOL.md, "Record value").

Strict by design: exactly one byte string encodes a given message, so anything that is
not the canonical encoding (overlong varints, trailing bytes, a key that disagrees with the
value, ...) is a ``DecodeError``. That makes every replayer skip exactly the same records.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from struct import Struct
from typing import Any
from zlib import crc32

from ._messages import (
    AUTH_TAG_BYTES,
    MAX_BEAT_ENTRIES,
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_ID_BYTES,
    MAX_MEMBER_TOPICS,
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_TASK_SOURCES,
    MAX_TOPIC_LENGTH,
    MAX_WEIGHT,
    AnnouncingMember,
    BeatEntry,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    MemberHeartbeat,
    Message,
    NamingTenure,
    Positions,
    ReleaseGroup,
    ReleasingPartition,
    ReleasingTask,
    task_last_offset,
    valid_topic,
)
from ._varint import append_uvarint, read_uvarint, read_varints, uvarint

_native_varints: Callable[[bytes, int, int], tuple[list[int], int] | None] | None
try:  # the C reader of many varints (setup.py builds it); else the Python one, the same
    from ._vectors import varints as _native_varints
except ImportError:  # pragma: no cover - an unbuilt tree
    _native_varints = None

__all__ = [
    "T_ANNOUNCING_MEMBER",
    "T_CLAIMING_MESSAGES",
    "T_CLAIMING_PARTITION",
    "T_HEARTBEAT",
    "T_HEARTBEATING_TASK",
    "T_LEAVING_GROUP",
    "T_NAMING_TENURE",
    "T_RELEASE_GROUP",
    "T_RELEASING_PARTITION",
    "T_RELEASING_TASK",
    "VERSION_1",
    "VERSION_2",
    "VERSION_3",
    "VERSION_4",
    "VERSION_5",
    "VERSION_6",
    "VERSION_7",
    "VERSION_8",
    "VERSION_9",
    "DecodeError",
    "Envelope",
    "MemberFields",
    "ReservationFields",
    "TaskFields",
    "UnknownVersion",
    "decode_member_fields",
    "decode_reservation_fields",
    "decode_task_fields",
    "decode_v6_fields",
    "decode_v7_fields",
    "decode_v8_fields",
    "encode",
    "envelope",
    "record_key",
]

VERSION_1 = 1
VERSION_2 = 2
VERSION_3 = 3
VERSION_4 = 4
VERSION_5 = 5
VERSION_6 = 6
VERSION_7 = 7
VERSION_8 = 8
VERSION_9 = 9

T_HEARTBEAT = 1
T_CLAIMING_PARTITION = 2
T_RELEASING_PARTITION = 3
T_CLAIMING_MESSAGES = 4
T_RELEASE_GROUP = 5
T_ANNOUNCING_MEMBER = 6  # version 2
T_LEAVING_GROUP = 7  # version 2
T_HEARTBEATING_TASK = 8  # version 3
T_RELEASING_TASK = 9  # version 3
T_NAMING_TENURE = 10  # version 9

#: Header layout per type: every field that changes from one record of a sender to the next
#: (int64, heartbeat interval, auth tag) is at a fixed position before the identity part
#: (ids, topic, partition), which is constant for one sender and partition and identical for
#: all four partition types — that is what the replayer caches.
HAS_I64 = frozenset({T_HEARTBEAT, T_RELEASING_PARTITION, T_CLAIMING_MESSAGES, T_RELEASE_GROUP})
HAS_HB = frozenset({T_HEARTBEAT, T_CLAIMING_PARTITION})
HAS_TAG = frozenset({T_HEARTBEAT, T_RELEASE_GROUP})
#: Where the auth tag field (length byte, then the tag) starts, per type that has one.
TAG_POS = {T_HEARTBEAT: 14, T_RELEASE_GROUP: 10}
#: Where the identity part starts for an untagged record (add AUTH_TAG_BYTES when tagged).
IDENT_START = {
    T_HEARTBEAT: 15,
    T_CLAIMING_PARTITION: 6,
    T_RELEASING_PARTITION: 10,
    T_CLAIMING_MESSAGES: 10,
    T_RELEASE_GROUP: 11,
}

_I64 = Struct(">q")
_U32 = Struct(">I")
#: the record types under version byte 6
_V6_TYPES = (T_CLAIMING_PARTITION, T_RELEASING_PARTITION, T_RELEASING_TASK)
_HDR = Struct(">BB")
_ANNOUNCE_HEAD = Struct(">IHIB")  # heartbeat_interval_ms, weight, max_claims, flags
_ENTIRE_TOPIC = 0x01
#: The messages of one partition: their identity part names the topic and partition.
PartitionMessage = (
    Heartbeat
    | ClaimingPartition
    | ReleasingPartition
    | ClaimingMessages
    | HeartbeatingTask
    | ReleasingTask
    | NamingTenure
)


class DecodeError(ValueError):
    """The record is not a valid encoding of any known message (versions 1 to 9)."""


class UnknownVersion(Exception):
    """A record of a protocol version to come (``messages.FUTURE_VERSIONS``): replay of its
    coordination partition stops before it. Not a ``DecodeError``: such a record is never
    skipped, since this code does not know the rules that record's writer relies on.

    ``verdicts`` are those of the records the same ``apply_many`` call applied before it."""

    def __init__(self, offset: int, version: int, verdicts: list | tuple = ()) -> None:
        super().__init__(
            f"the record at offset {offset} is of protocol version {version}; this replayer "
            f"knows versions 1 to 9 and stops here: upgrade it before replaying this log"
        )
        self.offset = offset
        self.version = version
        self.verdicts = list(verdicts)


def record_key(group_id: str, topic: str | None = None, partition: int | None = None) -> bytes:
    """Canonical record key: ``group/topic/partition`` or ``group`` for ReleaseGroup."""
    if topic is None:
        return group_id.encode("utf-8")
    return f"{group_id}/{topic}/{partition}".encode()


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return uvarint(len(b)) + b


def _tag(tag: bytes | None) -> bytes:
    return b"\x00" if tag is None else bytes((AUTH_TAG_BYTES,)) + tag


def encode(msg: Message) -> tuple[bytes, bytes]:
    """Encode a message to its ``(key, value)`` record; the inverse of :func:`decode`."""
    encoder = _ENCODERS.get(type(msg))
    if encoder is None:
        raise TypeError(f"not a coordination message: {msg!r}")
    return encoder(msg)


def _ident(msg: Message) -> bytes:
    return _str(msg.client_id) + _str(msg.instance_id) + _str(msg.group_id)


def _tail(msg: PartitionMessage) -> bytes:
    """A partition record's identity part: the ids, the topic and the partition."""
    return _ident(msg) + _str(msg.topic) + uvarint(msg.partition)


def _partition_key(msg: PartitionMessage) -> bytes:
    return record_key(msg.group_id, msg.topic, msg.partition)


def _encode_announcing_member(msg: AnnouncingMember) -> tuple[bytes, bytes]:
    flags = _ENTIRE_TOPIC if msg.entire_topic else 0
    head = _HDR.pack(msg.version, T_ANNOUNCING_MEMBER) + _ANNOUNCE_HEAD.pack(
        msg.heartbeat_interval_ms, msg.weight, msg.max_claims, flags
    )
    return record_key(msg.group_id), head + _ident(msg) + _topic_numbers(msg.topics, 0)


def _encode_leaving_group(msg: LeavingGroup) -> tuple[bytes, bytes]:
    return record_key(msg.group_id), _HDR.pack(VERSION_2, T_LEAVING_GROUP) + _ident(msg)


def _encode_heartbeating_task(msg: HeartbeatingTask) -> tuple[bytes, bytes]:
    if msg.tenure is not None:  # version 8: in the envelope, naming the tenure it beats in
        body = (
            _U32.pack(msg.heartbeat_interval_ms)
            + _I64.pack(msg.tenure)
            + _topic_numbers(msg.positions, 1)
            + _tail(msg)
        )
        return _partition_key(msg), seal(VERSION_8, T_HEARTBEATING_TASK, msg.group_id, body)
    head = _HDR.pack(VERSION_3, T_HEARTBEATING_TASK) + _U32.pack(msg.heartbeat_interval_ms)
    vector = _topic_numbers(msg.positions, 1)  # an offset is stored + 1: -1 is 0x00
    return _partition_key(msg), head + vector + _tail(msg)


def _encode_releasing_task(msg: ReleasingTask) -> tuple[bytes, bytes]:
    if msg.tenure is not None:  # version 6, naming its tenure
        body = _I64.pack(msg.tenure) + _topic_numbers(msg.positions, 1) + _tail(msg)
        return _partition_key(msg), seal(VERSION_6, T_RELEASING_TASK, msg.group_id, body)
    head = _HDR.pack(VERSION_3, T_RELEASING_TASK)
    return _partition_key(msg), head + _topic_numbers(msg.positions, 1) + _tail(msg)


def _encode_release_group(msg: ReleaseGroup) -> tuple[bytes, bytes]:
    value = (
        _HDR.pack(msg.version, T_RELEASE_GROUP)
        + _I64.pack(msg.msg_expire_time)
        + _tag(msg.auth_tag)
        + _ident(msg)
    )
    return record_key(msg.group_id), value


def _encode_heartbeat(msg: Heartbeat) -> tuple[bytes, bytes]:
    head = (
        _HDR.pack(msg.version, T_HEARTBEAT)
        + _I64.pack(msg.last_offset)
        + _U32.pack(msg.heartbeat_interval_ms)
        + _tag(msg.auth_tag)
    )
    return _partition_key(msg), head + _tail(msg)


def _encode_claiming_partition(msg: ClaimingPartition) -> tuple[bytes, bytes]:
    if msg.version == VERSION_6:  # in the envelope: its offset names the tenure it begins
        body = _U32.pack(msg.heartbeat_interval_ms) + _tail(msg)
        return _partition_key(msg), seal(VERSION_6, T_CLAIMING_PARTITION, msg.group_id, body)
    head = _HDR.pack(msg.version, T_CLAIMING_PARTITION) + _U32.pack(msg.heartbeat_interval_ms)
    return _partition_key(msg), head + _tail(msg)


def _encode_releasing_partition(msg: ReleasingPartition) -> tuple[bytes, bytes]:
    if msg.tenure is not None:  # version 6: in the envelope, naming the tenure it ends
        body = _I64.pack(msg.tenure) + _I64.pack(msg.last_offset) + _tail(msg)
        return _partition_key(msg), seal(VERSION_6, T_RELEASING_PARTITION, msg.group_id, body)
    head = _HDR.pack(msg.version, T_RELEASING_PARTITION) + _I64.pack(msg.last_offset)
    return _partition_key(msg), head + _tail(msg)


def _encode_claiming_messages(msg: ClaimingMessages) -> tuple[bytes, bytes]:
    if msg.first_offset is not None:  # version 4: the reservation names where it starts
        head = (
            _HDR.pack(VERSION_4, T_CLAIMING_MESSAGES)
            + _I64.pack(msg.first_offset)
            + _I64.pack(msg.proposed_last_offset)
        )
    else:
        head = _HDR.pack(msg.version, T_CLAIMING_MESSAGES) + _I64.pack(msg.proposed_last_offset)
    return _partition_key(msg), head + _tail(msg)


def _encode_member_heartbeat(msg: MemberHeartbeat) -> tuple[bytes, bytes]:
    """Version 7 (PROTOCOL.md, "Version 7"): the envelope, the heartbeat interval, the
    sender's ids, then the entries grouped by topic, every number a varint."""
    parts = [_U32.pack(msg.heartbeat_interval_ms), _str(msg.client_id), _str(msg.instance_id)]
    groups: list[tuple[str, list[BeatEntry]]] = []
    for entry in msg.entries:
        if not groups or groups[-1][0] != entry[0]:
            groups.append((entry[0], []))
        groups[-1][1].append(entry)
    out = bytearray(b"".join(parts))
    append_uvarint(out, len(groups))
    for topic, entries in groups:
        out += _str(topic)
        append_uvarint(out, len(entries))
        for _, partition, tenure, last in entries:  # (a member's every held partition)
            append_uvarint(out, partition)
            append_uvarint(out, tenure)
            append_uvarint(out, last + 1)
    body = bytes(out)
    return record_key(msg.group_id), seal(VERSION_7, T_HEARTBEAT, msg.group_id, body)


def _encode_naming_tenure(msg: NamingTenure) -> tuple[bytes, bytes]:
    """Version 9 (PROTOCOL.md, "Version 9"): the envelope, then the identity part."""
    return _partition_key(msg), seal(VERSION_9, T_NAMING_TENURE, msg.group_id, _tail(msg))


#: Message class (exactly: not a subclass) -> its encoder.
_ENCODERS: dict[type, Callable[[Any], tuple[bytes, bytes]]] = {
    AnnouncingMember: _encode_announcing_member,
    LeavingGroup: _encode_leaving_group,
    HeartbeatingTask: _encode_heartbeating_task,
    ReleasingTask: _encode_releasing_task,
    ReleaseGroup: _encode_release_group,
    Heartbeat: _encode_heartbeat,
    ClaimingPartition: _encode_claiming_partition,
    ReleasingPartition: _encode_releasing_partition,
    ClaimingMessages: _encode_claiming_messages,
    MemberHeartbeat: _encode_member_heartbeat,
    NamingTenure: _encode_naming_tenure,
}


#: ``(version, type, group_id, end)`` of a record's envelope (version 6 and later):
#: ``value[end:]`` is what the version and type define.
Envelope = tuple[int, int, str, int]

#: Where the check of an envelope sits (bytes 2..5) and where its group id starts.
_CHECK_AT = 2
ENVELOPE_GROUP_AT = 6


def _check(value: bytes) -> int:
    """CRC-32 (ISO-HDLC, ``zlib.crc32``) of the value without its four check bytes."""
    return crc32(value[ENVELOPE_GROUP_AT:], crc32(value[:_CHECK_AT]))


def seal(version: int, typ: int, group_id: str, body: bytes) -> bytes:
    """A record in the envelope of version 6 and later (PROTOCOL.md, "Version 6"): version,
    type, the check, the group id, then ``body`` (what the version and type define)."""
    rest = _str(group_id) + body
    head = _HDR.pack(version, typ)
    return head + _U32.pack(crc32(rest, crc32(head))) + rest


def envelope(value: object) -> Envelope:
    """The envelope of a record of version 6 or later: version and type, the check, and the
    group id the record belongs to (a valid id). What follows is the version's own; a
    replayer that does not know the version still learns, from the envelope alone, that the
    bytes are a record and which group it concerns. Raises only :class:`DecodeError`: a
    check that does not match (random bytes whose first byte looks like a version), a
    truncated or invalid group id."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise DecodeError(f"value must be bytes, got {type(value).__name__}")
    buf = bytes(value)
    if len(buf) < ENVELOPE_GROUP_AT + 2:
        raise DecodeError("value shorter than an envelope")
    if _U32.unpack_from(buf, _CHECK_AT)[0] != _check(buf):
        raise DecodeError("the envelope's check does not match")
    group, end = _read_str(buf, ENVELOPE_GROUP_AT, MAX_ID_BYTES, "group_id")
    return buf[0], buf[1], group, end


def unsigned_value(value: bytes) -> bytes:
    """The encoding a tag is computed over: ``value`` (a valid Heartbeat or ReleaseGroup
    encoding) with its tag field emptied."""
    pos = TAG_POS[value[1]]
    if value[pos] == 0:
        return bytes(value)
    return bytes(value[:pos]) + b"\x00" + bytes(value[pos + 1 + AUTH_TAG_BYTES :])


def _read_str(buf: bytes, pos: int, limit: int, what: str) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos, limit, what + " length", DecodeError)
    if n == 0:
        raise DecodeError(f"empty {what}")
    end = pos + n
    if end > len(buf):
        raise DecodeError(f"truncated {what}")
    try:
        s = buf[pos:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not valid UTF-8") from exc
    return s, end


def _record_bytes(key: object, value: object) -> tuple[bytes | bytearray | memoryview, bytes]:
    """The key and the value as bytes, once key and value are byte strings and the value
    holds at least a version and a type byte."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise DecodeError(f"value must be bytes, got {type(value).__name__}")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise DecodeError(f"key must be bytes, got {type(key).__name__}")
    buf = bytes(value)
    if len(buf) < 2:
        raise DecodeError("value shorter than its header")
    return key, buf


Fields = tuple[
    int, str, str, str, "str | None", "int | None", "int | None", int, "int | None", "bytes | None"
]


def _topic_numbers(pairs: tuple[tuple[str, int], ...], add: int) -> bytes:
    """A count, then each topic as ``str`` and its number ``+ add`` as a varint: an
    announcement's topic list (partition counts) and a task's vector (offsets, ``add`` 1)."""
    return uvarint(len(pairs)) + b"".join(_str(t) + uvarint(n + add) for t, n in pairs)


def _read_topic_numbers(
    buf: bytes, pos: int, max_count: int, what: str, max_number: int, number: str, add: int
) -> tuple[list[tuple[str, int]], int]:
    """The inverse of :func:`_topic_numbers`, strict: valid topic names, strictly ascending,
    canonical varints within their bounds."""
    n, pos = read_uvarint(buf, pos, max_count, f"{what} count", DecodeError)
    out: list[tuple[str, int]] = []
    for _ in range(n):
        topic, pos = _read_str(buf, pos, MAX_TOPIC_LENGTH, what)
        if not valid_topic(topic):
            raise DecodeError(f"invalid {what} name {topic!r}")
        if out and out[-1][0] >= topic:
            raise DecodeError(f"{what}s are not sorted and unique")
        value, pos = read_uvarint(buf, pos, max_number, number, DecodeError)
        out.append((topic, value - add))
    return out, pos


def _read_identity(
    key: bytes | bytearray | memoryview, buf: bytes, pos: int, partitioned: bool
) -> tuple[str, str, str, str | None, int | None]:
    """The identity part that ends every partition record (versions 1 and 3): ids, then
    topic and partition (``partitioned``), nothing after it, and the key that names them."""
    client, pos = _read_str(buf, pos, MAX_ID_BYTES, "client_id")
    instance, pos = _read_str(buf, pos, MAX_ID_BYTES, "instance_id")
    group, pos = _read_str(buf, pos, MAX_ID_BYTES, "group_id")
    topic = partition = None
    if partitioned:
        topic, pos = _read_str(buf, pos, MAX_TOPIC_LENGTH, "topic")
        if not valid_topic(topic):
            raise DecodeError(f"invalid topic name {topic!r}")
        partition, pos = read_uvarint(buf, pos, MAX_PARTITION, "partition", DecodeError)
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} trailing bytes")
    if bytes(key) != record_key(group, topic, partition):
        raise DecodeError("record key does not match the value")
    return client, instance, group, topic, partition


def decode_fields(key: object, value: object) -> Fields:
    """Decode to a plain tuple, the fast form used by the world state.

    Returns ``(type, client_id, instance_id, group_id, topic, partition, number, ident_start,
    heartbeat_interval_ms, auth_tag)`` where ``number`` is last_offset / proposed_last_offset /
    msg_expire_time (None for ClaimingPartition), ``value[ident_start:]`` is the identity part
    (ids, topic, partition) after the header, ``heartbeat_interval_ms`` is None for the types
    without one and ``auth_tag`` is None when absent. Raises only :class:`DecodeError`.
    """
    key, buf = _record_bytes(key, value)
    version, typ = buf[0], buf[1]
    if version != VERSION_1:
        # version 5 has one layout: a ClaimingPartition (the version 1 one, byte 0 aside)
        if version != VERSION_5:
            raise DecodeError(f"unknown version {version}")
        if typ != T_CLAIMING_PARTITION:
            raise DecodeError(f"unknown version 5 message type {typ}")
    if typ not in IDENT_START:
        raise DecodeError(f"unknown message type {typ}")
    number = hb = tag = None
    pos = 2
    if typ in HAS_I64:
        if len(buf) < pos + 8:
            raise DecodeError("truncated int64 field")
        number = _I64.unpack_from(buf, pos)[0]
        pos += 8
        low = 0 if typ == T_RELEASE_GROUP else -1
        if number < low:
            raise DecodeError(f"int64 field {number} below {low}")
    if typ in HAS_HB:
        if len(buf) < pos + 4:
            raise DecodeError("truncated heartbeat_interval_ms")
        hb = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if not 1 <= hb <= MAX_HEARTBEAT_INTERVAL_MS:
            raise DecodeError(f"heartbeat_interval_ms {hb} out of range")
    if typ in HAS_TAG:
        if pos >= len(buf):
            raise DecodeError("truncated auth_tag")
        n = buf[pos]
        pos += 1
        if n == AUTH_TAG_BYTES:
            if len(buf) < pos + AUTH_TAG_BYTES:
                raise DecodeError("truncated auth_tag")
            tag = buf[pos : pos + AUTH_TAG_BYTES]
            pos += AUTH_TAG_BYTES
        elif n != 0:
            raise DecodeError(f"auth_tag length must be 0 or {AUTH_TAG_BYTES}, got {n}")
    start = pos
    client, instance, group, topic, partition = _read_identity(
        key, buf, pos, typ != T_RELEASE_GROUP
    )
    assert number is None or number <= MAX_OFFSET
    return typ, client, instance, group, topic, partition, number, start, hb, tag


#: ``(type, client_id, instance_id, group_id, topics, heartbeat_interval_ms, weight,
#: max_claims, entire_topic, version)``; for LeavingGroup the middle five are ``(), 0, 0, 0,
#: False``. ``version``: the record's version byte (an announcement's: 2 or 4).
MemberFields = tuple[int, str, str, str, tuple[tuple[str, int], ...], int, int, int, bool, int]


def decode_member_fields(key: object, value: object) -> MemberFields:
    """Decode a membership record strictly (AnnouncingMember of version 2 or 4, LeavingGroup
    of version 2), to a plain tuple (:data:`MemberFields`). Raises only :class:`DecodeError`."""
    key, buf = _record_bytes(key, value)
    version, typ = buf[0], buf[1]
    if version == VERSION_4:
        if typ != T_ANNOUNCING_MEMBER:
            raise DecodeError(f"unknown version 4 membership type {typ}")
    elif version != VERSION_2:
        raise DecodeError(f"not a membership record (version {version})")
    elif typ not in (T_ANNOUNCING_MEMBER, T_LEAVING_GROUP):
        raise DecodeError(f"unknown version 2 message type {typ}")
    pos = 2
    hb = weight = max_claims = 0
    entire = False
    if typ == T_ANNOUNCING_MEMBER:
        if len(buf) < pos + _ANNOUNCE_HEAD.size:
            raise DecodeError("truncated announcement header")
        hb, weight, max_claims, flags = _ANNOUNCE_HEAD.unpack_from(buf, pos)
        pos += _ANNOUNCE_HEAD.size
        if not 1 <= hb <= MAX_HEARTBEAT_INTERVAL_MS:
            raise DecodeError(f"heartbeat_interval_ms {hb} out of range")
        if not 1 <= weight <= MAX_WEIGHT:
            raise DecodeError(f"weight {weight} out of range")
        if max_claims > MAX_PARTITION:
            raise DecodeError(f"max_claims {max_claims} out of range")
        if flags & ~_ENTIRE_TOPIC:
            raise DecodeError(f"unknown announcement flags {flags:#x}")
        entire = bool(flags & _ENTIRE_TOPIC)
    client, pos = _read_str(buf, pos, MAX_ID_BYTES, "client_id")
    instance, pos = _read_str(buf, pos, MAX_ID_BYTES, "instance_id")
    group, pos = _read_str(buf, pos, MAX_ID_BYTES, "group_id")
    topics: list[tuple[str, int]] = []
    if typ == T_ANNOUNCING_MEMBER:
        topics, pos = _read_topic_numbers(
            buf, pos, MAX_MEMBER_TOPICS, "topic", MAX_PARTITION + 1, "partition count", 0
        )
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} trailing bytes")
    if bytes(key) != record_key(group):
        raise DecodeError("record key does not match the value")
    return typ, client, instance, group, tuple(topics), hb, weight, max_claims, entire, version


#: ``(client_id, instance_id, group_id, topic, partition, first_offset,
#: proposed_last_offset, ident_start)`` of a version 4 ClaimingMessages;
#: ``value[ident_start:]`` is the identity part, byte for byte that of the version 1 types.
ReservationFields = tuple[str, str, str, str, int, int, int, int]


def decode_reservation_fields(key: object, value: object) -> ReservationFields:
    """Decode a version 4 ClaimingMessages strictly (:data:`ReservationFields`): two int64,
    ``0 <= first_offset <= proposed_last_offset``, then the identity part. Raises only
    :class:`DecodeError`."""
    key, buf = _record_bytes(key, value)
    if buf[0] != VERSION_4 or buf[1] != T_CLAIMING_MESSAGES:
        raise DecodeError(f"not a version 4 ClaimingMessages (version {buf[0]}, type {buf[1]})")
    if len(buf) < 18:
        raise DecodeError("truncated int64 field")
    first = _I64.unpack_from(buf, 2)[0]
    last = _I64.unpack_from(buf, 10)[0]
    if not 0 <= first <= last:
        raise DecodeError(f"reservation {first}..{last} is not 0 <= first <= last")
    client, instance, group, topic, partition = _read_identity(key, buf, 18, True)
    assert topic is not None and partition is not None
    return client, instance, group, topic, partition, first, last, 18


def _opened(
    key: object, value: object, version: int, types: tuple[int, ...]
) -> tuple[bytes | bytearray | memoryview, bytes, int, str, int]:
    """A record of ``version`` (6 or later) opened: its key and value as bytes, its type
    (one of ``types``), the envelope's group and where the rest starts. Raises only
    :class:`DecodeError`."""
    key, buf = _record_bytes(key, value)
    got, typ, group, pos = envelope(value)
    if got != version:
        raise DecodeError(f"not a version {version} record (version {got})")
    if typ not in types:
        raise DecodeError(f"unknown version {version} message type {typ}")
    return key, buf, typ, group, pos


def _enveloped_identity(
    key: bytes | bytearray | memoryview, buf: bytes, pos: int, group: str
) -> tuple[str, str, str, int]:
    """The identity part of a partition record of version 6 or later (:func:`_read_identity`),
    whose group must be the envelope's ``group``: ``(client_id, instance_id, topic,
    partition)``."""
    client, instance, ident_group, topic, partition = _read_identity(key, buf, pos, True)
    if ident_group != group:
        raise DecodeError("the envelope's group is not the record's")
    assert topic is not None and partition is not None
    return client, instance, topic, partition


#: ``(type, client_id, instance_id, group_id, topic, partition, number, ident_start,
#: last_offset, positions)`` of a version 6 record: ``number`` is the heartbeat interval of
#: a ClaimingPartition, the tenure of a ReleasingPartition or ReleasingTask; ``last_offset``
#: is a release's (a task's: its vector's scalar), else -1; ``positions`` a ReleasingTask's
#: vector, else None; ``value[ident_start:]`` is the identity part, byte for byte that of
#: the version 1 types.
V6Fields = tuple[int, str, str, str, str, int, int, int, int, "Positions | None"]


def decode_v6_fields(key: object, value: object) -> V6Fields:
    """Decode a version 6 record strictly (:data:`V6Fields`): the envelope (its check and
    group id), then per type: a ClaimingPartition's heartbeat interval (1..3,600,000), a
    ReleasingPartition's tenure (0..2^63-1) and last_offset (-1..2^63-1), a ReleasingTask's
    tenure and position vector (as version 3 writes it); then the identity
    part, whose group must be the envelope's. Raises only :class:`DecodeError`."""
    key, buf, typ, group, pos = _opened(key, value, VERSION_6, _V6_TYPES)
    last = -1
    vector: Positions | None = None
    if typ == T_CLAIMING_PARTITION:
        if len(buf) < pos + 4:
            raise DecodeError("truncated heartbeat_interval_ms")
        number = _U32.unpack_from(buf, pos)[0]
        if not 1 <= number <= MAX_HEARTBEAT_INTERVAL_MS:
            raise DecodeError(f"heartbeat_interval_ms {number} out of range")
        start = pos + 4
    elif typ == T_RELEASING_PARTITION:
        if len(buf) < pos + 16:
            raise DecodeError("truncated int64 field")
        number = _I64.unpack_from(buf, pos)[0]
        last = _I64.unpack_from(buf, pos + 8)[0]
        if number < 0:
            raise DecodeError(f"tenure {number} below 0")
        if last < -1:
            raise DecodeError(f"last_offset {last} below -1")
        start = pos + 16
    else:  # T_RELEASING_TASK
        if len(buf) < pos + 8:
            raise DecodeError("truncated int64 field")
        number = _I64.unpack_from(buf, pos)[0]
        if number < 0:
            raise DecodeError(f"tenure {number} below 0")
        positions, start = _read_topic_numbers(
            buf, pos + 8, MAX_TASK_SOURCES, "source topic", MAX_OFFSET + 1, "source position", 1
        )
        if not positions:
            raise DecodeError("a task without sources")
        vector = tuple(positions)
        last = task_last_offset(vector)
        if last > MAX_OFFSET:
            raise DecodeError("the task's positions add up beyond 2^63 - 1")
    client, instance, topic, partition = _enveloped_identity(key, buf, start, group)
    return typ, client, instance, group, topic, partition, number, start, last, vector


#: ``(client_id, instance_id, group_id, heartbeat_interval_ms, entries)`` of a version 7
#: MemberHeartbeat: ``entries`` as ``MemberHeartbeat.entries``.
V7Fields = tuple[str, str, str, int, list[BeatEntry]]


def decode_v7_fields(key: object, value: object) -> V7Fields:
    """Decode a version 7 MemberHeartbeat strictly (:data:`V7Fields`): the envelope (its
    check and group id; key ``group``), the heartbeat interval (1..3,600,000), the sender's
    ids, then 1..``MAX_BEAT_ENTRIES`` entries grouped by topic (each topic and each group
    non-empty), strictly ascending by (topic, partition), each a partition, a tenure
    (0..2^63-1) and ``last_offset + 1`` (0..2^63), canonical varints, nothing after them.
    Raises only :class:`DecodeError`."""
    key, buf, _, group, pos = _opened(key, value, VERSION_7, (T_HEARTBEAT,))
    if bytes(key) != record_key(group):
        raise DecodeError("record key does not match the value")
    if len(buf) < pos + 4:
        raise DecodeError("truncated heartbeat_interval_ms")
    hb = _U32.unpack_from(buf, pos)[0]
    if not 1 <= hb <= MAX_HEARTBEAT_INTERVAL_MS:
        raise DecodeError(f"heartbeat_interval_ms {hb} out of range")
    client, pos = _read_str(buf, pos + 4, MAX_ID_BYTES, "client_id")
    instance, pos = _read_str(buf, pos, MAX_ID_BYTES, "instance_id")
    n_topics, pos = read_uvarint(buf, pos, MAX_BEAT_ENTRIES, "topic count", DecodeError)
    if n_topics == 0:
        raise DecodeError("a member heartbeat without entries")
    entries: list[BeatEntry] = []
    previous = ""
    for _ in range(n_topics):
        topic, pos = _read_str(buf, pos, MAX_TOPIC_LENGTH, "topic")
        if not valid_topic(topic):
            raise DecodeError(f"invalid topic name {topic!r}")
        if topic <= previous:
            raise DecodeError("topics are not sorted and unique")
        previous = topic
        room = MAX_BEAT_ENTRIES - len(entries)
        n, pos = read_uvarint(buf, pos, room, "entry count", DecodeError)
        if n == 0:
            raise DecodeError(f"topic {topic!r} without entries")
        got = None if _native_varints is None else _native_varints(buf, pos, 3 * n)
        # (None: anything unusual, which the Python reader names)
        numbers, pos = read_varints(buf, pos, 3 * n, DecodeError) if got is None else got
        partitions = numbers[0::3]
        tenures = numbers[1::3]
        lasts = numbers[2::3]
        if n > 1 and (partitions != sorted(partitions) or len(set(partitions)) != n):
            raise DecodeError("partitions are not sorted and unique")
        if partitions[-1] > MAX_PARTITION:
            raise DecodeError("partition out of range")
        if max(tenures) > MAX_OFFSET:
            raise DecodeError("tenure out of range")
        if max(lasts) > MAX_OFFSET + 1:
            raise DecodeError("last_offset out of range")
        entries += zip(repeat(topic), partitions, tenures, [x - 1 for x in lasts])
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} trailing bytes")
    return client, instance, group, hb, entries


#: ``(client_id, instance_id, group_id, topic, partition, heartbeat_interval_ms, tenure,
#: positions, ident_start)`` of a version 8 HeartbeatingTask: ``value[ident_start:]`` is the
#: identity part, byte for byte that of the version 1 types.
V8Fields = tuple[str, str, str, str, int, int, int, Positions, int]


def decode_v8_fields(key: object, value: object) -> V8Fields:
    """Decode a version 8 HeartbeatingTask strictly (:data:`V8Fields`): the envelope (its
    check and group id), the heartbeat interval (1..3,600,000), the tenure (0..2^63-1), the
    position vector (as version 3 writes it), then the identity part, whose group must be
    the envelope's. Raises only :class:`DecodeError`."""
    key, buf, _, group, pos = _opened(key, value, VERSION_8, (T_HEARTBEATING_TASK,))
    if len(buf) < pos + 12:
        raise DecodeError("truncated heartbeat_interval_ms or tenure")
    hb = _U32.unpack_from(buf, pos)[0]
    if not 1 <= hb <= MAX_HEARTBEAT_INTERVAL_MS:
        raise DecodeError(f"heartbeat_interval_ms {hb} out of range")
    tenure = _I64.unpack_from(buf, pos + 4)[0]
    if tenure < 0:
        raise DecodeError(f"tenure {tenure} below 0")
    positions, start = _read_topic_numbers(
        buf, pos + 12, MAX_TASK_SOURCES, "source topic", MAX_OFFSET + 1, "source position", 1
    )
    if not positions:
        raise DecodeError("a task without sources")
    vector = tuple(positions)
    if task_last_offset(vector) > MAX_OFFSET:
        raise DecodeError("the task's positions add up beyond 2^63 - 1")
    client, instance, topic, partition = _enveloped_identity(key, buf, start, group)
    return client, instance, group, topic, partition, hb, tenure, vector, start


#: ``(client_id, instance_id, group_id, topic, partition, ident_start)`` of a version 9
#: NamingTenure: ``value[ident_start:]`` is the identity part, byte for byte that of the
#: version 1 types.
V9Fields = tuple[str, str, str, str, int, int]


def decode_v9_fields(key: object, value: object) -> V9Fields:
    """Decode a version 9 NamingTenure strictly (:data:`V9Fields`): the envelope (its check
    and group id), then the identity part, whose group must be the envelope's. Raises only
    :class:`DecodeError`."""
    key, buf, _, group, pos = _opened(key, value, VERSION_9, (T_NAMING_TENURE,))
    client, instance, topic, partition = _enveloped_identity(key, buf, pos, group)
    return client, instance, group, topic, partition, pos


#: ``(type, client_id, instance_id, group_id, topic, partition, heartbeat_interval_ms,
#: positions, ident_start)``: ``heartbeat_interval_ms`` is 0 for ReleasingTask and
#: ``value[ident_start:]`` is the identity part (ids, topic, partition), byte for byte that of
#: the version 1 partition types.
TaskFields = tuple[int, str, str, str, str, int, int, Positions, int]


def decode_task_fields(key: object, value: object) -> TaskFields:
    """Decode a version 3 task record (HeartbeatingTask, ReleasingTask) strictly, to a plain
    tuple (:data:`TaskFields`). Raises only :class:`DecodeError`."""
    key, buf = _record_bytes(key, value)
    if buf[0] != VERSION_3:
        raise DecodeError(f"not a version 3 record (version {buf[0]})")
    typ = buf[1]
    if typ not in (T_HEARTBEATING_TASK, T_RELEASING_TASK):
        raise DecodeError(f"unknown version 3 message type {typ}")
    pos = 2
    hb = 0
    if typ == T_HEARTBEATING_TASK:
        if len(buf) < pos + 4:
            raise DecodeError("truncated heartbeat_interval_ms")
        hb = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if not 1 <= hb <= MAX_HEARTBEAT_INTERVAL_MS:
            raise DecodeError(f"heartbeat_interval_ms {hb} out of range")
    positions, pos = _read_topic_numbers(
        buf, pos, MAX_TASK_SOURCES, "source topic", MAX_OFFSET + 1, "source position", 1
    )
    if not positions:
        raise DecodeError("a task without sources")
    vector = tuple(positions)
    if task_last_offset(vector) > MAX_OFFSET:
        raise DecodeError("the task's positions add up beyond 2^63 - 1")
    start = pos
    client, instance, group, topic, partition = _read_identity(key, buf, pos, True)
    assert topic is not None and partition is not None
    return typ, client, instance, group, topic, partition, hb, vector, start
