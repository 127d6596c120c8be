"""Log compaction (docs/broker.md): latest value per key kept, order and offsets kept,
tombstones removed after delete.retention.ms, crash-safe at every step of a swap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import NewRecord, PartitionLog, TopicConfig, encode_batch
from storage._errors import InvalidRecord
from storage._records import decode_records

from .conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]


def _config(**kw) -> TopicConfig:
    kw.setdefault("cleanup_policy", "compact")
    kw.setdefault("segment_bytes", 400)
    kw.setdefault("retention_ms", -1)
    return TopicConfig(**kw)


def _put(plog: PartitionLog, clock, key: bytes, value: bytes | None) -> int:
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


def _check(read: list, written: dict[int, tuple[bytes, bytes | None]], active_base: int) -> None:
    """Offsets increase and each survivor is what was written there; in the cleanable part
    every key's latest write survives; nothing after the active segment's start is lost."""
    offsets = [r.offset for r in read]
    assert offsets == sorted(set(offsets))
    for r in read:
        assert (r.key, r.value) == written[r.offset]
    latest: dict[bytes, int] = {}
    for off in sorted(written):
        latest[written[off][0]] = off
    survivors = set(offsets)
    for key, off in latest.items():
        if written[off][1] is not None:
            assert off in survivors, (key, off)  # a live key's latest value is never removed
    for off in written:
        if off >= active_base:
            assert off in survivors


def test_latest_per_key_survives_and_tombstones_expire(tmp_path, clock: FakeClock) -> None:
    plog = PartitionLog(tmp_path / "p", _config(delete_retention_ms=1000), clock)
    written = {}
    for round_ in range(6):
        for k in range(5):
            value = None if (k == 3 and round_ == 4) else b"v%d-%d" % (k, round_)
            if k == 3 and round_ == 5:
                continue  # key 3 ends deleted
            off = _put(plog, clock, b"k%d" % k, value)
            written[off] = (b"k%d" % k, value)
    assert plog.segment_count > 3
    removed = plog.clean()
    assert removed > 0
    read = _all(plog)
    _check(read, written, plog._segments[-1].base_offset)
    assert any(r.key == b"k3" and r.value is None for r in read)  # tombstone kept for now
    active = plog._segments[-1].base_offset
    cleaned_keys = [r.key for r in read if r.offset < active]
    assert len(cleaned_keys) == len(set(cleaned_keys))  # superseded records really removed
    clock.advance(2000)
    for k in range(5):  # roll past the tombstone's segment with new data
        off = _put(plog, clock, b"k%d" % k if k != 3 else b"k9", b"new")
        written[off] = (b"k%d" % k if k != 3 else b"k9", b"new")
    plog.clean()
    read = _all(plog)
    _check(read, written, plog._segments[-1].base_offset)
    assert not any(r.key == b"k3" for r in read)  # tombstone removed after delete.retention.ms
    plog.close()
    reopened = PartitionLog(tmp_path / "p", _config(delete_retention_ms=1000), clock)
    assert [(r.offset, r.value) for r in _all(reopened)] == [(r.offset, r.value) for r in read]
    reopened.close()


def test_the_last_record_is_never_cleaned_when_an_empty_segment_follows_it(
    tmp_path, clock, monkeypatch
) -> None:
    """An append that rolled, then failed its write (no space left), left an empty active
    segment behind the one holding the log's last record, which became cleanable: its
    tombstone was removed once delete.retention.ms passed, and [its offset, log end) held no
    record, so a read up to the log end (a streams restore) waited for good. The segment
    holding the last record is never cleaned, as the active one is not (a helper's repro,
    2026-12-06; Kafka's active segment is never empty)."""
    import errno

    from storage._errors import StorageError
    from storage._segment import Segment

    plog = PartitionLog(tmp_path / "p", _config(delete_retention_ms=1000), clock)
    for k in range(4):
        _put(plog, clock, b"k%d" % k, b"v" * 40)
    last = _put(plog, clock, b"k1", None)  # the log ends in a tombstone
    write = Segment.write

    def no_space(self, pieces, total):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Segment, "write", no_space)
    with pytest.raises(StorageError, match="the append failed"):
        plog.append(encode_batch([NewRecord(b"x" * 300, key=b"k9", timestamp=clock())]))
    monkeypatch.setattr(Segment, "write", write)
    assert plog._segments[-1].size == 0 and plog.log_end_offset == last + 1
    for _ in range(3):  # the first pass would note the tombstone, a later one remove it
        clock.advance(2000)
        plog.clean()
    read = _all(plog)
    assert read[-1].offset == last and read[-1].value is None
    assert [r.offset for r in _all(plog) if r.offset >= last] == [last]
    plog.close()


