"""The C record walk gives the verdict the Python reference gives, on any input.

``storage._validation._walk`` runs ``storage._fastrecords.walk_records`` and, when it refuses
a batch, the Python walk to raise the error. Two things must hold for that to be safe: the C
walk never accepts what the reference refuses (or the reverse), and it refuses with the same
kind (CORRUPT_MESSAGE or INVALID_RECORD) at the same record. Both are compared here directly,
walk against walk, and end to end through ``validate_batch`` with and without the extension
(same exception type and message), on well-formed, damaged and arbitrary batches.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Compression, TimestampType, encode_batch
from storage import _validation as validation_module
from storage._errors import CorruptRecordError, InvalidRecord
from storage._records import KeptRecord
from storage._validation import validate_batch

from .corruptions import CORRUPTIONS, TS, batch, record, varint

fast_walk = validation_module._walk_records
pytestmark = pytest.mark.skipif(
    fast_walk is None, reason="storage._fastrecords was not built (no C compiler at install)"
)

blobs = st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=60, max_size=300))
header_keys = st.one_of(st.text(max_size=4), st.sampled_from(["é", "\u20ac", "\U0001f600"]))
headers = st.lists(st.tuples(header_keys, blobs), max_size=3).map(tuple)
new_records = st.builds(
    # (stored records: negative timestamps too, which a NewRecord refuses)
    lambda key, value, hdrs, ts: KeptRecord(value=value, key=key, headers=hdrs, timestamp=ts),
    blobs,
    blobs,
    st.one_of(st.just(()), st.just(()), headers),
    st.one_of(st.integers(0, 100), st.integers(-(2**62), 2**62)),
)
batch_specs = st.tuples(
    st.lists(new_records, min_size=1, max_size=8),
    st.sampled_from([Compression.NONE] * 4 + list(Compression)),
    st.sampled_from(list(TimestampType)),
)

_KIND = {None: 0, CorruptRecordError: 1, InvalidRecord: 2}


def _python_verdict(data: bytes, count: int, first_ts: int, require_keys: bool) -> tuple:
    """(kind, max timestamp or None) from the reference walk."""
    try:
        top = validation_module._walk_python(data, count, first_ts, require_keys)
    except CorruptRecordError as exc:
        return _KIND[type(exc)], None
    return 0, top


def _same_walk(data: bytes, count: int, first_ts: int, require_keys: bool = False) -> None:
    kind, value = fast_walk(data, count, first_ts, require_keys)
    expected_kind, expected_top = _python_verdict(data, count, first_ts, require_keys)
    assert kind == expected_kind, (kind, value, expected_kind)
    if kind == 0:
        assert value == expected_top


def _outcome(buf: bytes, require_keys: bool) -> tuple:
    try:
        validate_batch(buf, 1 << 20, require_keys=require_keys)
    except CorruptRecordError as exc:
        return type(exc), str(exc)
    return None, None


def _same_validation(buf: bytes, monkeypatch: pytest.MonkeyPatch, require_keys: bool) -> None:
    """validate_batch with the C walk and with the Python walk alone: same type and message."""
    with_c = _outcome(buf, require_keys)
    with monkeypatch.context() as m:
        m.setattr(validation_module, "_walk_records", None)
        python_only = _outcome(buf, require_keys)
    assert with_c == python_only


def _records_section(buf: bytes) -> tuple[bytes, int, int]:
    """The records bytes (decompressed) of one batch, its count and first timestamp."""
    from storage._compression import decompress

    (attributes,) = struct.unpack_from(">h", buf, 21)
    (first_ts,) = struct.unpack_from(">q", buf, 27)
    (count,) = struct.unpack_from(">i", buf, 57)
    payload = buf[61:]
    if attributes & 0x07:
        payload = decompress(attributes & 0x07, payload)
    return bytes(payload), count, first_ts


@settings(max_examples=300, deadline=None)
@given(batch_specs, st.booleans())
def test_well_formed_batches(spec, require_keys) -> None:
    recs, compression, ts_type = spec
    buf = encode_batch(recs, compression=compression, timestamp_type=ts_type)
    data, count, first_ts = _records_section(buf)
    _same_walk(data, count, first_ts, require_keys)
    with pytest.MonkeyPatch.context() as mp:
        _same_validation(buf, mp, require_keys)


@settings(max_examples=800, deadline=None)
@given(batch_specs, st.data())
def test_damaged_records_behind_a_valid_crc(spec, data) -> None:
    """Bytes set, inserted or removed in the records (the CRC and length fixed up so the
    damage reaches the walk), for plain batches; for compressed ones, the decompressed
    records are damaged and compressed again, so they reach the same C walk."""
    recs, compression, ts_type = spec
    buf = encode_batch(recs, compression=Compression.NONE, timestamp_type=ts_type)
    records = bytearray(buf[61:])
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, max(0, len(records) - 1)))
        action = data.draw(st.sampled_from(["set", "set", "set", "insert", "delete"]))
        if action == "set" and records:
            records[i] = data.draw(st.integers(0, 255))
        elif action == "insert":
            records[i:i] = data.draw(st.binary(min_size=1, max_size=3))
        elif records:
            del records[i]
    count = len(recs) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    _same_walk(bytes(records), count, TS, data.draw(st.booleans()))
    head = bytearray(buf[:61])
    struct.pack_into(">i", head, 57, count)
    struct.pack_into(">i", head, 23, count - 1)
    payload = bytes(records)
    if compression != Compression.NONE:
        from storage._compression import compress

        payload = compress(compression, payload)
        struct.pack_into(">h", head, 21, struct.unpack_from(">h", head, 21)[0] | compression)
    whole = bytearray(head + payload)
    struct.pack_into(">i", whole, 8, len(whole) - 12)
    struct.pack_into(">I", whole, 17, crc32c.crc32c(bytes(whole[21:])))
    with pytest.MonkeyPatch.context() as mp:
        _same_validation(bytes(whole), mp, data.draw(st.booleans()))


@settings(max_examples=600, deadline=None)
@given(
    st.binary(max_size=200),
    st.integers(-3, 12),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.just(TS)),
    st.booleans(),
)
def test_arbitrary_bytes(raw, count, first_ts, require_keys) -> None:
    _same_walk(raw, count, first_ts, require_keys)


# Hand-built edges where a 64-bit walk would go wrong: 10-byte varints carrying more than 64
# bits, timestamps at the ends of int64, header keys that are almost UTF-8.
_BIG = [
    b"\xff" * 9 + b"\x7f",  # a 10-byte varint of 70 bits (zigzag: a huge negative number)
    b"\xfe" * 9 + b"\x7f",  # 70 bits, positive
    b"\xff" * 9 + b"\x01",  # exactly 64 bits
    b"\x80" * 10,  # runs on past 10 bytes
]


@pytest.mark.parametrize("field", ["length", "ts", "offset", "key", "value", "hcount"])
@pytest.mark.parametrize("big", _BIG)
def test_varints_wider_than_64_bits(field, big) -> None:
    fields = {
        "length": None,
        "ts": varint(0),
        "offset": varint(0),
        "key": varint(1) + b"k",
        "value": varint(1) + b"v",
        "hcount": varint(0),
    }
    fields[field] = big + (b"k" if field == "key" else b"v" if field == "value" else b"")
    body = b"\x00" + fields["ts"] + fields["offset"] + fields["key"] + fields["value"]
    body += fields["hcount"]
    data = (big if field == "length" else varint(len(body))) + body
    for first_ts in (TS, 2**63 - 1, -(2**63)):
        _same_walk(data, 1, first_ts)


def _wide(n: int, size: int) -> bytes:
    """``n``'s zigzag varint in exactly ``size`` bytes (over-long: zero groups after it)."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    for _ in range(size - 1):
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


