"""When a compacted partition is cleaned (Kafka's LogCleanerManager rules), tombstone
removal, merging up to segment.bytes, the log start kept, streaming reads: all on a manual
clock or an explicit ``now``, never a sleep."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storage import DataDir, NewRecord, PartitionLog, TopicConfig, encode_batch
from storage._compaction import (
    CHECKPOINT_FILE,
    CleanerState,
    SegmentSummary,
    choose,
    group_by_size,
    iter_segment_batches,
)
from storage._records import decode_records

from .conftest import FakeClock

NOW = 1_700_000_000_000


def _cfg(**kw: object) -> TopicConfig:
    kw.setdefault("cleanup_policy", "compact")
    kw.setdefault("retention_ms", -1)
    return TopicConfig(**kw)


def _seg(
    base: int, size: int = 100, ts: int = NOW - 1000, first: int | None = None
) -> SegmentSummary:
    return SegmentSummary(base, size, ts, ts if first is None else first)


# ---------------------------------------------------------------------- the decision


def test_dirty_ratio_must_exceed_the_minimum() -> None:
    segs = [_seg(0), _seg(10), _seg(20, 50)]  # 100 clean bytes, 100 dirty, then the active
    assert choose(segs, 10, NOW, _cfg(min_cleanable_dirty_ratio=0.5)) is None  # 0.5 is not > 0.5
    plan = choose(segs, 10, NOW, _cfg(min_cleanable_dirty_ratio=0.49))
    assert plan is not None and (plan.first_dirty, plan.end) == (10, 20)
    assert plan.dirty_ratio == pytest.approx(0.5)


def test_without_a_checkpoint_everything_is_dirty() -> None:
    segs = [_seg(5), _seg(10), _seg(20, 50)]
    for checkpoint in (-1, 0, 21):  # missing, below the log start, past the active base
        plan = choose(segs, checkpoint, NOW, _cfg())
        assert plan is not None and plan.first_dirty == 5 and plan.dirty_ratio == 1.0


def test_the_active_segment_is_never_cleanable() -> None:
    assert choose([_seg(0, 500)], 0, NOW, _cfg(min_cleanable_dirty_ratio=0.0)) is None
    assert choose([_seg(0), _seg(10, 500)], 10, NOW, _cfg(min_cleanable_dirty_ratio=0.0)) is None


def test_empty_segments_after_the_last_records_leave_its_segment_uncleaned() -> None:
    """(an append that rolled, then failed its write): the segment holding the log's last
    record stays uncleaned, as the active segment does, so that record is never removed"""
    cfg = _cfg(min_cleanable_dirty_ratio=0.0)
    plan = choose([_seg(0), _seg(10), _seg(20, 0)], 0, NOW, cfg)
    assert plan is not None and plan.end == 10
    assert choose([_seg(0), _seg(10, 0), _seg(10, 0)], 0, NOW, cfg) is None
    plan = choose([_seg(0), _seg(10), _seg(20), _seg(30, 0)], 0, NOW, cfg)
    assert plan is not None and plan.end == 20


def test_min_compaction_lag_keeps_recent_segments_uncleanable() -> None:
    cfg = _cfg(min_compaction_lag_ms=5000, min_cleanable_dirty_ratio=0.0)
    segs = [_seg(0, ts=NOW - 9000), _seg(10, ts=NOW - 4000), _seg(20, ts=NOW - 6000), _seg(30, 50)]
    plan = choose(segs, 0, NOW, cfg)
    assert plan is not None and plan.end == 10  # the first too-recent segment stops it
    assert choose(segs, 10, NOW, cfg) is None  # nothing dirty is old enough
    later = choose(segs, 10, NOW + 1001, cfg)
    assert later is not None and later.end == 30


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    cfg = _cfg(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    segs = [_seg(0, 1000), _seg(10, 100, ts=NOW, first=NOW - 60_000), _seg(20, 50)]
    assert choose(segs, 10, NOW, cfg) is None  # ratio 0.09, first batch exactly at the lag
    plan = choose(segs, 10, NOW + 1, cfg)
    assert plan is not None and "max.compaction.lag.ms" in plan.reason
    # no dirty bytes: nothing to force
    assert choose([_seg(0, 1000, first=0), _seg(10, 50)], 10, NOW, cfg) is None


def test_tombstones_due_trigger_a_pass_on_a_quiet_log() -> None:
    segs = [_seg(0), _seg(10, 50)]
    cfg = _cfg()
    assert choose(segs, 10, NOW, cfg) is None
    assert choose(segs, 10, NOW, cfg, tombstones_due_at=NOW + 1) is None
    plan = choose(segs, 10, NOW + 1, cfg, tombstones_due_at=NOW + 1)
    assert plan is not None and plan.end == 10 and "tombstones" in plan.reason


def test_group_by_size_merges_adjacent_segments_that_fit() -> None:
    sizes = [(0, 300), (10, 300), (20, 300), (30, 900), (40, 100), (50, 100)]
    assert group_by_size(sizes, 1000, 60) == [[0, 1, 2], [3, 4], [5]]
    assert group_by_size(sizes, 100, 60) == [[0], [1], [2], [3], [4], [5]]
    # an offset span beyond int32 is never merged
    assert group_by_size([(0, 1), (1 << 31, 1)], 1000, (1 << 31) + 5) == [[0], [1]]


def test_cleaner_state_remembers_when_each_range_was_first_cleaned() -> None:
    state = CleanerState()
    state.mark_cleaned(0, 100, 5000, 0)
    state.mark_cleaned(100, 250, 9000, 0)
    assert [state.cleaned_at(o) for o in (0, 99, 100, 249, 250, 10_000)] == [
        5000,
        5000,
        9000,
        9000,
        None,
        None,
    ]
    state.mark_cleaned(250, 300, 9500, 120)  # retention moved the log start to 120
    assert state.cleaned_at(120) == 9000 and state.cleaned_at(299) == 9500
    assert state.ranges[0][0] == 100


# ---------------------------------------------------------------------- a partition


def _put(plog: PartitionLog, clock: FakeClock, key: bytes, value: bytes | None) -> int:
    return plog.append(encode_batch([NewRecord(value, key=key, timestamp=clock())])).base_offset


def _all(plog: PartitionLog) -> list:
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        records = [r for r in decode_records(plog.read(offset, 1 << 20).data) if r.offset >= offset]
        if not records:
            break
        out.extend(records)
        offset = records[-1].offset + 1
    return out


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.log"))}


def test_dirty_ratio_decides_on_a_real_log(tmp_path: Path, clock: FakeClock) -> None:
    plog = PartitionLog(tmp_path, _cfg(segment_ms=10, min_cleanable_dirty_ratio=0.5), clock)

    def segment_of(values: list[bytes]) -> None:
        for i, value in enumerate(values):
            _put(plog, clock, b"k%d" % (i % 4), value)
        clock.advance(11)  # the next append rolls

    segment_of([b"v%02d" % i for i in range(20)])
    _put(plog, clock, b"k0", b"r00")  # rolls: 20 dirty records in a closed segment
    assert plog.clean() == 16  # dirty ratio 1.0 > 0.5
    assert plog.clean() == 0  # nothing dirty any more
    clock.advance(11)
    _put(plog, clock, b"k1", b"r01")  # rolls: one small dirty segment behind 4 clean records
    before = _files(tmp_path)
    assert plog.clean() == 0  # dirty ratio about 0.2: not due
    assert _files(tmp_path) == before  # and nothing was rewritten
    for i in range(12):
        _put(plog, clock, b"k%d" % (i % 4), b"w%02d" % i)
    clock.advance(11)
    _put(plog, clock, b"k2", b"r02")  # rolls: now most of the closed bytes are dirty
    assert plog.clean() > 0
    assert [r.value for r in _all(plog)] == [b"w08", b"w09", b"w10", b"w11", b"r02"]
    plog.close()


def test_max_compaction_lag_cleans_and_rolls_on_a_manual_clock(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = _cfg(segment_bytes=100_000, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=10_000)
    plog = PartitionLog(tmp_path, cfg, clock)
    for i in range(20):
        _put(plog, clock, b"k", b"v%d" % i)
    assert plog.segment_count == 1 and plog.clean() == 0  # only the active segment
    clock.advance(10_001)
    _put(plog, clock, b"k", b"last")  # the active segment is past the lag: it rolls
    assert plog.segment_count == 2
    assert plog.clean(now=clock() - 2) == 0  # ratio 1.0 is not > 1.0; first batch not too old
    assert plog.clean() == 19  # its first batch is now past max.compaction.lag.ms: forced
    assert [r.value for r in _all(plog)] == [b"v19", b"last"]
    plog.close()


def test_min_compaction_lag_never_cleans_recent_records(tmp_path: Path, clock: FakeClock) -> None:
    cfg = _cfg(
        segment_bytes=300,
        min_cleanable_dirty_ratio=0.0,
        min_compaction_lag_ms=5000,
        max_compaction_lag_ms=1,
    )
    plog = PartitionLog(tmp_path, cfg, clock)
    for i in range(30):
        _put(plog, clock, b"k", b"v%d" % i)
    assert plog.segment_count > 2
    assert plog.clean() == 0  # even max.compaction.lag.ms cannot force records that recent
    clock.advance(5001)
    _put(plog, clock, b"k", b"new")
    assert plog.clean() > 0
    plog.close()


def test_tombstone_goes_delete_retention_ms_after_its_first_cleaning(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = _cfg(
        segment_bytes=100_000,
        segment_ms=1000,
        delete_retention_ms=5000,
        min_cleanable_dirty_ratio=0.0,
    )
    plog = PartitionLog(tmp_path, cfg, clock)
    _put(plog, clock, b"gone", b"value")
    _put(plog, clock, b"gone", None)
    _put(plog, clock, b"kept", b"value")
    clock.advance(1001)
    _put(plog, clock, b"other", b"x")  # rolls: the tombstone's segment is closed
    t0 = clock()
    assert plog.clean() == 1  # the value it deletes is removed, the tombstone stays
    assert [(r.key, r.value) for r in _all(plog)][:2] == [(b"gone", None), (b"kept", b"value")]
    # the log stays quiet; a later pass merges the tombstone's segment with new dirty data
    clock.advance(3000)
    _put(plog, clock, b"more", b"y")
    clock.advance(1001)
    _put(plog, clock, b"more2", b"z")
    assert plog.clean() == 0
    assert plog.segment_count == 2  # merged into one cleaned segment + the active one
    assert clock() - t0 < 5000
    clock.advance(t0 + 5000 - clock())
    assert plog.clean() == 0  # exactly delete.retention.ms after: not yet
    assert any(r.key == b"gone" for r in _all(plog))
    clock.advance(1)
    assert plog.clean() == 1  # due by itself, on a log that got nothing new to clean
    assert not any(r.key == b"gone" for r in _all(plog))
    assert plog.log_start_offset == 0
    plog.close()
    again = PartitionLog(tmp_path, cfg, clock)
    assert not any(r.key == b"gone" for r in _all(again))
    assert again.clean() == 0  # the checkpoint survived: nothing is dirty or due
    again.close()


def test_segments_merge_up_to_segment_bytes_and_the_log_start_stays(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = _cfg(segment_bytes=2000, segment_ms=10, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(tmp_path, cfg, clock)
    written = {}
    for i in range(80):
        key = b"old" if i < 40 else b"k%d" % (i % 6)
        written[_put(plog, clock, key, b"v%d" % i)] = key
        clock.advance(11)  # every append rolls: 80 tiny segments
    written[_put(plog, clock, b"old", b"superseded-all")] = b"old"
    clock.advance(11)
    _put(plog, clock, b"z", b"in the active segment")
    assert plog.segment_count > 70
    assert plog.clean() > 0
    sizes = [s.size for s in plog._segments[:-1]]
    assert len(sizes) < 10 and all(size <= 2000 for size in sizes)
    assert plog.log_start_offset == 0  # the emptied first segment keeps the log start
    assert plog._segments[0].size == 0
    values = [(r.offset, r.key, r.value) for r in _all(plog)]
    latest = {}
    for off, key in sorted(written.items()):
        latest[key] = off
    assert [v[0] for v in values[:-1]] == sorted(latest.values())
    assert values[-2][1:] == (b"old", b"superseded-all")
    assert plog.read(0).data  # offset 0 is below the first survivor, not out of range
    plog.close()
    again = PartitionLog(tmp_path, cfg, clock)
    assert again.log_start_offset == 0
    assert [(r.offset, r.value) for r in _all(again)] == [(v[0], v[2]) for v in values]
    again.close()


def test_an_emptied_first_segment_does_not_block_retention(
    tmp_path: Path, clock: FakeClock
) -> None:
    cfg = _cfg(
        cleanup_policy="compact,delete",
        segment_bytes=150,
        segment_ms=10,
        min_cleanable_dirty_ratio=0.0,
        retention_ms=60_000,
    )
    plog = PartitionLog(tmp_path, cfg, clock)
    for i in range(5):
        _put(plog, clock, b"k", b"v%d" % i)
        clock.advance(11)
    _put(plog, clock, b"k", b"last")
    clock.advance(11)
    _put(plog, clock, b"z", b"active")
    plog.clean()
    assert plog._segments[0].size == 0 and plog.log_start_offset == 0
    assert plog.enforce_retention() == 0  # an empty segment never goes alone
    clock.advance(60_001)
    plog.enforce_retention()
    assert plog.log_start_offset == plog.log_end_offset == 7
    plog.close()


def test_iter_segment_batches_reads_in_chunks(tmp_path: Path) -> None:
    batches = [
        encode_batch([NewRecord(b"x" * (i * 37 % 500), key=b"k", timestamp=i)], base_offset=i)
        for i in range(200)
    ]
    data = b"".join(batches)
    asked = []

    def read(pos: int, n: int) -> bytes:
        asked.append(n)
        return data[pos : pos + n]

    got = [bytes(b) for b in iter_segment_batches(read, len(data), chunk=1024)]
    assert got == batches
    assert max(asked) <= max(1024, max(len(b) for b in batches))
    assert len(data) > 20 * 1024


def test_a_pass_never_reads_a_segment_whole(tmp_path: Path, clock: FakeClock, monkeypatch) -> None:
    from storage import _segment as segment_module

    cfg = _cfg(segment_bytes=200_000, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(tmp_path, cfg, clock)
    for i in range(1500):
        _put(plog, clock, b"k%d" % (i % 50), b"v" * 100 + b"%d" % i)
    _put(plog, clock, b"k", b"x")
    while plog.segment_count < 2:
        _put(plog, clock, b"k", b"x" * 1000)
    biggest = max(s.size for s in plog._segments[:-1])
    assert biggest > 150_000
    reads = []
    real = segment_module.Segment.read

    def spy(self, pos: int, n: int) -> bytes:
        reads.append(n)
        return real(self, pos, n)

    monkeypatch.setattr(segment_module.Segment, "read", spy)
    import storage._compaction as compaction

    monkeypatch.setattr(compaction, "_READ_CHUNK", 16 * 1024)
    assert plog.clean() > 0
    assert reads and max(reads) <= 16 * 1024
    plog.close()


def test_a_corrupt_checkpoint_loses_nothing(tmp_path: Path, clock: FakeClock) -> None:
    cfg = _cfg(segment_bytes=300, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(tmp_path, cfg, clock)
    for i in range(30):
        _put(plog, clock, b"k%d" % (i % 3), b"v%d" % i)
    plog.clean()
    expected = [(r.offset, r.value) for r in _all(plog)]
    plog.close()
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"{not json")
    again = PartitionLog(tmp_path, cfg, clock)
    assert [(r.offset, r.value) for r in _all(again)] == expected
    again.clean()  # everything counts as dirty again: cleaned, nothing live lost
    assert [(r.offset, r.value) for r in _all(again)] == expected
    assert json.loads((tmp_path / CHECKPOINT_FILE).read_text())["first_dirty_offset"] > 0
    again.close()


_POINTS = ("before_commit", "after_commit", "after_old_removed")


@pytest.mark.parametrize("point", _POINTS)
def test_a_crash_in_a_merging_swap_leaves_a_valid_log(
    tmp_path: Path, clock: FakeClock, monkeypatch, point: str
) -> None:
    import storage._log as log_module

    cfg = _cfg(segment_bytes=3000, segment_ms=10, min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(tmp_path, cfg, clock)
    written = {}
    for i in range(40):
        written[_put(plog, clock, b"k%d" % (i % 5), b"v%d" % i)] = b"v%d" % i
        clock.advance(11)
    before = [(r.offset, r.value) for r in _all(plog)]
    real_replace = os.replace
    calls = {"n": 0}

    class Crash(BaseException):
        pass

    def replace(src, dst):
        calls["n"] += 1
        if point == "before_commit":
            raise Crash
        real_replace(src, dst)
        if point == "after_commit" and str(dst).endswith(".swap"):
            raise Crash
        if point == "after_old_removed" and not str(dst).endswith(".swap"):
            raise Crash

    if point == "after_old_removed":
        real_swap = log_module.PartitionLog._swap_group

        def swap_then_die(self, group, tmp, notes):
            # die after the old files are gone but before the swap file is renamed
            def replace_(src, dst):
                real_replace(src, dst)
                if str(dst).endswith(".swap"):
                    for seg in group:
                        seg.index.path.unlink(missing_ok=True)
                        seg.time_index.path.unlink(missing_ok=True)
                    for seg in group[1:]:
                        seg.log_path.unlink(missing_ok=True)
                    first = group[0]
                    first.log_path.unlink(missing_ok=True)
                    raise Crash

            monkeypatch.setattr(log_module.os, "replace", replace_)
            return real_swap(self, group, tmp, notes)

        monkeypatch.setattr(log_module.PartitionLog, "_swap_group", swap_then_die)
    else:
        monkeypatch.setattr(log_module.os, "replace", replace)
    with pytest.raises(Crash):
        plog.clean()
    monkeypatch.undo()
    plog._closed = True  # "SIGKILL": drop the object, reopen from the files
    again = PartitionLog(tmp_path, cfg, clock)
    assert not list(tmp_path.glob("*.swap")) and not list(tmp_path.glob("*.cleaned"))
    after = [(r.offset, r.value) for r in _all(again)]
    assert after == sorted(set(after))
    assert all(written[o] == v for o, v in after)
    live = {max(o for o in written if o % 5 == k) for k in range(5)}  # each key's latest
    assert live <= {o for o, _ in after}  # every key's latest value is there
    if point == "before_commit":
        assert after == before  # nothing happened
    else:
        assert len(after) < len(before)  # the committed group is in
    assert again.log_start_offset == 0
    again.clean()
    assert {r.offset for r in _all(again)} >= live
    again.close()


def test_data_dir_passes_its_clock_to_the_cleaner(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(
        tmp_path / "d", clock=clock, clean_interval_s=0, retention_check_interval_ms=0
    ) as d:
        d.create_topic(
            "c",
            1,
            _cfg(
                segment_bytes=100_000, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=10_000
            ),
        )
        plog = d.partition("c", 0)
        for i in range(10):
            _put(plog, clock, b"k", b"v%d" % i)
        clock.advance(10_001)
        _put(plog, clock, b"k", b"last")  # rolled at max.compaction.lag.ms
        assert d.clean(now=clock() - 2) == 0
        assert d.clean() == 9
