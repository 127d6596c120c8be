"""The C decoder of plain batches gives exactly what the Python reference gives.

``decode_columns`` hands plain batches to ``storage._fastrecords`` and everything else to
``decode_columns_python``; on any input, well formed or not, both must append the same
columns and raise the same error (type and message) after the same records.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Compression, CorruptRecordError, NewRecord, TimestampType, encode_batch
from storage import _records as records_module
from storage._records import KeptRecord, decode_columns, decode_columns_python

from .corruptions import CORRUPTIONS, good

fast = records_module._fast
pytestmark = pytest.mark.skipif(
    fast is None, reason="storage._fastrecords was not built (no C compiler at install)"
)

blobs = st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=60, max_size=200))
keys = st.one_of(blobs, st.sampled_from([b"g/t/0", b"g/t/1", b"g/t/12"]))  # repeated keys
headers = st.lists(st.tuples(st.text(max_size=4), blobs), max_size=2).map(tuple)
new_records = st.builds(
    # (stored records: negative timestamps too, which a NewRecord refuses)
    lambda key, value, hdrs, ts: KeptRecord(value=value, key=key, headers=hdrs, timestamp=ts),
    keys,
    blobs,
    st.one_of(st.just(()), st.just(()), st.just(()), headers),
    st.one_of(st.integers(0, 100), st.integers(-(2**62), 2**62)),
)
batch_specs = st.tuples(
    st.lists(new_records, min_size=1, max_size=6),
    st.sampled_from([Compression.NONE] * 4 + [Compression.GZIP]),
    st.sampled_from(list(TimestampType)),
    # near 2**63 the offsets overflow int64: the C decoder must leave those to Python
    st.one_of(st.integers(0, 2**40), st.integers(2**63 - 8, 2**63 - 1)),
)


def _encode(specs: list) -> tuple[bytes, list[int]]:
    """The concatenated batches and where each starts."""
    data = b""
    starts = []
    for recs, compression, ts_type, base in specs:
        starts.append(len(data))
        data += encode_batch(
            recs, base_offset=base, compression=compression, timestamp_type=ts_type
        )
    return data, starts


def _outcome(decode, buf: bytes) -> tuple:
    out: tuple[list, list, list, list] = ([], [], [], [])
    try:
        decode(buf, out)
    except Exception as exc:  # the error itself is what is compared
        return out, type(exc), str(exc)
    return out, None, None


def _same(buf: bytes) -> None:
    assert _outcome(decode_columns, buf) == _outcome(decode_columns_python, buf)
    assert _outcome(decode_columns, memoryview(buf)) == _outcome(decode_columns_python, buf)


@settings(max_examples=400, deadline=None)
@given(st.lists(batch_specs, max_size=5), st.integers(0, 70))
def test_well_formed_batches_and_partial_tails(specs, cut) -> None:
    data, _ = _encode(specs)
    _same(data)
    _same(data[: max(0, len(data) - cut)])


@settings(max_examples=600, deadline=None)
@given(st.lists(batch_specs, min_size=1, max_size=4), st.data())
def test_damaged_batches(specs, data) -> None:
    """Bytes changed, inserted or removed anywhere; CRCs (and lengths) sometimes fixed up so
    that the damage reaches the record parser instead of failing the CRC."""
    buf, starts = _encode(specs)
    raw = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["set", "set", "insert", "delete"]))
        if action == "set":
            raw[i] = data.draw(st.integers(0, 255))
        elif action == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=3))
        else:
            del raw[i]
    if data.draw(st.booleans()) and len(raw) == len(buf):
        ends = [*starts[1:], len(raw)]
        for start, end in zip(starts, ends, strict=True):
            struct.pack_into(">I", raw, start + 17, crc32c.crc32c(bytes(raw[start + 21 : end])))
    _same(bytes(raw))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(raw) -> None:
    _same(raw)


@settings(max_examples=200, deadline=None)
@given(batch_specs, st.data())
def test_one_damaged_record_with_a_valid_crc(spec, data) -> None:
    buf = bytearray(_encode([spec])[0])
    i = data.draw(st.integers(61, len(buf) - 1))
    buf[i] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    _same(bytes(buf))


def _plain(n: int, base: int = 0) -> bytes:
    recs = [NewRecord(value=b"v%d" % i, key=b"g/t/%d" % (i % 3), timestamp=i) for i in range(n)]
    return encode_batch(recs, base_offset=base, timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_the_fast_path_takes_plain_batches_whole() -> None:
    """Otherwise a decoder that always declined would pass every test above."""
    data = _plain(3) + _plain(2, base=3)
    out: tuple[list, list, list, list] = ([], [], [], [])
    assert fast.decode_plain(data, 0, crc32c.crc32c, *out) == len(data)
    assert out[0] == [0, 1, 2, 3, 4] and out[3][4] == b"v1"
    assert out[2][0] is out[2][3]  # a repeated key is one bytes object


def test_the_fast_path_stops_before_anything_else() -> None:
    plain = _plain(2)
    with_headers = encode_batch([NewRecord(value=b"x", headers=[("h", b"1")], timestamp=1)])
    compressed = encode_batch([NewRecord(value=b"x", timestamp=1)], compression=Compression.GZIP)
    bad_crc = bytearray(_plain(1))
    bad_crc[-1] ^= 1
    for other in (with_headers, compressed, bytes(bad_crc), plain[:-1]):
        out: tuple[list, list, list, list] = ([], [], [], [])
        assert fast.decode_plain(plain + other, 0, crc32c.crc32c, *out) == len(plain)
        assert len(out[0]) == 2


def test_a_bad_batch_after_good_ones_raises_the_reference_error() -> None:
    bad = bytearray(_plain(2, base=2))
    bad[-1] ^= 0xFF
    data = _plain(2) + bytes(bad)
    got = _outcome(decode_columns, data)
    assert got == _outcome(decode_columns_python, data)
    assert got[1] is CorruptRecordError and got[0][0] == [0, 1]


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_the_replay_read_skips_damage_alike_with_either_decoder(tmp_path, monkeypatch, name):
    """The embedded cluster's column read (what the Marshaler's tail uses) over a damaged
    stored batch between good ones: the same records, the same CorruptBatch and resume
    offset, whichever decoder runs."""
    from logmarshal import EmbeddedCluster

    def reads() -> list:
        out = []
        for offset in range(4):
            try:
                out.append(cluster.fetch_columns("t", 0, offset))
            except Exception as exc:  # the error and where to resume are what is compared
                out.append((type(exc), str(exc), getattr(exc, "next_offset", None)))
        return out

    with EmbeddedCluster(tmp_path / "c", maintenance_interval=0) as cluster:
        cluster.create_topic("t", 1)
        plog = cluster._dir.partition("t", 0)
        plog.validate_records = False
        plog.append(good(1))
        plog.append(CORRUPTIONS[name][0]())
        plog.append(good(2))
        fast_reads = reads()
        monkeypatch.setattr(records_module, "_fast", None)
        assert reads() == fast_reads
    assert fast_reads[0][0][0] == 0  # the good batch before the damage is read
