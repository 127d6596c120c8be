"""A damaged entry in the middle of a sealed segment's offset index (found by an attack,
2026-12-03). Loading a sealed segment checks its index's order, its range and its last
entry, not the entries between; reads trusted them. An entry moved into a batch made the
read serve bytes that are no batch (the records from there to the segment's end could not
be read, though intact on disk); one moved onto record bytes that look like a batch header of
length -12 made the read loop for good (Fetch runs on the broker's event loop: every client
stopped); one moved onto another whole batch skipped the records between, silently. Now a
read checks that the batch at an index position is the one the entry names and otherwise
walks the segment from its start; a segment that cannot be walked is a StorageError."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from logmarshal.localbroker import LocalBroker
from storage import (
    CorruptBatch,
    DataDir,
    NewRecord,
    StorageError,
    TopicConfig,
    decode_records,
    encode_batch,
    iter_batches,
)
from tests.storage.broker.helpers import RawClient, fetch_request

#: record bytes shaped as a batch header: base offset 0, length -12 (a walk's step of 0)
LOOPING = b"\x00" * 8 + b"\xff\xff\xff\xf4" + b"\x00" * 15
TS = int(time.time() * 1000)  # (recent: retention keeps every segment)
DAMAGED = 10  # the entry damaged: the batch ending at offset 10 (one record a batch)


def _value(i: int) -> bytes:
    return b"x" * 40 + LOOPING + b"y" * 40 if i == DAMAGED else b"v%d" % i


def _fill(data: Path) -> None:
    config = TopicConfig(segment_bytes=16 * 1024, index_interval_bytes=0)  # an entry a batch
    with DataDir(data) as dd:
        dd.create_topic("t", 1, config)
        plog = dd.partition("t", 0)
        for i in range(800):
            plog.append(encode_batch([NewRecord(_value(i), key=b"k%d" % i, timestamp=TS + i)]))
        assert plog.segment_count >= 3


def _damage(data: Path, how: str, at: int = DAMAGED) -> None:
    """Move the first segment's index entry of offset ``at``: into its batch, onto the
    looking-like-a-header bytes of its record, or onto the start of the next batch, whose
    own entry goes (the entries stay in order, as in a sparse index: a batch start, but
    another batch than the entry names; a read at DAMAGED would begin after it)."""
    index = data / "t-0" / f"{0:020d}.index"
    raw = bytearray(index.read_bytes())
    entries = list(struct.iter_unpack(">iI", raw))
    k = next(i for i, (rel, _) in enumerate(entries) if rel == at)
    rel, pos = entries[k]
    if how == "into its batch":
        moved = pos + 16
    elif how == "onto a header of length -12":
        moved = (data / "t-0" / f"{0:020d}.log").read_bytes().find(LOOPING, pos)
        assert pos < moved < entries[k + 1][1]
    else:  # "onto the next batch"
        moved = entries[k + 1][1]
        del raw[(k + 1) * 8 : (k + 2) * 8]
    struct.pack_into(">iI", raw, k * 8, rel, moved)
    index.write_bytes(bytes(raw))


def _break_magic(data: Path, last: int) -> None:
    """Damage the header (its magic) of the first segment's batch ending at ``last``."""
    entries = list(struct.iter_unpack(">iI", (data / "t-0" / f"{0:020d}.index").read_bytes()))
    position = next(p for r, p in entries if r == last)
    segment = data / "t-0" / f"{0:020d}.log"
    raw = bytearray(segment.read_bytes())
    raw[position + 16] = 7  # its magic
    segment.write_bytes(bytes(raw))


