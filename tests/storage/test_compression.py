"""LZ4 frames as Kafka's readers take them (KafkaLZ4BlockInputStream: independent blocks,
version 01, no dictionary id or reserved bit): what the broker writes is such a frame, and a
frame Kafka would refuse is refused here too, before it is stored where it would stop every
Java consumer of the partition (a helper's fuzz of the broker found both)."""

from __future__ import annotations

import lz4.frame
import pytest

from storage._compression import compress, decompress, decompress_noting
from storage._errors import CorruptRecordError
from storage._records import Compression

DATA = bytes(range(256)) * 1024  # 256 KiB: four 64 KiB blocks


def test_what_the_broker_compresses_is_independent_blocks() -> None:
    frame = compress(Compression.LZ4, DATA)
    assert frame[4] & 0x20, f"FLG {frame[4]:#04x}: linked blocks"
    assert decompress(Compression.LZ4, frame) == DATA


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": False},
        {"block_linked": False, "content_checksum": True, "store_size": False},
        {"block_linked": False, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_frames_kafka_writes_and_reads_are_taken(options) -> None:
    assert decompress(Compression.LZ4, lz4.frame.compress(DATA, **options)) == DATA


def test_linked_blocks_are_refused() -> None:
    linked = lz4.frame.compress(DATA, block_linked=True)
    with pytest.raises(CorruptRecordError, match="independent blocks"):
        decompress(Compression.LZ4, linked)


@pytest.mark.parametrize(("at", "bit"), [(4, 0x01), (4, 0x02), (5, 0x80), (5, 0x01)])
def test_a_dictionary_id_or_a_reserved_bit_is_refused(at: int, bit: int) -> None:
    frame = bytearray(lz4.frame.compress(DATA, block_linked=False))
    frame[at] |= bit  # (the header checksum is not fixed: the flags are refused first)
    with pytest.raises(CorruptRecordError, match="independent blocks"):
        decompress(Compression.LZ4, bytes(frame))


@pytest.mark.parametrize("cut", [0, 100, 255 * 1024])
def test_gzip_of_several_members_is_noted(cut: int) -> None:
    """librdkafka reads only the first member of a gzip payload: the broker compresses such a
    payload again in one piece (``decompress_noting``), one member is left as it is."""
    import gzip

    two = gzip.compress(DATA[:cut]) + gzip.compress(DATA[cut:])
    assert decompress_noting(Compression.GZIP, two) == (DATA, True)
    assert decompress_noting(Compression.GZIP, gzip.compress(DATA)) == (DATA, False)
    assert decompress(Compression.GZIP, two) == DATA


def test_a_gzip_batch_of_several_members_is_stored_as_one(tmp_path) -> None:
    """Records, offsets and producer fields kept; the payload one gzip member."""
    import zlib

    from storage import NewRecord, PartitionLog, TopicConfig, decode_records, encode_batch
    from tests.storage.conftest import FakeClock
    from tests.storage.corruptions import gzip_in_members

    records = [NewRecord(b"v%d" % i, key=b"k%d" % i, timestamp=5) for i in range(10)]
    plain = encode_batch(records, producer_id=7, producer_epoch=1, base_sequence=0)
    plog = PartitionLog(tmp_path, TopicConfig(), FakeClock())
    plog.append(encode_batch([NewRecord(b"first", timestamp=5)]))
    for cut in (0, 40):
        info = plog.append(gzip_in_members(plain, cut))
        stored = plog.read(info.base_offset).data
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert d.decompress(stored[61:]) == plain[61:] and d.eof and d.unused_data == b""
        assert stored[22] & 0x07 == Compression.GZIP and stored[43:61] == plain[43:61]
        got = decode_records(stored)
        assert [(r.offset, r.key, r.value) for r in got] == [
            (info.base_offset + i, r.key, r.value) for i, r in enumerate(records)
        ]
    plog.close()