@pytest.mark.parametrize(
    "field", ["length", "offset", "key", "value", "hcount", "hkey", "hvalue", "ts"]
)
@pytest.mark.parametrize("size", [3, 5, 6, 10])
def test_int32_fields_take_at_most_five_bytes_as_kafkas_reader(field, size) -> None:
    """Kafka reads every length, count and the offset delta of a record as an int32 varint
    (``ByteUtils.readVarint``): at most 5 bytes, else "Varint is too long" and every Java
    consumer of the partition stops at the batch for good (a helper's fuzz of the broker:
    a key length of 1 in 6 bytes was stored). Only the timestamp delta is an int64 (up to
    10 bytes). Over-long encodings within those widths read as Kafka reads them."""
    wide = {"length": 0, "offset": 0, "key": 1, "value": 1, "hcount": 1, "hkey": 1,
            "hvalue": 1, "ts": 0}  # fmt: skip
    enc = {f: (_wide(n, size) if f == field else varint(n)) for f, n in wide.items()}
    hdrs = enc["hcount"] + enc["hkey"] + b"h" + enc["hvalue"] + b"x"
    body = b"\x00" + enc["ts"] + enc["offset"] + enc["key"] + b"k" + enc["value"] + b"v" + hdrs
    length = _wide(len(body), size) if field == "length" else varint(len(body))
    data = length + body
    _same_walk(data, 1, TS)
    ok = size <= 5 or field == "ts"
    if ok:
        assert validation_module._walk_python(data, 1, TS) == TS
    else:
        with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
            validation_module._walk_python(data, 1, TS)