def _bounded(call: Callable[[], Any], seconds: float = 20.0) -> Any:
    """``call()``'s result; fails (instead of hanging the run) if it does not end."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"did not end in {seconds} s (a read that loops)"
    assert got, "raised (see the thread's traceback above)"
    return got[0]


def _offsets(data: bytes) -> list[int]:
    return [r.offset for _, batch in iter_batches(data) for r in decode_records(bytes(batch))]


HOWS = ["into its batch", "onto a header of length -12", "onto the next batch"]


@pytest.mark.parametrize("how", HOWS)
def test_reads_walk_around_a_damaged_index_entry(tmp_path, caplog, how):
    data = tmp_path / "data"
    _fill(data)
    _damage(data, how)
    with DataDir(data) as dd:
        plog = dd.partition("t", 0)
        for offset in (3, DAMAGED, DAMAGED + 1, 15):
            got = _offsets(_bounded(lambda o=offset: plog.read(o, 4096).data))
            assert got and got[0] == offset, f"read at {offset} gave {got[:3]}"
            assert got == list(range(offset, offset + len(got))), f"a gap: {got}"
        # a read whose byte budget ends at the damaged entry (the jump to the last indexed
        # batch that fits) returns whole batches only
        got = _offsets(_bounded(lambda: plog.read(DAMAGED - 3, 400).data))
        assert got == list(range(DAMAGED - 3, DAMAGED - 3 + len(got))) and len(got) >= 3
        # ListOffsets by timestamp walks the same index
        assert _bounded(lambda: plog.offset_for_timestamp(TS + DAMAGED)) == DAMAGED
    assert "reading from the start of the segment instead" in caplog.text


def test_a_batch_no_walk_can_pass_is_a_storage_error(tmp_path):
    """Disk damage to a sealed segment's batch header (here its magic): a read of that batch
    is CorruptBatch naming the offset after it, where a reader resumes (a length of -12
    there made the walk loop); a timestamp search that meets it is a clear StorageError; the
    batches after it are served, and the other segments as ever."""
    data = tmp_path / "data"
    _fill(data)
    _break_magic(data, DAMAGED)
    with DataDir(data) as dd:
        plog = dd.partition("t", 0)
        exc = _bounded(lambda: _raises(lambda: plog.read(DAMAGED, 4096)))
        assert isinstance(exc, CorruptBatch), exc
        assert (exc.offset, exc.next_offset) == (DAMAGED, DAMAGED + 1)
        exc = _bounded(lambda: _raises(lambda: plog.offset_for_timestamp(TS + DAMAGED)))
        assert isinstance(exc, StorageError) and "damaged segment" in str(exc), exc
        assert _offsets(plog.read(DAMAGED + 1).data)[:2] == [DAMAGED + 1, DAMAGED + 2]
        last = plog.log_end_offset - 1
        assert _offsets(plog.read(last).data) == [last]


def _raises(call: Callable[[], Any]) -> BaseException | None:
    """What ``call()`` raised (returned from the bounded thread, re-raised by the test)."""
    try:
        call()
    except BaseException as exc:  # (handed to the test thread)
        return exc
    return None


def test_the_broker_answers_every_client_over_a_damaged_index(tmp_path):
    """A broker process over the index of length -12: the fetch is answered with the
    records, and the broker keeps answering."""
    data = tmp_path / "data"
    _fill(data)
    _damage(data, "onto a header of length -12")
    broker = LocalBroker(tmp_path / "broker", data_dir=data).start()
    try:
        with RawClient(broker.address, timeout=20) as client:
            answer = client.call(fetch_request("t", 0, DAMAGED), FetchResponse)
            partition = answer.responses[0].partitions[0]
            assert partition.error_code == 0
            assert _offsets(partition.records)[:3] == [DAMAGED, DAMAGED + 1, DAMAGED + 2]
        with RawClient(broker.address, timeout=10) as other:
            started = time.monotonic()
            other.call(MetadataRequest[1](topics=None), MetadataResponse)
            assert time.monotonic() - started < 10
    finally:
        broker.kill()


@pytest.mark.parametrize("how", HOWS)
def test_a_damaged_index_is_rebuilt_once(tmp_path, caplog, how):
    """The first read that meets a damaged entry walks the segment once and rebuilds its
    index: later reads use it again (no walk from the start each time, on the broker's
    event loop), and its file is written back as it was before the damage, so the next
    start trusts a sound index."""
    data = tmp_path / "data"
    _fill(data)
    index = data / "t-0" / f"{0:020d}.index"
    sound = index.read_bytes()
    _damage(data, how)
    assert index.read_bytes() != sound
    with DataDir(data) as dd:
        plog = dd.partition("t", 0)
        assert _offsets(_bounded(lambda: plog.read(DAMAGED, 4096).data))[0] == DAMAGED
        assert "reading from the start of the segment instead" in caplog.text
        assert index.read_bytes() == sound
        caplog.clear()
        for offset in (DAMAGED, DAMAGED + 1, 3):
            got = _offsets(plog.read(offset, 4096).data)
            assert got == list(range(offset, offset + len(got))) and got, got
        assert plog.offset_for_timestamp(TS + DAMAGED) == DAMAGED
        assert "start of the segment" not in caplog.text
    caplog.clear()
    with DataDir(data) as dd:
        assert _offsets(dd.partition("t", 0).read(DAMAGED, 4096).data)[0] == DAMAGED
    assert "start of the segment" not in caplog.text and "rebuilding" not in caplog.text


def test_a_rebuild_keeps_the_entries_past_a_damaged_batch(tmp_path):
    """An index rebuilt by a read stops where a batch header is damaged; the batches after
    it stay readable through the old entries past it, as they were before the rebuild."""
    data = tmp_path / "data"
    _fill(data)
    broken = DAMAGED + 20
    _break_magic(data, broken)
    _damage(data, "into its batch")
    with DataDir(data) as dd:
        plog = dd.partition("t", 0)
        assert _offsets(_bounded(lambda: plog.read(DAMAGED, 100).data))[0] == DAMAGED
        assert _offsets(plog.read(broken + 1, 4096).data)[:2] == [broken + 1, broken + 2]
        assert _offsets(plog.read(broken - 1, 100).data)[0] == broken - 1
        exc = _raises(lambda: plog.read(broken, 4096))
        assert isinstance(exc, CorruptBatch) and exc.next_offset == broken + 1, exc


def test_a_rebuild_drops_a_damaged_entry_past_a_damaged_batch(tmp_path, caplog):
    """An old entry kept past a damaged header is kept only if its position holds the batch
    it names: a damaged one kept would make the read that meets it walk from the segment's
    start into the damaged header (a StorageError for a batch that is intact) and rebuild
    again, on every such read."""
    data = tmp_path / "data"
    _fill(data)
    broken = DAMAGED + 20
    _break_magic(data, broken)
    _damage(data, "into its batch")
    _damage(data, "into its batch", at=broken + 5)
    with DataDir(data) as dd:
        plog = dd.partition("t", 0)
        assert _offsets(_bounded(lambda: plog.read(DAMAGED, 100).data))[0] == DAMAGED
        caplog.clear()
        got = _offsets(_bounded(lambda: plog.read(broken + 5, 4096).data))
        assert got[:2] == [broken + 5, broken + 6]
        assert "start of the segment" not in caplog.text


def test_a_rebuild_beside_readers_never_pairs_old_and_new_entries(tmp_path):
    """A rebuild swaps the index a reader on another thread is using (the broker's event
    loop and its request threads): swapped as two arrays one after the other, a reader
    could pair the old offsets with the new positions (a ValueError from a strict zip that
    dropped the connection, found by review 2026-12-03)."""
    import sys

    from storage._index import OffsetIndex

    index = OffsetIndex(tmp_path / "x.index")
    short = [(i, i * 100) for i in range(10)]
    long = [(i, i * 100) for i in range(40)]
    index.replace(short)
    failures: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                got = index.entries()
                assert got in (short, long), len(got)
                rel, pos = index.floor(25)
                assert (rel, pos) in ((9, 900), (25, 2500)), (rel, pos)
            except BaseException as exc:  # (handed to the test thread)
                failures.append(exc)
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch as often as the interpreter allows
    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        for _ in range(20_000):
            index.replace(short)
            index.replace(long)
            if failures:
                break
    finally:
        stop.set()
        reader.join(10)
        sys.setswitchinterval(old)
    assert not failures, failures[0]
