"""Record-level validation of producer batches before they are stored (Kafka's magic-2 rules).

The batch checks in :mod:`storage._records` (length, magic, CRC, counts) vouch that the bytes
arrived as the producer sent them, not that the producer sent well-formed records. A batch
with a valid CRC over corrupt records would be stored and then stop every reader of the
partition, so every record is walked once here: lengths and varints, key / value / header
lengths and counts, offset deltas 0, 1, 2, ... ending at lastOffsetDelta, timestamps that fit
and agree with maxTimestamp, and compressed payloads that decompress within a bound. Batches
marked transactional or control are refused: this broker has no transactions, so only a
transaction coordinator could legitimately write them.

Two error kinds, as Kafka answers: :class:`CorruptRecordError` (CORRUPT_MESSAGE) when the
bytes do not parse, :class:`InvalidRecord` (INVALID_RECORD) when they parse but break a rule.

The walk runs in C (``storage._fastrecords.walk_records``) where the extension was built:
about 2 µs a record in Python is most of what a produce costs. :func:`_walk_python` is the
reference and the fallback: the C walk applies the same rules in the same order, and when it
refuses a batch the Python walk runs to raise the error, so every message has one author.
``tests/storage/test_validation_fast.py`` checks the two agree.
"""

from __future__ import annotations

import struct
from typing import Any

from storage._compression import DEFAULT_MAX_DECOMPRESSED, decompress_noting
from storage._errors import CorruptRecordError, InvalidRecord
from storage._varint import read_varint, read_varint32

try:  # built where a C compiler is present (setup.py); optional
    from storage._fastrecords import walk_records as _walk_records
except ImportError:  # pragma: no cover - depends on the build
    _walk_records = None

#: True when the record walk runs in C (benchmarks report it)
FAST_WALK = _walk_records is not None

__all__ = ["FAST_WALK", "refuse_log_append_time", "validate_batch", "validate_batches"]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OVERHEAD = 61
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def validate_batches(
    mv: memoryview,
    spans: list[tuple[int, int, int, int, int]],
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    *,
    require_keys: bool = False,
) -> set[int]:
    """Validate every batch of an append (spans as returned by ``records._validate_batches``);
    returns the indexes of those to compress again in one piece before they are stored
    (:func:`storage._compression.decompress_noting`).

    ``require_keys``: refuse records without a key (a compacted topic, as Kafka does).
    """
    again = set()
    for i, (pos, size, _count, _max_ts, _attrs) in enumerate(spans):
        try:
            if validate_batch(mv[pos : pos + size], max_decompressed, require_keys=require_keys):
                again.add(i)
        except CorruptRecordError as exc:
            raise type(exc)(f"batch at byte {pos}: {exc}") from None
    return again


def validate_batch(
    batch: Any, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, *, require_keys: bool = False
) -> bool:
    """Raise CorruptRecordError / InvalidRecord unless every record of this batch is well formed;
    returns whether its payload is to be compressed again in one piece before it is stored.

    ``batch`` is one whole batch whose header and CRC were already checked.
    """
    (_, _, _, _, _, attributes, last_delta, first_ts, max_ts, _, _, _, count) = _HEADER.unpack_from(
        batch, 0
    )
    if attributes & _CONTROL_MASK:
        raise InvalidRecord("control batches are written by the broker, not by producers")
    if attributes & _TRANSACTIONAL_MASK:
        raise InvalidRecord("transactional batches need a transactional producer (not supported)")
    codec = attributes & _CODEC_MASK
    payload = memoryview(batch)[_OVERHEAD:]
    data, again = (
        (payload, False) if codec == 0 else decompress_noting(codec, payload, max_decompressed)
    )
    seen_max = _walk(data, count, first_ts, require_keys)
    if last_delta != count - 1:
        raise InvalidRecord(f"lastOffsetDelta {last_delta} does not match {count} records")
    if not attributes & _TIMESTAMP_TYPE_MASK and seen_max != max_ts:
        raise InvalidRecord(f"maxTimestamp {max_ts} is not the records' maximum {seen_max}")
    return again


def _walk(data: Any, count: int, first_ts: int, require_keys: bool = False) -> int:
    """Check each record's layout and offset delta; returns the largest record timestamp.

    In C when built; a refusal (or no extension) runs the Python reference, which raises.
    """
    if _walk_records is not None:
        kind, value = _walk_records(data, count, first_ts, require_keys)
        if kind == 0:
            return value
    return _walk_python(data, count, first_ts, require_keys)


