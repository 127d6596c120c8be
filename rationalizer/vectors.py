"""Reading a task record's position vector in ``WorldState.apply_many``'s fast lane.

A holder heartbeats its task with the same sources, in the same order, record after record
(PROTOCOL.md, "Tasks (version 3)"): only the offsets move, and between two records mostly
their lowest varint bytes. So after the strict decoder (``codec.decode_task_fields``) has
accepted one record of a sender, :func:`learn` writes down the *layout* of its vector: the
bytes that must stay the same (the count, every source topic with its length, each
varint's upper bytes, so also its length and its canonical last byte) and where the one or
two lowest bytes of each offset sit. A later record of that sender whose vector keeps those
bytes is read by one ``struct`` call, byte comparisons and table look-ups (:func:`read`);
it parses exactly as the strict decoder would parse it, to the same vector. Anything else
(other sources, an offset that grew a byte or changed an upper byte, a lowest byte whose
continuation bit is not the learned one) is left to the strict decoder, which learns the
new layout.

A layout is a tuple: ``(size, reader, unpack, fixed..., topics..., bases..., tables...,
k)``: ``size`` the vector's length in bytes, ``reader`` the function for its number of
sources, ``unpack`` the struct that splits the vector into fixed chunks and low bytes, the
``n + 1`` fixed chunks, the ``n`` source topics, each offset's upper part minus one (its
``last_offset`` when its low bytes are zero), the table that checks and decodes each low
part, and ``k``, the vector's scalar (``messages.task_last_offset``) without the low parts.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct

from .messages import MAX_OFFSET, Positions
from .varint import uvarint

__all__ = ["MAX_FAST_SOURCES", "Layout", "learn", "read"]

#: Tasks of more sources are always read by the strict decoder (each count has its own
#: unrolled reader; PROTOCOL.md allows 64, tasks have two or three).
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


def _read1(lay: Layout, value: bytes, at: int) -> tuple[Positions, int] | None:
    _, _, unpack, fixed0, fixed1, s0, b0, t0, k = lay
    f0, h0, f1 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1:
        return None
    try:
        l0 = t0[h0]
        return ((s0, b0 + l0),), k + l0
    except (TypeError, IndexError):  # a low byte that does not fit the layout
        return None


def _read2(lay: Layout, value: bytes, at: int) -> tuple[Positions, int] | None:
    _, _, unpack, fixed0, fixed1, fixed2, s0, s1, b0, b1, t0, t1, k = lay
    f0, h0, f1, h1, f2 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1 or f2 != fixed2:
        return None
    try:
        l0 = t0[h0]
        l1 = t1[h1]
        return ((s0, b0 + l0), (s1, b1 + l1)), k + l0 + l1
    except (TypeError, IndexError):
        return None


def _read3(lay: Layout, value: bytes, at: int) -> tuple[Positions, int] | None:
    _, _, unpack, fixed0, fixed1, fixed2, fixed3, s0, s1, s2, b0, b1, b2, t0, t1, t2, k = lay
    f0, h0, f1, h1, f2, h2, f3 = unpack(value, at)
    if f0 != fixed0 or f1 != fixed1 or f2 != fixed2 or f3 != fixed3:
        return None
    try:
        l0 = t0[h0]
        l1 = t1[h1]
        l2 = t2[h2]
        return ((s0, b0 + l0), (s1, b1 + l1), (s2, b2 + l2)), k + l0 + l1 + l2
    except (TypeError, IndexError):
        return None


_READERS: tuple[Callable[[Layout, bytes, int], tuple[Positions, int] | None], ...] = (
    _read1,
    _read2,
    _read3,
)


def read(lay: Layout, value: bytes, at: int) -> tuple[Positions, int] | None:
    """The vector at ``value[at : at + lay[0]]`` (the caller checked that the value is that
    long) and its scalar, if it has ``lay``'s layout; else None (decode it strictly). The
    fast lane calls ``lay[1]`` directly; this is its readable name."""
    return lay[1](lay, value, at)


def learn(value: bytes, start: int, end: int, positions: Positions) -> Layout | None:
    """The layout of the vector ``value[start:end]``, which the strict decoder accepted and
    decoded to ``positions``; None when the lane does not read such vectors (more than
    :data:`MAX_FAST_SOURCES` sources, an offset of ten varint bytes, or low parts that
    could push the scalar past 2^63 - 1)."""
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
