"""LZ4 frames as Kafka's readers take them (KafkaLZ4BlockInputStream: independent blocks,
version 01, no dictionary id or reserved bit): what the broker writes is such a frame, and a
frame Kafka would refuse is refused here too, before it is stored where it would stop every
Java consumer of the partition (a helper's fuzz of the broker found both)."""

from __future__ import annotations

import lz4.frame
import pytest

from storage._compression import compress, decompress
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