def _walk_python(data: Any, count: int, first_ts: int, require_keys: bool = False) -> int:
    """The reference walk: check each record's layout and offset delta; returns the largest
    record timestamp.

    The hot loop of a produce: varints of one or two bytes (every field of a record under
    8 KiB) are decoded inline, longer ones by :func:`storage._varint.read_varint`.
    """
    if isinstance(data, memoryview):
        data = data.tobytes()  # indexing bytes is faster than a memoryview
    n = len(data)
    p = 0
    max_delta = _INT64_MIN
    min_delta = _INT64_MAX
    # locals: called for every varint of 2+ bytes (int32 fields at most 5 bytes, as Kafka's
    # reader; only the timestamp delta is an int64)
    varint, varint32 = read_varint, read_varint32
    odd: str | None = None  # the first rule a record breaks that a reader still decodes
    for expected in range(count):
        if p >= n:
            raise CorruptRecordError(f"the batch declares {count} records but holds {expected}")
        # record length, bounded by the batch
        b = data[p]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            p += 1
        elif p + 1 < n and data[p + 1] < 0x80:
            u = (b & 0x7F) | (data[p + 1] << 7)
            length = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            length, p = varint32(data, p, n)
        end = p + length
        if length < 6 or end > n:  # attributes + 5 one-byte varints is the smallest record
            raise CorruptRecordError(
                f"record {expected} has length {length} (bytes left in the batch: {n - p})"
            )
        # attributes (unused in v2), then the timestamp delta: the record has >= 6 bytes
        b = data[p + 1]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            p += 2
        else:
            ts_delta, p = varint(data, p + 1, end)
        if ts_delta > max_delta:
            max_delta = ts_delta
        if ts_delta < min_delta:
            min_delta = ts_delta
        # offset delta
        b = data[p] if p < end else 0x80
        if b < 0x80:
            off_delta = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            off_delta, p = varint32(data, p, end)
        if off_delta != expected:
            raise InvalidRecord(
                f"record {expected} has offsetDelta {off_delta}; deltas must be 0, 1, 2, ..."
            )
        # key
        b = data[p] if p < end else 0x80
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            p += 1
        elif p + 1 < end and data[p + 1] < 0x80:
            u = (b & 0x7F) | (data[p + 1] << 7)
            size = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            size, p = varint32(data, p, end)
        if size < -1:  # a reader takes it for null (Kafka's does): it breaks a rule only
            odd = odd or f"record {expected} has key length {size} (only -1 is null)"
        elif p + size > end:
            raise CorruptRecordError(f"record {expected} has key length {size}")
        if size > 0:
            p += size
        elif size < 0 and require_keys:
            raise InvalidRecord(f"record {expected} has no key: a compacted topic needs one")
        # value
        b = data[p] if p < end else 0x80
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            p += 1
        elif p + 1 < end and data[p + 1] < 0x80:
            u = (b & 0x7F) | (data[p + 1] << 7)
            size = (u >> 1) ^ -(u & 1)
            p += 2
        else:
            size, p = varint32(data, p, end)
        if size < -1:
            odd = odd or f"record {expected} has value length {size} (only -1 is null)"
        elif p + size > end:
            raise CorruptRecordError(f"record {expected} has value length {size}")
        if size > 0:
            p += size
        # headers: the common case is none (one zero byte that ends the record)
        if p + 1 == end and data[p] == 0:
            p = end
            continue
        hcount, p = varint32(data, p, end)
        if hcount < 0 or hcount > end - p:
            raise CorruptRecordError(f"record {expected} has header count {hcount}")
        for _ in range(hcount):
            hklen, p = varint32(data, p, end)
            if hklen < 0 or p + hklen > end:
                raise CorruptRecordError(f"record {expected} has header key length {hklen}")
            try:
                data[p : p + hklen].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError(
                    f"record {expected} has a header key that is not UTF-8"
                ) from None
            p += hklen
            hvlen, p = varint32(data, p, end)
            if hvlen < -1:
                odd = odd or f"record {expected} has header value length {hvlen} (only -1 is null)"
            elif p + hvlen > end:
                raise CorruptRecordError(f"record {expected} has header value length {hvlen}")
            if hvlen > 0:
                p += hvlen
        if p != end:
            raise CorruptRecordError(
                f"record {expected} declares {length} bytes but its fields take {length - end + p}"
            )
    if p != n:
        raise CorruptRecordError(f"{n - p} bytes follow the last of {count} records")
    if odd is not None:  # (after the walk: a record a reader cannot decode is corrupt first)
        raise InvalidRecord(odd)
    if count == 0:
        return first_ts
    top = first_ts + max_delta
    if first_ts + min_delta < _INT64_MIN or top > _INT64_MAX:
        raise InvalidRecord("a record timestamp does not fit in int64")
    return top


def refuse_log_append_time(spans: list[tuple[int, int, int, int, int]]) -> None:
    """A batch that says LogAppendTime (attribute 0x08) for a CreateTime topic: its
    maxTimestamp, which no check ties to its records then, became every record's time."""
    for pos, _, _, _, attributes in spans:
        if attributes & _TIMESTAMP_TYPE_MASK:
            raise InvalidRecord(
                f"the batch at byte {pos} says LogAppendTime: only the broker stamps that, "
                "on a topic whose message.timestamp.type is LogAppendTime"
            )