def test_compacted_topic_refuses_records_without_key(tmp_path, clock) -> None:
    plog = PartitionLog(tmp_path / "p", _config(), clock)
    with pytest.raises(InvalidRecord, match="no key"):
        plog.append(encode_batch([NewRecord(b"v", timestamp=clock())]))
    plog.close()


def test_min_compaction_lag_keeps_recent_segments(tmp_path, clock) -> None:
    plog = PartitionLog(tmp_path / "p", _config(min_compaction_lag_ms=10_000), clock)
    for i in range(30):
        _put(plog, clock, b"k", b"v%d" % i)
    assert plog.clean() == 0
    clock.advance(20_000)
    _put(plog, clock, b"k", b"last")
    assert plog.clean() > 0
    plog.close()


_CRASH_POINTS = ("after_tmp", "after_index_unlink", "after_replace")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.integers(0, 6), st.booleans()),
            st.tuples(st.just("clean"), st.just(0), st.just(False)),
            st.tuples(st.just("crash"), st.integers(0, len(_CRASH_POINTS) - 1), st.just(False)),
            st.tuples(st.just("tick"), st.just(0), st.just(False)),
        ),
        min_size=5,
        max_size=80,
    )
)
def test_property_random_writes_deletes_cleanings_and_crashes(tmp_path_factory, ops) -> None:
    directory = tmp_path_factory.mktemp("c") / "p"
    clock = FakeClock()
    cfg = _config(segment_bytes=300, delete_retention_ms=5_000)
    plog = PartitionLog(directory, cfg, clock)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    try:
        for op, arg, flag in ops:
            if op == "put":
                key = b"k%d" % arg
                value = None if flag and arg % 2 else b"v%d-%d" % (arg, len(written))
                written[_put(plog, clock, key, value)] = (key, value)
            elif op == "clean":
                plog.clean()
            elif op == "tick":
                clock.advance(3_000)
            else:  # a crash at one step of a swap: the process dies, the files stay as they are
                point = _CRASH_POINTS[arg]
                plog = _crash_during_clean(plog, directory, cfg, clock, point)
            _check(_all(plog), written, plog._segments[-1].base_offset)
    finally:
        plog.close()


class _Crash(BaseException):
    pass


def _crash_during_clean(plog, directory, cfg, clock, point) -> PartitionLog:
    real_replace, real_unlink = os.replace, Path.unlink
    state = {"unlinks": 0}

    def replace(src, dst):
        if point == "after_tmp":
            raise _Crash
        real_replace(src, dst)
        if point == "after_replace":
            raise _Crash

    def unlink(self, missing_ok=False):
        real_unlink(self, missing_ok=missing_ok)
        if point == "after_index_unlink" and str(self).endswith(".index"):
            state["unlinks"] += 1
            raise _Crash

    import storage._log as log_module

    os_replace = log_module.os.replace
    log_module.os.replace = replace
    Path.unlink = unlink
    try:
        plog.clean()
    except _Crash:
        pass
    finally:
        log_module.os.replace = os_replace
        Path.unlink = real_unlink
    # "SIGKILL": drop the object without closing it properly, reopen from the files
    plog._closed = True
    for seg in plog._segments:
        seg.close()
    return PartitionLog(directory, cfg, clock)


_CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
from storage import NewRecord, PartitionLog, TopicConfig, encode_batch
merge = sys.argv[3] == "merge"
# merge: segments roll every 5 ms, so they are small and the cleaner merges adjacent ones up
# to segment.bytes; every pass is due (min.cleanable.dirty.ratio 0). The clock is the record
# count (a record a millisecond), not wall time: 50 appends take under 5 ms of a fast machine,
# whose segments then rolled once a pass and merged two at a time, "merged" (a pass merging
# more) waiting on a scheduling hiccup, sometimes longer than the test waits for it
cfg = TopicConfig(cleanup_policy="compact", retention_ms=-1,
                  segment_bytes=4000 if merge else 2000, segment_ms=5 if merge else 604800000,
                  min_cleanable_dirty_ratio=0.0)
i = 0
plog = PartitionLog(sys.argv[1], cfg, lambda: i)
print("ready", flush=True)
told = False
while True:
    for _ in range(50):
        plog.append(encode_batch([NewRecord(b"%d" % i, key=b"k%d" % (i % 13), timestamp=i)]))
        i += 1
    before = plog.segment_count
    plog.clean()
    if not told and plog.segment_count < before - 1:
        print("merged", flush=True)
        told = True
