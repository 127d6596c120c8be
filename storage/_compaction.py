"""Log compaction: keep the latest record of every key, as Kafka's log cleaner does.

When a partition is cleaned (Kafka's LogCleanerManager rules, decided by :func:`choose`
with ``now`` given, so tests use a manual clock):

* the log splits at the *first dirty offset* (the cleaner checkpoint: everything before it
  was cleaned by an earlier pass) and at the *first uncleanable offset*: the active segment's
  base (the newest segment's that holds records, when empty ones follow it), or the first
  dirty segment holding a record newer than ``min.compaction.lag.ms`` (records that recent
  are never cleaned);
* it is cleaned if its dirty ratio (dirty bytes / clean + dirty bytes) is above
  ``min.cleanable.dirty.ratio``, or if a dirty segment's first batch is older than
  ``max.compaction.lag.ms`` (and there are dirty bytes to clean), or (our addition, so
  that a quiet log loses them too) if a kept tombstone has become removable.

What a pass does:

* an offset map (key -> latest offset) is built from the dirty part; every segment from the
  log start to the first uncleanable offset is rewritten without the records it supersedes.
  Records without a key (written before the topic became compacted) are kept;
* a tombstone (null value) survives until ``delete.retention.ms`` after the pass that first
  cleaned it (the times are kept per range of offsets in the checkpoint, so merging
  segments never makes a tombstone older or younger than it is);
* order and offsets never change: surviving records keep their offsets; a batch with gaps is
  written as one batch per run of consecutive survivors;
* adjacent segments are merged into one while their combined size fits ``segment.bytes``
  (Kafka's groupSegmentsBySize); a group keeps its first segment's base offset, even if
  cleaning empties it, so the log start offset never moves (Kafka keeps it too);
* segments are read batch by batch (:func:`iter_segment_batches`), never whole.

Crash safety (a group ``[b1, end)`` cleaned into one segment): the output is written to
``<b1>.log.cleaned`` and fsynced; renamed to ``<b1>.log.<end>.swap`` and the directory
fsynced (the commit point); the group's old files are removed; the swap file is renamed to
``<b1>.log``. Opening a log removes a stray ``.cleaned`` file (the pass never happened) and
completes a ``.swap`` (removes every segment with a base in ``[b1, end)``, then renames), so
a crash at any step leaves either the old segments or the cleaned one, never a broken log.
The checkpoint (``cleaner-checkpoint.json``) is written after the swaps; losing it only
makes the next pass clean more and keep tombstones longer.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from storage._config import TopicConfig
from storage._errors import CorruptRecordError
from storage._files import OFFSET_MAX, fsync_dir, read_json, replace_durably
from storage._records import (
    Compression,
    KeptRecord,
    Record,
    decode_batch,
    encode_batch,
    read_header,
)
from storage._segment import scan_batches

__all__ = [
    "CHECKPOINT_FILE",
    "CLEANED_SUFFIX",
    "SWAP_FILE",
    "CleanerState",
    "CleaningPlan",
    "Note",
    "SegmentSummary",
    "choose",
    "clean_batch",
    "complete_swaps",
    "group_by_size",
    "iter_segment_batches",
    "offset_map",
    "swap_name",
    "write_cleaned",
]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
#: ``<base>.log.<end>.swap``: a cleaned group, committed, replacing segments [base, end)
SWAP_FILE = re.compile(r"([0-9]{20})\.log\.([0-9]{20})\.swap")  # fullmatch
CHECKPOINT_FILE = "cleaner-checkpoint.json"
_CHECKPOINT_VERSION = 1
_MAX_CLEAN_RANGES = 1000  # older first-cleaned ranges are merged (later time kept) past this
_READ_CHUNK = 1 << 20
_NEVER = -1  # a range's time when its offsets were never cleaned
_INT32_MAX = (1 << 31) - 1


def swap_name(base: int, end: int) -> str:
    """The committed swap file of a cleaned group replacing segments [base, end)."""
    return f"{base:020d}.log.{end:020d}.swap"


# ---------------------------------------------------------------------- the decision


@attrs.frozen
class SegmentSummary:
    """What the decision needs of one segment (the last one given is the active one)."""

    base_offset: int
    size: int
    max_timestamp: int
    first_batch_timestamp: int


@attrs.frozen
class CleaningPlan:
    """Clean [log start, end): the offset map comes from [first_dirty, end)."""

    first_dirty: int
    end: int
    dirty_ratio: float
    reason: str


def choose(
    segments: Sequence[SegmentSummary],
    first_dirty: int,
    now: int,
    cfg: TopicConfig,
    tombstones_due_at: int | None = None,
) -> CleaningPlan | None:
    """Whether (and how far) to clean a compacted log now; None if it is not due."""
    # the newest segment that holds records is never cleaned, as Kafka's active segment is
    # not: so the log's last record is never removed. Empty segments after it (a roll whose
    # append then failed, ENOSPC or a crash) once made it cleanable: a tombstone there was
    # removed and the tail [its offset, log end) held no record, so a read of it (a streams
    # restore to the log end) waited for records that never came
    last = len(segments) - 1
    while last > 0 and segments[last].size == 0:
        last -= 1
    if last < 1:
        return None  # only the active segment: nothing is cleanable
    closed, active = segments[:last], segments[last]
    log_start = segments[0].base_offset
    if not log_start <= first_dirty <= active.base_offset:
        first_dirty = log_start  # no checkpoint, or one retention overtook: all dirty
    end = active.base_offset
    dirty = [s for s in closed if s.base_offset >= first_dirty]
    if cfg.min_compaction_lag_ms > 0:
        for s in dirty:
            if s.max_timestamp > now - cfg.min_compaction_lag_ms:
                end = s.base_offset  # this segment and all after it are too recent
                break
    clean_bytes = sum(s.size for s in closed if s.base_offset < first_dirty)
    dirty_bytes = sum(s.size for s in dirty if s.base_offset < end)
    total = clean_bytes + dirty_bytes
    ratio = dirty_bytes / total if total else 0.0
    firsts = [s.first_batch_timestamp for s in dirty if s.first_batch_timestamp > 0]
    overdue = bool(firsts) and min(firsts) < now - cfg.max_compaction_lag_ms
    if dirty_bytes > 0 and ratio > cfg.min_cleanable_dirty_ratio:
        reason = f"dirty ratio {ratio:.2f} > {cfg.min_cleanable_dirty_ratio}"
    elif dirty_bytes > 0 and overdue:
        reason = f"dirty records older than max.compaction.lag.ms {cfg.max_compaction_lag_ms}"
    elif tombstones_due_at is not None and now >= tombstones_due_at and end > log_start:
        reason = "tombstones past delete.retention.ms"
    else:
        return None
    return CleaningPlan(first_dirty, end, ratio, reason)


def group_by_size(sizes: Sequence[tuple[int, int]], max_bytes: int, end: int) -> list[list[int]]:
    """Kafka's groupSegmentsBySize: indexes of adjacent segments (given as (base, size))
    whose combined size fits max_bytes and whose offsets span fits an int32."""
    groups: list[list[int]] = []
    i = 0
    while i < len(sizes):
        group = [i]
        total = sizes[i][1]
        base = sizes[i][0]
        i += 1
        while i < len(sizes):
            nxt_end = sizes[i + 1][0] if i + 1 < len(sizes) else end
            if total + sizes[i][1] > max_bytes or nxt_end - 1 - base > _INT32_MAX:
                break
            total += sizes[i][1]
            group.append(i)
            i += 1
        groups.append(group)
    return groups


# ---------------------------------------------------------------------- the cleaner's memory


def _whole(value: object) -> int:
    """A checkpoint's offset or time, refused (ValueError) unless an int64."""
    if type(value) is not int or not -OFFSET_MAX - 1 <= value <= OFFSET_MAX:
        raise ValueError(f"{value!r} is not an int64")
    return value


