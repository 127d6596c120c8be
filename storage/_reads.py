"""Reads of one segment's batches: from the offset index's position for an offset, checked
against the entry (a damaged entry is walked around from the segment's start, never trusted
into a loop or a skip), and the timestamp search of ListOffsets."""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Callable
from typing import TypeVar

from storage._errors import CorruptBatch, CorruptRecordError, StorageError, UnsupportedCompression
from storage._records import decode_batch
from storage._segment import Segment, next_intact

log = logging.getLogger(__name__)

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # at byte 23
_MAX_TS = struct.Struct(">q")  # at byte 35
_MAGIC = 2
_BATCH_OVERHEAD = 61
_MiB = 1024 * 1024

T = TypeVar("T")


class _NotABatch(StorageError):
    """A position taken from an index names no batch start, or another batch than the
    index says (a damaged index entry)."""


def _checked_head(
    buf: bytes, rel: int, seg: Segment, p: int, expect: int | None = None
) -> tuple[int, int]:
    """(last offset, size) of the batch header at ``buf[rel:]`` (byte ``p`` of ``seg``);
    _NotABatch if it cannot be one (wrong magic, a length below the header's, a base offset
    before the segment's) or, with ``expect`` (an index entry's), its last offset is not
    that: a walk never trusts a size that would not move it forward, nor an index entry
    that names another batch (which would skip the records between)."""
    base, length = _BATCH_HEAD.unpack_from(buf, rel)
    (last_delta,) = _LAST_DELTA.unpack_from(buf, rel + 23)
    magic = buf[rel + 16]
    if magic != _MAGIC or length < _BATCH_OVERHEAD - 12 or base < seg.base_offset:
        raise _NotABatch(
            f"{seg.log_path}: no batch header at byte {p} (magic {magic}, length {length}, "
            f"base offset {base})"
        )
    if expect is not None and base + last_delta != expect:
        raise _NotABatch(
            f"{seg.log_path}: the index names the batch ending at {expect} at byte {p}, "
            f"which holds one ending at {base + last_delta}"
        )
    return base + last_delta, length + 12


def read_segment(
    seg: Segment, offset: int, max_bytes: int, limit: int, *, sealed: bool = False
) -> bytes:
    """Bytes of the whole batches of seg from the one holding offset, within limit.

    Positions come from the sparse index; one that names no batch start or another batch
    (a damaged entry: loading a sealed segment checks only the entries' order and range and
    its last entry) is not trusted: the walk starts again from the segment's first batch,
    without the index, and a segment whose batches cannot be walked is a StorageError (the
    client gets an error code; no read loops or serves bytes that are not batches). A
    ``sealed`` segment's index is then rebuilt (:meth:`Segment.rebuild_offset_index`)."""
    return _around_damage(
        lambda use_index: _read_segment_from(seg, offset, max_bytes, limit, use_index),
        "reading",
        seg if sealed else None,
        limit,
    )


def _around_damage(walk: Callable[[bool], T], doing: str, rebuild: Segment | None, limit: int) -> T:
    """``walk(True)`` (from the index's position), else, if the index named no batch or
    another batch, ``walk(False)`` (from the segment's start); a StorageError if that walk
    meets a header that is no batch either. After a walk from the start, ``rebuild``'s
    index is rebuilt from its headers: one walk of the segment per damaged index, not one
    per read that meets the damage (reads run on the broker's event loop). The active
    segment's index (rebuilt at start-up, appended to since) is never rebuilt here."""
    try:
        return walk(True)
    except _NotABatch as exc:
        log.warning("%s; %s from the start of the segment instead", exc, doing)
    try:
        found = walk(False)
    except _NotABatch as exc:
        raise StorageError(f"damaged segment: {exc}") from None
    if rebuild is not None:
        rebuild.rebuild_offset_index(limit)
    return found


