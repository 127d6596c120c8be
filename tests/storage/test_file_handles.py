"""The open-file budget counts open segment files; idle ones are closed (LRU) and reopened
on demand, so a data directory holds more partitions than ``ulimit -n`` allows files."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from storage import DataDir, PartitionLog, TopicConfig
from storage._errors import OffsetOutOfRange
from storage._segment import FileHandles

from .conftest import FakeClock, batch

ROOT = Path(__file__).resolve().parents[2]


def _open_files_under(path: Path) -> int:
    """Descriptors of this process that name a file under path (Linux /proc)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)) and target.endswith(".log"):
            n += 1
    return n


def test_budget_counts_files_and_idle_ones_are_closed(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(tmp_path / "d", clock=clock, max_open_files=8) as d:
        d.create_topic("many", 50, TopicConfig(segment_bytes=300))
        for round_ in range(3):
            for p in range(50):
                d.partition("many", p).append(batch([b"%d-%d" % (p, round_)] * 3, ts=clock()))
        assert d.handles.open_count <= 8
        assert _open_files_under(tmp_path / "d") <= 8
        assert d.handles.closed > 0  # least recently used ones were closed...
        for p in range(50):  # ...and reopened on demand
            data = d.partition("many", p).read(0, 1 << 20).data
            for round_ in range(3):
                assert b"%d-%d" % (p, round_) in data
        assert d.handles.open_count <= 8
        assert _open_files_under(tmp_path / "d") <= 8


def test_partitions_are_not_bounded_by_the_file_limit(tmp_path: Path) -> None:
    with DataDir(tmp_path / "d", max_open_files=4) as d:
        d.create_topic("wide", 300)  # would have been 16 with 4 descriptors per partition
        assert d.describe("wide").partitions == 300


def test_reads_follow_a_cleaned_segment_after_its_descriptor_was_closed(
    tmp_path: Path, clock: FakeClock
) -> None:
    handles = FileHandles(1)  # every other use of another segment closes this one
    cfg = TopicConfig(cleanup_policy="compact", segment_bytes=400, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(tmp_path, cfg, clock, handles=handles)
    for i in range(60):
        plog.append(batch([b"v%d" % i], ts=clock(), key=b"k%d" % (i % 3)))
    assert plog.segment_count > 3
    assert plog.clean() > 0
    values = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        from storage import decode_records

        data = plog.read(offset, 1 << 20).data
        records = list(decode_records(data))
        values += [r.value for r in records]
        offset = records[-1].offset + 1
    assert values[-3:] == [b"v57", b"v58", b"v59"]
    assert handles.open_count <= 1
    plog.close()


def test_a_deleted_segment_is_never_reopened(tmp_path: Path, clock: FakeClock) -> None:
    handles = FileHandles(1)
    plog = PartitionLog(
        tmp_path, TopicConfig(segment_bytes=300, retention_ms=1000), clock, handles=handles
    )
    for i in range(30):
        plog.append(batch([b"v%d" % i], ts=clock()))
    old = plog._view.segments[0]
    clock.advance(1001)
    plog.enforce_retention()
    with pytest.raises(OffsetOutOfRange):
        plog.read(0)
    from storage._segment import SegmentGone

    with pytest.raises(SegmentGone):
        old.read(0, 10)  # a reader holding the old view is told to look again
    plog.close()


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
from storage import DataDir, NewRecord, encode_batch, decode_records
N = 2000
with DataDir(sys.argv[1], clean_interval_s=0) as d:
    d.create_topic("wide", N)
    for p in range(N):
        d.partition("wide", p).append(encode_batch([NewRecord(b"value-%d" % p, key=b"k", timestamp=1)]))
    peak = d.handles.open_count
    budget = d.handles.capacity
with DataDir(sys.argv[1], clean_interval_s=0) as d:  # reopening 2,000 partitions fits too
    ok = 0
    for p in range(N):
        plog = d.partition("wide", p)
        records = list(decode_records(plog.read(0).data))
        ok += [r.value for r in records] == [b"value-%d" % p] and plog.log_end_offset == 1
    print(json.dumps({"ok": ok, "peak": peak, "budget": budget, "closed": d.handles.closed}))
"""


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_2000_partitions_under_ulimit_256(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "d"), str(ROOT)],
        preexec_fn=_limit_files,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] == 2000
    assert report["budget"] < 256 and report["peak"] <= report["budget"]
    assert report["closed"] > 0


def test_readers_during_merging_cleans_with_a_tiny_budget(tmp_path: Path, clock: FakeClock) -> None:
    """Readers race the cleaner's swaps while descriptors are closed and reopened all the
    time: every read returns records that were written at those offsets, never an error."""
    import threading

    from storage import decode_records

    handles = FileHandles(2)
    cfg = TopicConfig(
        cleanup_policy="compact",
        retention_ms=-1,
        segment_bytes=3000,
        segment_ms=10,
        min_cleanable_dirty_ratio=0.0,
    )
    plog = PartitionLog(tmp_path, cfg, clock, handles=handles)
    written: dict[int, bytes] = {}
    recorded = [0]  # offsets below this are in written
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                offset = plog.log_start_offset
                while offset < plog.log_end_offset:
                    records = list(decode_records(plog.read(offset, 4096).data))
                    for r in records:
                        known = r.offset < recorded[0]  # its value is in written already
                        if r.offset >= offset and known and written[r.offset] != r.value:
                            raise AssertionError(f"offset {r.offset}: {r.value!r}")
                    if not records:
                        break
                    offset = records[-1].offset + 1
            except BaseException as exc:  # reported to the test thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for round_ in range(30):
            for i in range(10):
                value = b"v%d-%d" % (round_, i)
                info = plog.append(batch([value], ts=clock(), key=b"k%d" % (i % 4)))
                written[info.base_offset] = value
                recorded[0] = info.base_offset + 1
                clock.advance(11)
            plog.clean()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[0]
    assert handles.closed > 0 and plog.segment_count < 100
    plog.close()
