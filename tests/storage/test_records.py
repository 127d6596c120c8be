"""RecordBatch v2 codec: round trips, interop with kafka-python's encoder/decoder, bad input."""

from __future__ import annotations

import gzip
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage import (
    BATCH_OVERHEAD,
    Compression,
    CorruptRecordError,
    NewRecord,
    TimestampType,
    assign_offsets,
    decode_batch,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
    verify_crc,
)
from storage._records import KeptRecord
from storage._varint import read_varint, write_varint

opt_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=8), opt_bytes), max_size=3).map(tuple)
timestamps = st.integers(min_value=-(2**40), max_value=2**41)
# (stored records may have negative timestamps, which a NewRecord refuses: KeptRecord)
new_records = st.builds(KeptRecord, opt_bytes, opt_bytes, headers, timestamp=timestamps)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(new_records, min_size=1, max_size=20),
    base=st.integers(0, 2**40),
    gz=st.booleans(),
)
def test_round_trip(records: list[NewRecord], base: int, gz: bool) -> None:
    comp = Compression.GZIP if gz else Compression.NONE
    data = encode_batch(records, base_offset=base, compression=comp)
    header, decoded = decode_batch(data)
    assert header.size == len(data)
    assert header.record_count == len(records)
    assert header.compression is comp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert verify_crc(data)
    for i, (new, got) in enumerate(zip(records, decoded, strict=True)):
        assert got.offset == base + i
        assert (got.timestamp, got.key, got.value, got.headers) == (
            new.timestamp,
            new.key,
            new.value,
            new.headers,
        )


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n: int) -> None:
    out = bytearray()
    write_varint(out, n)
    assert read_varint(out, 0, len(out)) == (n, len(out))


def test_varint_too_long_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        read_varint(b"\xff" * 11, 0, 11)


def _kafka_python_batch(records: list[tuple[int, bytes | None, bytes | None, list]]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, (ts, key, value, hdrs) in enumerate(records):
        assert builder.append(offset, ts, key, value, hdrs) is not None
    return bytes(builder.build())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**41),
            opt_bytes,
            opt_bytes,
            st.lists(st.tuples(st.text(max_size=8), opt_bytes), max_size=3),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_kafka_python_batches_parse_here(records: list) -> None:
    data = _kafka_python_batch(records)
    header = read_header(data)
    assert verify_crc(data)
    assert header.record_count == len(records)
    _, decoded = decode_batch(data)
    for i, ((ts, key, value, hdrs), got) in enumerate(zip(records, decoded, strict=True)):
        assert (got.offset, got.timestamp, got.key, got.value) == (i, ts, key, value)
        assert got.headers == tuple(hdrs)


@settings(max_examples=60, deadline=None)
@given(st.lists(new_records, min_size=1, max_size=10), st.integers(0, 2**40))
def test_our_batches_decode_with_kafka_python(records: list[NewRecord], base: int) -> None:
    data = encode_batch(records, base_offset=base)
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc()
    assert kb.base_offset == base
    got = list(kb)
    assert len(got) == len(records)
    for i, (new, rec) in enumerate(zip(records, got, strict=True)):
        assert rec.offset == base + i
        assert (rec.timestamp, rec.key, rec.value) == (new.timestamp, new.key, new.value)
        assert tuple(rec.headers) == new.headers


def test_assign_offsets_log_append_time_read_by_kafka_python() -> None:
    src = _kafka_python_batch([(1000, b"k", b"a", []), (900, None, b"b", [("h", b"1")])])
    patched = assign_offsets(src, 42, 5_000)
    assert isinstance(patched, bytearray)
    # only header bytes changed; records identical
    assert patched[BATCH_OVERHEAD:] == src[BATCH_OVERHEAD:]
    assert patched[12:16] == src[12:16]  # leader epoch untouched
    kb = DefaultRecordBatch(bytes(patched))
    assert kb.validate_crc()
    assert kb.timestamp_type == 1
    assert kb.base_offset == 42
    assert [(r.offset, r.timestamp, r.value) for r in kb] == [(42, 5000, b"a"), (43, 5000, b"b")]
    header, recs = decode_batch(patched)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in recs] == [5000, 5000]


