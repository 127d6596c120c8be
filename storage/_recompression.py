"""Re-encode a batch's records section with another codec (the topic's compression.type).

Only the records section and the header fields that describe it change (codec bits,
batchLength, CRC); offsets, timestamps, producer fields and the records themselves are kept.
"""

from __future__ import annotations

import struct
from typing import Any

import crc32c

from storage._compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress

__all__ = ["CODEC_IDS", "recompress"]

#: compression.type value -> codec id in the batch attributes
CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_OVERHEAD = 61
_ATTRIBUTES = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")


def recompress(
    batch: Any, codec: int | None, limit: int = DEFAULT_MAX_DECOMPRESSED, *, again: bool = False
) -> bytes:
    """The batch (whole, CRC already checked) with its records compressed by ``codec`` (None:
    its own); ``again``: even by the codec it has (a gzip payload of several members, one)."""
    mv = memoryview(batch)
    header = bytearray(mv[:_OVERHEAD])
    (attributes,) = _ATTRIBUTES.unpack_from(header, 21)
    source = attributes & 0x07
    codec = source if codec is None else codec
    if source == codec and not again:
        return bytes(mv)
    records = mv[_OVERHEAD:] if source == 0 else decompress(source, mv[_OVERHEAD:], limit)
    payload = bytes(records) if codec == 0 else compress(codec, records)
    _ATTRIBUTES.pack_into(header, 21, (attributes & ~0x07) | codec)
    _INT32.pack_into(header, 8, _OVERHEAD - 12 + len(payload))
    crc = crc32c.crc32c(payload, crc32c.crc32c(bytes(header[21:])))
    _CRC.pack_into(header, 17, crc)
    return bytes(header) + payload
