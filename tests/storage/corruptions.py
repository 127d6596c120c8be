"""Batches with a correct CRC, record count and lastOffsetDelta but corrupt records.

Each passes every batch-level check (they are what the broker once stored and then blocking
every reader); only record-level validation refuses them. Built byte by byte, not with
encode_batch, so the corruption is exactly the named one.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import crc32c
import zstandard

from storage._errors import InvalidRecord

_HEADER = struct.Struct(">qiibIhiqqqhii")
TS = 1_700_000_000_000


def varint(n: int) -> bytes:
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(
    *,
    length: int | None = None,
    ts_delta: int = 0,
    off_delta: int = 0,
    key: bytes | None = b"k",
    klen: int | None = None,
    value: bytes | None = b"v",
    vlen: int | None = None,
    hcount: int = 0,
    headers: bytes = b"",
) -> bytes:
    body = bytearray(b"\x00")
    body += varint(ts_delta) + varint(off_delta)
    body += varint(-1 if key is None else len(key) if klen is None else klen) + (key or b"")
    body += varint(-1 if value is None else len(value) if vlen is None else vlen) + (value or b"")
    body += varint(hcount) + headers
    return varint(len(body) if length is None else length) + bytes(body)


def batch(
    payload: bytes,
    count: int,
    *,
    attributes: int = 0,
    last_delta: int | None = None,
    first_ts: int = TS,
    max_ts: int = TS,
) -> bytes:
    """A v2 batch around ``payload`` with a correct CRC and counts."""
    buf = bytearray(61 + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        0,
        len(buf) - 12,
        -1,
        2,
        0,
        attributes,
        count - 1 if last_delta is None else last_delta,
        first_ts,
        max_ts,
        -1,
        -1,
        -1,
        count,
    )
    buf[61:] = payload
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def good(n: int = 1) -> bytes:
    return batch(b"".join(record(off_delta=i) for i in range(n)), n)


def _gzip_bomb() -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    parts = [c.compress(zeros) for _ in range(80)]  # 80 MiB of zeros, ~80 KB compressed
    return batch(b"".join(parts) + c.flush(), 1, attributes=1)


def _zstd_bomb() -> bytes:
    return batch(zstandard.ZstdCompressor().compress(bytes(80 << 20)), 1, attributes=4)


def _snappy_cut_short() -> bytes:
    """Three records in a snappy block cut in half."""
    block = bytes(cramjam.snappy.compress_raw(record(value=b"v" * 200) * 3))
    return batch(block[: len(block) // 2], 3, attributes=2)


#: name -> (batch builder, the exception record validation must raise)
CORRUPTIONS = {
    "record length -5": (lambda: batch(record(length=-5), 1), None),
    "record length beyond the batch": (lambda: batch(record(length=500), 1), None),
    "key length -100": (lambda: batch(record(klen=-100, key=b""), 1), None),
    "value length 10^9": (lambda: batch(record(vlen=10**9), 1), None),
    "value length -7": (lambda: batch(record(vlen=-7, value=b""), 1), None),
    "offsetDelta -3": (lambda: batch(record(off_delta=-3), 1), InvalidRecord),
    "two records with offsetDelta 0": (
        lambda: batch(record(off_delta=0) + record(off_delta=0), 2),
        InvalidRecord,
    ),
    "header count -7": (lambda: batch(record(hcount=-7), 1), None),
    "gzip flag over garbage": (
        lambda: batch(b"\x1f\x8b garbage, not deflate" * 3, 1, attributes=1),
        None,
    ),
    "zstd flag over garbage": (
        lambda: batch(b"\x28\xb5\x2f\xfd garbage" * 3, 1, attributes=4),
        None,
    ),
    "snappy flag over garbage": (
        lambda: batch(b"\xff\xff\xff\xff\x0f garbage", 1, attributes=2),
        None,
    ),
    # a snappy block cut in half: cramjam's DecompressionError, not a ValueError, once
    # escaped as "unexpected" and closed the producer's connection (an attack, 2026-12-03)
    "snappy block cut short": (_snappy_cut_short, None),
    "lz4 flag over garbage": (lambda: batch(b"\x04\x22\x4d\x18 garbage", 1, attributes=3), None),
    "transactional + control from a client": (
        lambda: batch(record(), 1, attributes=0x30),
        InvalidRecord,
    ),
    "transactional from a client": (lambda: batch(record(), 1, attributes=0x10), InvalidRecord),
    "header key not UTF-8": (
        lambda: batch(record(hcount=1, headers=varint(2) + b"\xff\xfe" + varint(-1)), 1),
        None,
    ),
    "fewer records than declared": (lambda: batch(record(), 2), None),
    "bytes after the last record": (lambda: batch(record() + b"\x00\x00", 1), None),
    "maxTimestamp not the records' maximum": (
        lambda: batch(record(ts_delta=5), 1, max_ts=TS),
        InvalidRecord,
    ),
    # Kafka's reader takes at most 5 bytes for an int32 varint ("Varint is too long")
    "key length 1 in 6 bytes": (
        lambda: batch(b"\x1a" + record()[1:].replace(b"\x02k", b"\x82\x80\x80\x80\x80\x00k"), 1),
        None,
    ),
    "gzip bomb (80 MiB of zeros)": (_gzip_bomb, None),
    "zstd bomb (80 MiB of zeros)": (_zstd_bomb, None),
}


def gzip_in_members(encoded: bytes, cut: int) -> bytes:
    """An uncompressed batch (``encode_batch``'s) as gzip of two members, its records section
    cut at byte ``cut`` (0: an empty first member): what RFC 1952 allows, Kafka takes, and
    librdkafka reads only the first member of (a helper's fuzz of the broker)."""
    header = bytearray(encoded[:61])
    raw = encoded[61:]
    payload = gzip.compress(raw[:cut]) + gzip.compress(raw[cut:])
    (attributes,) = struct.unpack_from(">h", header, 21)
    struct.pack_into(">h", header, 21, attributes | 1)
    struct.pack_into(">i", header, 8, 49 + len(payload))
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + payload))
    return bytes(header) + payload
