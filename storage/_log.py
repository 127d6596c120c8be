"""PartitionLog: the durable, segmented log of one topic partition.

Appends are bytes in: validate header and CRC of each batch, patch base offset (and
LogAppendTime), one ``writev``. Reads return stored bytes; no record is decoded on
either path. Appends are serialised by a lock; readers take an immutable snapshot of
the segment list and the committed end, so they never block on (or see half of) a write.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import attrs

from storage._compaction import (
    CHECKPOINT_FILE,
    CLEANED_SUFFIX,
    CleanerState,
    CleaningPlan,
    Note,
    SegmentSummary,
    choose,
    complete_swaps,
    group_by_size,
    iter_segment_batches,
    offset_map,
    swap_name,
    write_cleaned,
)
from storage._config import TopicConfig
from storage._errors import (
    BatchLargerThanSegment,
    OffsetOutOfRange,
    PolicyViolation,
    StorageError,
)
from storage._files import OFFSET_MAX, fsync_dir
from storage._log_start import load_log_start, save_log_start
from storage._reads import find_timestamp, read_segment
from storage._recompression import CODEC_IDS, recompress
from storage._records import (
    TimestampType,
    _patched_header,
    _validate_batches,
)
from storage._segment import NO_TIMESTAMP, FileHandles, Segment, SegmentGone, report_gaps
from storage._validation import refuse_log_append_time, validate_batches

__all__ = ["AppendInfo", "FetchData", "PartitionLog"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"([0-9]{20})\.(log|index|timeindex)")  # fullmatch
_MiB = 1024 * 1024
_INT32_MAX = (1 << 31) - 1


@attrs.frozen
class AppendInfo:
    """Where an append landed; log_append_time is -1 for CreateTime topics."""

    base_offset: int
    last_offset: int
    log_append_time: int
    record_count: int


@attrs.frozen
class FetchData:
    """Whole stored batches plus the offsets a Fetch response reports."""

    data: bytes
    high_watermark: int
    log_start_offset: int


class _View(NamedTuple):
    """What readers see: replaced atomically (one attribute store) after every append."""

    segments: tuple[Segment, ...]
    bases: tuple[int, ...]
    log_end_offset: int
    active_size: int
    #: the log start offset: the first segment's base, or past it where DeleteRecords
    #: moved it inside that segment (Kafka's logStartOffset)
    start: int


class PartitionLog:
    """A partition's segments on disk; thread-safe (appends serialised, reads concurrent)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: TopicConfig,
        clock: Callable[[], int],
        *,
        topic: str = "",
        partition: int = 0,
        validate_records: bool = True,
        handles: FileHandles | None = None,
        clean_shutdown: bool = False,
    ) -> None:
        self.directory = Path(directory)
        #: the open-file budget this log's segments share (the DataDir's, or its own)
        self.handles = handles if handles is not None else FileHandles()
        #: walk every record of an append (storage._validation); off only to measure its cost
        self.validate_records = validate_records
        self.config = config
        self.topic = topic
        self.partition = partition
        self._clock = clock
        self._lock = threading.RLock()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._fsync_failed: OSError | None = None  # then appends stop until a reopen
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self.directory.mkdir(parents=True, exist_ok=True)
        # (closed cleanly last time, the DataDir's marker: damage found now is kept)
        self._segments: list[Segment] = self._open_segments(clean_shutdown)
        self._start = self._load_start()
        self._active.open_writers()
        self._waiters = 0
        #: counts wake_waiters() calls: a waiter that began before one returns
        self._wakes = 0
        self._clean_lock = threading.Lock()
        self._cleaner = CleanerState.load(self.directory)
        self._publish(segments_changed=True)

    # ------------------------------------------------------------------ opening

    def _open_segments(self, clean_shutdown: bool) -> list[Segment]:
        """Open all segments, recover the newest, drop leftovers of interrupted operations."""
        complete_swaps(self.directory, _SEGMENT_FILE)
        bases = set()
        stray = []
        for entry in self.directory.iterdir():
            m = _SEGMENT_FILE.fullmatch(entry.name)
            if m is None:
                if entry.name.endswith((".tmp", ".deleted", CLEANED_SUFFIX)):
                    stray.append(entry)
                continue
            if int(m.group(1)) > OFFSET_MAX:
                raise StorageError(
                    f"{entry}: not a segment of this log (its name's offset is beyond int64); "
                    "move it away"
                )
            if m.group(2) == "log":
                bases.add(int(m.group(1)))
        for entry in self.directory.iterdir():
            m = _SEGMENT_FILE.fullmatch(entry.name)
            if m is not None and m.group(2) != "log" and int(m.group(1)) not in bases:
                stray.append(entry)
        for path in stray:
            log.info("%s: removing leftover %s", self.directory, path.name)
            path.unlink(missing_ok=True)

        interval = self.config.index_interval_bytes
        ordered = sorted(bases)
        segments = [Segment(self.directory, b, interval, self.handles) for b in ordered]
        # Empty segments between others hold nothing; drop them. The first one is kept: its
        # base is the log start offset (a segment emptied by cleaning keeps it, as in Kafka).
        # Cleaning empties segments as a matter of course (every key they held written again
        # later), so that is no warning; one whose indexes still name records lost them.
        kept = []
        for i, seg in enumerate(segments):
            if seg.size == 0 and 0 < i < len(segments) - 1:
                if seg.index_files_hold_entries():
                    log.warning(
                        "%s: empty, though its indexes name records (lost from it); removed",
                        seg.log_path,
                    )
                else:
                    log.info("%s: removing a segment cleaning emptied", seg.log_path)
                seg.delete()
                seg.close()
            else:
                kept.append(seg)
        segments = kept
        if not segments:
            return [Segment(self.directory, 0, interval, self.handles)]
        for seg, nxt in itertools.pairwise(segments):
            seg.load_sealed(nxt.base_offset)
        if not self.config.compact and not (self.directory / CHECKPOINT_FILE).exists():
            report_gaps(segments)  # (a log once cleaned has gaps of its own)
        newest = segments[-1]
        newest.recover(keep_cut=clean_shutdown)
        if newest.size:
            first = newest.first_batch_max_timestamp
            now = self._clock()
            newest.roll_base_ms = first if first <= now else now
        return segments

    def _load_start(self) -> int:
        """The log start offset: where DeleteRecords last moved it (kept on disk), else the
        first segment's base. A log that ends before that point (appends not yet on disk
        when DeleteRecords answered, lost in a crash) starts again, empty, at it, as Kafka's
        LogLoader does: offsets below it were handed out, and are never handed out again."""
        first = self._segments[0].base_offset
        saved = load_log_start(self.directory)
        if saved is None or saved <= first:
            return first
        end = self._active.next_offset
        if saved > end:
            log.warning(
                "%s: the log ends at %d, before its log start offset %d (set by "
                "delete-records); its segments are removed and it starts again at %d",
                self.directory,
                end,
                saved,
                saved,
            )
            for seg in self._segments:
                seg.delete()
                seg.close()
            self._segments = [
                Segment(self.directory, saved, self.config.index_interval_bytes, self.handles)
            ]
            fsync_dir(self.directory)
            return saved
        # segments wholly below it (a crash between keeping the start and removing them)
        below = self._wholly_below(saved)
        for seg in self._segments[:below]:
            log.info("%s: removing segment %d, below the log start %d", self.directory,
                     seg.base_offset, saved)  # fmt: skip
            seg.delete()
            seg.close()
        del self._segments[:below]
        return saved

    # ------------------------------------------------------------------ state

    @property
    def _active(self) -> Segment:
        return self._segments[-1]

    def _publish(self, segments_changed: bool = False) -> None:
        """Swap in a new reader snapshot and wake long-polls (if anyone waits)."""
        if segments_changed:
            segs = tuple(self._segments)
            self._segs, self._bases = segs, tuple(s.base_offset for s in segs)
            # retention or the cleaner may have removed the segment the start was in
            self._start = max(self._start, segs[0].base_offset)
        active = self._segments[-1]
        self._view = _View(self._segs, self._bases, active.next_offset, active.size, self._start)
        if self._waiters:
            with self._cond:
                self._cond.notify_all()

    @property
    def log_start_offset(self) -> int:
        """The first offset a read may ask for (Kafka's logStartOffset): the first
        segment's base, or past it where DeleteRecords moved it."""
        return self._view.start

    @property
    def log_end_offset(self) -> int:
        """Next offset to be assigned (the high watermark: one node, nothing to replicate)."""
        return self._view.log_end_offset

    @property
    def size_bytes(self) -> int:
        view = self._view
        return sum(s.size for s in view.segments[:-1]) + view.active_size

    @property
    def segment_count(self) -> int:
        return len(self._view.segments)

    # ------------------------------------------------------------------ append

    def append(self, batches: bytes | bytearray | memoryview, *, flush: bool = False) -> AppendInfo:
        """Store one or more concatenated v2 batches; all are checked before any is written."""
        mv = memoryview(batches).cast("B")
        spans = _validate_batches(mv, self.config.max_message_bytes)
        if self.config.timestamp_type is not TimestampType.LOG_APPEND_TIME:
            refuse_log_append_time(spans)
        again = (
            validate_batches(mv, spans, require_keys=self.config.compact)
            if self.validate_records
            else ()
        )
        target = CODEC_IDS.get(self.config.compression_type)
        if again or (target is not None and any(span[4] & 0x07 != target for span in spans)):
            mv = memoryview(
                b"".join(
                    recompress(mv[pos : pos + size], target, again=i in again)
                    for i, (pos, size, *_) in enumerate(spans)
                )
            )
            spans = _validate_batches(mv)
        total = len(mv)
        records = sum(span[2] for span in spans)
        for span in spans:
            if span[1] > self.config.segment_bytes:
                raise BatchLargerThanSegment(
                    f"batch of {span[1]} bytes exceeds segment.bytes {self.config.segment_bytes}"
                )
        with self._lock:
            if self._closed or self._fsync_failed:
                why = "is closed" if self._closed else f"failed an fsync ({self._fsync_failed})"
                raise StorageError(f"{self.directory} {why}; a reopen recovers it")
            try:
                return self._append_locked(mv, spans, total, records, flush)
            except OSError as exc:
                # a disk or process limit (no space, too many open files at a roll): Kafka's
                # KAFKA_STORAGE_ERROR, not a dropped connection. A failed roll is tried again
                # by the next append; a partial write was undone (Segment.write)
                raise StorageError(f"{self.directory}: the append failed: {exc}") from exc

    def _append_locked(
        self,
        mv: memoryview,
        spans: list[tuple[int, int, int, int, int]],
        total: int,
        records: int,
        flush: bool,
    ) -> AppendInfo:
        """The append itself, under ``self._lock``."""
        now = self._clock()
        self._maybe_roll(now, total, records)
        seg = self._active
        base = seg.next_offset
        lat = now if self.config.timestamp_type is TimestampType.LOG_APPEND_TIME else None
        pieces: list[bytes | memoryview] = []
        next_offset = base
        for pos, size, count, _, _ in spans:
            pieces.append(_patched_header(mv, pos, size, next_offset, lat))
            pieces.append(mv[pos + 61 : pos + size])
            next_offset += count
        start = seg.size
        seg.write(pieces, total)
        if seg.roll_base_ms is None:
            seg.roll_base_ms = now
        offset = base
        for pos, size, count, max_ts, _ in spans:
            seg.note_batch(
                start + pos, offset, size, offset + count, max_ts if lat is None else lat
            )
            offset += count
        self._unflushed_messages += records
        fms = self.config.flush_ms
        if (
            flush
            or (
                self.config.flush_messages is not None
                and self._unflushed_messages >= self.config.flush_messages
            )
            or (fms is not None and now - self._last_flush_ms >= fms)
        ):
            self._fsync(now)
        # Published only after a due fsync: readers never see data a crash could take back
        # from a topic that promises to flush.
        self._publish()
        return AppendInfo(base, next_offset - 1, -1 if lat is None else lat, records)

    def may_roll(self, incoming: int) -> bool:
        """Whether an append of ``incoming`` bytes rolls by size (fsyncs of the old segment,
        its indexes and the directory): a caller on an event loop runs it off the loop."""
        seg = self._active
        return seg.size > 0 and seg.size + incoming > self.config.segment_bytes

    def _maybe_roll(self, now: int, incoming: int, records: int) -> None:
        seg = self._active
        if seg.size == 0:
            return
        cfg = self.config
        # Kafka's maxSegmentMs: a compacted log also rolls at max.compaction.lag.ms, so the
        # active segment (never cleaned) cannot hold a record past that lag
        segment_ms = (
            min(cfg.segment_ms, cfg.max_compaction_lag_ms) if cfg.compact else cfg.segment_ms
        )
        if (
            seg.size + incoming > cfg.segment_bytes
            or (
                seg.roll_base_ms is not None
                and now - seg.roll_base_ms > segment_ms - _jitter(seg.base_offset, cfg)
            )
            or len(seg.index.rel) * _INDEX_ENTRY_BYTES >= cfg.segment_index_bytes
            or seg.next_offset + records - seg.base_offset > _INT32_MAX
            or seg.size + incoming > _INT32_MAX
        ):
            self._roll()

    def _roll(self) -> None:
        self._roll_active()
        self._delete_expired(self._clock(), include_active=False)

    def _roll_active(self) -> None:
        """Seal the active segment and start a new one at the log end."""
        old = self._active
        old.seal()
        new = Segment(
            self.directory, old.next_offset, self.config.index_interval_bytes, self.handles
        )
        new.next_offset = old.next_offset
        new.open_writers()
        self._segments.append(new)
        self._publish(segments_changed=True)
        fsync_dir(self.directory)
        self._unflushed_messages = 0
        log.debug("%s: rolled to segment %d", self.directory, new.base_offset)

    def _fsync(self, now: int) -> None:
        try:
            self._active.fsync()
        except OSError as exc:  # what the pages hold is unknown (a later fsync may succeed
            self._fsync_failed = exc  # on pages lost): as Kafka takes the log dir offline
            log.error(
                "%s: fsync failed (%s): appends are refused until the broker restarts (reads "
                "go on; the restart recovers the log from what reached the disk)",
                self.directory,
                exc,
            )
            raise
        self._unflushed_messages = 0
        self._last_flush_ms = now

    def flush(self) -> None:
        """fsync the active segment (older ones were fsynced when they rolled)."""
        with self._lock:
            if self._closed:
                return
            self._active.flush_indexes()
            self._fsync(self._clock())

    def flush_if_due(self) -> None:
        """Honour flush.ms for a quiet log (called by the DataDir's flusher thread)."""
        fms = self.config.flush_ms
        if fms is None or self._unflushed_messages == 0:
            return
        with self._lock:
            now = self._clock()
            if not self._closed and self._unflushed_messages and now - self._last_flush_ms >= fms:
                self._fsync(now)

    # ------------------------------------------------------------------ retention

    def enforce_retention(self, now: int | None = None) -> int:
        """Kafka's periodic retention check (log.retention.check.interval.ms): delete the
        oldest whole segments past retention.ms or beyond retention.bytes; returns how many.

        The active segment counts too, when it is not empty: if it is expired, it is rolled
        first and then deleted, so the log end offset stays and the log start offset moves
        up to it (the new, empty active segment's base). ``now`` defaults to the log's clock.
        """
        with self._lock:
            if self._closed:
                return 0
            return self._delete_expired(self._clock() if now is None else now, include_active=True)

    def delete_before(self, offset: int) -> int:
        """DeleteRecords: the log starts at ``offset`` from now on, as in Kafka: a read
        below it is OffsetOutOfRange, ListOffsets' earliest is it, and every whole segment
        below it is removed (never the active one). The new start is on disk before this
        returns, so a restart does not bring the records back. Returns the log start
        offset (the one it had, when that is past ``offset``). Raises OffsetOutOfRange
        beyond the log end and PolicyViolation on a topic compacted and not deleted
        (``cleanup.policy=compact``), as Kafka's Partition.deleteRecordsOnLeader does."""
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        with self._lock:
            if self._closed:
                raise StorageError(f"{self.directory}: log is closed")
            if not self.records_deletable:
                raise PolicyViolation(
                    f"{self.topic}-{self.partition}: records cannot be deleted from a topic "
                    "whose cleanup.policy is compact (add delete to it)"
                )
            end = self._active.next_offset
            if offset > end:
                raise OffsetOutOfRange(offset, self._start, end)
            if offset > self._start:
                try:
                    save_log_start(self.directory, offset)
                except OSError as exc:
                    raise StorageError(
                        f"{self.directory}: could not keep the log start offset: {exc}"
                    ) from exc
                self._start = offset
            doomed = self._wholly_below(self._start)
            gone, self._segments = self._segments[:doomed], self._segments[doomed:]
            self._publish(segments_changed=bool(doomed))
            for seg in gone:
                log.info("%s: delete-records removes segment %d", self.directory, seg.base_offset)
                seg.delete()
            return self._start

    @property
    def records_deletable(self) -> bool:
        """Whether DeleteRecords may move this log's start: not on a topic compacted and not
        deleted (``cleanup.policy=compact``), whose records the cleaner alone removes."""
        return self.config.delete or not self.config.compact

    def _wholly_below(self, start: int) -> int:
        """How many of the oldest segments hold only offsets below ``start`` (each is
        followed by a segment based at or below it: the active one never counts)."""
        below = 0
        for nxt in self._segments[1:]:
            if nxt.base_offset > start:
                break
            below += 1
        return below

    def _delete_expired(self, now: int, *, include_active: bool) -> int:
        """Kafka's deletableSegments: the oldest segments while each is past retention.ms
        (its largest timestamp) or the log without it is still at least retention.bytes.
        An empty active segment is never deleted; a non-empty one only if include_active."""
        cfg = self.config
        if not cfg.delete:
            return 0  # cleanup.policy=compact: the cleaner, not retention, bounds the log
        total = sum(s.size for s in self._segments)
        last = len(self._segments) - 1
        doomed = 0
        for i, seg in enumerate(self._segments):
            if i == last and (not include_active or seg.size == 0):
                break
            if seg.size == 0:
                continue  # emptied by cleaning: goes with the next segment, never alone
            too_old = (
                cfg.retention_ms >= 0
                and seg.max_timestamp != NO_TIMESTAMP
                and now - seg.max_timestamp > cfg.retention_ms
                and (i == last or now - seg.verified_max_timestamp() > cfg.retention_ms)
            )
            too_big = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            total -= seg.size
            doomed = i + 1
        if not doomed:
            return 0
        if doomed == len(self._segments):
            # A log always has a segment: roll first (Kafka does too), so the new empty
            # active segment keeps the log end offset as the log start.
            self._roll_active()
        gone, self._segments = self._segments[:doomed], self._segments[doomed:]
        self._publish(segments_changed=True)
        for seg in gone:
            log.info("%s: retention deletes segment %d", self.directory, seg.base_offset)
            seg.delete()
        return doomed

    # ------------------------------------------------------------------ compaction

    def clean(self, now: int | None = None) -> int:
        """One cleaner pass if the log is due (see :func:`storage._compaction.choose`); returns
        the number of records removed. ``now`` defaults to the log's clock.

        Segments are read batch by batch and the cleaned groups written outside the lock;
        each swap (two renames and the removal of the old files) happens under it, so
        appends wait only for the swap. One pass at a time per log.
        """
        cfg = self.config
        if not cfg.compact or self._closed:
            return 0
        with self._clean_lock:
            now = self._clock() if now is None else now
            state = self._cleaner
            due = None
            if state.tombstones_cleaned_at is not None:
                due = state.tombstones_cleaned_at + cfg.delete_retention_ms + 1
            with self._lock:
                segs = list(self._segments)
            summaries = [
                SegmentSummary(s.base_offset, s.size, s.max_timestamp, s.first_batch_max_timestamp)
                for s in segs
            ]
            plan = choose(summaries, state.first_dirty, now, cfg, due)
            if plan is None:
                return 0
            try:
                return self._clean(plan, segs, now)
            except SegmentGone:
                log.info(
                    "%s: retention removed segments during cleaning; retried later", self.directory
                )
                return 0

    def _clean(self, plan: CleaningPlan, segs: list[Segment], now: int) -> int:
        cfg = self.config
        state = self._cleaner
        closed = [s for s in segs[:-1] if s.base_offset < plan.end]
        latest: dict[bytes, int] = {}
        for seg in closed:
            if seg.base_offset >= plan.first_dirty:
                offset_map(iter_segment_batches(seg.read, seg.size), latest)

        def drop_tombstone(offset: int) -> bool:
            first = state.cleaned_at(offset)
            return first is not None and now - first > cfg.delete_retention_ms

        removed_total = 0
        tombstones: list[int] = []
        groups = group_by_size(
            [(s.base_offset, s.size) for s in closed], cfg.segment_bytes, plan.end
        )
        for indexes in groups:
            group = [closed[i] for i in indexes]
            removed, kept_tombstones, swapped = self._clean_group(group, latest, drop_tombstone)
            if swapped is None:
                return removed_total  # the log changed under the pass (closed, retention)
            removed_total += removed
            tombstones += kept_tombstones
        with self._lock:
            # saved under the lock its closed check is made under: a log closed meanwhile
            # (its topic deleted, maybe created again in the same directory) gets no
            # checkpoint of the pass, which the new log would have taken for its own
            if self._closed:
                return removed_total
            log_start = self._segments[0].base_offset
            state.first_dirty = plan.end
            state.mark_cleaned(plan.first_dirty, plan.end, now, log_start)
            times = [state.cleaned_at(o) for o in tombstones]
            state.tombstones_cleaned_at = (
                min((now if t is None else t) for t in times) if times else None
            )
            state.save(self.directory)
        log.info(
            "%s: cleaned offsets [%d, %d) (%s): %d record(s) removed, %d segment(s) into %d",
            self.directory,
            segs[0].base_offset,
            plan.end,
            plan.reason,
            removed_total,
            len(closed),
            len(groups),
        )
        return removed_total

    def _clean_group(
        self, group: list[Segment], latest: dict[bytes, int], drop_tombstone: Callable[[int], bool]
    ) -> tuple[int, list[int], bool | None]:
        """Clean adjacent segments into one; returns (records removed, offsets of kept
        tombstones, whether it was swapped in: None if the log changed under it)."""
        first = group[0]
        tmp = first.log_path.with_name(first.log_path.name + CLEANED_SUFFIX)
        with self._lock:  # (closed, its directory may be another log's: _drop_cleaned)
            if self._closed:
                return 0, [], None
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            removed, tombstones, notes = write_cleaned(fd, group, latest, drop_tombstone)
            if len(group) == 1 and not removed:
                os.close(fd)
                fd = -1
                self._drop_cleaned(tmp)
                return 0, tombstones, False  # nothing to change
            os.fsync(fd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
                fd = -1
            self._drop_cleaned(tmp)
            raise
        finally:
            if fd >= 0:
                os.close(fd)
        if not self._swap_group(group, tmp, notes):
            return removed, tombstones, None
        return removed, tombstones, True

    def _drop_cleaned(self, tmp: Path) -> None:
        """Remove a pass's cleaned file, by its path, only while this log is open: once
        closed, its directory may be another log's (its topic deleted and made again under
        the same name), whose own pass may be writing a file of that name. A stray one left
        in a log's own directory is removed when the log is next opened."""
        with self._lock:
            if not self._closed:
                tmp.unlink(missing_ok=True)

    def _swap_group(self, group: list[Segment], tmp: Path, notes: list[Note]) -> bool:
        """Replace the group's segments with the cleaned file (see storage._compaction)."""
        with self._lock:
            i = next((j for j, s in enumerate(self._segments) if s is group[0]), -1)
            k = i + len(group)
            if (
                self._closed
                or i < 0
                or k >= len(self._segments)
                or any(a is not b for a, b in zip(self._segments[i:k], group, strict=True))
            ):
                self._drop_cleaned(tmp)  # closed, or retention deleted some of it meanwhile
                return False
            end = self._segments[k].base_offset
            first = group[0]
            swap = self.directory / swap_name(first.base_offset, end)
            os.replace(tmp, swap)
            fsync_dir(self.directory)  # committed: opening the log completes the swap
            for seg in group:
                seg.mark_gone()  # never reopened by path: that would open the cleaned file
                seg.index.path.unlink(missing_ok=True)
                seg.time_index.path.unlink(missing_ok=True)
            for seg in group[1:]:
                seg.log_path.unlink(missing_ok=True)
            os.replace(swap, first.log_path)
            fsync_dir(self.directory)
            new = Segment(
                self.directory, first.base_offset, self.config.index_interval_bytes, self.handles
            )
            new.adopt(notes, end)
            self._segments[i:k] = [new]
            self._publish(segments_changed=True)
        return True

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int = _MiB) -> FetchData:
        """Whole batches from the one containing offset; at least one batch, else up to max_bytes."""
        for _ in range(_VIEW_RETRIES):
            try:
                return self._read(offset, max_bytes)
            except SegmentGone:
                # retention or the cleaner replaced a segment under the lock: once it is
                # free the new view is published
                with self._lock:
                    pass
        raise StorageError(f"{self.directory}: segments kept changing under a read")

    def _read(self, offset: int, max_bytes: int) -> FetchData:
        view = self._view
        start, end = view.start, view.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(offset, start, end)
        if offset == end:
            return FetchData(b"", end, start)
        i = bisect.bisect_right(view.bases, offset) - 1
        last = len(view.segments) - 1
        while i <= last:
            seg = view.segments[i]
            limit = view.active_size if i == last else seg.size
            try:
                data = read_segment(seg, offset, max(max_bytes, 0), limit, sealed=i != last)
            except OSError as exc:
                raise StorageError(f"{self.directory}: read failed: {exc}") from exc
            if seg.index_repaired:
                self._keep_repaired_index(seg)
            if data:
                return FetchData(data, end, start)
            i += 1
        return FetchData(b"", end, start)

    def wait_for(self, offset: int, timeout: float) -> bool:
        """Long poll: True as soon as log_end_offset > offset, False on timeout, close or
        :meth:`wake_waiters`."""
        if self._view.log_end_offset > offset:
            return True
        with self._cond:
            # Counted before the predicate is checked, so an append that publishes after
            # the check is sure to see a waiter and notify.
            self._waiters += 1
            wakes = self._wakes
            try:
                self._cond.wait_for(
                    lambda: (
                        self._view.log_end_offset > offset or self._closed or self._wakes != wakes
                    ),
                    max(timeout, 0.0),
                )
            finally:
                self._waiters -= 1
        return self._view.log_end_offset > offset

    def wake_waiters(self) -> None:
        """End every :meth:`wait_for` under way now, as its timeout would (Kafka's consumer
        ``wakeup()``): a reader that is stopping need not wait out its long poll."""
        with self._cond:
            self._wakes += 1
            self._cond.notify_all()

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """First offset whose timestamp is >= timestamp_ms, or None (Kafka ListOffsets)."""
        for _ in range(_VIEW_RETRIES):
            try:
                return self._offset_for_timestamp(timestamp_ms)
            except SegmentGone:
                with self._lock:
                    pass
        raise StorageError(f"{self.directory}: segments kept changing under a lookup")

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """The largest timestamp in the log and the first offset holding it (Kafka's
        ListOffsets MAX_TIMESTAMP, ``kafka-get-offsets --time -3``); None for an empty log."""
        for _ in range(_VIEW_RETRIES):
            try:
                return self._max_timestamp_and_offset()
            except SegmentGone:
                with self._lock:
                    pass
        raise StorageError(f"{self.directory}: segments kept changing under a lookup")

    def _max_timestamp_and_offset(self) -> tuple[int, int] | None:
        view = self._view
        last = len(view.segments) - 1
        best = None  # the first segment with the largest max timestamp, as Kafka picks
        for i, seg in enumerate(view.segments):
            if seg.max_timestamp != NO_TIMESTAMP and (
                best is None or seg.max_timestamp > best[1].max_timestamp
            ):
                best = (i, seg)
        if best is None:
            return None
        i, seg = best
        limit = view.active_size if i == last else seg.size
        ts = seg.max_timestamp
        found = find_timestamp(seg, seg.max_timestamp_last_offset, limit, ts, sealed=i != last)
        if seg.index_repaired:
            self._keep_repaired_index(seg)
        return None if found is None else (ts, found)

    def _offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        view = self._view
        last = len(view.segments) - 1
        for i, seg in enumerate(view.segments):
            limit = view.active_size if i == last else seg.size
            if seg.max_timestamp == NO_TIMESTAMP or seg.max_timestamp < timestamp_ms:
                continue
            offset = max(seg.base_offset + seg.skip_for(timestamp_ms, limit), view.start)
            found = find_timestamp(
                seg, offset, limit, timestamp_ms, sealed=i != last, floor=view.start
            )
            if seg.index_repaired:
                self._keep_repaired_index(seg)
            if found is not None:
                return found
        return None

    def _keep_repaired_index(self, seg: Segment) -> None:
        """Write the offset index a read rebuilt (it met a damaged entry) over the damaged
        file, so that the next start trusts a sound one; under the lock, and only while
        ``seg`` is still this log's (after retention or the cleaner replaced it, its file
        names are another segment's). A failed write leaves the repair in memory."""
        with self._lock:
            if not seg.index_repaired:
                return  # (another read wrote it)
            seg.index_repaired = False
            if self._closed or not any(s is seg for s in self._segments):
                return
            try:
                seg.index.rewrite(seg.index.entries())
            except OSError:
                log.exception("%s: could not write its rebuilt index", seg.log_path)
                return
            log.warning("%s: its offset index was rebuilt from the log", seg.log_path)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush and release files; waiting long-polls return False."""
        with self._lock:
            if self._closed:
                return
            try:
                self._active.flush_indexes()
                self._active.fsync()
                if self._fsync_failed:  # (not a clean shutdown: the next open recovers)
                    raise StorageError(f"{self.directory} failed an fsync: {self._fsync_failed}")
            finally:
                self._closed = True
                for seg in self._segments:
                    seg.close()
        with self._cond:
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unwritable(self) -> OSError | None:
        """The failed fsync that stopped this log's appends until it is reopened (Kafka's
        offline log directory), or None."""
        return self._fsync_failed


_VIEW_RETRIES = 8  # reads that find a segment gone look again this many times
_INDEX_ENTRY_BYTES = 8  # Kafka's offset index entry: relative offset and position, int32 each


def _jitter(base_offset: int, cfg: TopicConfig) -> int:
    """segment.jitter.ms: how much earlier this segment rolls, fixed per segment (a topic's
    partitions do not all roll at once) and reproducible."""
    if cfg.segment_jitter_ms <= 0:
        return 0
    return (base_offset * 2654435761) % min(cfg.segment_jitter_ms, cfg.segment_ms)