@attrs.define
class CleanerState:
    """The cleaner checkpoint of one partition: the first dirty offset, and when each range
    of offsets was first cleaned (``ranges``: sorted (start offset, time) pairs; a record at
    offset o was first cleaned at the time of the last range starting at or before o)."""

    first_dirty: int = -1
    ranges: list[tuple[int, int]] = attrs.Factory(list)
    tombstones_cleaned_at: int | None = None  # earliest first-cleaned time of a kept tombstone

    def cleaned_at(self, offset: int) -> int | None:
        """When the record at offset was first cleaned, or None if it never was."""
        i = bisect.bisect_right(self.ranges, (offset, 1 << 63)) - 1
        if i < 0 or self.ranges[i][1] == _NEVER:
            return None
        return self.ranges[i][1]

    def mark_cleaned(self, start: int, end: int, now: int, log_start: int) -> None:
        """Offsets [start, end) were cleaned for the first time at now."""
        if end <= start:
            return
        after = self.cleaned_at(end)
        ranges = [(o, t) for o, t in self.ranges if o < start]
        ranges.append((start, now))
        ranges.append((end, _NEVER if after is None else after))
        ranges += [(o, t) for o, t in self.ranges if o > end]
        # forget what retention removed (the range holding log_start stays)
        while len(ranges) > 1 and ranges[1][0] <= log_start:
            ranges.pop(0)
        while len(ranges) > _MAX_CLEAN_RANGES:
            # merge the two oldest, keeping the later time: tombstones only live longer
            (o1, t1), (_, t2) = ranges[0], ranges[1]
            ranges[:2] = [(o1, _NEVER if _NEVER in (t1, t2) else max(t1, t2))]
        self.ranges = ranges

    @classmethod
    def load(cls, directory: Path) -> CleanerState:
        path = directory / CHECKPOINT_FILE
        try:
            raw = read_json(path)
            if not isinstance(raw, dict) or raw.get("version") != _CHECKPOINT_VERSION:
                raise ValueError(
                    f"unknown version {raw.get('version') if isinstance(raw, dict) else raw!r}"
                )
            cleaned_at = raw["tombstones_cleaned_at"]
            state = cls(
                _whole(raw["first_dirty_offset"]),
                sorted((_whole(o), _whole(t)) for o, t in raw["ranges"]),
                None if cleaned_at is None else _whole(cleaned_at),
            )
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "%s: unreadable cleaner checkpoint (%s); the whole log counts as dirty and "
                "tombstones are kept until cleaned again",
                path,
                exc,
            )
            return cls()
        return state

    def save(self, directory: Path) -> None:
        """Durably (``replace_durably``): the checkpoint is old or new, never torn."""
        data = json.dumps(
            {
                "version": _CHECKPOINT_VERSION,
                "first_dirty_offset": self.first_dirty,
                "ranges": self.ranges,
                "tombstones_cleaned_at": self.tombstones_cleaned_at,
            }
        ).encode()
        replace_durably(directory / CHECKPOINT_FILE, data)


