"""Retention as Kafka runs it: a periodic check that deletes expired segments, the active
one included (rolled first, so the log end offset stays and becomes the log start)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from storage import DataDir, PartitionLog, TopicConfig
from storage._errors import OffsetOutOfRange

from .conftest import FakeClock, batch


def _log(path: Path, clock: FakeClock, **cfg: object) -> PartitionLog:
    return PartitionLog(path, TopicConfig(**cfg), clock)


def _fill(plog: PartitionLog, clock: FakeClock, n: int) -> None:
    for i in range(n):
        plog.append(batch([b"v%d" % i], ts=clock()))


def test_quiet_active_segment_expires_by_time(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=3000)
    _fill(plog, clock, 1000)
    assert plog.segment_count == 1  # nothing ever rolled: only the active segment
    clock.advance(3000)
    assert plog.enforce_retention() == 0  # exactly retention.ms old is not yet past it
    assert plog.log_start_offset == 0
    clock.advance(1)
    assert plog.enforce_retention() == 1
    assert (plog.log_start_offset, plog.log_end_offset) == (1000, 1000)
    assert plog.size_bytes == 0 and plog.segment_count == 1
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{1000:020d}.log"]
    with pytest.raises(OffsetOutOfRange):
        plog.read(999)
    # the log goes on from its end, and the start survives a reopen
    info = plog.append(batch([b"next"], ts=clock()))
    assert info.base_offset == 1000
    plog.close()
    again = _log(tmp_path, clock, retention_ms=3000)
    assert (again.log_start_offset, again.log_end_offset) == (1000, 1001)
    again.close()


def test_explicit_now_decides_not_the_clock(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=3000)
    _fill(plog, clock, 10)
    assert plog.enforce_retention(now=clock() + 3000) == 0
    assert plog.enforce_retention(now=clock() + 3001) == 1
    assert plog.log_start_offset == 10
    plog.close()


def test_time_retention_stops_at_the_first_young_segment(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=-1, segment_bytes=400)
    for i in range(30):
        plog.append(batch([b"value-%02d" % i], ts=clock()))
        clock.advance(1000)
    plog.config = TopicConfig(retention_ms=10_000, segment_bytes=400)  # as an alter would
    bases = [s.base_offset for s in plog._view.segments]
    assert len(bases) > 3
    deleted = plog.enforce_retention()
    assert 0 < deleted < len(bases)
    # every surviving segment holds a record at most 10 s old, the deleted ones did not
    first = plog._view.segments[0]
    assert clock() - first.max_timestamp <= 10_000
    assert plog.log_start_offset == bases[deleted]
    assert plog.log_end_offset == 30
    plog.close()


def test_size_retention_may_take_the_active_segment(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=-1, retention_bytes=0)
    _fill(plog, clock, 5)
    assert plog.segment_count == 1 and plog.size_bytes > 0
    assert plog.enforce_retention() == 1
    assert (plog.log_start_offset, plog.log_end_offset, plog.size_bytes) == (5, 5, 0)
    assert plog.enforce_retention() == 0  # an empty active segment is never deleted
    plog.close()


def test_size_retention_keeps_the_newest_within_the_budget(
    tmp_path: Path, clock: FakeClock
) -> None:
    plog = _log(tmp_path, clock, retention_ms=-1, retention_bytes=700, segment_bytes=300)
    _fill(plog, clock, 40)
    plog.enforce_retention()
    sizes = [s.size for s in plog._view.segments]
    # Kafka's rule: delete the oldest while the rest still reaches retention.bytes
    assert sum(sizes) - sizes[0] < 700
    assert plog.log_end_offset == 40
    plog.close()


def test_compact_only_topics_are_not_trimmed(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=10, cleanup_policy="compact")
    plog.append(batch([b"v"], ts=clock(), key=b"k"))
    clock.advance(1_000_000)
    assert plog.enforce_retention() == 0
    assert plog.log_start_offset == 0
    plog.close()


def test_data_dir_enforces_with_its_clock(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(tmp_path / "d", clock=clock, retention_check_interval_ms=0) as d:
        d.create_topic("quiet", 2, TopicConfig(retention_ms=3000))
        d.create_topic("kept", 1)
        for p in range(2):
            _fill(d.partition("quiet", p), clock, 7)
        _fill(d.partition("kept", 0), clock, 7)
        clock.advance(3001)
        assert d.enforce_retention() == 2
        assert [i.log_start_offset for i in d.describe("quiet").partition_info] == [7, 7]
        assert d.describe("kept").partition_info[0].log_start_offset == 0


def _wait_for(predicate, seconds: float = 20.0) -> bool:
    """Poll a positive condition with a deadline (the thread runs on its own schedule)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_data_dir_thread_checks_periodically(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(tmp_path / "d", clock=clock, retention_check_interval_ms=50) as d:
        d.create_topic("quiet", 1, TopicConfig(retention_ms=3000))
        plog = d.partition("quiet", 0)
        _fill(plog, clock, 100)
        clock.advance(3001)  # expired on the injected clock; the thread notices by itself
        assert _wait_for(lambda: plog.log_start_offset == 100)
        assert plog.log_end_offset == 100


def test_embedded_cluster_trims_a_quiet_topic(tmp_path: Path, clock: FakeClock) -> None:
    from logmarshal.embedded import EmbeddedCluster

    with EmbeddedCluster(tmp_path / "e", clock=clock, maintenance_interval=0.05) as cluster:
        cluster.create_topic("quiet", 1, {"retention.ms": 3000})
        _fill(cluster.data_dir.partition("quiet", 0), clock, 50)
        clock.advance(3001)
        assert _wait_for(lambda: cluster.earliest_offset("quiet", 0) == 50)
        assert cluster.latest_offset("quiet", 0) == 50
