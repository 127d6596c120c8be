"""The Kafka wire format as the broker needs it: frames, request headers, response frames.

Request and response bodies are decoded and encoded with kafka-python's protocol classes
(pinned exactly in setup.cfg: ``kafka.protocol`` is not kafka-python's public API). Two
things are done by hand because they are on the hot path or where the library is awkward:

* the request header is parsed here, then the body is decoded from a memoryview (decoding
  with ``header=True`` copies the whole frame: 860 µs for a 1 MiB produce against 20 µs);
* the Fetch response is written here as a list of buffers, so stored batches go to the
  socket without being copied into an encode buffer.

Tagged fields and which answers carry response header v1 are :mod:`storage._kafka_framing`'s,
shared with the clients that speak to Kafka brokers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from .._kafka_framing import MalformedFrame, response_header_is_flexible, skip_tagged_fields
from .errors import ErrorCode, ProtocolError

__all__ = [
    "API_VERSIONS",
    "SUPPORTED",
    "ApiKey",
    "ApiSpec",
    "RequestHeader",
    "api_versions_response",
    "encode_fetch_response",
    "encode_response",
    "parse_request_header",
]


class ApiKey:
    """Kafka API keys served by the broker."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44


class ApiSpec(NamedTuple):
    """An API the broker serves: advertised version range and kafka-python classes."""

    key: int
    min_version: int
    max_version: int
    request: Any
    response: Any


# Non-flexible versions, which every client measured accepts, and flexible ones (KIP-482)
# where a client needs them: ApiVersions 3, ListOffsets 6-7 (MAX_TIMESTAMP, Kafka's
# get-offsets --time -3), ListGroups 3-5 (group states and types: Kafka's consumer-groups
# --list --state). The ranges contain Produce 3 and Fetch 4 (old librdkafka matches
# features on exact versions) and Metadata 4 (kafka-python infers the broker version from
# it). See the project's measured-facts note.
SUPPORTED: dict[int, ApiSpec] = {
    spec.key: spec
    for spec in (
        ApiSpec(ApiKey.PRODUCE, 3, 8, ProduceRequest, ProduceResponse),
        ApiSpec(ApiKey.FETCH, 4, 11, FetchRequest, None),
        ApiSpec(ApiKey.LIST_OFFSETS, 1, 7, ListOffsetsRequest, ListOffsetsResponse),
        ApiSpec(ApiKey.METADATA, 0, 8, MetadataRequest, MetadataResponse),
        ApiSpec(ApiKey.API_VERSIONS, 0, 3, ApiVersionsRequest, None),
        ApiSpec(ApiKey.CREATE_TOPICS, 2, 4, CreateTopicsRequest, CreateTopicsResponse),
        ApiSpec(ApiKey.DELETE_TOPICS, 1, 3, DeleteTopicsRequest, DeleteTopicsResponse),
        ApiSpec(ApiKey.DELETE_RECORDS, 0, 1, DeleteRecordsRequest, DeleteRecordsResponse),
        ApiSpec(ApiKey.INIT_PRODUCER_ID, 0, 1, InitProducerIdRequest, InitProducerIdResponse),
        ApiSpec(ApiKey.DESCRIBE_CONFIGS, 1, 3, DescribeConfigsRequest, DescribeConfigsResponse),
        ApiSpec(ApiKey.CREATE_PARTITIONS, 0, 1, CreatePartitionsRequest, CreatePartitionsResponse),
        ApiSpec(ApiKey.ALTER_CONFIGS, 0, 1, AlterConfigsRequest, AlterConfigsResponse),
        ApiSpec(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            0,
            0,
            IncrementalAlterConfigsRequest,
            IncrementalAlterConfigsResponse,
        ),
        # Group APIs (storage.broker.groups): read-only views, classic consumption refused.
        ApiSpec(ApiKey.OFFSET_COMMIT, 2, 7, OffsetCommitRequest, OffsetCommitResponse),
        ApiSpec(ApiKey.OFFSET_FETCH, 1, 5, OffsetFetchRequest, OffsetFetchResponse),
        ApiSpec(ApiKey.FIND_COORDINATOR, 0, 2, FindCoordinatorRequest, FindCoordinatorResponse),
        ApiSpec(ApiKey.JOIN_GROUP, 0, 5, JoinGroupRequest, JoinGroupResponse),
        ApiSpec(ApiKey.HEARTBEAT, 0, 3, HeartbeatRequest, HeartbeatResponse),
        ApiSpec(ApiKey.LEAVE_GROUP, 0, 3, LeaveGroupRequest, LeaveGroupResponse),
        ApiSpec(ApiKey.SYNC_GROUP, 0, 3, SyncGroupRequest, SyncGroupResponse),
        ApiSpec(ApiKey.DESCRIBE_GROUPS, 0, 4, DescribeGroupsRequest, DescribeGroupsResponse),
        ApiSpec(ApiKey.LIST_GROUPS, 0, 5, ListGroupsRequest, ListGroupsResponse),
    )
}
API_VERSIONS = ApiKey.API_VERSIONS