# ---------------------------------------------------------------------- streaming


def iter_segment_batches(
    read: Callable[[int, int], bytes], size: int, chunk: int | None = None
) -> Iterator[bytes | memoryview]:
    """The batches of a segment of ``size`` bytes, one at a time, read ``chunk`` bytes (1 MiB)
    at a time through ``read(position, n)`` (a batch bigger than a chunk is read whole)."""
    chunk = _READ_CHUNK if chunk is None else chunk
    pos = 0
    buf = b""
    buf_start = 0
    while pos < size:
        rel = pos - buf_start
        if len(buf) - rel < 12:
            buf = read(pos, min(chunk, size - pos))
            buf_start, rel = pos, 0
            if len(buf) < 12:
                raise CorruptRecordError(f"short read at byte {pos} of a {size}-byte segment")
        length = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
        total = length + 12
        if length < 49 or pos + total > size:
            raise CorruptRecordError(f"bad batch length {length} at byte {pos}")
        if rel + total > len(buf):
            buf = read(pos, max(min(chunk, size - pos), total))
            buf_start, rel = pos, 0
            if len(buf) < total:
                raise CorruptRecordError(f"short read at byte {pos}")
        yield memoryview(buf)[rel : rel + total]
        pos += total


def offset_map(batches: Iterable[bytes | memoryview], into: dict[bytes, int]) -> None:
    """Record each key's latest offset (Kafka's OffsetMap, exact: a dict, not a hash table)."""
    for batch in batches:
        for rec in decode_batch(batch)[1]:
            if rec.key is not None:
                into[rec.key] = rec.offset


def _runs(records: list[Record]) -> Iterator[list[Record]]:
    """Consecutive-offset runs of ``records``."""
    run: list[Record] = []
    for rec in records:
        if run and rec.offset != run[-1].offset + 1:
            yield run
            run = []
        run.append(rec)
    if run:
        yield run


@attrs.define
class BatchResult:
    """What cleaning one batch gave: bytes to write, counts, kept tombstones' offsets."""

    pieces: list[bytes | memoryview]
    kept: int
    removed: int
    tombstones: list[int]