@pytest.mark.parametrize("field", ["key", "value", "hcount"])
def test_a_five_byte_varint_outside_int32_is_corrupt(field) -> None:
    """Five bytes carry 35 bits; Kafka's reader keeps 32 of them (a different number than
    ours), so a value outside the int32 range is refused, not read two ways."""
    big = b"\x81\x80\x80\x80\x10"  # zigzag 2^32 + 1: -(2^31) - 1
    key = big if field == "key" else varint(1) + b"k"
    value = big if field == "value" else varint(1) + b"v"
    hdrs = big if field == "hcount" else varint(0)
    body = b"\x00" + varint(0) + varint(0) + key + value + hdrs
    data = varint(len(body)) + body
    _same_walk(data, 1, TS)
    with pytest.raises(CorruptRecordError, match="int32"):
        validation_module._walk_python(data, 1, TS)


@pytest.mark.parametrize("n", [-3, -2, -1, 0, 1])
@pytest.mark.parametrize("field", ["key", "value", "hcount", "hkey", "hvalue"])
def test_small_and_negative_lengths_in_every_field(field, n) -> None:
    """-1 is null only where the format allows it; -2 and below are never lengths."""
    key = varint(n) if field == "key" else varint(1) + b"k"
    value = varint(n) if field == "value" else varint(1) + b"v"
    if field == "hcount":
        hdrs = varint(n)
    elif field == "hkey":
        hdrs = varint(1) + varint(n) + varint(-1)
    elif field == "hvalue":
        hdrs = varint(1) + varint(1) + b"h" + varint(n)
    else:
        hdrs = varint(0)
    body = b"\x00" + varint(0) + varint(0) + key + value + hdrs
    for tail in (b"", b"\x00", b"v"):
        data = varint(len(body + tail)) + body + tail
        for require_keys in (False, True):
            _same_walk(data, 1, TS, require_keys)


@pytest.mark.parametrize(
    "key",
    [
        b"\xc0\x80",  # overlong NUL
        b"\xe0\x80\x80",  # overlong
        b"\xed\xa0\x80",  # a surrogate
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf0\x8f\xbf\xbf",  # overlong 4-byte
        b"\xe2\x82",  # truncated
        b"\xe2\x82\xac",  # the euro sign: valid
        b"\xf0\x9f\x98\x80",  # an emoji: valid
        b"\xed\x9f\xbf",  # U+D7FF, just below the surrogates: valid
        b"\xf4\x8f\xbf\xbf",  # U+10FFFF: valid
    ],
)
def test_header_keys_at_the_edges_of_utf8(key) -> None:
    data = record(hcount=1, headers=varint(len(key)) + key + varint(-1))
    _same_walk(data, 1, TS)
    ok = fast_walk(data, 1, TS, False)[0] == 0
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        assert not ok
    else:
        assert ok


