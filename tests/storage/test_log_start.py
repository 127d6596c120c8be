"""The log start offset as Kafka keeps it: DeleteRecords moves it to exactly the offset
asked for, inside a segment too; it is on disk before the answer, so a restart keeps it;
retention past it takes over; a log that ends before it (appends lost in a crash) starts
again at it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from storage import PartitionLog, TopicConfig
from storage._errors import OffsetOutOfRange, PolicyViolation, StorageError
from storage._log_start import LOG_START_FILE, load_log_start, save_log_start
from storage._records import decode_batch

from .conftest import FakeClock, batch


def _log(path: Path, clock: FakeClock, **cfg: object) -> PartitionLog:
    return PartitionLog(path, TopicConfig(**cfg), clock)


def _offsets(data: bytes) -> list[int]:
    out = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        _, records = decode_batch(data[pos : pos + size])
        out += [r.offset for r in records]
        pos += size
    return out


def test_the_start_moves_inside_a_batch_and_a_read_below_it_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    plog = _log(tmp_path, clock)
    for i in range(4):
        plog.append(batch([b"a%d" % i, b"b%d" % i, b"c%d" % i], ts=clock()))  # 3 a batch
    assert plog.delete_before(4) == 4  # the second batch's middle record
    assert plog.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange) as exc:
        plog.read(3)
    assert exc.value.log_start_offset == 4
    # the read at the start serves its whole batch (as Kafka does: the client drops what
    # is below the offset it asked for), and says where the log starts
    data = plog.read(4)
    assert _offsets(data.data)[:3] == [3, 4, 5]
    assert data.log_start_offset == 4
    assert load_log_start(tmp_path) == 4
    plog.close()


def test_a_reopen_keeps_the_start_and_a_lost_file_only_brings_records_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    plog = _log(tmp_path, clock)
    for i in range(10):
        plog.append(batch([b"v%d" % i], ts=clock()))
    plog.delete_before(7)
    plog.close()
    again = _log(tmp_path, clock)
    assert (again.log_start_offset, again.log_end_offset) == (7, 10)
    with pytest.raises(OffsetOutOfRange):
        again.read(6)
    again.close()
    (tmp_path / LOG_START_FILE).unlink()  # without the file: the segment's base, as before
    third = _log(tmp_path, clock)
    assert third.log_start_offset == 0
    third.close()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b'{"version": 9, "log_start_offset": 3}',
        b'{"version": 1}',
        b'{"version": 1, "log_start_offset": -4}',
        b'{"version": 1, "log_start_offset": "3"}',
        b"[1]",
        b"\xff\xfe",
    ],
)
def test_an_unreadable_start_file_is_said_and_the_log_opens(
    tmp_path: Path, clock: FakeClock, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    plog = _log(tmp_path, clock)
    for i in range(5):
        plog.append(batch([b"v%d" % i], ts=clock()))
    plog.delete_before(3)
    plog.close()
    (tmp_path / LOG_START_FILE).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="storage._log_start"):
        again = _log(tmp_path, clock)
    assert again.log_start_offset == 0 and again.log_end_offset == 5
    assert "unreadable log start checkpoint" in caplog.text
    # and a new DeleteRecords writes a good one again
    assert again.delete_before(2) == 2
    again.close()
    assert load_log_start(tmp_path) == 2


def test_a_log_that_ends_before_its_start_starts_again_there(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's LogLoader: appends DeleteRecords saw but a crash lost (never flushed) left
    the log ending before its start; the offsets below it were handed out, so the log
    starts again, empty, at the start, and never hands them out again."""
    plog = _log(tmp_path, clock)
    for i in range(6):
        plog.append(batch([b"v%d" % i], ts=clock()))
    plog.delete_before(6)
    plog.close()
    (seg,) = tmp_path.glob("*.log")
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])  # the tail lost
    with caplog.at_level(logging.WARNING, logger="storage._log"):
        again = _log(tmp_path, clock)
    assert "starts again at 6" in caplog.text
    assert (again.log_start_offset, again.log_end_offset) == (6, 6)
    assert [p.name for p in tmp_path.glob("*.log")] == [f"{6:020d}.log"]
    assert again.append(batch([b"next"], ts=clock())).base_offset == 6
    again.close()
    third = _log(tmp_path, clock)
    assert (third.log_start_offset, third.log_end_offset) == (6, 7)
    third.close()