"""


def _readline(stream, seconds: float) -> bytes:
    """One line from a child's stdout, or b"" if none comes within seconds."""
    import select

    if not select.select([stream], [], [], seconds)[0]:
        return b""
    return stream.readline()


@pytest.mark.parametrize(
    ("mode", "delay"),
    [("plain", 0.3), ("plain", 0.7), ("plain", 1.1), ("merge", 0.1), ("merge", 0.5)],
)
def test_sigkill_mid_clean_leaves_a_valid_log(tmp_path, mode, delay) -> None:
    directory = tmp_path / "p"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory), str(ROOT), mode],
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: a readline takes one line, never the next one too (which
    )  # _readline's select would then wait for in vain)
    try:
        assert child.stdout is not None and _readline(child.stdout, 30) == b"ready\n"
        if mode == "merge":  # the kill lands among passes that merge segments
            assert _readline(child.stdout, 60) == b"merged\n"
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    plog = PartitionLog(directory, _config(segment_bytes=4000), lambda: 0)
    assert not list(directory.glob("*.swap")) and not list(directory.glob("*.cleaned"))
    read = _all(plog)
    offsets = [r.offset for r in read]
    assert offsets == sorted(set(offsets)) and offsets
    assert all(r.value == b"%d" % r.offset and r.key == b"k%d" % (r.offset % 13) for r in read)
    # every key's latest write is there: the writer's values are their offsets
    last = offsets[-1]
    for k in range(13):
        latest = max(o for o in range(last + 1) if o % 13 == k) if last >= k else None
        if latest is not None:
            assert latest in offsets
    assert plog.log_start_offset == 0  # cleaning never moves the log start
    plog.close()


def test_the_data_dir_cleans_periodically(tmp_path) -> None:
    """The cleaner runs on the DataDir's own thread, so the embedded cluster and the broker
    (both built on DataDir) compact alike."""
    from storage import DataDir

    with DataDir(tmp_path / "d", clean_interval_s=0.05) as d:
        d.create_topic("c", 1, _config())
        plog = d.partition("c", 0)
        for i in range(40):
            plog.append(
                encode_batch([NewRecord(b"v%d" % i, key=b"k", timestamp=int(time.time() * 1000))])
            )
        deadline = time.monotonic() + 10
        while len(_all(plog)) > 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_all(plog)) <= 10  # one per closed segment at most, plus the active one


def test_a_pass_whose_log_is_deleted_and_made_again_leaves_the_new_log_alone(
    tmp_path, clock, monkeypatch
) -> None:
    """A cleaning pass runs outside the log's lock. Its topic deleted (the log closed, its
    directory renamed away) and made again under the same name meanwhile, the pass removed
    its cleaned file by path: the new log's, whose own pass may be writing a file of that
    name (found by a helper's review, 2026-12-04; fails without)."""
    import storage._compaction as compaction
    from storage._compaction import CLEANED_SUFFIX

    path = tmp_path / "t-0"
    plog = PartitionLog(path, _config(), clock)
    for round_ in range(6):
        for k in range(5):
            _put(plog, clock, b"k%d" % k, b"v%d-%d" % (k, round_))
    assert plog.segment_count > 3
    first = plog._segments[0]
    theirs = path / (first.log_path.name + CLEANED_SUFFIX)  # the same name in the new log
    real = compaction.clean_batch
    made_again: list[Path] = []

    def deleted_and_made_again(*args, **kwargs):
        if not made_again:  # as DataDir.delete_topic, then create_topic of the same name
            plog.close()
            path.rename(tmp_path / "t-0.deleted")
            new = PartitionLog(path, _config(), clock)
            theirs.write_bytes(b"the new log's pass, half written")
            made_again.append(theirs)
            new.close()
        return real(*args, **kwargs)

    monkeypatch.setattr(compaction, "clean_batch", deleted_and_made_again)
    assert plog.clean() == 0  # nothing swapped into a closed log
    assert made_again == [theirs]
    assert theirs.read_bytes() == b"the new log's pass, half written"


def test_records_stored_with_negative_timestamps_are_compacted(tmp_path, clock) -> None:
    """A batch whose records have negative timestamps (a Kafka client may send them; the
    broker stores them, as Kafka's does) is written again by the cleaner as it was, though
    a new record refuses such a timestamp."""
    import struct

    from storage._records import crc32c, read_header

    plog = PartitionLog(tmp_path / "p", _config(segment_bytes=200), clock)
    raw = bytearray(
        encode_batch(
            [NewRecord(b"old", key=b"k", timestamp=0), NewRecord(b"x", key=b"j", timestamp=1)]
        )
    )
    struct.pack_into(">qq", raw, 27, -1000, -999)  # firstTimestamp, maxTimestamp
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    assert read_header(raw).first_timestamp == -1000
    plog.append(bytes(raw))
    for i in range(8):  # k's later value, then rolls past the first segment
        _put(plog, clock, b"k" if i == 0 else b"r%d" % i, b"new-%d" % i)
    assert plog.segment_count > 2
    assert plog.clean() == 1  # the first k: the batch is written again without it
    survivor = next(r for r in _all(plog) if r.key == b"j")
    assert (survivor.offset, survivor.value, survivor.timestamp) == (1, b"x", -999)
    plog.close()