@pytest.mark.parametrize("name", sorted(n for n in CORRUPTIONS if "bomb" not in n))
def test_every_named_corruption(name, monkeypatch) -> None:
    buf = CORRUPTIONS[name][0]()
    _same_validation(buf, monkeypatch, False)
    assert _outcome(buf, False)[0] is not None


def test_the_c_walk_accepts_and_refuses_on_its_own() -> None:
    """Otherwise a walk that always deferred to Python would pass every test above."""
    good = b"".join(record(off_delta=i, ts_delta=i) for i in range(3))
    assert fast_walk(good, 3, TS, False) == (0, TS + 2)
    assert fast_walk(record(off_delta=1), 1, TS, False) == (2, 0)
    assert fast_walk(good + b"\x00", 3, TS, False) == (1, -1)
    assert fast_walk(record(key=None), 1, TS, True) == (2, 0)
    assert fast_walk(batch(record(), 1)[61:], 1, TS, False) == (0, TS)


# zstd: one declared-size frame is decompressed in one call (most of a zstd batch's
# validation cost was reading the stream in chunks); anything else goes to the stream reader.
# Both must agree on every payload: the same bytes, or the same refusal.


def _zstd_outcome(payload: bytes, limit: int) -> tuple:
    from storage._compression import decompress

    try:
        return decompress(Compression.ZSTD, payload, limit), None
    except CorruptRecordError as exc:
        return None, type(exc)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=3),
    st.sampled_from(["one", "several", "trailing", "unsized", "damaged"]),
    st.integers(0, 5000),
    st.data(),
)
def test_zstd_fast_path_agrees_with_the_stream_reader(chunks, shape, limit, data) -> None:
    import zstandard

    from storage import _compression as compression

    frame = zstandard.ZstdCompressor().compress
    if shape == "one":
        payload = frame(chunks[0])
    elif shape == "several":
        payload = b"".join(frame(c) for c in chunks)
    elif shape == "trailing":
        payload = frame(chunks[0]) + data.draw(st.binary(min_size=1, max_size=8))
    elif shape == "unsized":
        payload = zstandard.ZstdCompressor(write_content_size=False).compress(chunks[0])
    else:
        raw = bytearray(frame(chunks[0]))
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        payload = bytes(raw)
    fast = _zstd_outcome(payload, limit)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(compression, "_zstd_one_frame", lambda _data, _limit: None)
        assert _zstd_outcome(payload, limit) == fast


def test_zstd_fast_path_takes_one_frame_sized_or_not() -> None:
    """Otherwise a fast path that always declined would pass the test above. librdkafka's
    frames do not declare their size: those are the ones that matter."""
    import zstandard

    from storage import _compression as compression

    raw = b"x" * 5000 + bytes(range(256)) * 40
    for compressor in (
        zstandard.ZstdCompressor(),
        zstandard.ZstdCompressor(write_content_size=False),
    ):
        payload = compressor.compress(raw)
        assert compression._zstd_one_frame(payload, len(raw) + 128 * 1024) == raw
        assert compression._zstd_one_frame(payload + payload, 1 << 20) is None
    assert compression._zstd_one_frame(payload, 1000) is None  # the bound passes the limit


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=400_000),
        st.integers(0, 600_000).map(bytes),  # zeros: RLE blocks
        st.binary(min_size=1, max_size=64).flatmap(
            lambda unit: st.integers(1, 5000).map(lambda k: unit * k)
        ),
    ),
    st.booleans(),
    st.booleans(),
)
def test_zstd_block_bound_is_never_below_the_output(raw, sized, checksum) -> None:
    import zstandard

    from storage._compression import _zstd_bound

    payload = zstandard.ZstdCompressor(write_content_size=sized, write_checksum=checksum).compress(
        raw
    )
    bound = _zstd_bound(payload)
    assert bound is not None and bound >= len(raw)
    assert _zstd_bound(payload + b"x") is None


def test_unsized_zstd_bomb_is_refused_within_bounded_memory() -> None:
    """A frame that does not declare its size: the block bound sends it to the stream
    reader, which stops at the limit."""
    import tracemalloc

    import zstandard

    from storage._compression import decompress

    payload = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(80 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="more than"):
            decompress(Compression.ZSTD, payload, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