def test_assign_offsets_create_time_keeps_crc_and_handles_several_batches() -> None:
    a = encode_batch([NewRecord(b"x", timestamp=1), NewRecord(b"y", timestamp=2)])
    b = encode_batch([NewRecord(b"z", timestamp=3)])
    out = assign_offsets(a + b, 10, None)
    assert out[17:21] == a[17:21]
    assert [r.offset for r in decode_records(out)] == [10, 11, 12]


def test_assign_offsets_refuses_damaged_batch() -> None:
    data = bytearray(encode_batch([NewRecord(b"x", timestamp=1)]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        assign_offsets(data, 0, 123)


def test_gzip_batch_is_really_compressed() -> None:
    records = [NewRecord(b"a" * 100, timestamp=1)] * 50
    data = encode_batch(records, compression=Compression.GZIP)
    assert len(data) < 1000
    assert gzip.decompress(data[BATCH_OVERHEAD:])  # it is a gzip stream
    assert len(decode_records(data)) == 50


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_every_kafka_codec_round_trips(codec) -> None:
    records = [NewRecord(b"a" * 100, key=b"k%d" % i, timestamp=1 + i) for i in range(50)]
    data = encode_batch(records, compression=codec)
    assert len(data) < 1000  # really compressed
    assert read_header(data).compression is codec
    assert [r.value for r in decode_records(data)] == [b"a" * 100] * 50


def test_a_codec_over_garbage_is_corrupt_not_a_crash() -> None:
    data = bytearray(encode_batch([NewRecord(b"x", timestamp=1)]))
    struct.pack_into(">h", data, 21, Compression.LZ4)
    # fix the CRC so only the codec is "wrong"
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    assert read_header(data).compression is Compression.LZ4
    with pytest.raises(CorruptRecordError):
        decode_batch(data)


def test_iter_batches_stops_at_partial_tail() -> None:
    a = encode_batch([NewRecord(b"x", timestamp=1)])
    b = encode_batch([NewRecord(b"y", timestamp=2)], base_offset=1)
    buf = a + b[:-3]
    assert [h.base_offset for h, _ in iter_batches(buf)] == [0]
    assert [h.base_offset for h, _ in iter_batches(a + b + b[:5])] == [0, 1]
    assert [r.value for r in decode_records(a + b + b[:30])] == [b"x", b"y"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:40], "need"),
        (lambda d: d[:16] + b"\x01" + d[17:], "magic"),
        (lambda d: d[:8] + struct.pack(">i", 10) + d[12:], "length"),
    ],
)
def test_read_header_rejects(mutate, message: str) -> None:
    data = encode_batch([NewRecord(b"x", timestamp=1)])
    with pytest.raises(CorruptRecordError, match=message):
        read_header(mutate(data))


def test_decode_rejects_bad_crc_and_truncation() -> None:
    data = bytearray(encode_batch([NewRecord(b"hello", timestamp=1)]))
    assert not verify_crc(data[:-1])
    with pytest.raises(CorruptRecordError):
        decode_batch(data[:-1])
    data[-2] ^= 1
    assert not verify_crc(data)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(data)


def test_new_record_validation() -> None:
    with pytest.raises(TypeError):
        NewRecord(b"x")  # type: ignore[call-arg]  # timestamp is required
    with pytest.raises(TypeError):
        NewRecord("text", timestamp=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        NewRecord(b"x", headers=[(b"k", b"v")], timestamp=1)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        NewRecord(b"x", timestamp=2**63)
    rec = NewRecord(bytearray(b"x"), headers=[("k", b"v")], timestamp=1)
    assert rec.value == b"x" and rec.headers == (("k", b"v"),)
    with pytest.raises(ValueError):
        encode_batch([])


@pytest.mark.parametrize("timestamp", [-2, -5, -(2**63)])
def test_a_new_record_refuses_a_negative_timestamp_but_none(timestamp) -> None:
    """Kafka's record builder refuses a negative timestamp but -1 (NO_TIMESTAMP): "Invalid
    negative timestamp"; one was stored as given."""
    with pytest.raises(ValueError, match=rf"timestamp {timestamp} is negative"):
        NewRecord(b"x", timestamp=timestamp)
    assert NewRecord(b"x", timestamp=-1).timestamp == -1
    assert NewRecord(b"x", timestamp=0).timestamp == 0