def test_a_first_segment_emptied_by_cleaning_opens_without_a_rebuild(
    tmp_path, clock, caplog
) -> None:
    """Cleaning can leave the first segment empty (every key it held written again later);
    it is kept, its base being the log start. Every open of the log then warned that its
    index was "missing or inconsistent" and rebuilt it from nothing (until 2026-12-06):
    noise at every start of a broker holding a compacted topic (`__marshal` among them)."""
    import logging

    path = tmp_path / "p"
    plog = PartitionLog(path, _config(), clock)
    for i in range(60):
        _put(plog, clock, b"k%d" % (i % 3), b"v" * 40)
    plog.clean()
    plog.close()
    assert (path / f"{0:020d}.log").stat().st_size == 0  # (the case: emptied, kept)
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="storage"):
            again = PartitionLog(path, _config(), clock)
        assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
        assert again.log_start_offset == 0
        assert [r.key for r in _all(again)][-3:] == [b"k0", b"k1", b"k2"]
        again.close()


def test_an_empty_first_segment_whose_indexes_name_records_is_said(tmp_path, clock, caplog):
    """A first segment found empty while its index files still hold entries lost its
    records (cleaning writes an emptied segment's indexes empty): said, not rewritten
    silently (a helper's attack on the quiet open above, 2026-12-06)."""
    import logging

    path = tmp_path / "p"
    plog = PartitionLog(path, _config(index_interval_bytes=0), clock)
    for i in range(30):
        _put(plog, clock, b"k%d" % i, b"v" * 40)
    plog.close()
    (path / f"{0:020d}.log").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="storage"):
        PartitionLog(path, _config(index_interval_bytes=0), clock).close()
    assert [r for r in caplog.records if "its indexes name records" in r.getMessage()]


def _emptied_middle(path: Path, clock, **kw) -> tuple[list[int], list]:
    """A log whose cleaning emptied segments between others: their bases, and what it read."""
    plog = PartitionLog(path, _config(**kw), clock)
    for i in range(40):
        _put(plog, clock, b"k%d" % i, b"v" * 40)  # keys written once, then again below
    for i in range(40):
        _put(plog, clock, b"k%d" % i, b"w" * 40)
    for i in range(40):
        _put(plog, clock, b"z%d" % (i % 2), b"x" * 40)
    plog.clean()
    read = [(r.offset, r.key, r.value) for r in _all(plog)]
    plog.close()
    logs = sorted(path.glob("*.log"))
    return [int(p.stem) for p in logs[1:-1] if p.stat().st_size == 0], read


def test_segments_cleaning_emptied_are_removed_at_open_quietly(tmp_path, clock, caplog) -> None:
    """A segment between others that cleaning emptied is removed at the next open: a normal
    outcome of compaction, once a WARNING per segment at every first open after a cleaning
    (until 2026-12-06)."""
    import logging

    path = tmp_path / "p"
    emptied, read = _emptied_middle(path, clock)
    assert emptied  # (the case: cleaning emptied segments between others)
    with caplog.at_level(logging.WARNING, logger="storage"):
        again = PartitionLog(path, _config(), clock)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert not [b for b in emptied if (path / f"{b:020d}.log").exists()]
    assert [(r.offset, r.key, r.value) for r in _all(again)] == read
    again.close()


def test_an_empty_middle_segment_whose_indexes_name_records_is_said(tmp_path, clock, caplog):
    """An empty segment between others whose index files hold entries lost its records (a
    cleaned segment's indexes are written empty): that is a warning still."""
    import logging

    path = tmp_path / "p"
    plog = PartitionLog(path, _config(index_interval_bytes=0), clock)
    for i in range(30):
        _put(plog, clock, b"k%d" % i, b"v" * 40)
    plog.close()
    middle = sorted(path.glob("*.log"))[1]
    assert (middle.with_suffix(".index")).stat().st_size > 0
    middle.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="storage"):
        PartitionLog(path, _config(index_interval_bytes=0), clock).close()
    assert [r for r in caplog.records if "its indexes name records" in r.getMessage()]
    assert not middle.exists()
