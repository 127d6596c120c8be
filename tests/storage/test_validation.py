"""Record-level validation: every corruption with a valid CRC is refused and nothing is stored."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import Compression, NewRecord, PartitionLog, TopicConfig, encode_batch
from storage._errors import CorruptRecordError, InvalidRecord
from storage._records import decode_batch
from storage._validation import validate_batch
from tests.storage.corruptions import CORRUPTIONS, good


def _log(tmp_path: Path, clock, validate: bool = True) -> PartitionLog:
    return PartitionLog(tmp_path / "p", TopicConfig(), clock, validate_records=validate)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupt_records_are_refused_and_nothing_is_stored(name, tmp_path, clock) -> None:
    build, kind = CORRUPTIONS[name]
    data = build()
    plog = _log(tmp_path, clock)
    plog.append(good())
    before = plog.size_bytes
    with pytest.raises(CorruptRecordError) as info:
        plog.append(good() + data)  # a good batch first: all or nothing per append
    if kind is not None:
        assert isinstance(info.value, kind), info.value
    assert plog.log_end_offset == 1 and plog.size_bytes == before
    plog.append(good(2))
    assert plog.log_end_offset == 3
    plog.close()


@pytest.mark.parametrize(
    "name", [n for n in sorted(CORRUPTIONS) if "bomb" not in n and "garbage" not in n]
)
def test_without_validation_the_corruption_would_be_stored(name, tmp_path, clock) -> None:
    """The corruptions pass every batch-level check: only record validation stops them."""
    plog = _log(tmp_path, clock, validate=False)
    plog.append(CORRUPTIONS[name][0]())
    assert plog.log_end_offset >= 1
    plog.close()


def test_zip_bomb_is_refused_within_bounded_memory() -> None:
    data = CORRUPTIONS["gzip bomb (80 MiB of zeros)"][0]()
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="more than"):
            validate_batch(data, max_decompressed=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # the bound, not the 80 MiB the payload inflates to


@pytest.mark.parametrize("codec", list(Compression))
def test_valid_batches_of_every_codec_pass(codec) -> None:
    recs = [
        NewRecord(
            b"v%d" % i,
            key=None if i % 3 else b"k",
            headers=[("h", None), ("é", b"x")],
            timestamp=1000 + (i * 7919) % 50,
        )
        for i in range(40)
    ]
    validate_batch(encode_batch(recs, compression=codec))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=20)),
            st.one_of(st.none(), st.binary(max_size=200)),
            st.lists(
                st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                max_size=3,
            ),
            st.integers(-(10**12), 10**12),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(list(Compression)),
)
def test_validation_accepts_what_the_encoder_writes(rows, codec) -> None:
    data = encode_batch(
        [NewRecord(v, key=k, headers=h, timestamp=1_700_000_000_000 + t) for k, v, h, t in rows],
        compression=codec,
    )
    validate_batch(data)
    assert len(decode_batch(data)[1]) == len(rows)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_validation_and_decoding_agree_on_mutated_records(data) -> None:
    """Flip bytes in the records (then fix the CRC): validation refuses exactly what a reader
    could not decode, and never raises anything but CorruptRecordError."""
    import struct

    import crc32c

    buf = bytearray(
        encode_batch([NewRecord(b"value-%d" % i, key=b"key", timestamp=5 + i) for i in range(3)])
    )
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    try:
        validate_batch(buf)
    except InvalidRecord:
        return  # parses, breaks a rule: decoding may or may not succeed
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            decode_batch(buf)
        return
    decode_batch(buf)  # accepted means readable


def test_a_length_below_minus_one_is_a_broken_rule_not_corruption() -> None:
    """Found by the property above (one byte of three records set to 20): a value length of
    -25 is read as null by Kafka's reader and ours, so validation calls it a broken rule
    (only -1 is null: InvalidRecord), not corruption, in C and in the reference alike."""
    import struct

    import crc32c

    from storage._validation import FAST_WALK, _walk_python

    buf = bytearray(
        encode_batch([NewRecord(b"value-%d" % i, key=b"key", timestamp=5 + i) for i in range(3)])
    )
    buf[82] = 20  # record 1's key length 3 -> 10: its value length is read from "1" (-25)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    assert decode_batch(buf)[1][1].value is None  # readable
    with pytest.raises(InvalidRecord, match="record 1 has value length -25"):
        validate_batch(buf)
    with pytest.raises(InvalidRecord):
        _walk_python(bytes(buf[61:]), 3, 5)
    if FAST_WALK:
        from storage._fastrecords import walk_records

        assert walk_records(bytes(buf[61:]), 3, 5, False) == (2, 1)  # invalid, record 1


def test_a_stored_corrupt_batch_is_an_error_readers_can_skip(tmp_path, clock) -> None:
    """Damage behind a valid CRC: records before it are returned, then CorruptBatch names the
    offsets to skip to; the records after it are readable from there."""
    from storage import CorruptBatch
    from storage._records import decode_readable

    plog = _log(tmp_path, clock, validate=False)
    plog.append(good(2))
    plog.append(CORRUPTIONS["value length 10^9"][0]())
    plog.append(good(3))
    records, damage = decode_readable(plog.read(0).data)
    assert [r.offset for r in records] == [0, 1]
    assert isinstance(damage, CorruptBatch) and (damage.offset, damage.next_offset) == (2, 3)
    records, damage = decode_readable(plog.read(damage.next_offset).data)
    assert [r.offset for r in records] == [3, 4, 5] and damage is None
    plog.close()
