"""Sparse offset and time indexes of one segment, with fixed-size binary entries.

Both can always be rebuilt from the log, so they are written without fsync on the hot
path and validated on open; an index that looks wrong is thrown away and rebuilt.

Both are Kafka's layout, entry for entry, so that Kafka's ``kafka-dump-log`` reads them
without a mismatch:

* ``.index``: 8-byte entries ``(relative offset int32, position uint32)``, both strictly
  increasing. An entry points at the start of the batch whose *last* offset it names.
* ``.timeindex``: 12-byte entries ``(timestamp int64, relative offset int32)`` with
  strictly increasing timestamps. An entry ``(T, r)`` says that T is the largest timestamp
  of the batches up to the one ending at relative offset r (the batch holding T ends there),
  so a search for ts > T may skip every batch up to r.
  When a segment is sealed a last entry ``(segment max timestamp, relative last offset of
  the batch holding it)`` is added, which is how a sealed segment's max timestamp survives
  restarts.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from array import array
from pathlib import Path

from storage._files import read_regular, replace_file

__all__ = ["OffsetIndex", "TimeIndex"]

log = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">iI")
_TIME_ENTRY = struct.Struct(">qi")
_PENDING_BYTES = 4096  # buffered index entries are appended to the file past this


class _IndexFile:
    """Shared plumbing: in-memory arrays mirrored by an append-only file."""

    entry: struct.Struct

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending = bytearray()  # entries not yet appended to the file
        self._writable = False
        self._behind = False  # a write of the pending entries failed (said once)

    def _read_entries(self) -> list[tuple[int, int]] | None:
        """Entries on disk, or None if the file is missing or not a whole number of entries."""
        try:
            data = read_regular(self.path, limit=None)
        except FileNotFoundError:
            return None
        except ValueError as exc:  # not a regular file: rebuilt like a damaged one
            log.warning("%s", exc)
            return None
        if len(data) % self.entry.size:
            log.warning(
                "%s: size %d is not a multiple of %d", self.path, len(data), self.entry.size
            )
            return None
        return list(self.entry.iter_unpack(data))

    def open_writer(self) -> None:
        """Allow appends. No descriptor is kept: entries are buffered and appended by an
        open-write-close when the buffer fills or on flush, so an index costs the open-file
        budget nothing between writes."""
        self._writable = True

    def _write(self, a: int, b: int) -> None:
        if not self._writable:
            return
        self._pending += self.entry.pack(a, b)
        if len(self._pending) >= _PENDING_BYTES:
            try:
                self._append_pending(fsync=False)
            except OSError as exc:
                # The batch this entry indexes is in the log already, and its append must not
                # fail for the index: it was reported failed while stored, and the next batch
                # took the same offsets (a full disk: acknowledged records cut at the next
                # open). The entries stay buffered for the next flush; an index is rebuilt
                # from its log when it falls short.
                if not self._behind:
                    log.warning("%s: index entries not written yet: %s", self.path, exc)
                self._behind = True

    def _append_pending(self, *, fsync: bool) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            done = 0
            try:
                view = memoryview(bytes(self._pending))
                while view:
                    n = os.write(fd, view)
                    done += n
                    view = view[n:]
            finally:
                del self._pending[:done]  # what reached the file is not written twice
            self._behind = False
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        """Replace the file with exactly these entries (after a rebuild)."""
        self._pending.clear()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(self.entry.pack(a, b) for a, b in entries))
        replace_file(tmp, self.path)

    def flush(self, fsync: bool = False) -> None:
        """Append what is buffered; with ``fsync`` (a seal), the file exists afterwards even
        without entries: a sealed segment smaller than ``index.interval.bytes`` had no
        ``.index``, and the next open warned and rebuilt it (until 2026-12-06)."""
        if self._pending or (fsync and self._writable):
            self._append_pending(fsync=fsync)

    def close_writer(self) -> None:
        """Write what is buffered and refuse further appends."""
        if self._pending:
            self._append_pending(fsync=False)
        self._writable = False

    def discard_writer(self) -> None:
        """Drop what is buffered (the files are being deleted) and refuse further appends."""
        self._pending.clear()
        self._writable = False


class OffsetIndex(_IndexFile):
    """Maps a relative offset to the file position of the batch that ends there."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        # One pair, swapped by one assignment (:meth:`replace` runs beside readers on other
        # threads): a reader that takes both from ``_arrays`` at once never pairs an old
        # array with a new one. An append to the active segment's pair may show one more
        # relative offset than positions for a moment; readers go by the shorter.
        self._arrays: tuple[array[int], array[int]] = (array("q"), array("q"))

    @property
    def rel(self) -> array[int]:
        return self._arrays[0]

    @property
    def pos(self) -> array[int]:
        return self._arrays[1]

    def snapshot(self) -> tuple[array[int], array[int]]:
        """(relative offsets, positions) of one version of the index."""
        return self._arrays

    def entries(self) -> list[tuple[int, int]]:
        rels, positions = self._arrays
        n = min(len(rels), len(positions))
        return list(zip(rels[:n], positions[:n], strict=True))

    def load(self, log_size: int, rel_limit: int) -> bool:
        """Load and validate; False (and nothing loaded) if the file cannot be trusted."""
        entries = self._read_entries()
        if entries is None:
            return False
        prev_rel, prev_pos = -1, -1
        for rel, pos in entries:
            if rel <= prev_rel or pos <= prev_pos or rel >= rel_limit or pos >= log_size:
                log.warning(
                    "%s: entry (%d, %d) is out of order or out of range", self.path, rel, pos
                )
                return False
            prev_rel, prev_pos = rel, pos
        self.replace(entries)
        return True

    def append(self, rel: int, pos: int) -> None:
        rels, positions = self._arrays
        rels.append(rel)
        positions.append(pos)
        self._write(rel, pos)

    def floor(self, rel: int) -> tuple[int | None, int]:
        """(last relative offset, position) of the last indexed batch ending at or before
        rel; (None, 0) if none: a reader checks the batch it finds there against it."""
        rels, positions = self._arrays
        i = bisect.bisect_right(rels, rel) - 1
        return (rels[i], positions[i]) if 0 <= i < len(positions) else (None, 0)

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Serve these entries instead (a sealed segment's index rebuilt after a read met a
        damaged entry), in memory; the file is rewritten by its log (:meth:`rewrite`, under
        the log's lock)."""
        self._arrays = (array("q", (e[0] for e in entries)), array("q", (e[1] for e in entries)))

    def clear(self) -> None:
        self._arrays = (array("q"), array("q"))


class TimeIndex(_IndexFile):
    """Lets a timestamp search skip the part of a segment that is entirely older."""

    entry = _TIME_ENTRY

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.ts = array("q")
        self.rel = array("q")

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.ts, self.rel, strict=True))

    def load(self, rel_limit: int) -> bool:
        """Load and validate; rel_limit is the segment's relative next offset."""
        entries = self._read_entries()
        if entries is None:
            return False
        prev_ts, prev_rel = None, -1
        for ts, rel in entries:
            if (prev_ts is not None and ts <= prev_ts) or rel < prev_rel or rel > rel_limit:
                log.warning(
                    "%s: entry (%d, %d) is out of order or out of range", self.path, ts, rel
                )
                return False
            prev_ts, prev_rel = ts, rel
        self.ts = array("q", (e[0] for e in entries))
        self.rel = array("q", (e[1] for e in entries))
        return True

    @property
    def last_timestamp(self) -> int | None:
        return self.ts[-1] if self.ts else None

    def maybe_append(self, ts: int, rel: int) -> None:
        """Add (ts, rel) if ts is newer than the last entry (entries stay strictly increasing)."""
        if not self.ts or ts > self.ts[-1]:
            self.ts.append(ts)
            self.rel.append(rel)
            self._write(ts, rel)

    def lookup(self, ts: int) -> int:
        """A relative offset before which every batch is older than ts (0 if none known)."""
        entry = self.entry_before(ts)
        return 0 if entry is None else entry[1]

    def entry_before(self, ts: int) -> tuple[int, int] | None:
        """The entry :meth:`lookup` skips by, (timestamp, relative offset); None if none."""
        i = bisect.bisect_left(self.ts, ts) - 1
        return (self.ts[i], self.rel[i]) if i >= 0 else None

    def clear(self) -> None:
        self.ts = array("q")
        self.rel = array("q")