def test_retention_past_the_start_takes_over(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, retention_ms=1000, segment_bytes=400)
    for i in range(30):
        plog.append(batch([b"v%02d" % i], ts=clock()))
    bases = [s.base_offset for s in plog._segments]
    assert len(bases) >= 3
    plog.delete_before(bases[1] + 1)
    assert plog.log_start_offset == bases[1] + 1
    clock.advance(1001)
    plog.enforce_retention()
    assert plog.log_start_offset == plog.log_end_offset == 30
    plog.close()
    again = _log(tmp_path, clock, retention_ms=1000, segment_bytes=400)
    assert again.log_start_offset == 30  # the file's older offset counts no more
    again.close()


def test_a_start_that_cannot_be_kept_is_a_storage_error_and_moves_nothing(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plog = _log(tmp_path, clock)
    for i in range(5):
        plog.append(batch([b"v%d" % i], ts=clock()))

    def full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("storage._log.save_log_start", full)
    with pytest.raises(StorageError, match="No space left"):
        plog.delete_before(3)
    assert plog.log_start_offset == 0
    assert _offsets(plog.read(0).data)[:1] == [0]
    plog.close()


def test_timestamps_below_the_start_find_the_start(tmp_path: Path, clock: FakeClock) -> None:
    plog = _log(tmp_path, clock, segment_bytes=400, retention_ms=-1)
    for i in range(30):
        plog.append(batch([b"v%02d" % i, b"w%02d" % i], ts=1000 + i))  # 2 a batch
    assert plog.segment_count > 3
    plog.delete_before(31)  # the second record of batch 15
    assert plog.offset_for_timestamp(0) == 31
    assert plog.offset_for_timestamp(1015) == 31
    assert plog.offset_for_timestamp(1016) == 32
    assert plog.offset_for_timestamp(2000) is None
    plog.close()


def test_segments_left_below_a_kept_start_go_at_the_next_open(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A crash after the start was kept and before the segments below it were removed:
    the next open removes them (Kafka's retention check deletes segments below the start)."""
    plog = _log(tmp_path, clock, segment_bytes=400, retention_ms=-1)
    for i in range(30):
        plog.append(batch([b"v%02d" % i], ts=clock()))
    bases = [s.base_offset for s in plog._segments]
    assert len(bases) > 3
    plog.close()
    save_log_start(tmp_path, bases[2] + 1)  # kept; the crash came before the removal
    again = _log(tmp_path, clock, segment_bytes=400, retention_ms=-1)
    assert again.log_start_offset == bases[2] + 1
    assert [s.base_offset for s in again._segments] == bases[2:]
    assert sorted(int(p.stem) for p in tmp_path.glob("*.log")) == bases[2:]
    assert _offsets(again.read(bases[2] + 1).data)[0] == bases[2] + 1
    with pytest.raises(OffsetOutOfRange):
        again.read(bases[2])
    again.close()


def test_a_compacted_topic_refuses_delete_records_as_kafka_does(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Kafka's Partition.deleteRecordsOnLeader: PolicyViolation unless the cleanup policy
    includes delete; compact,delete topics move their start as any other."""
    plog = _log(tmp_path / "c", clock, cleanup_policy="compact")
    for i in range(5):
        plog.append(batch([b"v%d" % i], ts=clock(), key=b"k%d" % i))
    with pytest.raises(PolicyViolation, match=r"cleanup\.policy is compact"):
        plog.delete_before(3)
    assert plog.log_start_offset == 0 and load_log_start(tmp_path / "c") is None
    plog.close()
    both = _log(tmp_path / "cd", clock, cleanup_policy="compact,delete")
    for i in range(5):
        both.append(batch([b"v%d" % i], ts=clock(), key=b"k%d" % i))
    assert both.delete_before(3) == 3
    both.close()
