"""The offset and time indexes hold Kafka's entries (``LogSegment.append``), checked here
without a JVM: Kafka's own reader on these files is tests/storage/broker/test_java_tools.py.

Kafka's rule, per batch at ``pos`` once more than ``index.interval.bytes`` were written since
the last entry: offset entry ``(batch last offset, pos)``; time entry ``(max timestamp so far,
last offset of the batch holding it)``, appended when that timestamp grew; on roll, the time
entry ``(segment max timestamp, last offset of its batch)``.
"""

from __future__ import annotations

import struct
from pathlib import Path

from storage import NewRecord, PartitionLog, TopicConfig, encode_batch
from tests.storage.conftest import FakeClock

T0 = 1_700_000_000_000


def _batch(first: int, stamps: list[int]) -> bytes:
    return encode_batch(
        [NewRecord(b"v%d" % (first + i), timestamp=ts) for i, ts in enumerate(stamps)]
    )


def _kafka_entries(batches: list[tuple[int, int, int, int]], interval: int, base: int):
    """Kafka's entries for (position, size, last offset, max timestamp) per batch, as
    ``LogSegment.append`` writes them (plus the entry on roll)."""
    offsets, times = [], []
    since, max_ts, max_off = 0, -1, -1
    for pos, size, last, ts in batches:
        if ts > max_ts:
            max_ts, max_off = ts, last
        if since > interval:
            offsets.append((last - base, pos))
            if not times or max_ts > times[-1][0]:
                times.append((max_ts, max_off - base))
            since = 0
        since += size
    if not times or max_ts > times[-1][0]:
        times.append((max_ts, max_off - base))
    return offsets, times


def _read(path: Path, fmt: str) -> list[tuple[int, int]]:
    return list(struct.iter_unpack(fmt, path.read_bytes()))


def _write_segment_then_roll(
    tmp_path: Path, clock: FakeClock
) -> tuple[PartitionLog, list[tuple[int, int, int, int]]]:
    plog = PartitionLog(tmp_path, TopicConfig(segment_bytes=800, index_interval_bytes=60), clock)
    stamps = [[T0 + 5, T0 + 1, T0 + 9], [T0 + 2], [T0 + 30, T0 + 3], [T0 + 30], [T0 + 4, T0 + 40],
              [T0 + 6], [T0 + 7, T0 + 8, T0 + 8], [T0 + 50], [T0 + 1]]  # fmt: skip
    written = []
    pos = 0
    for group in stamps:
        data = _batch(plog.log_end_offset, group)
        info = plog.append(data)
        written.append((pos, len(data), info.last_offset, max(group)))
        pos += len(data)
    plog.append(_batch(plog.log_end_offset, [T0] * 60))  # past segment_bytes: the first rolls
    return plog, written


def test_sealed_segment_indexes_are_kafkas(tmp_path: Path, clock: FakeClock) -> None:
    plog, written = _write_segment_then_roll(tmp_path, clock)
    assert plog.segment_count == 2
    offsets, times = _kafka_entries(written, 60, 0)
    assert len(offsets) > 3 and len(times) > 2  # the rule had entries to write
    assert _read(tmp_path / f"{0:020d}.index", ">iI") == offsets
    assert _read(tmp_path / f"{0:020d}.timeindex", ">qi") == times
    assert times[-1] == (T0 + 50, 13)  # the roll entry: the segment's max, its batch's last offset
    plog.close()


def test_an_index_of_the_earlier_layout_is_rebuilt_into_kafkas(
    tmp_path: Path, clock: FakeClock
) -> None:
    plog, written = _write_segment_then_roll(tmp_path, clock)
    plog.close()
    index, timeindex = tmp_path / f"{0:020d}.index", tmp_path / f"{0:020d}.timeindex"
    kafkas = index.read_bytes(), timeindex.read_bytes()
    # the layout before: base offsets, and a last time entry at the next segment's base
    starts, next_base = {}, 0
    for pos, _, last, _ in written:
        starts[pos], next_base = next_base, last + 1
    index.write_bytes(b"".join(struct.pack(">iI", starts[p], p) for _, p in _read(index, ">iI")))
    old_times = [*_read(timeindex, ">qi")[:-1], (T0 + 50, next_base)]
    timeindex.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in old_times))
    again = PartitionLog(tmp_path, TopicConfig(segment_bytes=800, index_interval_bytes=60), clock)
    try:
        assert (index.read_bytes(), timeindex.read_bytes()) == kafkas
        assert again.offset_for_timestamp(T0 + 41) == 13  # the record stamped T0 + 50
        assert again.max_timestamp_and_offset() == (T0 + 50, 13)
    finally:
        again.close()


def test_max_timestamp_is_the_first_offset_holding_the_largest(
    tmp_path: Path, clock: FakeClock
) -> None:
    plog = PartitionLog(tmp_path, TopicConfig(segment_bytes=300, index_interval_bytes=0), clock)
    assert plog.max_timestamp_and_offset() is None  # empty: no offset (Kafka answers -1)
    for stamps in (
        [T0 + 3, T0 + 1],
        [T0 + 20, T0 + 2, T0 + 20],
        [T0 + 4],
        [T0 + 20],
        [T0 + 5, T0 + 6],
    ):
        plog.append(_batch(plog.log_end_offset, stamps))
    assert plog.segment_count > 1
    # offset 2 is the first record stamped T0 + 20 (a batch of three, in a sealed segment)
    assert plog.max_timestamp_and_offset() == (T0 + 20, 2)
    plog.close()
    again = PartitionLog(tmp_path, TopicConfig(segment_bytes=300, index_interval_bytes=0), clock)
    try:
        assert again.max_timestamp_and_offset() == (T0 + 20, 2)
    finally:
        again.close()


def test_a_segment_too_small_for_an_index_entry_has_its_index_files(
    tmp_path: Path, clock: FakeClock, caplog
) -> None:
    """A segment sealed before ``index.interval.bytes`` were written (a quiet topic rolled
    by ``segment.ms``, `__marshal`'s small segments) has no offset entry; its ``.index``
    was never created, so the next open warned that the index was missing and rebuilt it
    (until 2026-12-06). Kafka keeps both files of every segment; so does the seal now."""
    import logging

    config = TopicConfig(segment_bytes=300, index_interval_bytes=4096)
    plog = PartitionLog(tmp_path, config, clock)
    for i in range(12):
        plog.append(_batch(i, [T0 + i]))
    assert plog.segment_count > 2
    plog.close()
    for log_file in sorted(tmp_path.glob("*.log"))[:-1]:  # (sealed: not the active one)
        for suffix in (".index", ".timeindex"):
            assert log_file.with_suffix(suffix).exists(), log_file.with_suffix(suffix).name
    with caplog.at_level(logging.WARNING, logger="storage"):
        again = PartitionLog(tmp_path, config, clock)
    try:
        assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
        assert again.offset_for_timestamp(T0 + 7) == 7
    finally:
        again.close()
