"""Kafka RecordBatch v2 (magic 2): the one record format used on the wire and on disk.

Layout of the 61-byte batch header (big endian)::

    0  baseOffset           int64   \\  outside the CRC: the broker patches these
    8  batchLength          int32    | (bytes after this field)
    12 partitionLeaderEpoch int32   /
    16 magic                int8    (= 2)
    17 crc                  uint32  CRC32C of bytes 21..end
    21 attributes           int16   codec (bits 0-2), timestamp type (0x08),
                                    transactional (0x10), control (0x20)
    23 lastOffsetDelta      int32
    27 firstTimestamp       int64
    35 maxTimestamp         int64
    43 producerId           int64
    51 producerEpoch        int16
    53 baseSequence         int32
    57 recordCount          int32
    61 records...

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
key (varint length, -1 = null), value (same), header count varint, then headers
(key: varint length + UTF-8, value: varint length, -1 = null). Varints are zigzag
encoded base-128, as in protobuf (:mod:`storage._varint`).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import crc32c as _crc32c

from storage import _compression as _compression
from storage._errors import CorruptBatch, CorruptRecordError, RecordTooLarge
from storage._varint import read_varint, write_varint

try:  # built by `pip install -e .` where a C compiler is present (setup.py); optional
    from storage import _fastrecords as _fast
except ImportError:  # pragma: no cover - depends on the build
    _fast = None

#: True when plain batches are decoded by the C extension (benchmarks report it)
FAST_DECODER = _fast is not None

__all__ = [
    "BATCH_OVERHEAD",
    "BatchHeader",
    "Compression",
    "Header",
    "NewRecord",
    "Record",
    "RecordColumns",
    "TimestampType",
    "assign_offsets",
    "decode_batch",
    "decode_columns",
    "decode_columns_from",
    "decode_columns_python",
    "decode_readable",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "read_header",
    "verify_crc",
]

BATCH_OVERHEAD = 61
MAGIC = 2
# batchLength counts the bytes after the length field, so the smallest legal value is the
# header minus baseOffset and batchLength themselves.
_LOG_OVERHEAD = 12
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - _LOG_OVERHEAD
_CRC_START = 21
_ATTR_OFFSET = 21
_MAX_TS_OFFSET = 35

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_OVERHEAD
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1

crc32c = _crc32c.crc32c


class TimestampType(enum.IntEnum):
    """Whose clock a batch's timestamps come from (attribute bit 0x08)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Compression(enum.IntEnum):
    """Codec of the records section (attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Header = tuple[str, bytes | None]


def _opt_bytes(value: Any) -> bytes | None:
    """Accept any bytes-like payload at the boundary but store immutable bytes."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected bytes or None, got {type(value).__name__}")


def _headers(value: Any) -> tuple[Header, ...]:
    """Normalise headers to a tuple of (str, bytes|None) pairs, rejecting anything else."""
    out = []
    for item in value:
        try:
            key, val = item
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes | None) pair, got {item!r}") from None
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, got {type(key).__name__}")
        check_header_name(key)
        out.append((key, _opt_bytes(val)))
    return tuple(out)


def check_header_name(name: str) -> None:
    """ValueError if a header's name (a str) has no UTF-8 form: a lone surrogate
    (``"\udcff"``, what ``surrogateescape`` decoding leaves) failed the whole batch it was
    in when encoded, and crashed the process inside librdkafka over the network."""
    if not name.isascii():
        try:
            name.encode()
        except UnicodeEncodeError:
            raise ValueError(f"header name {name!r} has no UTF-8 form (a lone surrogate)") from None


def _check_int64(value: Any, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int (epoch ms), got {type(value).__name__}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name} {value} does not fit in int64")


def check_new_timestamp(value: Any, name: str = "timestamp") -> None:
    """A timestamp given to a new record (a :class:`NewRecord`'s, a Producer's ``send``):
    epoch ms of 0 or more, or -1 (Kafka's NO_TIMESTAMP), as Kafka's record builder takes
    them ("Invalid negative timestamp")."""
    _check_int64(value, name)
    if value < -1:
        raise ValueError(f"{name} {value} is negative: epoch ms of 0 or more, or -1 for none")


