"""Request bodies decoded so that what a malformed one costs is bounded.

The bodies are decoded by kafka-python's generated decoders (pinned exactly: setup.cfg),
which trust the bytes. A helper's attack (2026-12-05) found three ways one request held the
broker's event loop, and so every client, for seconds (quadratic work in the frame's size):

- an unsigned varint of a million bytes (`0xff` ... `0x01`) is read as one integer that
  grows with every byte: 15 s for 1 MB. No varint of Kafka's is over 10 bytes, and a long
  run of bytes with the high bit set is found before decoding, in C;
- each struct that carries tagged fields had the rest of the frame copied to read them
  (`bytes(data[pos:])`): 10 s for 4 MB of structs with an empty tagged field each. They
  are read from the frame in place instead (:class:`_FrameReader`);
- a length that runs past the end of the frame was taken as the bytes that were there (a
  Produce whose records claim 1 MB and hold 87 bytes was stored and answered NONE). A body
  whose fields run past its end is now malformed (:func:`decode_body`).
"""

from __future__ import annotations

import re
from typing import Any

from kafka.protocol.schemas.fields.struct import StructField

__all__ = ["MAX_HIGH_BIT_RUN", "decode_body"]

#: the longest run of bytes with the high bit set a non-Produce body may carry: a varint's
#: continuation bytes (Kafka's are at most 10) or UTF-8 and binary payloads (a run this long
#: in a group id, config value or member assignment is not one a client writes)
MAX_HIGH_BIT_RUN = 8192
_HIGH_BIT_RUN = re.compile(rb"[\x80-\xff]{%d}" % (MAX_HIGH_BIT_RUN + 1))


class _FrameReader:
    """What kafka-python's tagged-field decoder reads (``read``, ``tell``), over the frame
    from ``start``, with no copy of it."""

    __slots__ = ("_data", "_pos", "_start")

    def __init__(self, data: memoryview, start: int) -> None:
        self._data = data
        self._start = self._pos = start

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else min(self._pos + n, len(self._data))
        out = bytes(self._data[self._pos : end])
        self._pos = end
        return out

    def tell(self) -> int:
        return self._pos - self._start


_COPYING = "_BytesIO(bytes(data[pos:]))"


def _read_tags_in_place() -> None:
    """Make kafka-python's generated decoders read a struct's tagged fields from the frame
    in place, not from a copy of the rest of it (once per process; before any decoder of a
    request body is compiled: they are compiled on first use)."""
    original = StructField._emit_tagged_decode
    if getattr(original, "_in_place", False):
        return

    def emit(self: Any, ctx: Any, var_name: str, indent: str, version: int) -> None:
        first = len(ctx.lines)
        original(self, ctx, var_name, indent, version)
        for i in range(first, len(ctx.lines)):
            if _COPYING in ctx.lines[i]:
                ctx.lines[i] = ctx.lines[i].replace(_COPYING, "_FrameReader(data, pos)")
                ctx.globs["_FrameReader"] = _FrameReader
                return
        raise RuntimeError(  # (kafka-python is pinned; a new version must be looked at)
            f"kafka-python's tagged-field decoder no longer reads {_COPYING!r}"
        )

    emit._in_place = True  # type: ignore[attr-defined]  # a marker read back above: a second import patches once
    StructField._emit_tagged_decode = emit


_read_tags_in_place()


def decode_body(request_cls: Any, body: memoryview, version: int, *, produce: bool) -> Any:
    """``body`` decoded as ``request_cls`` at ``version``; ValueError if it is malformed:
    fields that run past its end, or (``produce`` aside: records are binary, and read by
    the storage's own checks) a run of more than ``MAX_HIGH_BIT_RUN`` high-bit bytes."""
    if not produce:
        found = _HIGH_BIT_RUN.search(body)
        if found is not None:
            raise ValueError(
                f"more than {MAX_HIGH_BIT_RUN} bytes with the high bit set in a row, from "
                f"byte {found.start()}: no varint is that long"
            )
    flexible = request_cls.flexible_version_q(version)
    decode = request_cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=request_cls[None]
    )
    request, end = decode(body, 0)
    if end > len(body):
        raise ValueError(f"its fields run {end - len(body)} bytes past the end of the frame")
    return request
