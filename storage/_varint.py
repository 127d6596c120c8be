"""The zigzag varints of Kafka's record format (RecordBatch v2), written and read in one place.

Every length, delta and count inside a record is a signed number, zigzag encoded into base-128
groups, least significant first, as in protobuf (Kafka's ``ByteUtils.writeVarint`` /
``writeVarlong``). The record encoder, the record decoders and the producer batch validation
all use these two functions; their hot loops decode the common one- and two-byte varints
inline and call :func:`read_varint` for the rest (through a local alias).

The C extension (``storage/_fastrecords.c``) has its own, checked against these by
``tests/storage/test_validation_fast.py`` and ``tests/storage/test_columns.py``. The broker's
request headers use another encoding, Kafka's unsigned varint of flexible versions
(``storage.broker.wire``).
"""

from __future__ import annotations

from typing import Any

from storage._errors import CorruptRecordError

__all__ = ["read_varint", "read_varint32", "write_varint"]


def write_varint(out: bytearray, n: int) -> None:
    """Append the zigzag base-128 encoding of n (int32 or int64 range)."""
    u = (n << 1) ^ (n >> 63)
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Decode one zigzag varint (at most 10 bytes) at ``pos``, inside ``[pos, end)``; returns
    (value, new position), or raises CorruptRecordError."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def read_varint32(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """:func:`read_varint` of a field Kafka reads as an int32 (``ByteUtils.readVarint``: a
    record's length, offset delta, key and value lengths, header count and header lengths):
    at most 5 bytes and in the int32 range. Kafka's reader refuses a longer one ("Varint is
    too long") and wraps a larger one, so either, stored, would stop or mislead a Java
    consumer of the partition there."""
    value, after = read_varint(buf, pos, end)
    if after - pos > 5:
        raise CorruptRecordError("varint is longer than 5 bytes (its field is an int32)")
    if not -(2**31) <= value < 2**31:
        raise CorruptRecordError("varint is outside the int32 range of its field")
    return value, after
