"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

A segment is append-only. Writes go straight to the file descriptor (``os.writev``),
reads use ``os.pread`` so concurrent readers never share a file position. Only the
newest (active) segment can be torn by a crash: older ones are fsynced when they roll.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import mmap
import os
import resource
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from storage._errors import StorageError
from storage._files import copy_durably
from storage._index import OffsetIndex, TimeIndex
from storage._records import BATCH_OVERHEAD, MAGIC, Compression, crc32c

__all__ = [
    "NO_TIMESTAMP",
    "FileHandles",
    "Segment",
    "SegmentGone",
    "default_file_budget",
    "end_past_damage",
    "scan_batches",
    "segment_name",
]

log = logging.getLogger(__name__)

NO_TIMESTAMP = -(1 << 63)
_HEADER = struct.Struct(">qiibIhiqqqhii")
_SCAN_CHUNK = 4 * 1024 * 1024
_IOV_MAX = 1024
_INT32_MAX = (1 << 31) - 1

# called as on_batch(position, base_offset, size, next_offset, max_timestamp)
BatchCallback = Callable[[int, int, int, int, int], None]


def segment_name(base_offset: int, suffix: str) -> str:
    """Kafka's file naming: base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}{suffix}"


def scan_batches(
    fd: int,
    file_size: int,
    expected_base: int,
    on_batch: BatchCallback,
    *,
    verify: bool = True,
    allow_gaps: bool = False,
    start: int = 0,
) -> tuple[int, str | None]:
    """Walk the batches of a segment file from position ``start`` (0: its first batch).

    Stops at the first batch that is short, has a wrong length, magic, record count or CRC,
    or does not continue the offsets (base offsets sit outside the CRC, so continuity is
    what catches damage there; ``allow_gaps`` accepts a forward jump, which compaction
    leaves in sealed segments). Returns (bytes of valid prefix, reason it stopped or None).
    """
    pos = start
    buf = b""
    buf_start = start
    expected = expected_base
    while pos < file_size:
        rel = pos - buf_start
        if len(buf) - rel < BATCH_OVERHEAD:
            if file_size - pos < BATCH_OVERHEAD:
                return pos, f"partial batch header at byte {pos}"
            buf = os.pread(fd, min(_SCAN_CHUNK, file_size - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < BATCH_OVERHEAD:
                return pos, f"short read at byte {pos}"
        (base, length, _, magic, crc, attrs_, last_delta, _, max_ts, _, _, _, count) = (
            _HEADER.unpack_from(buf, rel)
        )
        size = length + 12
        if magic != MAGIC:
            return pos, f"bad magic {magic} at byte {pos}"
        if length < BATCH_OVERHEAD - 12 or pos + size > file_size:
            return pos, f"bad or torn batch length {length} at byte {pos}"
        if attrs_ & 0x07 > Compression.ZSTD or count < 1 or last_delta != count - 1:
            return pos, f"bad batch attributes or record count at byte {pos}"
        if base < expected or (base != expected and not allow_gaps):
            return pos, f"batch at byte {pos} has base offset {base}, expected {expected}"
        if verify:
            if rel + size > len(buf):
                buf = os.pread(fd, max(min(_SCAN_CHUNK, file_size - pos), size), pos)
                buf_start, rel = pos, 0
                if len(buf) < size:
                    return pos, f"short read at byte {pos}"
            if crc32c(memoryview(buf)[rel + 21 : rel + size]) != crc:
                return pos, f"CRC mismatch in batch at byte {pos} (offset {base})"
        expected = base + count
        on_batch(pos, base, size, expected, max_ts)
        pos += size
    return pos, None


_MAGIC_AT = 16  # the magic byte's place in a batch header
_MAGIC_BYTE = bytes((MAGIC,))


def end_past_damage(fd: int, file_size: int, pos: int, expected: int) -> int:
    """Past every offset a segment's bytes may still hold after damage at byte ``pos``
    (``expected`` is where the intact batches before it end): the end of the batches found
    after it by their magic byte and CRC, since the damage may have broken the lengths that
    chain them, and of the damaged batch itself if its header still names the offsets that
    were due. What kept damage may hold, for the operator who reads it."""
    end = expected
    if file_size - pos < BATCH_OVERHEAD:
        return end
    with mmap.mmap(fd, file_size, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
        head = _HEADER.unpack_from(view, pos)
        base, length, count = head[0], head[1], head[12]
        if base == expected and 1 <= count <= length and pos + length + 12 <= file_size:
            end = base + count
        for _, base, count in _intact_after(mm, view, file_size, pos, expected):
            end = max(end, base + count)
    return end


def next_intact(fd: int, file_size: int, pos: int, expected: int) -> tuple[int, int] | None:
    """(byte, base offset) of the first whole batch (magic byte and CRC) after damage at byte
    ``pos``, of offsets from ``expected`` on: where a read walks on past the damage."""
    if file_size - pos < BATCH_OVERHEAD:
        return None
    with mmap.mmap(fd, file_size, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
        for start, base, _ in _intact_after(mm, view, file_size, pos, expected):
            return start, base
    return None


def scan_around_damage(
    fd: int,
    file_size: int,
    expected_base: int,
    on_batch: BatchCallback,
    *,
    verify: bool = True,
    on_resume: Callable[[], None] | None = None,
) -> list[tuple[int, str]]:
    """:func:`scan_batches` (``allow_gaps``) over a whole sealed segment, going on at the next
    whole batch (:func:`next_intact`) after each damage, so that the batches after it stay
    readable; ``on_resume`` is called there. Returns each damage met: (byte, reason)."""
    after = expected_base

    def note(pos: int, base: int, size: int, next_offset: int, max_ts: int) -> None:
        nonlocal after
        after = next_offset
        on_batch(pos, base, size, next_offset, max_ts)

    damage: list[tuple[int, str]] = []
    at, expected = 0, expected_base
    while True:
        valid, reason = scan_batches(
            fd, file_size, expected, note, verify=verify, allow_gaps=True, start=at
        )
        if reason is None:
            return damage
        damage.append((valid, reason))
        found = next_intact(fd, file_size, valid, after)
        if found is None:
            return damage
        at, expected = found
        if on_resume is not None:
            on_resume()


def report_gaps(segments: Sequence[Segment]) -> None:
    """Log, as an error, offsets between two segments that neither holds, in a log no
    cleaner thins (where a gap means a segment file went missing): reads there go on at
    the next segment, as over the gaps compaction leaves, so an open is where it is said."""
    for seg, nxt in itertools.pairwise(segments):
        end = seg.end_on_disk()
        if end is not None and end < nxt.base_offset:
            log.error(
                "%s: offsets %d to %d are in no segment (a segment file missing?); reads "
                "there go on at %d",
                seg.log_path.parent,
                end,
                nxt.base_offset - 1,
                nxt.base_offset,
            )


def _intact_after(
    mm: mmap.mmap, view: memoryview, file_size: int, pos: int, expected: int
) -> Iterator[tuple[int, int, int]]:
    """(byte, base offset, record count) of each batch after byte ``pos`` found by its magic
    byte and CRC, of offsets from ``expected`` on, in file order."""
    at = pos + 1 + _MAGIC_AT
    while (m := mm.find(_MAGIC_BYTE, at)) >= 0:
        start = m - _MAGIC_AT
        if start + BATCH_OVERHEAD > file_size:
            return
        at = m + 1
        (base, length, _, _, crc, attrs_, last_delta, _, _, _, _, _, count) = _HEADER.unpack_from(
            view, start
        )
        size = length + 12
        if (
            length < BATCH_OVERHEAD - 12
            or start + size > file_size
            or attrs_ & 0x07 > Compression.ZSTD
            or count < 1
            or last_delta != count - 1
            or base < expected
            or crc32c(view[start + 21 : start + size]) != crc
        ):
            continue
        yield start, base, count
        at = start + size + _MAGIC_AT


_FD_RESERVE = 1024  # descriptors left for sockets, metadata and index files


def default_file_budget() -> int:
    """How many segment files may be open at once within this process's ``ulimit -n``: the
    soft limit less a reserve (1024, or half the limit if that is smaller)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 4096
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft - min(_FD_RESERVE, soft // 2))


class SegmentGone(StorageError):
    """The segment was deleted or replaced (retention, cleaning) and its descriptor closed:
    a reader holding an old view should look again."""


class FileHandles:
    """The open segment files of a data directory, at most ``capacity`` of them.

    A segment's descriptor is opened on first use and stays open while it is used; the
    least recently used idle ones are closed when the budget is reached, and reopened on
    demand. A descriptor is *pinned* for the length of one read, write, fsync or scan, so
    it is never closed under a caller (a descriptor number closed and reused by another
    file while a pread uses it would read the wrong file). If every open one is pinned, the
    budget is exceeded rather than a caller blocked; if the process runs out of descriptors
    (EMFILE) idle ones are closed and the open retried.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = default_file_budget() if capacity is None else max(1, capacity)
        self._lock = threading.Lock()
        self._idle: OrderedDict[Segment, None] = OrderedDict()  # LRU order, oldest first
        self._open = 0
        #: descriptors opened and closed over the cache's life (tests and metrics)
        self.opened = 0
        self.closed = 0

    @property
    def open_count(self) -> int:
        return self._open

    def acquire(self, seg: Segment) -> int:
        """The segment's descriptor, opened if needed, pinned until :meth:`release`."""
        with self._lock:
            if seg._fd >= 0:
                seg._pins += 1
                self._idle.pop(seg, None)
                return seg._fd
            if seg._gone:
                raise SegmentGone(f"{seg.log_path} was deleted or replaced")
            self._make_room(self.capacity - 1)
            while True:
                try:
                    fd = os.open(seg.log_path, seg._open_flags, 0o644)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._idle:
                        if isinstance(exc, FileNotFoundError) and seg._created:
                            raise SegmentGone(f"{seg.log_path} is gone") from exc
                        raise
                    self._make_room(max(0, self._open - max(1, len(self._idle) // 2)))
            seg._open_flags &= ~os.O_CREAT  # created once; a later reopen must not recreate it
            seg._created = True
            seg._fd = fd
            seg._pins = 1
            self._open += 1
            self.opened += 1
            return fd

    def release(self, seg: Segment) -> None:
        with self._lock:
            seg._pins -= 1
            if seg._pins > 0:
                return
            if seg._gone or seg._closing:
                self._close(seg)
            else:
                self._idle[seg] = None
                if self._open > self.capacity:
                    self._make_room(self.capacity)

    def forget(self, seg: Segment) -> None:
        """Close the segment's descriptor now, or when its last user releases it."""
        with self._lock:
            seg._closing = True
            if seg._fd >= 0 and seg._pins == 0:
                self._close(seg)

    def _make_room(self, target: int) -> None:
        """Close least recently used idle descriptors until at most ``target`` are open."""
        while self._open > target and self._idle:
            seg, _ = self._idle.popitem(last=False)
            self._close(seg)

    def _close(self, seg: Segment) -> None:
        self._idle.pop(seg, None)
        if seg._fd < 0:
            return
        fd, seg._fd = seg._fd, -1
        self._open -= 1
        self.closed += 1
        try:
            os.close(fd)
        except OSError:
            log.exception("%s: close failed", seg.log_path)


class Segment:
    """Files and in-memory bookkeeping of one segment. Its log file descriptor comes from a
    :class:`FileHandles` (opened on demand, closed when idle and the budget is reached)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        handles: FileHandles | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = directory / segment_name(base_offset, ".log")
        self.index = OffsetIndex(directory / segment_name(base_offset, ".index"))
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex"))
        self.index_interval_bytes = index_interval_bytes
        self.handles = handles if handles is not None else FileHandles()
        self._fd = -1
        self._pins = 0
        self._gone = False  # deleted or replaced: never reopened by path
        self._closing = False
        self._created = False
        self._open_flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        with self.open() as fd:
            st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a device or FIFO put there: never ours to read
            self.handles.forget(self)
            raise StorageError(f"{self.log_path} is not a regular file")
        self.size = st.st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._max_timestamp_rel = 0  # relative last offset of the batch holding max_timestamp
        self.first_batch_max_timestamp = NO_TIMESTAMP
        self.roll_base_ms: int | None = None  # when age-based rolling starts counting
        self._bytes_since_index = 0
        #: the offset index was rebuilt in memory (a read met a damaged entry) and its file
        #: is still the damaged one: the log rewrites it (:meth:`Log.keep_repaired_index`)
        self.index_repaired = False
        self.time_index_doubted = False  # said once: an entry did not hold (:meth:`skip_for`)

    @contextlib.contextmanager
    def open(self) -> Iterator[int]:
        """The log file's descriptor, pinned open for the block."""
        fd = self.handles.acquire(self)
        try:
            yield fd
        finally:
            self.handles.release(self)

    # ---------------------------------------------------------------- bookkeeping

    def note_batch(self, pos: int, base: int, size: int, next_offset: int, max_ts: int) -> None:
        """Update indexes and counters for a batch now stored at pos: Kafka's sparse rule and
        Kafka's entries (``LogSegment.append``), so that Kafka's own reader accepts the files:
        the offset entry names the batch's last offset, the time entry the max timestamp so
        far (this batch included) and the last offset of the batch that holds it."""
        last_rel = next_offset - 1 - self.base_offset
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self._max_timestamp_rel = last_rel
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(last_rel, pos)
            if self.max_timestamp != NO_TIMESTAMP:
                self.time_index.maybe_append(self.max_timestamp, self._max_timestamp_rel)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        if self.first_batch_max_timestamp == NO_TIMESTAMP and pos == 0:
            self.first_batch_max_timestamp = max_ts
        self.next_offset = next_offset

    def _reset_bookkeeping(self) -> None:
        self.index.clear()
        self.time_index.clear()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._max_timestamp_rel = 0
        self.first_batch_max_timestamp = NO_TIMESTAMP

    # ---------------------------------------------------------------- open paths

    def recover(self, *, keep_cut: bool = False) -> int:
        """Validate every batch (newest segment on open); truncate the tail at the first bad
        one, and rebuild the indexes from what survives. Returns the number of bytes cut.

        ``keep_cut``: the directory was shut down cleanly, so damage is no write that a crash
        tore but a corruption, and intact records may follow it. The cut bytes are then first
        kept in a file beside the segment (``<segment>.log.<byte>.damaged``, fsynced); so
        they are after a crash too when a whole batch follows the damage (a crash tears only
        the last writes; a torn tail is cut and not kept). The
        log goes on from the damage all the same, as after an unclean leader election: a log
        end with offsets skipped, and nothing to read up to it, would keep a reader that
        waits to reach the end (a replay of ``__marshal``) waiting.
        """
        self._reset_bookkeeping()
        file_size = self.size
        with self.open() as fd:
            valid, reason = scan_batches(fd, file_size, self.base_offset, self.note_batch)
            cut = file_size - valid
            why = None
            if cut and keep_cut:
                why = "though the directory was shut down cleanly"
            elif cut and next_intact(fd, file_size, valid, self.next_offset) is not None:
                # a whole batch after the damage: no torn tail (a crash tears the last writes)
                why = "with whole batches after it (no write a crash tore)"
            if why is not None:
                kept = self._damaged_path(valid)
                copy_durably(fd, valid, file_size, kept)
                end = end_past_damage(fd, file_size, valid, self.next_offset)
                held = (
                    f"offsets {self.next_offset} to {end - 1}"
                    if end > self.next_offset
                    else "no whole batch"
                )
                log.error(
                    "%s: damaged at byte %d %s (%s): the %d bytes from there (%s) are kept in "
                    "%s, and new records take offsets from %d on",
                    self.log_path,
                    valid,
                    why,
                    reason,
                    cut,
                    held,
                    kept.name,
                    self.next_offset,
                )
            elif cut:
                log.warning(
                    "%s: truncating %d bytes at byte %d: %s", self.log_path, cut, valid, reason
                )
            if cut:
                os.ftruncate(fd, valid)
                os.fsync(fd)
                self.size = valid
        self._write_indexes()
        return cut

    def _damaged_path(self, pos: int) -> Path:
        """A new file for the damaged bytes from ``pos`` (a number added if damage was kept
        from the same byte before)."""
        path = self.log_path.with_name(f"{self.log_path.name}.{pos}.damaged")
        n = 0
        while path.exists():
            n += 1
            path = self.log_path.with_name(f"{self.log_path.name}.{pos}-{n}.damaged")
        return path

    def load_sealed(self, next_base: int) -> None:
        """Open an older, fsynced segment: trust its indexes if they validate, else rebuild."""
        rel_limit = next_base - self.base_offset
        if self.size == 0:  # (the first segment, emptied by cleaning: nothing to index, and
            if self.index_files_hold_entries():  # no warning at every open, until 2026-12-06)
                log.warning(
                    "%s: empty, though its indexes name records (lost from it); indexes "
                    "rewritten empty",
                    self.log_path,
                )
            self._reset_bookkeeping()
            self.next_offset = next_base
            self._write_indexes()  # (empty, as its log)
            return
        if (
            self.index.load(self.size, rel_limit)
            and self.time_index.load(rel_limit)
            and self.time_index.rel
            # Kafka's sealing entry names an offset inside the segment; an entry at the next
            # segment's base is the layout before 2026-11-29, rebuilt once into Kafka's
            and self.time_index.rel[-1] < rel_limit
            and self._index_tail_matches()
        ):
            self.next_offset = next_base
            self.max_timestamp = self.time_index.ts[-1]
            self._max_timestamp_rel = self.time_index.rel[-1]
            self.first_batch_max_timestamp = self._first_batch_max_ts()
            return
        log.warning("%s: index missing or inconsistent, rebuilding from the log", self.log_path)
        self._reset_bookkeeping()
        with self.open() as fd:
            damage = scan_around_damage(fd, self.size, self.base_offset, self.note_batch)
        for pos, reason in damage:
            # An old segment is not truncated on disk, nor served short: a read of the damaged
            # offsets gets CorruptBatch (naming where to resume), the batches after it are read
            log.error("%s: damaged sealed segment at byte %d: %s", self.log_path, pos, reason)
        if self.next_offset > next_base:
            log.warning(
                "%s: ends at offset %d but the next segment starts at %d",
                self.log_path,
                self.next_offset,
                next_base,
            )
        else:
            self.next_offset = next_base  # (compaction removed the segment's last offsets)
        self._seal_time_index()
        self._write_indexes()

    def end_on_disk(self) -> int | None:
        """The offset after the last batch this sealed segment's file holds, walked from its
        last index entry (headers only; None where a header is damaged): its
        :attr:`next_offset` is the next segment's base, whatever the file holds."""
        _, positions = self.index.snapshot()
        end = [self.base_offset]

        def note(pos: int, base: int, size: int, next_offset: int, max_ts: int) -> None:
            end[0] = next_offset

        with self.open() as fd:
            _, damage = scan_batches(
                fd,
                self.size,
                self.base_offset,
                note,
                verify=False,
                allow_gaps=True,
                start=positions[-1] if positions else 0,
            )
        return None if damage else end[0]

    def verified_max_timestamp(self) -> int:
        """The largest timestamp of this sealed segment, read from its batch headers (and
        kept as :attr:`max_timestamp`): retention deletes a segment by it, and a time index
        damaged in order, which the checks at open pass, must not delete fresh records."""
        found = [NO_TIMESTAMP]

        def note(pos: int, base: int, size: int, next_offset: int, max_ts: int) -> None:
            found[0] = max(found[0], max_ts)

        with self.open() as fd:
            scan_around_damage(fd, self.size, self.base_offset, note, verify=False)
        if found[0] != self.max_timestamp:
            log.error(
                "%s: its time index says its records reach %d, its batches say %d: the "
                "batches are taken (the time index is damaged)",
                self.log_path,
                self.max_timestamp,
                found[0],
            )
            self.max_timestamp = found[0]
        return self.max_timestamp

    def adopt(self, notes: Sequence[tuple[int, int, int, int, int]], next_base: int) -> None:
        """Take the bookkeeping of a sealed segment just written by the cleaner (its batches
        as note_batch arguments), instead of scanning it again; write its indexes."""
        self._reset_bookkeeping()
        for note in notes:
            self.note_batch(*note)
        self.next_offset = next_base
        self._seal_time_index()
        self._write_indexes()

    def rebuild_offset_index(self, limit: int) -> None:
        """Rebuild the offset index in memory from the batch headers up to byte ``limit``,
        by the rule :meth:`note_batch` writes it with: after a read met a damaged entry, so
        that later reads use the index again instead of each walking the segment from its
        start. Headers only (no CRCs): a read decodes what it serves. Where a header is no
        batch, the walk goes on at the next whole batch (:func:`next_intact`), which gets an
        entry, so that reads past the damage jump there. If none is found, the old entries
        past the damage are kept: only those whose position holds a batch header ending at
        their offset (a wrong one kept would send every read that meets it through another
        walk and rebuild)."""
        entries: list[tuple[int, int]] = []
        since = 0

        def on_batch(pos: int, base: int, size: int, next_offset: int, max_ts: int) -> None:
            nonlocal since
            if since > self.index_interval_bytes:
                entries.append((next_offset - 1 - self.base_offset, pos))
                since = 0
            since += size

        def resume() -> None:
            nonlocal since
            since = self.index_interval_bytes + 1

        with self.open() as fd:
            damage = scan_around_damage(
                fd, limit, self.base_offset, on_batch, verify=False, on_resume=resume
            )
        for pos, reason in damage:
            log.warning("%s: damaged at byte %d: %s", self.log_path, pos, reason)
        if damage:  # (entries past the last damage that a walk could not reach)
            valid, last = damage[-1][0], (entries[-1][0] if entries else -1)
            for r, p in self.index.entries():
                if p > valid and r > last and self._names_batch_at(r, p):
                    entries.append((r, p))
                    last = r
        self.index.replace(entries)
        self.index_repaired = True

    def _names_batch_at(self, rel: int, pos: int) -> bool:
        """True if byte ``pos`` starts a batch header (magic 2) ending at relative ``rel``."""
        raw = self.read(pos, 27)
        if len(raw) != 27 or raw[16] != 2:
            return False
        (base,) = struct.unpack_from(">q", raw)
        (last_delta,) = struct.unpack_from(">i", raw, 23)
        return base + last_delta == self.base_offset + rel

    def skip_for(self, ts: int, limit: int) -> int:
        """The relative offset a search for ``ts`` may start at: every batch before it is
        older (the time index's :meth:`~TimeIndex.lookup`), once the entry it skips by is
        checked against the batches it names. Loading checks the entries' order and range,
        not their values: an entry damaged in order (a timestamp lowered, an offset moved
        on) skipped batches that reach ``ts``, and the search answered a later offset,
        silently. An entry that does not hold is searched past from the segment's start;
        so is one naming a batch past ``limit`` (appended after the search's view), which
        this view cannot check (no damage: nothing said)."""
        entry = self.time_index.entry_before(ts)
        if entry is None:
            return 0
        stamp, rel = entry
        holds = self._time_entry_holds(stamp, rel, limit)
        if holds:
            return rel
        if holds is False and not self.time_index_doubted:
            self.time_index_doubted = True
            log.warning(
                "%s: time index entry (%d, %d) does not match the batches it names; searching "
                "the segment from its start",
                self.time_index.path,
                stamp,
                rel,
            )
        return 0

    def _time_entry_holds(self, stamp: int, rel: int, limit: int) -> bool | None:
        """True if the batch ending at relative ``rel`` has max timestamp ``stamp`` and the
        batches walked to it (from the offset index's entry of a batch before it) none
        larger, as the entry says; None if that batch lies past ``limit``. A spot check: an
        entry damaged into another batch's (max timestamp, last offset) passes it when no
        batch walked reaches past that timestamp. The walk starts at the segment's
        start if the offset index's entry is damaged (that damage is the read's to report,
        not the time index's)."""
        target = self.base_offset + rel
        expect, pos = self.indexed(target - 1)  # (a batch before it walked: its max too)
        if expect is not None and not self._names_batch_at(expect - self.base_offset, pos):
            pos = 0
        while pos + BATCH_OVERHEAD <= limit:
            raw = self.read(pos, BATCH_OVERHEAD)
            if len(raw) < BATCH_OVERHEAD or raw[16] != MAGIC:
                return False
            head = _HEADER.unpack_from(raw)
            last, length = head[0] + head[6], head[1]
            if last >= target:
                return last == target and head[8] == stamp
            if head[8] > stamp or length < BATCH_OVERHEAD - 12:
                return False  # (an older batch reaching past the entry's stamp: not its max)
            pos += 12 + length
        return None if pos >= limit else False

    def index_files_hold_entries(self) -> bool:
        """Either index file is not empty (cleaning writes an emptied segment's empty)."""
        for path in (self.index.path, self.time_index.path):
            with contextlib.suppress(OSError):
                if path.stat().st_size > 0:
                    return True
        return False

    def _index_tail_matches(self) -> bool:
        """Spot-check: the last offset-index entry must point at a batch with that last offset
        (an index of the earlier layout, which named base offsets, fails it and is rebuilt)."""
        rels, positions = self.index.snapshot()
        return not rels or self._names_batch_at(rels[-1], positions[-1])

    def _first_batch_max_ts(self) -> int:
        raw = self.read(0, BATCH_OVERHEAD)
        if len(raw) < BATCH_OVERHEAD:
            return NO_TIMESTAMP
        return _HEADER.unpack_from(raw)[8]

    def _write_indexes(self) -> None:
        self.index.rewrite(self.index.entries())
        self.time_index.rewrite(self.time_index.entries())

    # ---------------------------------------------------------------- writes

    def open_writers(self) -> None:
        self.index.open_writer()
        self.time_index.open_writer()

    def write(self, pieces: Sequence[bytes | memoryview], total: int) -> None:
        """Append pieces with as few syscalls as possible; undo a partial write on error."""
        start = self.size
        with self.open() as fd:
            try:
                _writev_all(fd, list(pieces), total)
            except BaseException:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    log.exception("%s: could not undo a failed write", self.log_path)
                raise
        self.size = start + total

    def fsync(self) -> None:
        """fsync the log file. A descriptor closed since a write is no loss: Linux's fsync
        on any descriptor of the file writes all of its dirty pages."""
        with self.open() as fd:
            os.fsync(fd)

    def _seal_time_index(self) -> None:
        """Kafka's entry on roll: (segment max timestamp, last offset of the batch holding it);
        how a sealed segment's max timestamp survives restarts."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self._max_timestamp_rel)

    def seal(self) -> None:
        """Make this segment read-only history: final time entry, everything fsynced."""
        self._seal_time_index()
        self.index.flush(fsync=True)
        self.time_index.flush(fsync=True)
        self.index.close_writer()
        self.time_index.close_writer()
        self.fsync()

    def flush_indexes(self) -> None:
        self.index.flush()
        self.time_index.flush()

    # ---------------------------------------------------------------- reads

    def read(self, pos: int, n: int) -> bytes:
        handles = self.handles  # acquire/release spelled out: the hot path of every fetch
        fd = handles.acquire(self)
        try:
            return os.pread(fd, n, pos)
        finally:
            handles.release(self)

    @property
    def max_timestamp_last_offset(self) -> int:
        """The last offset of the (first) batch holding :attr:`max_timestamp`."""
        return self.base_offset + self._max_timestamp_rel

    def indexed(self, offset: int) -> tuple[int | None, int]:
        """(last offset, position) of the last indexed batch ending at or before ``offset``:
        the batch holding ``offset`` starts there or later. (None, 0) when no entry
        precedes it (the segment's first batch starts at 0)."""
        rel, pos = self.index.floor(offset - self.base_offset)
        return (None if rel is None else self.base_offset + rel), pos

    # ---------------------------------------------------------------- lifecycle

    def delete(self) -> None:
        """Remove the files. A reader using the descriptor right now finishes its read;
        one that comes later gets :class:`SegmentGone` and looks at the log again."""
        self.index.discard_writer()
        self.time_index.discard_writer()
        self.mark_gone()
        for path in (self.log_path, self.index.path, self.time_index.path):
            path.unlink(missing_ok=True)
        # the damaged bytes kept beside it (:meth:`recover`) go with the segment they came
        # from: nothing else removes them, and their offsets are below the log start now
        for path in self.log_path.parent.glob(f"{self.log_path.name}.*.damaged"):
            log.warning("%s: removed with its segment", path)
            path.unlink(missing_ok=True)

    def mark_gone(self) -> None:
        """This object no longer names the file at log_path (deleted or replaced)."""
        self._gone = True
        self.handles.forget(self)

    def close(self) -> None:
        self.index.close_writer()
        self.time_index.close_writer()
        self.handles.forget(self)


def _writev_all(fd: int, pieces: list[bytes | memoryview], total: int) -> None:
    """os.writev until everything is written (handles short writes and IOV_MAX)."""
    written = 0
    i = 0
    while written < total:
        chunk = pieces[i : i + _IOV_MAX]
        n = os.writev(fd, chunk)
        written += n
        # advance past fully written pieces, keep the rest of a partial one
        while n > 0:
            size = len(pieces[i])
            if n >= size:
                n -= size
                i += 1
            else:
                pieces[i] = memoryview(pieces[i])[n:]
                n = 0