def clean_batch(
    batch: bytes | memoryview,
    latest: dict[bytes, int],
    drop_tombstone: Callable[[int], bool],
) -> BatchResult:
    """One batch without superseded records (a key's record before its latest offset in
    ``latest``) and without the tombstones ``drop_tombstone(offset)`` allows to go.

    A batch that loses nothing is copied byte for byte; otherwise each run of survivors is
    re-encoded with the same codec, timestamp type and producer fields.
    """
    h = read_header(batch, 0)
    records = decode_batch(batch)[1]
    survivors = []
    for r in records:
        if r.key is not None:
            found = latest.get(r.key)
            if found is not None and r.offset < found:
                continue
            if r.value is None and drop_tombstone(r.offset):
                continue
        survivors.append(r)
    tombstones = [r.offset for r in survivors if r.value is None and r.key is not None]
    if len(survivors) == len(records):
        return BatchResult([batch], len(records), 0, tombstones)
    pieces: list[bytes | memoryview] = []
    # a LogAppendTime batch's records all read its max timestamp: re-encoding them with
    # that timestamp and the same type reproduces it
    for run in _runs(survivors):
        delta = run[0].offset - h.base_offset
        pieces.append(
            encode_batch(
                [
                    KeptRecord(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
                    for r in run
                ],
                base_offset=run[0].offset,
                timestamp_type=h.timestamp_type,
                compression=Compression(h.compression),
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence + delta if h.base_sequence >= 0 else -1,
                partition_leader_epoch=h.partition_leader_epoch,
            )
        )
    return BatchResult(pieces, len(survivors), len(records) - len(survivors), tombstones)


#: what :meth:`storage._segment.Segment.adopt` replays of each batch written: (position,
#: base offset, size, next offset, max timestamp)
Note = tuple[int, int, int, int, int]


class _Segment(Protocol):
    """What cleaning reads of a segment (:class:`storage._segment.Segment`)."""

    size: int

    def read(self, position: int, n: int) -> bytes: ...


def write_cleaned(
    fd: int,
    group: Sequence[_Segment],
    latest: dict[bytes, int],
    drop_tombstone: Callable[[int], bool],
) -> tuple[int, list[int], list[Note]]:
    """Write the cleaned batches of ``group`` (adjacent segments) to ``fd``, from its start;
    returns (records removed, offsets of kept tombstones, a note per batch written)."""
    removed = 0
    tombstones: list[int] = []
    notes: list[Note] = []
    pos = 0
    for seg in group:
        for batch in iter_segment_batches(seg.read, seg.size):
            result = clean_batch(batch, latest, drop_tombstone)
            removed += result.removed
            tombstones += result.tombstones
            for piece in result.pieces:
                h = read_header(piece, 0)
                size = len(piece)
                notes.append((pos, h.base_offset, size, h.last_offset + 1, h.max_timestamp))
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]
                pos += size
    return removed, tombstones, notes


def complete_swaps(directory: Path, segment_file: re.Pattern[str]) -> None:
    """Finish a cleaner swap a crash interrupted after its commit point: the
    ``<b>.log.<end>.swap`` file replaces every segment file (``segment_file``, fullmatch)
    with a base in [b, end)."""
    swaps = []
    for entry in directory.iterdir():
        m = SWAP_FILE.fullmatch(entry.name)
        if m is not None:
            swaps.append((int(m.group(1)), int(m.group(2)), entry))
    for base, end, swap in sorted(swaps):
        why = _not_a_swap(swap, base, end)
        if why is not None:
            kept = swap.with_name(swap.name + ".damaged")
            log.error(
                "%s: not a cleaner's swap (%s): the segments it would replace are kept, and "
                "it is set aside as %s",
                swap,
                why,
                kept.name,
            )
            os.replace(swap, kept)
            fsync_dir(directory)
            continue
        log.warning("%s: completing an interrupted cleaner swap of [%d, %d)", directory, base, end)
        for entry in list(directory.iterdir()):
            m = segment_file.fullmatch(entry.name)
            if m is not None and base <= int(m.group(1)) < end:
                entry.unlink(missing_ok=True)
        os.replace(swap, directory / f"{base:020d}.log")
        fsync_dir(directory)


def _not_a_swap(path: Path, base: int, end: int) -> str | None:
    """Why ``path`` is no swap the cleaner committed (it fsyncs whole batches of offsets in
    [base, end) before the rename that commits it), or None: a file put there by hand or
    damaged must not replace the segments it names."""
    ends: list[int] = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        _, reason = scan_batches(
            f.fileno(), size, base, lambda *note: ends.append(note[3]), allow_gaps=True
        )
    if reason is not None:
        return reason
    if ends and ends[-1] > end:
        return f"it holds offsets up to {ends[-1] - 1}, past its name's {end - 1}"
    return None