def _read_segment_from(
    seg: Segment, offset: int, max_bytes: int, limit: int, use_index: bool
) -> bytes:
    window = min(max(64 * 1024, max_bytes + seg.index_interval_bytes + 1024), 8 * _MiB)
    expect, pos = seg.indexed(offset) if use_index else (None, 0)
    buf = b""
    buf_start = pos

    def header_at(p: int, expect: int | None = None) -> tuple[int, int]:
        nonlocal buf, buf_start
        rel = p - buf_start
        if rel < 0 or len(buf) - rel < 27:
            buf = seg.read(p, min(window, limit - p))
            buf_start, rel = p, 0
            if len(buf) < 27:
                raise StorageError(f"{seg.log_path}: short read at byte {p}")
        last, size = _checked_head(buf, rel, seg, p, expect)
        if p + size > limit:  # (a damaged length: a walk that trusted it would leave the
            # segment, and its reader would go on in the next one, the records between skipped)
            raise _NotABatch(f"{seg.log_path}: the batch at byte {p} runs past the segment")
        return last, size

    # find the batch holding offset
    walked = seg.base_offset  # the offset after the batches walked
    while True:
        if pos >= limit:
            return b""
        try:
            last_offset, size = header_at(pos, expect)
        except _NotABatch as exc:
            if use_index:
                raise  # (walked again from the segment's start, where damage is stepped over)
            pos, walked = _past_damage(seg, pos, limit, walked, offset, exc)
            continue
        expect = None
        if last_offset >= offset:
            break
        walked = last_offset + 1
        pos += size
    first = pos
    end = pos + size
    if limit - first <= max_bytes:
        end = limit  # everything left fits: no need to walk the headers
    elif use_index:
        # Batch starts at index entries are known: jump to the last one that still fits,
        # then walk at most index_interval_bytes of headers. The batches jumped over are
        # served unwalked, as is everything when all that is left fits: served bytes are
        # checked by the client's CRC (Kafka serves a segment's bytes unread too); what a
        # read walks, it checks.
        target = first + max_bytes
        rels, positions = seg.index.snapshot()
        i = bisect.bisect_right(positions, target) - 1
        if 0 <= i < len(rels) and end < positions[i] < limit:
            end = positions[i]
            header_at(end, seg.base_offset + rels[i])  # (the entry is that batch's)
    while end < limit:
        try:
            _, size = header_at(end)
        except _NotABatch:
            break  # a damaged header past the batches served: a read of it fails
        if end + size - first > max_bytes:
            break
        end += size
    rel = first - buf_start
    if rel >= 0 and end - buf_start <= len(buf):
        return buf[rel : end - buf_start]
    return seg.read(first, end - first)


def _past_damage(
    seg: Segment, pos: int, limit: int, walked: int, offset: int, exc: _NotABatch
) -> tuple[int, int]:
    """A walk from the segment's start met bytes at ``pos`` that are no batch: (byte, base
    offset) of the next whole batch (found by its magic byte and CRC), where the walk goes
    on if ``offset`` is there or later. An ``offset`` in between is in the damage:
    :class:`CorruptBatch`, naming where a reader may resume (Kafka's CORRUPT_MESSAGE for a
    client), never a read that skips to the next segment or an error with no way on."""
    with seg.open() as fd:
        found = next_intact(fd, limit, pos, walked)
    resume = found[1] if found is not None else seg.next_offset
    if offset < resume:
        log.warning("%s; offsets %d to %d are unreadable", exc, walked, resume - 1)
        raise CorruptBatch(str(exc), walked, resume)
    return found if found is not None else (limit, resume)


def find_timestamp(
    seg: Segment, offset: int, limit: int, ts: int, *, sealed: bool = False, floor: int = 0
) -> int | None:
    """The first offset at or after ``offset``'s batch, and at or after ``floor`` (the log
    start offset, which DeleteRecords may put inside a batch), whose timestamp reaches
    ``ts``: scans batch headers from the indexed batch before ``offset`` and decodes only
    the ones found. A damaged index entry is walked around as :func:`read_segment` does."""
    return _around_damage(
        lambda use_index: _find_timestamp_from(seg, offset, limit, ts, use_index, floor),
        "searching",
        seg if sealed else None,
        limit,
    )


def _find_timestamp_from(
    seg: Segment, offset: int, limit: int, ts: int, use_index: bool, floor: int
) -> int | None:
    expect, pos = seg.indexed(offset) if use_index else (None, 0)
    while pos < limit:
        head = seg.read(pos, 61)
        if len(head) < 61:
            raise StorageError(f"{seg.log_path}: short read at byte {pos}")
        _, size = _checked_head(head, 0, seg, pos, expect)
        expect = None
        base = _BATCH_HEAD.unpack_from(head)[0]
        (max_ts,) = _MAX_TS.unpack_from(head, 35)
        if max_ts >= ts and base + _LAST_DELTA.unpack_from(head, 23)[0] >= floor:
            batch = seg.read(pos, size)
            try:
                header, records = decode_batch(batch)
            except (UnsupportedCompression, CorruptRecordError):
                return max(base, floor)
            for rec in records:
                if rec.timestamp >= ts and rec.offset >= floor:
                    return rec.offset
            if header.base_offset >= floor:
                return header.base_offset
        pos += size
    return None
