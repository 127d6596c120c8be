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

from storage import DataDir, NewRecord, TopicConfig, encode_batch

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
        doubted = [r for r in caplog.records if "does not match the batch" in r.getMessage()]
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
