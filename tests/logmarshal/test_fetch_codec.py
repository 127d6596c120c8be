"""The replay's Fetch v5 and ListOffsets v2, packed and read by hand
(``network.fetch_client``), against kafka-python's FetchRequest[5] / FetchResponse[5] and
ListOffsetsRequest[2] / ListOffsetsResponse[2], which the replay used before: the same bytes
out, the same fields read back."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

from logmarshal.network.fetch_client import (
    FetchedPartition,
    decode_fetch,
    decode_list_offsets,
    encode_fetch,
    encode_list_offsets,
)
from storage._kafka_framing import encode_request


@pytest.mark.parametrize(
    ("offsets", "max_bytes", "wait_ms", "correlation"),
    [
        ({0: 5}, 1 << 20, 500, 1),
        ({0: 5, 3: 1 << 40, 7: 0, 200: 12}, 1 << 20, 0, 2**31 - 1),
        ({p: p * 1000 for p in range(8)}, 1 << 30, 1500, 77),  # max bytes x 8 capped
    ],
)
def test_request_is_kafka_pythons_byte_for_byte(
    offsets: dict[int, int], max_bytes: int, wait_ms: int, correlation: int
) -> None:
    r = FetchRequest[5]
    theirs = r(
        replica_id=-1,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=min(max_bytes * len(offsets), 0x7FFFFFFF),
        isolation_level=0,
        topics=[
            r.FetchTopic(
                topic="__marshal",
                partitions=[
                    r.FetchTopic.FetchPartition(
                        partition=p,
                        fetch_offset=o,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    expected = encode_request(theirs, correlation, "logmarshal-replay")
    assert encode_fetch(correlation, "__marshal", offsets, max_bytes, wait_ms) == expected


def _answer(correlation: int) -> bytes:
    """A Fetch v5 answer as kafka-python encodes it: two topics, records, none (null), an
    error, aborted transactions."""
    R = FetchResponse[5]
    P = R.FetchableTopicResponse.PartitionData
    body = R(
        throttle_time_ms=3,
        responses=[
            R.FetchableTopicResponse(
                topic="__marshal",
                partitions=[
                    P(
                        partition_index=0,
                        error_code=0,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=2,
                        aborted_transactions=None,
                        records=b"batch-0",
                    ),
                    P(
                        partition_index=5,
                        error_code=1,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        aborted_transactions=None,
                        records=None,
                    ),
                    P(
                        partition_index=6,
                        error_code=0,
                        high_watermark=99,
                        last_stable_offset=90,
                        log_start_offset=0,
                        aborted_transactions=[
                            P.AbortedTransaction(producer_id=7, first_offset=80),
                            P.AbortedTransaction(producer_id=8, first_offset=85),
                        ],
                        records=b"",
                    ),
                ],
            ),
            R.FetchableTopicResponse(
                topic="other",
                partitions=[
                    P(
                        partition_index=1,
                        error_code=3,
                        high_watermark=0,
                        last_stable_offset=0,
                        log_start_offset=0,
                        aborted_transactions=[],
                        records=b"x" * 300,
                    ),
                ],
            ),
        ],
    ).encode()
    return struct.pack(">i", correlation) + bytes(body)


def test_answer_reads_as_kafka_python_reads_it() -> None:
    frame = _answer(9)
    theirs = FetchResponse[5].decode(memoryview(frame)[4:])
    ours = decode_fetch(frame, 9)
    assert list(ours) == [t.topic for t in theirs.responses] == ["__marshal", "other"]
    for topic in theirs.responses:
        assert ours[topic.topic] == [
            FetchedPartition(
                p.partition_index, p.error_code, p.high_watermark, p.log_start_offset, p.records
            )
            for p in topic.partitions
        ]
    assert ours["__marshal"][0].records == b"batch-0"
    assert ours["__marshal"][1].records is None
    assert ours["other"][0].records == b"x" * 300


def test_answer_to_another_request_or_torn_is_refused() -> None:
    frame = _answer(9)
    with pytest.raises(ConnectionError, match="expected 10"):
        decode_fetch(frame, 10)
    for cut in (len(frame) - 1, len(frame) - 300, 40, 13):
        with pytest.raises((ValueError, struct.error)):
            decode_fetch(frame[:cut], 9)


@pytest.mark.parametrize(
    ("partitions", "timestamp", "correlation"),
    [([0], -2, 1), ([3, 0, 200], -1, 2**31 - 1), (list(range(50)), -2, 77)],
)
def test_list_offsets_request_is_kafka_pythons_byte_for_byte(
    partitions: list[int], timestamp: int, correlation: int
) -> None:
    r = ListOffsetsRequest[2]
    theirs = r(
        replica_id=-1,
        isolation_level=0,
        topics=[
            r.ListOffsetsTopic(
                name="__marshal",
                partitions=[
                    r.ListOffsetsTopic.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in partitions
                ],
            )
        ],
    )
    expected = encode_request(theirs, correlation, "logmarshal-replay")
    assert encode_list_offsets(correlation, "__marshal", partitions, timestamp) == expected


def _offsets_answer(correlation: int) -> bytes:
    """A ListOffsets v2 answer as kafka-python encodes it: two topics, an error among them."""
    R = ListOffsetsResponse[2]
    T = R.ListOffsetsTopicResponse
    P = T.ListOffsetsPartitionResponse
    body = R(
        throttle_time_ms=0,
        topics=[
            T(
                name="__marshal",
                partitions=[
                    P(partition_index=0, error_code=0, timestamp=-1, offset=12),
                    P(partition_index=4, error_code=6, timestamp=-1, offset=-1),
                    P(partition_index=9, error_code=0, timestamp=-1, offset=1 << 40),
                ],
            ),
            T(name="other", partitions=[P(partition_index=1, error_code=0, timestamp=5, offset=3)]),
        ],
    ).encode()
    return struct.pack(">i", correlation) + bytes(body)


def test_list_offsets_answer_reads_as_kafka_python_reads_it() -> None:
    frame = _offsets_answer(4)
    theirs = ListOffsetsResponse[2].decode(memoryview(frame)[4:])
    expected = {
        t.name: {p.partition_index: p.offset for p in t.partitions if p.error_code == 0}
        for t in theirs.topics
    }
    assert (
        decode_list_offsets(frame, 4)
        == expected
        == {
            "__marshal": {0: 12, 9: 1 << 40},
            "other": {1: 3},
        }
    )


def test_list_offsets_answer_to_another_request_or_torn_is_refused() -> None:
    frame = _offsets_answer(4)
    with pytest.raises(ConnectionError, match="expected 5"):
        decode_list_offsets(frame, 5)
    for cut in (len(frame) - 1, len(frame) - 20, 20, 13, 6):
        with pytest.raises((ValueError, struct.error)):
            decode_list_offsets(frame[:cut], 4)


def _offsets_frame(topics: int, name: bytes, name_length: int, partitions: int) -> bytes:
    """A ListOffsets v2 answer written by hand, its counts and name as a hostile broker
    might send them, with one well-formed partition after the counts."""
    return (
        struct.pack(">iii", 4, 0, topics)
        + struct.pack(">h", name_length)
        + name
        + struct.pack(">i", partitions)
        + struct.pack(">ihqq", 0, 0, -1, 12)
    )


def test_list_offsets_answer_with_hostile_counts_or_names_is_refused_or_empty() -> None:
    # negative counts: nothing answered (the caller asks again), never an offset
    assert decode_list_offsets(_offsets_frame(-1, b"t", 1, 1), 4) == {}
    assert decode_list_offsets(_offsets_frame(1, b"t", 1, -1), 4) == {"t": {}}
    # a null or overlong name, a name that is not UTF-8, counts past the frame's end
    for frame in (
        _offsets_frame(1, b"", -1, 1),
        _offsets_frame(1, b"t", 500, 1),
        _offsets_frame(1, b"\xff\xfe", 2, 1),
        _offsets_frame(1, b"t", 1, 2**31 - 1),
        _offsets_frame(2**31 - 1, b"t", 1, 1),
    ):
        with pytest.raises((ValueError, struct.error)):
            decode_list_offsets(frame, 4)
    assert decode_list_offsets(_offsets_frame(1, b"t", 1, 1), 4) == {"t": {0: 12}}


def test_a_leader_that_answers_a_size_no_kafka_broker_sends_is_a_network_error_at_once() -> None:
    """The replay's reader meets a "leader" that answers its Fetch with an HTTP reply (its
    first bytes, read as a size, announce 1.2 GB) and then keeps the connection open. It
    closes the connection, asks again on a new one, and then raises NetworkError naming the
    size, in well under its timeout. Before, it buffered what came until the socket's
    timeout and gave a timeout."""
    import socket
    import threading
    import time

    from logmarshal.errors import NetworkError
    from logmarshal.network.fetch_client import _BatchReader

    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        for _ in range(2):  # the first attempt and the one on a new connection
            conn, _addr = server.accept()
            accepted.append(conn)
            conn.recv(65536)  # the Fetch
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    reader = _BatchReader("__marshal", (0,), lambda: server.getsockname()[:2], timeout=30.0)
    started = time.monotonic()
    try:
        with pytest.raises(NetworkError, match="announced a frame of 1213486160 bytes"):
            reader.fetch_many({0: 0}, 1 << 20, 0.0)
        assert time.monotonic() - started < 10  # not the 30 s timeout
        thread.join(5)
        assert len(accepted) == 2
    finally:
        reader.close()
        for conn in accepted:
            conn.close()
        server.close()
