"""Kafka's framing for clients: the bytes around a request's and a response's body.

A request goes out as its size, a request header (v1, or v2 with tagged fields when the body
is flexible) and its body; an answer comes back as its size, a response header (the
correlation id, then tagged fields when the body is flexible; ApiVersions answers with header
v0 at every version, since a client cannot know which header to expect before it knows the
version) and its body. The bodies are kafka-python's protocol classes (pinned exactly in
setup.cfg); this module neither builds nor reads them. One copy, for every raw client: the
network connection's replay reads (``logmarshal.network``: only :func:`recv_frame`; it packs
its own two requests, so client processes never import kafka-python), a broker asking its
controller (``storage.broker.peer``) and the broker tests' client. The broker's side of the same bytes,
on its hot path, is ``storage.broker.wire``; it shares the tagged fields from here.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from ._errors import LogmarshalError

__all__ = [
    "API_VERSIONS",
    "MAX_ANSWER",
    "SIZE",
    "MalformedFrame",
    "decode_response",
    "encode_request",
    "read_frame",
    "recv_frame",
    "response_body_offset",
    "response_header_is_flexible",
    "skip_tagged_fields",
]

#: a frame's size prefix, counting what follows it
SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
#: the API whose response header is v0 at every version
API_VERSIONS = 18
#: socket reads are at most this large (a long answer is read in pieces)
_RECV_CHUNK = 1 << 20
#: the largest answer a client takes when it was not told otherwise: librdkafka's
#: ``receive.message.max.bytes`` (a size beyond it is garbage, or a server that is no Kafka
#: broker: "HTTP" read as a size is 1.2 GB)
MAX_ANSWER = 100_000_000


class MalformedFrame(LogmarshalError, ValueError):
    """Bytes that do not parse as Kafka's framing (a varint or a tagged field that runs
    past the frame's end)."""


def encode_request(request: Any, correlation_id: int, client_id: str) -> bytes:
    """``request`` (a kafka-python request object) as it goes on the wire: size, request
    header with ``correlation_id`` and ``client_id``, body."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def response_header_is_flexible(response_cls: Any, version: int) -> bool:
    """Header v1 (with tagged fields) comes exactly with a flexible body, except ApiVersions'."""
    return response_cls.API_KEY != API_VERSIONS and bool(response_cls.flexible_version_q(version))


def response_body_offset(frame: bytes | memoryview, response_cls: Any, version: int) -> int:
    """Where the body of ``frame`` (an answer without its size) starts: after the correlation
    id, and the tagged fields of a flexible header."""
    if not response_header_is_flexible(response_cls, version):
        return _CORRELATION.size
    return skip_tagged_fields(memoryview(frame), _CORRELATION.size)


def decode_response(
    frame: bytes | memoryview, response_cls: Any, version: int, correlation_id: int
) -> Any:
    """The body of ``frame`` (an answer without its size) as ``response_cls[version]``;
    ConnectionError if it answers another request than ``correlation_id``."""
    (got,) = _CORRELATION.unpack_from(frame, 0)
    if got != correlation_id:
        raise ConnectionError(f"answer to request {got}, expected {correlation_id}")
    offset = response_body_offset(frame, response_cls, version)
    return response_cls[version].decode(memoryview(frame)[offset:])


def recv_frame(sock: socket.socket, max_size: int = MAX_ANSWER) -> bytes:
    """The next frame from a blocking socket, without its size; ConnectionError if the
    peer closes the connection first (the socket's timeout applies to each read), or if it
    announces a negative size or one above ``max_size`` (nothing of it is read: the
    connection is no longer in step and must be closed)."""
    (size,) = SIZE.unpack(_recv_exactly(sock, SIZE.size))
    _check_size(size, max_size)
    return _recv_exactly(sock, size)


def _check_size(size: int, max_size: int) -> None:
    if not 0 <= size <= max_size:
        raise ConnectionError(
            f"the peer announced a frame of {size} bytes (at most {max_size} taken): "
            "garbage on the connection, or a server that is no Kafka broker"
        )


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, _RECV_CHUNK))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


async def read_frame(
    reader: asyncio.StreamReader, timeout: float, max_size: int = MAX_ANSWER
) -> bytes:
    """The next frame from an asyncio stream, without its size; each of the two reads
    bounded by ``timeout`` (TimeoutError), IncompleteReadError if the peer stops before,
    ConnectionError for a size below 0 or above ``max_size`` (as :func:`recv_frame`)."""
    (size,) = SIZE.unpack(await asyncio.wait_for(reader.readexactly(SIZE.size), timeout))
    _check_size(size, max_size)
    return await asyncio.wait_for(reader.readexactly(size), timeout)


#: the most tagged fields one place of a frame may carry: Kafka defines a few per struct
MAX_TAGGED_FIELDS = 1024


def skip_tagged_fields(frame: memoryview, pos: int) -> int:
    """The position after the tagged fields at ``pos`` (KIP-482: a count, then each field's
    tag, size and bytes, all UNSIGNED_VARINT); MalformedFrame if they run past the end."""
    count, pos = _read_uvarint(frame, pos)
    if count > MAX_TAGGED_FIELDS:
        # (walked one by one, in Python: 99 MB of empty fields held a broker's loop 13 s)
        raise MalformedFrame(f"{count} tagged fields (more than {MAX_TAGGED_FIELDS})")
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedFrame("tagged field runs past the end of the frame")
    return pos


def _read_uvarint(frame: memoryview, pos: int) -> tuple[int, int]:
    """Kafka's UNSIGNED_VARINT of flexible headers (tagged fields): no zigzag, at most 5
    bytes (a uint32). Not the records' varint (``storage._varint``: signed, up to 10 bytes,
    CorruptRecordError), so not shared with it."""
    result = 0
    shift = 0
    while True:
        if pos >= len(frame):
            raise MalformedFrame("varint runs past the end of the frame")
        b = frame[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedFrame("varint is too long")
