"""Crash recovery: torn writes, garbage tails and flipped bytes in the newest segment."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import DataDir, PartitionLog, TopicConfig, decode_records, iter_batches
from storage._segment import end_past_damage
from tests.storage.conftest import FakeClock, batch

CFG = TopicConfig(segment_bytes=1500, index_interval_bytes=100)


def stored_batches(plog: PartitionLog) -> list[bytes]:
    """Every stored batch, in order, as raw bytes."""
    out: list[bytes] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).data
        chunk = [bytes(mv) for _, mv in iter_batches(data)]
        assert chunk
        out.extend(chunk)
        offset = decode_records(chunk[-1])[-1].offset + 1
    return out


def newest_segment(path: Path) -> Path:
    return max(path.glob("*.log"))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=14),
    kind=st.sampled_from(["truncate", "flip", "garbage"]),
    clean=st.booleans(),
    data=st.data(),
)
def test_recovery_after_random_damage(
    sizes: list[int], kind: str, clean: bool, data: st.DataObject
) -> None:
    """The same batches survive damage whether the last close was clean or not; after a
    clean one (``clean_shutdown``: a corruption, not a torn write), or when whole batches
    follow the damage (no write a crash tore), the cut bytes are kept."""
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        plog = PartitionLog(path, CFG, clock)
        n = 0
        for size in sizes:
            plog.append(
                batch([b"r%d-%s" % (n + i, b"x" * (n % 37)) for i in range(size)]), flush=True
            )
            n += size
        original = stored_batches(plog)
        plog.close()

        seg = newest_segment(path)
        seg_bytes = bytearray(seg.read_bytes())
        # batches of the newest segment are the tail of `original`
        in_last = []
        for b in reversed(original):
            if sum(len(x) for x in in_last) == len(seg_bytes):
                break
            in_last.insert(0, b)
        assert b"".join(in_last) == bytes(seg_bytes)
        earlier = original[: len(original) - len(in_last)]

        if kind == "garbage":
            garbage = data.draw(st.binary(min_size=1, max_size=200))
            seg.write_bytes(bytes(seg_bytes) + garbage)
            expect_prefix, damaged_at = len(in_last), None
        else:
            if not seg_bytes:
                return
            pos = data.draw(st.integers(0, len(seg_bytes) - 1))
            if kind == "truncate":
                seg.write_bytes(bytes(seg_bytes[:pos]))
            else:
                seg_bytes[pos] ^= data.draw(st.integers(1, 255))
                seg.write_bytes(bytes(seg_bytes))
            # which batch holds the damaged byte?
            start = 0
            damaged_at = rel = 0
            for i, b in enumerate(in_last):
                if start <= pos < start + len(b):
                    damaged_at, rel = i, pos - start
                    break
                start += len(b)
            expect_prefix = damaged_at
            if kind == "flip" and 12 <= rel < 16:
                # partitionLeaderEpoch sits outside the CRC in the v2 format (as in Kafka):
                # a flip there is undetectable, but it carries no record data.
                expect_prefix = len(in_last)

        damaged = seg.read_bytes()
        again = PartitionLog(path, CFG, clock, clean_shutdown=clean)  # must not raise
        left, kept = seg.read_bytes(), sorted(path.glob("*.damaged"))
        assert damaged.startswith(left)
        # kept after a crash too when whole batches follow the damage (no torn tail)
        followed = kind == "flip" and damaged_at is not None and damaged_at < len(in_last) - 1
        if (clean or followed) and len(left) < len(damaged):  # nothing lost: cut kept beside
            assert [k.name for k in kept] == [f"{seg.name}.{len(left)}.damaged"]
            assert left + kept[0].read_bytes() == damaged
        else:
            assert kept == []
        got = stored_batches(again)
        want = earlier + in_last[:expect_prefix]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g[:12] == w[:12] and g[16:] == w[16:]
        assert decode_records(b"".join(got)) == decode_records(b"".join(want))
        # the log is usable and offsets continue right after what survived
        end = again.log_end_offset
        info = again.append(batch([b"after"]), flush=True)
        assert info.base_offset == end
        assert decode_records(again.read(end).data)[0].value == b"after"
        again.close()
        # and a second open is a no-op
        third = PartitionLog(path, CFG, clock)
        assert third.log_end_offset == end + 1
        third.close()


def test_zero_length_segments(tmp_path: Path, clock: FakeClock) -> None:
    plog = PartitionLog(tmp_path, CFG, clock)
    plog.close()
    assert (tmp_path / "00000000000000000000.log").stat().st_size == 0
    plog = PartitionLog(tmp_path, CFG, clock)
    assert plog.log_end_offset == 0 and plog.read(0).data == b""
    for i in range(30):
        plog.append(batch([b"v%d" % i, b"y" * 30]))
    end = plog.log_end_offset
    plog.close()
    # a crash right after a roll leaves an empty newest segment
    (tmp_path / f"{end:020d}.log").touch()
    plog = PartitionLog(tmp_path, CFG, clock)
    assert plog.log_end_offset == end
    assert len(decode_records(b"".join(stored_batches(plog)))) == end
    plog.close()
    # and a torn newest segment cut to nothing
    newest = newest_segment(tmp_path)
    base = int(newest.stem)
    newest.write_bytes(b"")
    plog = PartitionLog(tmp_path, CFG, clock)
    assert plog.log_end_offset == base
    plog.close()


def test_unflushed_tail_may_go_but_flushed_stays(tmp_path: Path, clock: FakeClock) -> None:
    plog = PartitionLog(tmp_path, TopicConfig(), clock)
    plog.append(batch([b"durable"]), flush=True)
    plog.append(batch([b"maybe"]))
    seg = tmp_path / "00000000000000000000.log"
    size = seg.stat().st_size
    plog.close()
    os.truncate(seg, size - 10)  # simulate the unflushed write being torn
    plog = PartitionLog(tmp_path, TopicConfig(), clock)
    assert [r.value for r in decode_records(plog.read(0).data)] == [b"durable"]
    plog.close()


def test_datadir_open_recovers_every_partition(tmp_path: Path, clock: FakeClock) -> None:
    with DataDir(tmp_path, clock=clock) as dd:
        dd.create_topic("t", 3)
        for p in range(3):
            for _ in range(3):
                dd.partition("t", p).append(batch([b"a", b"b"]), flush=True)
    (tmp_path / ".clean-shutdown").unlink()  # as a crash leaves it: torn writes cut away
    for p in range(3):
        seg = tmp_path / f"t-{p}" / "00000000000000000000.log"
        raw = bytearray(seg.read_bytes())
        raw[-5 * (p + 1)] ^= 0xFF
        seg.write_bytes(bytes(raw))
    with DataDir(tmp_path, clock=clock) as dd:
        assert [dd.partition("t", p).log_end_offset for p in range(3)] == [4, 4, 4]
    assert not list(tmp_path.glob("t-*/*.damaged"))


def test_damage_after_a_clean_shutdown_is_kept(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by an attack on the CLI: a read-only command (``topic list``) cut a segment at
    a flipped byte and 50 intact records after it were gone. After a clean close the damage
    is a corruption, not a torn write: the cut bytes are kept beside the segment, named in
    an error, and the log goes on from the damage as before."""
    with DataDir(tmp_path, clock=clock) as dd:
        dd.create_topic("t", 1)
        for i in range(8):
            dd.partition("t", 0).append(batch([b"r%d-a" % i, b"r%d-b" % i]), flush=True)
    assert (tmp_path / ".clean-shutdown").exists()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    sizes = [len(b) for _, b in iter_batches(bytes(raw))]
    at = sum(sizes[:2])  # the third batch (offsets 4 and 5)
    raw[at + 70] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with caplog.at_level(logging.ERROR, logger="storage._segment"):
        dd = DataDir(tmp_path, clock=clock)
    try:
        assert dd.clean_shutdown and not (tmp_path / ".clean-shutdown").exists()
        plog = dd.partition("t", 0)
        assert plog.log_end_offset == 4
        kept = tmp_path / "t-0" / f"00000000000000000000.log.{at}.damaged"
        assert seg.read_bytes() + kept.read_bytes() == bytes(raw)
        assert "offsets 4 to 15" in caplog.text and kept.name in caplog.text
        assert plog.append(batch([b"after"]), flush=True).base_offset == 4
    finally:
        dd.close()
    with DataDir(tmp_path, clock=clock) as dd:  # clean again, nothing more is cut or kept
        assert [r.value for r in decode_records(dd.partition("t", 0).read(0).data)][-1] == b"after"
        assert len(list((tmp_path / "t-0").glob("*.damaged"))) == 1
        # once its segment is deleted (here: records deleted past it), the kept bytes go with
        # it: nothing else removed them
        plog = dd.partition("t", 0)
        plog.append(batch([b"roll"]), flush=True)
        with plog._lock:  # (a segment of its own for the next record: the damaged one can go)
            plog._roll()
        plog.append(batch([b"last"]), flush=True)
        plog.delete_before(plog.log_end_offset - 1)
        assert plog.segment_count == 1
        assert not list((tmp_path / "t-0").glob("*.damaged"))