def _check_timestamp(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    _check_int64(value, attribute.name)


def _check_new_timestamp(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_new_timestamp(value, attribute.name)


@attrs.frozen
class NewRecord:
    """A record to be encoded; the timestamp is required so no hidden clock is read. It is
    epoch ms of 0 or more, or -1 (none), as Kafka's producer writes them."""

    value: bytes | None = attrs.field(converter=_opt_bytes)
    key: bytes | None = attrs.field(default=None, converter=_opt_bytes)
    headers: tuple[Header, ...] = attrs.field(default=(), converter=_headers)
    timestamp: int = attrs.field(kw_only=True, validator=_check_new_timestamp)


@attrs.frozen
class KeptRecord(NewRecord):
    """A stored record encoded again as it is (the cleaner's copy of a batch's survivors):
    its timestamp is the log's, which a client may have written negative (Kafka's broker
    stores those too), so it is only checked to fit int64."""

    timestamp: int = attrs.field(kw_only=True, validator=_check_timestamp)


@attrs.frozen
class Record:
    """A decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@attrs.frozen
class BatchHeader:
    """The fixed 61-byte header of a v2 batch, as stored."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + _LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)


# --------------------------------------------------------------------------- encode


def _encode_records(records: Sequence[NewRecord], first_ts: int) -> bytearray:
    out = bytearray()
    body = bytearray()
    for delta, rec in enumerate(records):
        body.clear()
        body.append(0)  # record attributes: unused
        write_varint(body, rec.timestamp - first_ts)
        write_varint(body, delta)
        key = rec.key
        if key is None:
            body.append(1)  # zigzag(-1)
        else:
            write_varint(body, len(key))
            body += key
        value = rec.value
        if value is None:
            body.append(1)
        else:
            write_varint(body, len(value))
            body += value
        write_varint(body, len(rec.headers))
        for hkey, hval in rec.headers:
            raw = hkey.encode("utf-8")
            write_varint(body, len(raw))
            body += raw
            if hval is None:
                body.append(1)
            else:
                write_varint(body, len(hval))
                body += hval
        write_varint(out, len(body))
        out += body
    return out


def encode_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode records as one v2 batch, the exact bytes a Kafka producer would send."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if len(records) > _INT32_MAX:
        raise ValueError("too many records for one batch")
    for rec in records:
        if not isinstance(rec, NewRecord):
            raise TypeError(f"expected NewRecord, got {type(rec).__name__}")
    compression = Compression(compression)
    timestamp_type = TimestampType(timestamp_type)
    first_ts = records[0].timestamp
    max_ts = max(rec.timestamp for rec in records)
    payload: bytes | bytearray = _encode_records(records, first_ts)
    if compression is not Compression.NONE:
        payload = _compression.compress(compression, payload)
    attributes = int(compression)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_MASK
    buf = bytearray(BATCH_OVERHEAD + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - _LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        len(records) - 1,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[BATCH_OVERHEAD:] = payload
    _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


# --------------------------------------------------------------------------- decode


def read_header(buf: Any, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header at pos (does not need the whole batch)."""
    if len(buf) - pos < BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"need {BATCH_OVERHEAD} bytes for a batch header at {pos}, have {len(buf) - pos}"
        )
    fields = _HEADER.unpack_from(buf, pos)
    header = BatchHeader(*fields)
    _check_header(header)
    return header


def _check_header(h: BatchHeader) -> None:
    if h.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {h.magic} (only v2 batches are stored)")
    if h.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {h.batch_length} is below the v2 minimum")
    if h.attributes & _CODEC_MASK > Compression.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {h.attributes & _CODEC_MASK}")
    if h.record_count < 0 or h.last_offset_delta < -1:
        raise CorruptRecordError("negative record count or offset delta")


def verify_crc(buf: Any, pos: int = 0) -> bool:
    """True if the whole batch at pos is present and its CRC32C matches."""
    h = read_header(buf, pos)
    end = pos + h.size
    if end > len(buf):
        return False
    return crc32c(memoryview(buf)[pos + _CRC_START : end]) == h.crc


def _decompress(h: BatchHeader, data: memoryview) -> bytes | memoryview:
    codec = h.attributes & _CODEC_MASK
    if codec == Compression.NONE:
        return data
    return _compression.decompress(codec, data)


def decode_batch(buf: Any, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Decode one whole batch at pos after checking its CRC.

    For LogAppendTime batches every record's timestamp is the batch's max timestamp,
    which is what Kafka clients report.
    """
    h = read_header(buf, pos)
    end = pos + h.size
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at {pos} is truncated ({len(buf) - pos} of {h.size} bytes)"
        )
    mv = memoryview(buf)
    if crc32c(mv[pos + _CRC_START : end]) != h.crc:
        raise CorruptRecordError(f"CRC mismatch in batch at offset {h.base_offset}")
    data = _decompress(h, mv[pos + BATCH_OVERHEAD : end])
    log_append = h.attributes & _TIMESTAMP_TYPE_MASK
    records: list[Record] = []
    p = 0
    n = len(data)
    base = h.base_offset
    first_ts = h.first_timestamp
    max_ts = h.max_timestamp
    try:
        for _ in range(h.record_count):
            length, p = read_varint(data, p, n)
            rec_end = p + length
            if length < 0 or rec_end > n:
                raise CorruptRecordError("record length runs past the end of the batch")
            p += 1  # record attributes
            ts_delta, p = read_varint(data, p, rec_end)
            off_delta, p = read_varint(data, p, rec_end)
            klen, p = read_varint(data, p, rec_end)
            if klen < 0:
                key = None
            else:
                key = bytes(data[p : p + klen])
                p += klen
            vlen, p = read_varint(data, p, rec_end)
            if vlen < 0:
                value = None
            else:
                value = bytes(data[p : p + vlen])
                p += vlen
            hcount, p = read_varint(data, p, rec_end)
            if hcount < 0:
                raise CorruptRecordError("negative header count")
            headers = []
            for _h in range(hcount):
                hklen, p = read_varint(data, p, rec_end)
                if hklen < 0:
                    raise CorruptRecordError("null header key")
                hkey = bytes(data[p : p + hklen]).decode("utf-8")
                p += hklen
                hvlen, p = read_varint(data, p, rec_end)
                if hvlen < 0:
                    hval = None
                else:
                    hval = bytes(data[p : p + hvlen])
                    p += hvlen
                headers.append((hkey, hval))
            if p != rec_end:
                raise CorruptRecordError("record length does not match its contents")
            records.append(
                Record(
                    base + off_delta,
                    max_ts if log_append else first_ts + ts_delta,
                    key,
                    value,
                    tuple(headers),
                )
            )
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"header key is not UTF-8: {exc}") from exc
    if p != n:
        raise CorruptRecordError("bytes left over after the last record")
    return h, records


def iter_batches(buf: Any) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield each whole batch in buf; stop silently at a trailing partial batch.

    The CRC is not checked here (decode_batch does), so walking a fetch is cheap.
    """
    mv = memoryview(buf).cast("B")
    pos = 0
    n = len(mv)
    while n - pos >= _LOG_OVERHEAD:
        _, length = _OFFSET_AND_LENGTH.unpack_from(mv, pos)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} at byte {pos} is below the minimum")
        end = pos + length + _LOG_OVERHEAD
        if end > n:
            return
        h = read_header(mv, pos)
        yield h, mv[pos:end]
        pos = end


def decode_readable(buf: Any) -> tuple[list[Record], CorruptBatch | None]:
    """The records of the whole batches in buf up to the first one that does not decode, and
    that batch's error (None if all decode): a reader keeps what precedes damage and can
    resume at ``error.next_offset`` to skip it."""
    out: list[Record] = []
    mv = memoryview(buf).cast("B")
    pos = 0
    n = len(mv)
    while n - pos >= _LOG_OVERHEAD:
        base, _ = _OFFSET_AND_LENGTH.unpack_from(mv, pos)
        try:
            h = read_header(mv, pos)
        except CorruptRecordError as exc:
            return out, CorruptBatch(str(exc), base, None)
        end = pos + h.size
        if end > n:
            break
        try:
            out.extend(decode_batch(mv[pos:end])[1])
        except CorruptRecordError as exc:
            return out, CorruptBatch(str(exc), h.base_offset, h.next_offset)
        pos = end
    return out, None


def decode_columns_from(buf: Any, offset: int) -> RecordColumns:
    """The records from ``offset`` on of the whole batches in ``buf`` (a fetch's answer,
    which starts with the whole batch holding ``offset``), as :func:`decode_columns` lists.

    A stored batch that does not decode ends the columns before it; when no record from
    ``offset`` on precedes it, its :class:`CorruptBatch` is raised instead, naming where a
    reader resumes to skip it whole. The one decoding of fetched bytes for replay, so every
    cluster (embedded or over the network) skips the same batches.
    """
    try:
        cols = decode_columns(buf)
    except CorruptRecordError:
        records, damage = decode_readable(buf)
        cols = ([], [], [], [])
        for r in records:
            cols[0].append(r.offset)
            cols[1].append(r.timestamp)
            cols[2].append(r.key)
            cols[3].append(r.value)
        if damage is not None and not any(o >= offset for o in cols[0]):
            raise damage from None
    first = 0
    offsets = cols[0]
    while first < len(offsets) and offsets[first] < offset:  # the batch holding offset
        first += 1
    if first:
        for c in cols:
            del c[:first]
    return cols


def decode_records(buf: Any) -> list[Record]:
    """All records of all whole batches in buf, in order."""
    out: list[Record] = []
    for _h, batch in iter_batches(buf):
        out.extend(decode_batch(batch)[1])
    return out


#: offsets, timestamps, keys, values: one list per field, one entry per record
RecordColumns = tuple[list[int], list[int], list[bytes | None], list[bytes | None]]


class _NotPlain(Exception):
    """This batch is not in the plain shape: let decode_batch decode it (or say what is
    wrong with it)."""


def decode_columns(buf: Any, out: RecordColumns | None = None) -> RecordColumns:
    """Offset, timestamp, key and value of every record of the whole batches in ``buf``, as
    four lists (appended to ``out`` if given, which is returned).

    The same values as :func:`decode_records` (headers aside: they are not returned), and
    the same errors (``CorruptRecordError``, ``UnsupportedCompression``), without a
    ``Record`` per record, for bulk reads: the coordination log's replay and the audit's
    export. Every CRC is checked. Batches in the common shape (uncompressed, no record
    headers, lengths that add up) are parsed by the C extension ``storage._fastrecords``
    when it was built; it stops before any other batch, which
    :func:`decode_columns_python` (the reference) decodes, so the results and errors are the
    same either way. A trailing partial batch is ignored, as :func:`iter_batches` does. If
    a batch is bad, the error is raised with the records of the batches before it already
    appended to ``out`` and none of its own.
    """
    if out is None:
        out = ([], [], [], [])
    if _fast is None:
        return decode_columns_python(buf, out)
    mv = memoryview(buf).cast("B")
    n = len(mv)
    pos = 0
    while True:
        pos = _fast.decode_plain(mv, pos, crc32c, *out)
        if n - pos < _LOG_OVERHEAD:
            return out
        # not a plain batch: the reference decodes (or refuses) it
        _, length = _OFFSET_AND_LENGTH.unpack_from(mv, pos)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} at byte {pos} is below the minimum")
        end = pos + length + _LOG_OVERHEAD
        if end > n:
            return out  # a trailing partial batch
        decode_columns_python(mv[pos:end], out)
        pos = end


def decode_columns_python(buf: Any, out: RecordColumns | None = None) -> RecordColumns:
    """:func:`decode_columns` in Python alone: the reference, and the fallback where the C
    extension was not built."""
    if out is None:
        out = ([], [], [], [])
    offsets, timestamps, keys, values = out
    read = read_varint  # a local: the loop below calls it for every varint of 2+ bytes
    for h, batch in iter_batches(buf):
        if crc32c(batch[_CRC_START:]) != h.crc or h.attributes & _CODEC_MASK:
            _extend_columns(out, batch)  # raises on a bad CRC, decompresses
            continue
        data = bytes(batch[BATCH_OVERHEAD:])
        n = len(data)
        start = len(offsets)
        base = h.base_offset
        p = 0
        try:
            for _ in range(h.record_count):
                # length, attributes (1 byte), timestamp delta, offset delta, key length,
                # key, value length, value, header count (0): zigzag varints, decoded
                # inline when they are one byte. decode_batch bounds each varint by its
                # record; here a misfit shows at the end (p + 1 != end) or as an
                # IndexError past the data, and decode_batch then says what is wrong.
                b = data[p]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    length, p = read(data, p, n)
                end = p + length
                if length < 0 or end > n:
                    raise _NotPlain
                p += 1
                b = data[p]
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    ts_delta, p = read(data, p, n)
                b = data[p]
                if b < 0x80:
                    off_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    off_delta, p = read(data, p, n)
                b = data[p]
                if b < 0x80:
                    klen = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    klen, p = read(data, p, n)
                if klen < 0:
                    key = None
                else:
                    key = data[p : p + klen]
                    p += klen
                b = data[p]
                if b < 0x80:
                    vlen = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    vlen, p = read(data, p, n)
                if vlen < 0:
                    value = None
                else:
                    value = data[p : p + vlen]
                    p += vlen
                if p + 1 != end or data[p]:  # headers, or lengths that do not add up
                    raise _NotPlain
                p = end
                offsets.append(base + off_delta)
                timestamps.append(ts_delta)
                keys.append(key)
                values.append(value)
            if p != n:
                raise _NotPlain
        except (_NotPlain, CorruptRecordError, IndexError):
            for column in out:
                del column[start:]
            _extend_columns(out, batch)
            continue
        if h.attributes & _TIMESTAMP_TYPE_MASK:
            timestamps[start:] = [h.max_timestamp] * (len(offsets) - start)
        else:
            first = h.first_timestamp
            timestamps[start:] = [first + d for d in timestamps[start:]]
    return out


def _extend_columns(out: RecordColumns, batch: memoryview) -> None:
    records = decode_batch(batch)[1]
    out[0].extend([r.offset for r in records])
    out[1].extend([r.timestamp for r in records])
    out[2].extend([r.key for r in records])
    out[3].extend([r.value for r in records])


# --------------------------------------------------------------------------- broker side


def _validate_batches(
    mv: memoryview, max_batch_bytes: int | None = None
) -> list[tuple[int, int, int, int, int]]:
    """Check every batch of an append (length, magic, CRC, counts) before anything is written.

    Returns (position, size, record_count, max_timestamp, attributes) per batch. This is
    per-batch work only: the CRC (hardware CRC32C) vouches for the records inside.
    """
    spans = []
    pos = 0
    n = len(mv)
    if n == 0:
        raise CorruptRecordError("no record batch to append")
    unpack = _HEADER.unpack_from
    while pos < n:
        if n - pos < BATCH_OVERHEAD:
            raise CorruptRecordError(f"trailing {n - pos} bytes are not a whole batch header")
        (_, length, _, magic, crc, attrs_, last_delta, _, max_ts, _, _, _, count) = unpack(mv, pos)
        if magic != MAGIC:
            raise CorruptRecordError(f"batch at byte {pos} has magic {magic}, expected 2")
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at byte {pos} has invalid length {length}")
        size = length + _LOG_OVERHEAD
        end = pos + size
        if end > n:
            raise CorruptRecordError(
                f"batch at byte {pos} is truncated ({n - pos} of {size} bytes)"
            )
        if attrs_ & _CODEC_MASK > Compression.ZSTD:
            raise CorruptRecordError(
                f"batch at byte {pos} has unknown codec {attrs_ & _CODEC_MASK}"
            )
        if count < 1 or last_delta != count - 1:
            raise CorruptRecordError(
                f"batch at byte {pos} has record count {count} and last offset delta {last_delta}"
            )
        if crc32c(mv[pos + _CRC_START : end]) != crc:
            raise CorruptRecordError(f"batch at byte {pos} fails its CRC32C check")
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise RecordTooLarge(f"batch of {size} bytes exceeds the limit of {max_batch_bytes}")
        spans.append((pos, size, count, max_ts, attrs_))
        pos = end
    return spans


def _patched_header(
    mv: memoryview, pos: int, size: int, base_offset: int, log_append_time: int | None
) -> bytes:
    """The batch's 61 header bytes with base offset (and append time + CRC) replaced."""
    header = bytearray(mv[pos : pos + BATCH_OVERHEAD])
    _BASE_OFFSET.pack_into(header, 0, base_offset)
    if log_append_time is not None:
        (attributes,) = _ATTRIBUTES.unpack_from(header, _ATTR_OFFSET)
        _ATTRIBUTES.pack_into(header, _ATTR_OFFSET, attributes | _TIMESTAMP_TYPE_MASK)
        _TIMESTAMP.pack_into(header, _MAX_TS_OFFSET, log_append_time)
        crc = crc32c(memoryview(header)[_CRC_START:])
        crc = crc32c(mv[pos + BATCH_OVERHEAD : pos + size], crc)
        _CRC.pack_into(header, 17, crc)
    return bytes(header)


def assign_offsets(
    batch: bytes | bytearray | memoryview, base_offset: int, log_append_time: int | None
) -> bytearray:
    """Return a copy with offsets (and LogAppendTime) assigned, as a broker does on append.

    Only header bytes change: base offset (outside the CRC) and, for LogAppendTime,
    attribute bit 0x08 and MaxTimestamp followed by a new CRC. Records are never
    re-encoded. Several concatenated batches get consecutive offsets. The input must
    pass the same checks as an append (CorruptRecordError otherwise), so a damaged
    batch is never given a fresh, valid CRC.
    """
    if base_offset < 0:
        raise ValueError("base offset must be >= 0")
    mv = memoryview(batch).cast("B")
    spans = _validate_batches(mv)
    out = bytearray(mv)
    next_offset = base_offset
    for pos, size, count, _, _ in spans:
        out[pos : pos + BATCH_OVERHEAD] = _patched_header(
            mv, pos, size, next_offset, log_append_time
        )
        next_offset += count
    return out