_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id
MIN_REQUEST_SIZE = 10  # api key, version, correlation id, client id length


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    """The request header's tagged fields skipped; malformed ones are a request that does not
    parse (ProtocolError: the connection closes)."""
    try:
        return skip_tagged_fields(frame, pos)
    except MalformedFrame as exc:
        raise ProtocolError(f"request header: {exc}") from None


def request_header_is_flexible(api_key: int, api_version: int) -> bool:
    """Header v2 (with tagged fields) is used exactly when the body version is flexible."""
    spec = SUPPORTED.get(api_key)
    if spec is None:
        return False
    if api_key == ApiKey.API_VERSIONS:
        return api_version >= 3
    return bool(spec.request.flexible_version_q(min(api_version, spec.request.max_version)))


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse a request header (v1 or v2) by hand; raise ProtocolError if it is malformed."""
    if len(frame) < MIN_REQUEST_SIZE:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than any header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    (length,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id = None
    if length >= 0:
        if pos + length > len(frame):
            raise ProtocolError("client id runs past the end of the request")
        try:
            client_id = bytes(frame[pos : pos + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("client id is not UTF-8") from None
        pos += length
    elif length != -1:
        raise ProtocolError(f"invalid client id length {length}")
    if request_header_is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def _frame(correlation_id: int, body: bytes | bytearray, flexible_header: bool) -> bytes:
    head = _FRAME_HEAD.pack(len(body) + 4 + flexible_header, correlation_id)
    return head + (b"\x00" if flexible_header else b"") + bytes(body)


def encode_response(correlation_id: int, spec: ApiSpec, version: int, response: Any) -> bytes:
    """A whole response frame: size, header (v0, or v1 for flexible bodies), body."""
    flexible = response_header_is_flexible(spec.response, version)
    return _frame(correlation_id, response.encode(), flexible)


def api_versions_response(correlation_id: int, version: int, error: ErrorCode) -> bytes:
    """ApiVersions by hand: an unsupported version must get a v0-encoded body.

    The response header is v0 even for the flexible v3 body (clients cannot know which
    header to expect before they know the version).
    """
    if error != ErrorCode.NONE or version == 0:
        version = 0
    out = bytearray(_INT16.pack(error))
    specs = sorted(SUPPORTED.values())
    if version >= 3:
        out += bytes([len(specs) + 1])  # compact array: length + 1 (fits one byte)
        for spec in specs:
            out += struct.pack(">hhh", spec.key, spec.min_version, spec.max_version) + b"\x00"
        out += _INT32.pack(0) + b"\x00"  # throttle time, no tagged fields
    else:
        out += _INT32.pack(len(specs))
        for spec in specs:
            out += struct.pack(">hhh", spec.key, spec.min_version, spec.max_version)
        if version >= 1:
            out += _INT32.pack(0)
    return _frame(correlation_id, out, flexible_header=False)


class FetchPartitionResult(NamedTuple):
    partition: int
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes


_FETCH_PARTITION = struct.Struct(">ihqqqi")  # index, error, hw, last stable, log start, aborted
_FETCH_PARTITION_V4 = struct.Struct(">ihqqi")  # v4 has no log start offset (added in v5)
_INT32_MINUS_ONE = _INT32.pack(-1)


def encode_fetch_response(
    correlation_id: int,
    version: int,
    topics: Sequence[tuple[str, Sequence[FetchPartitionResult]]],
    error: int = 0,
) -> list[bytes]:
    """A Fetch response (v4-v11, non-flexible) as buffers; records are not copied.

    ``error`` is the top-level error code (v7 on; earlier versions have only the
    partitions' codes)."""
    parts: list[bytes] = []
    head = bytearray(_INT32.pack(0))  # throttle time
    if version >= 7:
        head += struct.pack(">hi", error, 0)  # top-level error, session id (no sessions)
    head += _INT32.pack(len(topics))
    size = 0
    for name, partitions in topics:
        raw = name.encode("utf-8")
        head += _INT16.pack(len(raw)) + raw + _INT32.pack(len(partitions))
        for p in partitions:
            if version >= 5:
                head += _FETCH_PARTITION.pack(
                    p.partition, p.error, p.high_watermark, p.high_watermark, p.log_start_offset, 0
                )
            else:
                head += _FETCH_PARTITION_V4.pack(
                    p.partition, p.error, p.high_watermark, p.high_watermark, 0
                )
            if version >= 11:
                head += _INT32_MINUS_ONE  # preferred read replica: none
            head += _INT32.pack(len(p.records))
            parts.append(bytes(head))
            size += len(head)
            head = bytearray()
            if p.records:
                parts.append(p.records)
                size += len(p.records)
    if head:
        parts.append(bytes(head))
        size += len(head)
    return [_FRAME_HEAD.pack(size + 4, correlation_id), *parts]
