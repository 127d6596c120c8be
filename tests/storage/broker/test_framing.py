"""storage._kafka_framing, the one framing of every raw Kafka client here (the replay's, a
broker asking its controller, these tests'), against the broker's own parser and hand-made
bytes: the cases a real broker rarely sends (tagged fields in a response header, a frame
that arrives in pieces or stops) are the ones a copy would get wrong."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import pytest
from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest

from storage._kafka_framing import (
    MalformedFrame,
    decode_response,
    encode_request,
    read_frame,
    recv_frame,
    response_body_offset,
    skip_tagged_fields,
)
from storage.broker.errors import ProtocolError
from storage.broker.wire import parse_request_header


def _list_groups_body() -> bytes:
    r = ListGroupsResponse[3]
    return bytes(
        r(throttle_time_ms=5, error_code=0,
          groups=[r.ListedGroup(group_id="g", protocol_type="consumer")]).encode()
    )  # fmt: skip


@pytest.mark.parametrize(
    ("request_obj", "flexible"),
    [(MetadataRequest[1](topics=None), False), (ListGroupsRequest[3](), True)],
    ids=["header-v1", "header-v2"],
)
def test_a_request_parses_as_the_broker_reads_it(request_obj, flexible: bool) -> None:
    data = encode_request(request_obj, 41, "framing-test")
    (size,) = struct.unpack_from(">i", data, 0)
    assert size == len(data) - 4
    header = parse_request_header(memoryview(data)[4:])
    assert (header.api_key, header.api_version) == (request_obj.API_KEY, request_obj.API_VERSION)
    assert (header.correlation_id, header.client_id) == (41, "framing-test")
    # api key, version, correlation id, client id; header v2 adds its (empty) tagged fields
    assert header.body_offset == 10 + len("framing-test") + flexible
    assert data[4 + header.body_offset :] == bytes(request_obj.encode())


def test_a_flexible_answer_with_tagged_fields_in_its_header() -> None:
    body = _list_groups_body()
    # correlation id, then two tagged fields (tag 0: 2 bytes, tag 300: 1 byte), then the body
    header = struct.pack(">i", 7) + b"\x02" + b"\x00\x02ab" + b"\xac\x02\x01z"
    frame = header + body
    assert response_body_offset(frame, ListGroupsResponse, 3) == len(header)
    answer = decode_response(frame, ListGroupsResponse, 3, 7)
    assert answer.throttle_time_ms == 5
    assert [(g.group_id, g.protocol_type) for g in answer.groups] == [("g", "consumer")]


def test_api_versions_answers_with_header_v0_at_a_flexible_version() -> None:
    r = ApiVersionsResponse[3]
    body = bytes(
        r(
            error_code=0,
            api_keys=[r.ApiVersion(api_key=18, min_version=0, max_version=3)],
            throttle_time_ms=0,
        ).encode()
    )
    frame = struct.pack(">i", 3) + body  # no tagged-field byte after the correlation id
    assert response_body_offset(frame, ApiVersionsResponse, 3) == 4
    assert decode_response(frame, ApiVersionsResponse, 3, 3).api_keys[0].max_version == 3


def test_an_answer_to_another_request_is_refused() -> None:
    frame = struct.pack(">i", 8) + b"\x00" + _list_groups_body()
    with pytest.raises(ConnectionError, match="answer to request 8, expected 9"):
        decode_response(frame, ListGroupsResponse, 3, 9)


@pytest.mark.parametrize(
    "tagged",
    [
        b"\x01\x00\x05ab",
        b"\x01\x00",
        b"\x80\x80\x80\x80\x80\x01",
        b"",
        # (a helper's attack: 2**32 - 1 fields, then 99 MB of empty ones, walked for 13 s)
        b"\xff\xff\xff\xff\x0f" + b"\x00\x00" * 2000,
    ],
    ids=["field-past-end", "size-missing", "varint-too-long", "nothing", "too-many"],
)
def test_malformed_tagged_fields(tagged: bytes) -> None:
    with pytest.raises(MalformedFrame):
        skip_tagged_fields(memoryview(tagged), 0)
    # the broker closes the connection on them: ProtocolError, not the client's error
    request = struct.pack(">hhih", 16, 3, 1, -1) + tagged  # ListGroups v3: header v2
    with pytest.raises(ProtocolError):
        parse_request_header(memoryview(request))


def test_a_frame_read_in_pieces_and_one_cut_short() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.settimeout(5)
        payload = bytes(range(256)) * 20
        frame = struct.pack(">i", len(payload)) + payload

        def send() -> None:
            for i in range(0, len(frame), 333):
                right.sendall(frame[i : i + 333])
            right.sendall(struct.pack(">i", 10) + b"short")
            right.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            assert recv_frame(left) == payload
            with pytest.raises(ConnectionError, match="closed the connection"):
                recv_frame(left)
        finally:
            sender.join(5)


@pytest.mark.parametrize("size", [-1, -(2**31), 101, 0x48545450])  # 0x48545450: "HTTP"
def test_a_frame_of_a_size_past_the_limit_or_negative_is_refused_unread(size: int) -> None:
    """A negative size, or one beyond what the reader takes (garbage, or a server that is no
    Kafka broker: an HTTP answer's "HTTP" is a 1.2 GB size), is a broken connection at once:
    nothing after the size is waited for or kept. Before, a negative size failed inside
    ``recv`` and a large one buffered whatever came until the socket's timeout."""
    left, right = socket.socketpair()
    with left, right:
        left.settimeout(5)
        right.sendall(struct.pack(">i", size) + b"x" * 50)  # and the connection stays open
        with pytest.raises(ConnectionError, match=f"announced a frame of {size} bytes"):
            recv_frame(left, max_size=100)
        assert left.recv(100) == b"x" * 50  # nothing of the body was read

    async def read(data: bytes) -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        return await read_frame(reader, 5, max_size=100)

    with pytest.raises(ConnectionError, match=f"announced a frame of {size} bytes"):
        asyncio.run(read(struct.pack(">i", size) + b"x" * 50))
    assert asyncio.run(read(struct.pack(">i", 100) + b"y" * 100)) == b"y" * 100  # the limit itself


def test_a_count_of_tagged_fields_beyond_the_bound_is_refused_before_any_is_read() -> None:
    """(With no bound the fields were walked one by one, in Python, until the frame ran out:
    99 MB of empty fields held the broker's loop 13 s.)"""
    many = b"\xff\xff\xff\xff\x0f" + b"\x00\x00" * 2000
    with pytest.raises(MalformedFrame, match="more than 1024"):
        skip_tagged_fields(memoryview(many), 0)
    fine = b"\x02" + b"\x00\x00" + b"\x01\x01z"  # two fields, tags 0 and 1
    assert skip_tagged_fields(memoryview(fine), 0) == len(fine)
