"""Reading a task record's position vector in ``WorldState.apply_many``'s fast lane.

A holder heartbeats its task with the same sources, in the same order, record after record
(PROTOCOL.md, "Tasks (version 3)"): only the offsets move. So after the strict decoder
(``codec.decode_task_fields``) has accepted one record, :func:`learn` writes down the
*layout* of its vector, and a later record whose vector has that layout is read without the
decoder; it parses exactly as the strict decoder would parse it, to the same vector.
Anything else returns None and is left to the strict decoder, which learns the new layout.
There are two kinds of layout, read by ``lay[1](lay, value, at)`` alike (:func:`read`):

- **by sources** (where the C extension ``rationalizer._vectors`` is built, the default):
  the bytes of the count and of every source topic, nothing of the offsets, which the C
  reader parses as the strict decoder does (minimal varints, each ``last_offset + 1`` at
  most 2^63, the scalar at most 2^63 - 1). A sender's layout never changes while its
  sources do not, and all partitions of a task share one (``WorldState`` offers a task's
  last layout to the first record of its other keys). ``(min_size, reader, chunks...,
  topics...)``: ``min_size`` the size of the smallest vector it reads, the ``n`` chunks
  (the count with the first topic as ``str``, then each further topic as ``str``) and the
  ``n`` source topics.
- **by low bytes** (pure Python: without the extension, or ``python=True``): also the
  offsets' upper varint bytes (so their lengths and canonical last bytes), and where the
  one or two lowest bytes of each offset sit; read by one ``struct`` call, byte comparisons
  and table look-ups, for 1..:data:`MAX_FAST_SOURCES` sources. A record whose offset grew
  a byte or changed an upper byte, or whose lowest byte's continuation bit is not the
  learned one, goes to the strict decoder. ``(size, reader, unpack, fixed..., topics...,
  bases..., tables..., k)``: ``size`` the vector's length in bytes, ``unpack`` the struct
  that splits the vector into fixed chunks and low bytes, the ``n + 1`` fixed chunks, the
  ``n`` source topics, each offset's upper part minus one (its ``last_offset`` when its low
  bytes are zero), the table that checks and decodes each low part, and ``k``, the
  vector's scalar (``messages.task_last_offset``) without the low parts.

Either reader returns ``(positions, scalar, end)``: the vector, its scalar and where the
vector ends in ``value`` (the identity part starts there).
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct

from ._messages import MAX_OFFSET, MAX_TASK_SOURCES, Positions
from ._varint import uvarint

try:
    from . import _vectors
except ImportError:  # built without a C compiler: every layout is read by low bytes
    _vectors = None  # type: ignore[assignment]  # the module or None, as NATIVE says

__all__ = ["MAX_FAST_SOURCES", "NATIVE", "Layout", "learn", "read"]

#: The C reader (layouts by sources) is built.
NATIVE = _vectors is not None

#: Tasks of more sources are always read by the strict decoder where layouts are read by low
#: bytes (each count has its own unrolled reader; PROTOCOL.md allows 64, tasks have two or
#: three). Layouts by sources read any count.
MAX_FAST_SOURCES = 3

Layout = tuple

#: Low part of a one-byte varint: the byte itself if it ends the varint, else None.
_ONE: tuple[int | None, ...] = tuple(range(0x80)) + (None,) * 0x80


def _two(last: bool) -> tuple[int | None, ...]:
    """Low 14 bits of a varint from its first two bytes ``b0 | b1 << 8`` (struct "<H"): b0
    must go on; b1 must end the varint and be non-zero (``last``: a canonical two-byte
    varint) or go on (a longer one). None where the bytes do not fit; a ``last`` table
    stops at 0x8000 (b1 >= 0x80 raises IndexError)."""
    values = range(1 << 14)
    table: list[int | None] = [None] * (0x8000 if last else 0x10000)
    for b1 in range(1, 0x80) if last else range(0x80, 0x100):
        low = (b1 & 0x7F) << 7
        table[b1 << 8 | 0x80 : b1 << 8 | 0x100] = values[low : low + 0x80]
    return tuple(table)


_TWO_LAST = _two(True)
_TWO_MORE = _two(False)


def _read1(lay: Layout, value: bytes, at: int) -> tuple[Positions, int, int] | None:
    size, _, unpack, fixed0, fixed1, s0, b0, t0, k = lay
    f0, h0, f1 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1:
        return None
    try:
        l0 = t0[h0]
        return ((s0, b0 + l0),), k + l0, at + size
    except (TypeError, IndexError):  # a low byte that does not fit the layout
        return None


def _read2(lay: Layout, value: bytes, at: int) -> tuple[Positions, int, int] | None:
    size, _, unpack, fixed0, fixed1, fixed2, s0, s1, b0, b1, t0, t1, k = lay
    f0, h0, f1, h1, f2 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1 or f2 != fixed2:
        return None
    try:
        l0 = t0[h0]
        l1 = t1[h1]
        return ((s0, b0 + l0), (s1, b1 + l1)), k + l0 + l1, at + size
    except (TypeError, IndexError):
        return None


def _read3(lay: Layout, value: bytes, at: int) -> tuple[Positions, int, int] | None:
    size, _, unpack, fixed0, fixed1, fixed2, fixed3, s0, s1, s2, b0, b1, b2, t0, t1, t2, k = lay
    f0, h0, f1, h1, f2, h2, f3 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1 or f2 != fixed2 or f3 != fixed3:
        return None
    try:
        l0 = t0[h0]
        l1 = t1[h1]
        l2 = t2[h2]
        return ((s0, b0 + l0), (s1, b1 + l1), (s2, b2 + l2)), k + l0 + l1 + l2, at + size
    except (TypeError, IndexError):
        return None


_READERS: tuple[Callable[[Layout, bytes, int], tuple[Positions, int, int] | None], ...] = (
    _read1,
    _read2,
    _read3,
)


def read(lay: Layout, value: bytes, at: int) -> tuple[Positions, int, int] | None:
    """The vector at ``value[at:]``, its scalar and where it ends, if it has ``lay``'s
    layout; else None (decode it strictly). The caller checked that ``value`` is longer than
    ``at + lay[0]`` (a layout by low bytes reads that many bytes unchecked). The fast lane
    calls ``lay[1]`` directly; this is its readable name."""
    return lay[1](lay, value, at)


def learn(
    value: bytes, start: int, end: int, positions: Positions, python: bool = False
) -> Layout | None:
    """The layout of the vector ``value[start:end]``, which the strict decoder accepted and
    decoded to ``positions``: by sources where the C reader is built and ``python`` is
    false, else by low bytes. None when the lane does not read such vectors (by low bytes:
    more than :data:`MAX_FAST_SOURCES` sources, an offset of ten varint bytes, or low parts
    that could push the scalar past 2^63 - 1)."""
    if _vectors is not None and not python:
        return _by_sources(value, start, end, positions)
    n = len(positions)
    if not 1 <= n <= MAX_FAST_SOURCES:
        return None
    fmt = ["<"]
    fixed: list[bytes] = []
    topics: list[str] = []
    bases: list[int] = []
    tables: list[tuple[int | None, ...]] = []
    k = n - 1
    most = 0  # the largest the low parts can add
    chunk = start  # where the current fixed chunk began
    pos = start + 1  # after the count (at most 64: one byte)
    for topic, offset in positions:
        pos += len(uvarint(len(topic))) + len(topic)  # (topics are ASCII)
        number = offset + 1
        size = len(uvarint(number))
        if size > 9:
            return None
        fixed.append(value[chunk:pos])
        fmt.append(f"{pos - chunk}s")
        if size == 1:
            fmt.append("B")
            tables.append(_ONE)
            base = 0
            chunk = pos + 1
            most += 0x7F
        else:
            fmt.append("H")
            tables.append(_TWO_LAST if size == 2 else _TWO_MORE)
            base = number & ~0x3FFF
            chunk = pos + 2
            most += 0x3FFF
        bases.append(base - 1)
        k += base - 1
        topics.append(topic)
        pos += size
    if pos != end:  # (cannot happen for a vector the decoder accepted)
        return None
    fixed.append(value[chunk:end])
    fmt.append(f"{end - chunk}s")
    if k + most > MAX_OFFSET:
        return None
    unpack = Struct("".join(fmt)).unpack_from
    return (end - start, _READERS[n - 1], unpack, *fixed, *topics, *bases, *tables, k)


def _by_sources(value: bytes, start: int, end: int, positions: Positions) -> Layout | None:
    """The layout by sources of the vector ``value[start:end]`` (see the module's doc)."""
    assert _vectors is not None
    if not 1 <= len(positions) <= MAX_TASK_SOURCES:  # (the decoder accepted no other)
        return None
    chunks: list[bytes] = []
    chunk = start  # where the current chunk began
    pos = start + 1  # after the count (at most 64: one byte)
    for topic, offset in positions:
        pos += len(uvarint(len(topic))) + len(topic)  # (topics are ASCII)
        chunks.append(value[chunk:pos])
        pos += len(uvarint(offset + 1))
        chunk = pos
    if pos != end:  # (cannot happen for a vector the decoder accepted)
        return None
    topics = tuple(topic for topic, _ in positions)
    return (sum(map(len, chunks)) + len(chunks), _vectors.read, *chunks, *topics)
