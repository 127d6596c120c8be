"""decode_columns: exactly what decode_records decodes, minus a Record per record."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import (
    Compression,
    CorruptRecordError,
    NewRecord,
    RecordColumns,
    TimestampType,
    decode_columns,
    decode_records,
    encode_batch,
)
from storage._records import KeptRecord

# short and long (multi-byte varint lengths) keys and values; headers now and then
blobs = st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=60, max_size=300))
headers = st.one_of(
    st.just(()), st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2).map(tuple)
)
records = st.builds(
    # (stored records: negative timestamps too, which a NewRecord refuses)
    lambda key, value, hdrs, ts: KeptRecord(value=value, key=key, headers=hdrs, timestamp=ts),
    blobs,
    blobs,
    st.one_of(st.just(()), st.just(()), headers),
    st.one_of(st.integers(0, 100), st.integers(-(2**40), 2**40)),
)
batches = st.tuples(
    st.lists(records, min_size=1, max_size=8),
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]),
    st.sampled_from(list(TimestampType)),
    st.integers(0, 2**40),
)


def _reference(data: bytes) -> tuple[list, ...]:
    recs = decode_records(data)
    return (
        [r.offset for r in recs],
        [r.timestamp for r in recs],
        [r.key for r in recs],
        [r.value for r in recs],
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(batches, max_size=5), st.integers(0, 40))
def test_same_columns_as_decode_records(spec, cut) -> None:
    data = b""
    for recs, compression, ts_type, base in spec:
        data += encode_batch(
            recs, base_offset=base, compression=compression, timestamp_type=ts_type
        )
    assert decode_columns(data) == _reference(data)
    # a trailing partial batch is left alone, as storage does
    partial = data[: max(0, len(data) - cut)]
    assert decode_columns(partial) == _reference(partial)
    assert decode_columns(memoryview(partial)) == _reference(partial)


def test_common_shape_and_log_append_time() -> None:
    recs = [NewRecord(value=b"v" * n, key=b"g/t/%d" % n, timestamp=5) for n in (1, 63, 64, 200)]
    data = encode_batch(recs, base_offset=7, timestamp_type=TimestampType.LOG_APPEND_TIME)
    cols = decode_columns(data)
    assert cols == _reference(data)
    assert cols[0] == [7, 8, 9, 10] and cols[3][3] == b"v" * 200
    assert all(type(v) is bytes for v in cols[2] + cols[3])


def test_appends_to_the_lists_it_is_given() -> None:
    one = encode_batch([NewRecord(value=b"a", timestamp=1)], base_offset=3)
    two = encode_batch([NewRecord(value=None, key=b"k", timestamp=2)], base_offset=4)
    out: RecordColumns = ([0], [0], [b"x"], [b"y"])
    assert decode_columns(one, out) is out
    decode_columns(two, out)
    assert out == ([0, 3, 4], [0, 1, 2], [b"x", None, b"k"], [b"y", b"a", None])


def test_a_corrupt_batch_raises_like_storage_after_the_good_ones() -> None:
    good = encode_batch([NewRecord(value=b"g", timestamp=1)] * 2)
    bad = bytearray(encode_batch([NewRecord(value=b"x", key=b"k", timestamp=1)] * 3, base_offset=2))
    bad[-1] ^= 0xFF
    data = good + bytes(bad)
    with pytest.raises(CorruptRecordError):
        decode_records(data)
    out: RecordColumns = ([], [], [], [])
    with pytest.raises(CorruptRecordError):
        decode_columns(data, out)
    assert out == _reference(good)  # the good batch, nothing of the bad one


@settings(max_examples=300, deadline=None)
@given(batches, st.data())
def test_damaged_records_with_a_valid_crc_fail_or_agree_like_storage(spec, data) -> None:
    recs, _compression, ts_type, base = spec
    buf = bytearray(encode_batch(recs, base_offset=base, timestamp_type=ts_type))
    i = data.draw(st.integers(61, len(buf) - 1))
    buf[i] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    try:
        want = _reference(bytes(buf))
    except CorruptRecordError:
        out: RecordColumns = ([], [], [], [])
        with pytest.raises(CorruptRecordError):
            decode_columns(bytes(buf), out)
        assert out == ([], [], [], [])  # nothing of a bad batch is left behind
        return
    assert decode_columns(bytes(buf)) == want


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">i", buf, 8, len(buf) - 12)  # batchLength
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b + b"\x00",  # bytes left over after the last record
        lambda b: b[:-1],  # the last record is cut short
        lambda b: b[:61] + b"\xff" * 11 + b[61:],  # a varint longer than 10 bytes
        lambda b: b[:57] + struct.pack(">i", 1) + b[61:],  # fewer records than there are
    ],
)
def test_plain_batches_that_do_not_add_up_are_corrupt(damage) -> None:
    recs = [NewRecord(value=b"v" * 100, key=b"k", timestamp=1)] * 2
    buf = _recrc(bytearray(damage(encode_batch(recs))))
    with pytest.raises(CorruptRecordError):
        decode_records(buf)
    with pytest.raises(CorruptRecordError):
        decode_columns(buf)