def test_the_clean_marker_is_there_only_after_a_clean_close(tmp_path: Path) -> None:
    """Written once every partition is closed, removed by the next open: a process killed
    while it holds the directory leaves none, so its next open cuts torn writes."""
    marker = tmp_path / "d" / ".clean-shutdown"
    with DataDir(tmp_path / "d") as dd:
        assert not dd.clean_shutdown
        dd.create_topic("t", 1)
        assert not marker.exists()
    assert marker.exists()
    code = (
        "import sys, storage\n"
        f"dd = storage.DataDir({str(tmp_path / 'd')!r})\n"
        "print(dd.clean_shutdown, flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        assert not marker.exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with DataDir(tmp_path / "d") as dd:
        assert not dd.clean_shutdown


def test_end_past_damage_finds_batches_a_broken_length_unchained(tmp_path: Path) -> None:
    """The offsets kept damage may hold: batches after a broken length are found by their
    magic byte and CRC; a torn or garbage tail adds none."""
    plog = PartitionLog(tmp_path, TopicConfig(), FakeClock())
    for i in range(5):
        plog.append(batch([b"x%d" % i] * 3), flush=True)
    plog.close()
    raw = bytearray(newest_segment(tmp_path).read_bytes())
    at = sum(len(b) for _, b in list(iter_batches(bytes(raw)))[:2])
    raw[at + 8 : at + 12] = (7).to_bytes(4, "big")  # batch 3's length: no longer a chain
    path = tmp_path / "damaged"
    for data, want in ((raw, 15), (raw[: at + 30], 6), (raw[:at] + b"\0" * 200, 6)):
        path.write_bytes(bytes(data))
        fd = os.open(path, os.O_RDONLY)
        try:
            assert end_past_damage(fd, len(data), at, 6) == want
        finally:
            os.close(fd)
