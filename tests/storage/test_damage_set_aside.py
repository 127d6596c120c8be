"""Damage an attack on the storage found (2026-12-06): files an open trusted that could
delete or hide intact records, and checkpoints whose odd JSON stopped every open with a
traceback. Each test fails with its fix removed."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from storage import (
    CorruptBatch,
    DataDir,
    NewRecord,
    StorageError,
    TopicConfig,
    decode_records,
    encode_batch,
)
from storage._records import decode_readable
from storage.broker.idempotence import ProducerIdAllocator

TS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = TS + 10_000

    def __call__(self) -> int:
        return self.now


def _fill(data: Path, batches: int, config: dict[str, object] | None = None) -> None:
    """Topic ``t`` (1 partition) of ``batches`` batches of 3 keyed records, offsets 3·i..
    (segments of 2,000 bytes, indexed every 100 unless ``config`` says otherwise)."""
    with DataDir(data, clock=Clock()) as dd:
        settings = {"segment.bytes": 2000, "index.interval.bytes": 100, **(config or {})}
        dd.create_topic("t", 1, TopicConfig.from_dict(settings))
        plog = dd.partition("t", 0)
        for i in range(batches):
            recs = [
                NewRecord(b"v%d-%d" % (i, j), key=b"k%d-%d" % (i, j), timestamp=TS + i)
                for j in range(3)
            ]
            plog.append(encode_batch(recs))


def _segments(data: Path) -> list[Path]:
    return sorted((data / "t-0").glob("*.log"))


def _batch_starts(raw: bytes) -> list[int]:
    starts, pos = [], 0
    while pos + 12 <= len(raw):
        starts.append(pos)
        pos += struct.unpack_from(">i", raw, pos + 8)[0] + 12
    return starts


def _read_all(dd: DataDir) -> tuple[list[int], list[tuple[int, int | None]]]:
    """The offsets a reader gets, skipping damage where CorruptBatch (the read's, or its
    decoding's) says to resume; and the damage met, as (offset, next offset)."""
    plog = dd.partition("t", 0)
    offset, got, damage = plog.log_start_offset, [], []
    while offset < plog.log_end_offset:
        try:
            data = plog.read(offset, 1 << 20).data
        except CorruptBatch as exc:
            damage.append((exc.offset, exc.next_offset))
            assert exc.next_offset is not None and exc.next_offset > offset
            offset = exc.next_offset
            continue
        records, error = decode_readable(data)  # (as a client decodes what it is served)
        records = [r for r in records if r.offset >= offset]
        if records:
            got += [r.offset for r in records]
            offset = records[-1].offset + 1
        else:
            assert error is not None and error.next_offset is not None, f"stuck at {offset}"
            damage.append((error.offset, error.next_offset))
            offset = error.next_offset
    return got, damage


@pytest.mark.parametrize("field", ["length", "magic"])
def test_a_damaged_header_in_a_sealed_segment_is_stepped_over(tmp_path, field) -> None:
    """A damaged length sent the walk past the segment's end: reads at the damage got
    nothing, and reads after it got the next segment's records (435 records skipped, no
    error). A damaged magic made every read after it an error with no way on. Now the
    damaged batch is CorruptBatch naming the offset after it, and the rest is read."""
    data = tmp_path / "data"
    _fill(data, 400, {"segment.bytes": 20_000, "index.interval.bytes": 4096})
    seg = _segments(data)[0]
    raw = bytearray(seg.read_bytes())
    at = _batch_starts(bytes(raw))[8]  # offsets 24..26
    if field == "length":
        raw[at + 8 : at + 12] = (999_999).to_bytes(4, "big")
    else:
        raw[at + 16] = 7
    seg.write_bytes(bytes(raw))
    with DataDir(data, clock=Clock()) as dd:
        plog = dd.partition("t", 0)
        with pytest.raises(CorruptBatch) as raised:
            plog.read(24)
        assert (raised.value.offset, raised.value.next_offset) == (24, 27)
        for offset in (27, 60, 100):
            records = decode_records(plog.read(offset).data)
            assert next(r.offset for r in records if r.offset >= offset) == offset
        got, damage = _read_all(dd)
    assert damage == [(24, 27)]
    assert got == [o for o in range(1200) if not 24 <= o < 27]


def test_a_sealed_segment_rebuilt_around_damage_reads_the_same_on_every_open(
    tmp_path,
) -> None:
    """A sealed segment with a CRC error and no index: its rebuild stopped at the damage and
    served nothing from there (21 intact records skipped without an error), and the index it
    wrote made the next open serve them. Now both opens serve them, the damage reported."""
    data = tmp_path / "data"
    _fill(data, 60)
    seg = _segments(data)[0]
    raw = bytearray(seg.read_bytes())
    raw[_batch_starts(bytes(raw))[8] + 70] ^= 0xFF  # a record byte of offsets 24..26
    seg.write_bytes(bytes(raw))
    seg.with_suffix(".index").unlink()
    for _ in range(2):
        with DataDir(data, clock=Clock()) as dd:
            assert dd.partition("t", 0).log_end_offset == 180
            got, damage = _read_all(dd)
        assert damage == [(24, 27)]
        assert got == [o for o in range(180) if not 24 <= o < 27]


def test_damage_followed_by_whole_batches_is_kept_after_a_crash(tmp_path, caplog) -> None:
    """Recovery after a crash cut the newest segment at a flipped byte and threw away the
    whole, fsynced batches after it. A crash tears only the last writes, so those bytes are
    now kept beside the segment, as after a clean shutdown."""
    data = tmp_path / "data"
    _fill(data, 40, {"segment.bytes": 1 << 20})
    seg = _segments(data)[-1]
    raw = bytearray(seg.read_bytes())
    at = _batch_starts(bytes(raw))[10]
    raw[at + 70] ^= 0xFF
    seg.write_bytes(bytes(raw))
    (data / ".clean-shutdown").unlink(missing_ok=True)
    with caplog.at_level(logging.ERROR), DataDir(data, clock=Clock()) as dd:
        assert dd.partition("t", 0).log_end_offset == 30
    kept = sorted((data / "t-0").glob("*.damaged"))
    assert [k.name for k in kept] == [f"{seg.name}.{at}.damaged"]
    assert seg.read_bytes() + kept[0].read_bytes() == bytes(raw)
    assert "no write a crash tore" in caplog.text


def test_a_junk_swap_file_replaces_nothing(tmp_path, caplog) -> None:
    """A ``.swap`` file completes a cleaner's pass on open, replacing the segments its name
    covers. A 10-byte junk one deleted all four segments of a compacted partition."""
    data = tmp_path / "data"
    _fill(data, 60, {"cleanup.policy": "compact"})
    before = [p.name for p in _segments(data)]
    assert len(before) >= 3
    swap = data / "t-0" / f"{0:020d}.log.{1_000_000:020d}.swap"
    swap.write_bytes(b"0123456789")
    with caplog.at_level(logging.ERROR), DataDir(data, clock=Clock()) as dd:
        got, damage = _read_all(dd)
    assert got == list(range(180)) and damage == []
    assert [p.name for p in _segments(data)] == before
    assert not swap.exists() and swap.with_name(swap.name + ".damaged").exists()
    assert "not a cleaner's swap" in caplog.text


def test_a_time_index_damaged_in_order_deletes_nothing(tmp_path, caplog) -> None:
    """Retention deleted a sealed segment of 10-second-old records under a 7-day
    retention.ms, after its time index's timestamps were lowered (in order, so the checks
    at open pass). The batches' own timestamps are read before a segment is deleted."""
    data = tmp_path / "data"
    _fill(data, 60, {"retention.ms": 7 * 86_400_000})
    index = _segments(data)[0].with_suffix(".timeindex")
    raw = bytearray(index.read_bytes())
    for pos in range(0, len(raw), 12):
        (ts,) = struct.unpack_from(">q", raw, pos)
        struct.pack_into(">q", raw, pos, ts - TS)
    index.write_bytes(bytes(raw))
    with caplog.at_level(logging.ERROR), DataDir(data, clock=Clock()) as dd:
        plog = dd.partition("t", 0)
        assert plog.enforce_retention() == 0
        assert plog.log_start_offset == 0
        got, _ = _read_all(dd)
    assert got == list(range(180))
    assert "its time index says" in caplog.text


def test_a_segment_name_beyond_int64_is_refused_by_name(tmp_path) -> None:
    """An empty ``99999999999999999999.log`` opened as the log's end: every append then
    failed with a struct.error."""
    data = tmp_path / "data"
    _fill(data, 3)
    stray = data / "t-0" / ("9" * 20 + ".log")
    stray.touch()
    with pytest.raises(StorageError, match="beyond int64") as raised:
        DataDir(data, clock=Clock())
    assert str(stray) in str(raised.value)


@pytest.mark.parametrize(
    "content",
    [b"[]", b"[" * 100_000, b'{"version": 1, "first_dirty_offset": 1e400, "ranges": []}'],
)
def test_odd_json_in_a_partition_checkpoint_is_a_warning(tmp_path, caplog, content) -> None:
    """JSON of the wrong shape, a number beyond a float, or nesting too deep in a cleaner or
    log start checkpoint stopped every open with an AttributeError, OverflowError or
    RecursionError traceback that named no file. Such a checkpoint is unreadable, as a
    damaged one is: a warning naming it, and the open goes on."""
    data = tmp_path / "data"
    _fill(data, 3, {"cleanup.policy": "compact"})
    for name in ("cleaner-checkpoint.json", "log-start-offset.json"):
        (data / "t-0" / name).write_bytes(content)
    with caplog.at_level(logging.WARNING), DataDir(data, clock=Clock()) as dd:
        assert dd.partition("t", 0).log_end_offset == 9
    for name in ("cleaner-checkpoint.json", "log-start-offset.json"):
        assert f"{name}: unreadable" in caplog.text


@pytest.mark.parametrize("counter", ["1e400", "1e30", str(1 << 60), '"abc"', "[1]"])
def test_a_producer_id_counter_out_of_range_is_a_clear_error(tmp_path, counter) -> None:
    """``{"next_counter": 1e400}`` was an OverflowError, ``1e30`` a struct.error from the
    InitProducerId that handed out an id beyond int64."""
    (tmp_path / "producer-ids.json").write_text(f'{{"next_counter": {counter}}}')
    with pytest.raises(StorageError, match=r"producer-ids\.json is unreadable"):
        ProducerIdAllocator(tmp_path, 0).next_id()


def test_a_segment_file_gone_from_the_middle_is_reported(tmp_path, caplog) -> None:
    """A deleted middle segment went unnoticed: no word at open or at a read, and a read in
    its offsets was served the next segment's. It is an error at open, naming the offsets."""
    data = tmp_path / "data"
    _fill(data, 60)
    segments = _segments(data)
    assert len(segments) >= 3
    gone = segments[1]
    first, after = int(gone.name[:20]), int(segments[2].name[:20])
    for path in gone.parent.glob(gone.name[:20] + ".*"):
        path.unlink()
    with caplog.at_level(logging.ERROR), DataDir(data, clock=Clock()) as dd:
        assert dd.partition("t", 0).log_end_offset == 180
    assert f"offsets {first} to {after - 1} are in no segment" in caplog.text
    caplog.clear()
    _fill(tmp_path / "whole", 60)  # (an intact log says nothing)
    with caplog.at_level(logging.ERROR), DataDir(tmp_path / "whole", clock=Clock()):
        pass
    assert "in no segment" not in caplog.text
