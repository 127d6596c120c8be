"""Base-128 varints of the rationalizer's encodings, written and read in one place.

Unsigned LEB128, least significant group first, as PROTOCOL.md specifies for record values
("Record value"), snapshots ("Snapshots", with zigzag for signed numbers) and snapshot
records ("Published snapshots"). Readers are strict, because every replayer must refuse
exactly the same bytes: only the minimal encoding is accepted, and nothing above the
caller's limit. Each format raises its own error (``DecodeError``, ``SnapshotError``), so the
caller passes its class and what the number is, for the message.
"""

from __future__ import annotations

__all__ = [
    "append_svarint",
    "append_uvarint",
    "read_svarint",
    "read_uvarint",
    "read_varints",
    "uvarint",
]


def append_uvarint(out: bytearray, n: int) -> None:
    """Append ``n >= 0`` to ``out``."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint(n: int) -> bytes:
    """``n >= 0`` as bytes."""
    out = bytearray()
    append_uvarint(out, n)
    return bytes(out)


def append_svarint(out: bytearray, n: int) -> None:
    """Append any int, zigzag encoded (0, -1, 1, -2, ... become 0, 1, 2, 3, ...)."""
    append_uvarint(out, 2 * n if n >= 0 else -2 * n - 1)


def read_uvarint(
    buf: bytes, pos: int, limit: int, what: str, error: type[Exception]
) -> tuple[int, int]:
    """The minimal (canonical) varint at ``buf[pos:]``, no greater than ``limit``, and the
    position after it; else ``error`` saying what is wrong with ``what``."""
    n = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise error(f"truncated {what}")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if n > limit:
            raise error(f"{what} out of range")
        if b < 0x80:
            if b == 0 and shift:
                raise error(f"overlong varint in {what}")
            return n, pos
        shift += 7


def read_svarint(
    buf: bytes, pos: int, limit: int, what: str, error: type[Exception]
) -> tuple[int, int]:
    """The inverse of :func:`append_svarint`; ``limit`` bounds the zigzag form."""
    z, pos = read_uvarint(buf, pos, limit, what, error)
    return (z >> 1 if not z & 1 else -((z + 1) >> 1)), pos


def read_varints(buf: bytes, pos: int, count: int, error: type[Exception]) -> tuple[list[int], int]:
    """``count`` minimal varints of at most 64 bits from ``buf[pos:]`` (what
    :func:`read_uvarint` reads one at a time, here in one loop: a version 7
    MemberHeartbeat's entries are mostly them), and the position after them; else ``error``.
    The caller checks each one's range."""
    out: list[int] = []
    append = out.append
    try:
        for _ in range(count):
            b = buf[pos]
            pos += 1
            if b < 0x80:
                append(b)
                continue
            n = b & 0x7F
            shift = 7
            while True:
                b = buf[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise error("varint out of range")
            if b == 0:
                raise error("overlong varint")
            append(n)
    except IndexError:
        raise error("truncated entries") from None
    return out, pos
