"""A sealed segment's time index damaged in order. Loading checks the entries' order and
range, not their values, and a timestamp search skipped every batch before the entry it
looked up: an entry whose offset moved on, or whose timestamp was lowered, skipped batches
that reach the timestamp searched, and ``offset_for_timestamp`` (Kafka's ListOffsets by
time: ``kafka-get-offsets --time``, a group reset to a date) answered a later offset,
silently. Now the entry a search skips by is checked against the batch it names, and one
that does not hold is searched past from the segment's start."""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

import pytest

from storage import DataDir, NewRecord, PartitionLog, TopicConfig, encode_batch

TS = int(time.time() * 1000)  # (recent: retention keeps every segment)
SOUGHT = 50  # offset SOUGHT holds the first record stamped TS + SOUGHT


def _fill(data: Path) -> None:
    """One record a batch, stamped TS + offset, a time index entry a batch (so each entry
    is (TS + r, r)), in several segments."""
    config = TopicConfig(segment_bytes=16 * 1024, index_interval_bytes=0)
    with DataDir(data) as dd:
        dd.create_topic("t", 1, config)
        plog = dd.partition("t", 0)
        for i in range(800):
            plog.append(encode_batch([NewRecord(b"v%d" % i, timestamp=TS + i)]))
        assert plog.segment_count >= 3


def _damage(data: Path, how: str) -> None:
    """Damage the first segment's time index, its entries kept in order (so that loading
    keeps it): entries 41..59 name offset 60 (moved on), or are gone and the one of 60
    says TS + 41 (lowered)."""
    path = data / "t-0" / f"{0:020d}.timeindex"
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    at = [rel for _, rel in entries].index(41)
    assert entries[at - 1 : at + 20] == [(TS + r, r) for r in range(40, 61)]
    if how == "offset moved on":
        entries[at : at + 19] = [(TS + r, 60) for r in range(41, 60)]
    else:  # "timestamp lowered"
        entries[at : at + 20] = [(TS + 41, 60)]
    path.write_bytes(b"".join(struct.pack(">qi", *e) for e in entries))


@pytest.mark.parametrize("how", ["offset moved on", "timestamp lowered"])
def test_a_time_index_damaged_in_order_does_not_skip_the_answer(tmp_path, caplog, how) -> None:
    _fill(tmp_path)
    _damage(tmp_path, how)
    with DataDir(tmp_path) as dd:
        plog = dd.partition("t", 0)
        with caplog.at_level(logging.WARNING, logger="storage"):
            for ts in (TS + 45, TS + SOUGHT, TS + 59):
                assert plog.offset_for_timestamp(ts) == ts - TS
            assert plog.offset_for_timestamp(TS + 30) == 30  # (an entry that holds)
            assert plog.offset_for_timestamp(TS + 700) == 700  # (another segment's)
        doubted = [r for r in caplog.records if "does not match the batches" in r.getMessage()]
        assert len(doubted) == 1  # said once for the segment, not once a search


def test_an_intact_time_index_is_trusted(tmp_path, caplog) -> None:
    """Every entry holds on an intact log: no search is said to doubt one (and each
    answer is the offset stamped so)."""
    _fill(tmp_path)
    with DataDir(tmp_path) as dd:
        plog = dd.partition("t", 0)
        with caplog.at_level(logging.WARNING, logger="storage"):
            for offset in range(0, 800, 7):
                assert plog.offset_for_timestamp(TS + offset) == offset
    assert not [r for r in caplog.records if "does not match" in r.getMessage()]


def test_an_entry_damaged_into_another_batchs_is_doubted(tmp_path, caplog) -> None:
    """CreateTime out of order (batch maxima 1000, 500, 2000): the first entry (1000, 0)
    damaged into (500, 1), the real batch 1's stamp and offset, passed a check of the batch
    it names alone, and a search for 600 skipped batch 0 (stamped 1000). The check walks a
    batch before it too (a helper's attack, 2026-12-06)."""
    config = TopicConfig(index_interval_bytes=0, segment_bytes=1024, retention_ms=-1)
    plog = PartitionLog(tmp_path, config, lambda: TS)
    for ts in (1000, 500, 2000, 3000, 4000):
        plog.append(encode_batch([NewRecord(b"x", timestamp=ts)]))
    while plog.segment_count < 2:
        plog.append(encode_batch([NewRecord(b"y" * 100, timestamp=5000)]))
    plog.close()
    path = tmp_path / f"{0:020d}.timeindex"
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    assert entries[0] == (1000, 0)
    entries[0] = (500, 1)
    path.write_bytes(b"".join(struct.pack(">qi", *e) for e in entries))
    with caplog.at_level(logging.WARNING, logger="storage"):
        again = PartitionLog(tmp_path, config, lambda: TS)
        try:
            assert again.offset_for_timestamp(600) == 0
        finally:
            again.close()
    assert [r for r in caplog.records if "does not match the batches" in r.getMessage()]


def test_an_entry_past_the_searchs_view_is_no_damage(tmp_path, caplog) -> None:
    """A search reads the active segment up to its view's size while appends go on: the
    entry it skips by may name a batch appended since, past what it may read. That is no
    damage: searched from the segment's start, nothing said (it was said, and the segment
    doubted for good: a helper's attack, 24 of 1,429 segments under appends)."""
    plog = PartitionLog(tmp_path, TopicConfig(index_interval_bytes=0), lambda: TS)
    for ts in (100, 200, 300):
        plog.append(encode_batch([NewRecord(b"x", timestamp=ts)]))
    segment = plog._segments[-1]
    seen = segment.size  # (the view a search took)
    plog.append(encode_batch([NewRecord(b"x", timestamp=400)]))
    plog.append(encode_batch([NewRecord(b"x", timestamp=500)]))
    with caplog.at_level(logging.WARNING, logger="storage"):
        assert segment.skip_for(450, seen) == 0
        assert segment.skip_for(450, segment.size) == 3  # (the entry (400, 3) holds)
    assert not segment.time_index_doubted and not caplog.records
    assert plog.offset_for_timestamp(450) == 4
    plog.close()


def test_a_damaged_offset_index_entry_is_not_blamed_on_the_time_index(tmp_path, caplog):
    """An offset index entry moved a few bytes into its batch (order kept) sent the time
    entry's check into no batch: the time index, intact, was reported damaged, and the
    offset index, damaged, never was. The check now walks from the segment's start, and
    the search reports and repairs the offset index."""
    config = TopicConfig(index_interval_bytes=0, retention_ms=-1, segment_bytes=3000)
    plog = PartitionLog(tmp_path, config, lambda: TS)
    i = 0
    while plog.segment_count < 2:
        plog.append(encode_batch([NewRecord(b"v%d" % i + b"x" * 50, timestamp=1000 + i)]))
        i += 1
    plog.close()
    path = tmp_path / f"{0:020d}.index"
    entries = list(struct.iter_unpack(">iI", path.read_bytes()))
    entries[10] = (entries[10][0], entries[10][1] + 5)
    path.write_bytes(b"".join(struct.pack(">iI", *e) for e in entries))
    with caplog.at_level(logging.WARNING, logger="storage"):
        again = PartitionLog(tmp_path, config, lambda: TS)
        try:
            sought = entries[10][0] + 1
            assert again.offset_for_timestamp(1000 + sought) == sought
        finally:
            again.close()
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "does not match" in m]
    assert [m for m in said if "offset index was rebuilt" in m]
