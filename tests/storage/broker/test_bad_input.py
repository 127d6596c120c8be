"""Bad input affects only the connection that sent it; the broker keeps serving everyone."""

from __future__ import annotations

import os
import random
import struct

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse

from storage import DataDir, NewRecord, TopicConfig, encode_batch
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.errors import ErrorCode

from .helpers import RawClient, batch, fetch_request, produce_request


def _still_serving(broker) -> None:
    with RawClient(broker.address) as client:
        response = client.call(MetadataRequest[1](topics=None), MetadataResponse)
        assert {t.name for t in response.topics} == {"t", "lat"}


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_close_only_that_connection(broker, seed):
    rng = random.Random(seed)
    with RawClient(broker.address) as bystander, RawClient(broker.address) as attacker:
        attacker.send_raw(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
        # Whatever the garbage decodes to, the bystander is served meanwhile.
        response = bystander.call(MetadataRequest[1](topics=None), MetadataResponse)
        assert response.brokers[0].port == broker.address[1]
    _still_serving(broker)


def test_garbage_body_with_valid_frame_closes_connection(broker):
    with RawClient(broker.address) as client:
        # Produce v8: no transactional id, acks -1, then 1000 topics promised, one torn name.
        body = struct.pack(">hhih", 0, 8, 1, 4) + b"test" + struct.pack(">hhii", -1, -1, 5000, 1000)
        body += b"\x00\x05ab"
        client.send_raw(_frame(body))
        assert client.is_closed_by_peer()
    _still_serving(broker)


@pytest.mark.parametrize("size", [-1, 0, 3, (8 << 20) + 1, 0x7FFFFFFF])
def test_bad_frame_sizes_close_connection(broker, size):
    with RawClient(broker.address) as client:
        client.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert client.is_closed_by_peer()
    _still_serving(broker)


def test_truncated_frame_then_disconnect(broker):
    request = RawClient.request_bytes(RawClient.__new__(RawClient), ApiVersionsRequest[0](), 1)
    for cut in (1, 3, 4, 7, len(request) - 1):
        with RawClient(broker.address) as client:
            client.send_raw(request[:cut])
    _still_serving(broker)


def test_half_sent_request_does_not_block_others(broker):
    with RawClient(broker.address) as stuck:
        stuck.send_raw(struct.pack(">i", 1000) + b"\x00\x03")  # promises 1000 bytes, sends 2
        _still_serving(broker)


def test_unknown_api_key_closes_connection(broker):
    with RawClient(broker.address) as client:
        client.send_raw(_frame(struct.pack(">hhih", 9999, 0, 7, -1)))
        assert client.is_closed_by_peer()
    _still_serving(broker)


def test_unsupported_version_closes_connection(broker):
    with RawClient(broker.address) as client:
        client.send_raw(_frame(struct.pack(">hhih", 0, 99, 7, -1)))  # Produce v99
        assert client.is_closed_by_peer()
    _still_serving(broker)


def test_unsupported_api_versions_version_gets_v0_error_body(broker):
    with RawClient(broker.address) as client:
        client.send_raw(_frame(struct.pack(">hhih", 18, 42, 7, -1) + b"\x00"))
        frame = client.recv_frame()
        correlation_id, error, count = struct.unpack_from(">ihi", frame, 0)
        assert correlation_id == 7
        assert error == ErrorCode.UNSUPPORTED_VERSION
        keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0] for i in range(count)}
        assert {0, 1, 2, 3, 18, 19, 22} <= keys


def test_produce_to_unknown_topic_and_partition(broker):
    with RawClient(broker.address) as client:
        for topic, partition in (("nope", 0), ("t", 7)):
            response = client.call(produce_request(topic, partition, batch()), ProduceResponse)
            part = response.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_corrupt_batch(broker):
    data = bytearray(batch())
    data[-1] ^= 0xFF  # breaks the CRC
    with RawClient(broker.address) as client:
        response = client.call(produce_request("t", 0, bytes(data)), ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        response = client.call(produce_request("t", 0, b"\x00" * 30), ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    _still_serving(broker)


def test_produce_lz4_with_linked_blocks_is_corrupt_and_nothing_is_stored(broker, monkeypatch):
    """Kafka's readers take only LZ4 frames of independent blocks: a batch of linked ones,
    stored, stops every Java consumer of the partition at it for good (a helper's fuzz).
    Refused as Kafka's broker refuses it; what was stored before stays readable."""
    import lz4.frame

    from storage import Compression

    records = [NewRecord(os.urandom(40_000), timestamp=1) for _ in range(4)]  # > one block
    real = lz4.frame.compress
    with monkeypatch.context() as m:
        m.setattr(lz4.frame, "compress", lambda raw, **_: real(raw, block_linked=True))
        linked = encode_batch(records, compression=Compression.LZ4)
    with RawClient(broker.address) as client:
        before = client.call(produce_request("t", 0, batch()), ProduceResponse)
        assert before.responses[0].partition_responses[0].error_code == 0
        response = client.call(produce_request("t", 0, linked), ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
        ok = client.call(
            produce_request("t", 0, encode_batch(records, compression=Compression.LZ4)),
            ProduceResponse,
        )
        part = ok.responses[0].partition_responses[0]
        assert (
            part.error_code == 0
            and part.base_offset == before.responses[0].partition_responses[0].base_offset + 3
        )
    _still_serving(broker)


_READ_ALL = """
import sys
import time

import confluent_kafka as ck

c = ck.Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g", "enable.auto.commit": False})
c.assign([ck.TopicPartition("t", 0, int(sys.argv[2]))])
values, deadline = [], time.monotonic() + 20
while time.monotonic() < deadline and len(values) < int(sys.argv[3]):
    m = c.poll(0.2)
    if m is not None and not m.error():
        values.append(m.value().decode())
c.close()
print(",".join(values))
"""


@pytest.mark.parametrize("cut", [0, 40])
def test_gzip_of_two_members_is_read_whole_by_librdkafka(broker, cut):
    """A gzip payload of two members (RFC 1952 allows it; Kafka's broker takes it and Java
    reads it) made a librdkafka consumer abort when the first member was empty (an assertion
    in rd_slice_init_full), and read half of the batch silently otherwise (a helper's fuzz).
    The broker stores it as one member: a confluent-kafka consumer process reads it all."""
    import subprocess
    import sys

    from tests.storage.corruptions import gzip_in_members

    records = [NewRecord(b"v%d" % i, key=b"k", timestamp=1) for i in range(10)]
    with RawClient(broker.address) as client:
        answer = client.call(
            produce_request("t", 0, gzip_in_members(encode_batch(records), cut)), ProduceResponse
        )
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0
    bootstrap = f"{broker.address[0]}:{broker.address[1]}"
    done = subprocess.run(
        [sys.executable, "-c", _READ_ALL, bootstrap, str(part.base_offset), "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == ",".join(f"v{i}" for i in range(10))


def test_produce_too_large(broker):
    records = encode_batch([NewRecord(os.urandom(2 << 20), timestamp=1)])
    with RawClient(broker.address) as client:
        response = client.call(produce_request("t", 0, records), ProduceResponse)
        assert (
            response.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
        )


def test_produce_larger_than_a_segment_is_kafkas_record_list_too_large(tmp_path):
    """A batch within ``max.message.bytes`` but over ``segment.bytes`` gets Kafka's code for
    it (RecordBatchTooLargeException: RECORD_LIST_TOO_LARGE, 18), as librdkafka and the Java
    client expect, and nothing is stored."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("small", 1, TopicConfig(segment_bytes=4096))
    records = encode_batch([NewRecord(os.urandom(6000), timestamp=1)])
    with (
        BrokerThread(BrokerConfig(data_dir=data, port=0)) as running,
        RawClient(running.address) as client,
    ):
        response = client.call(produce_request("small", 0, records), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.RECORD_LIST_TOO_LARGE == 18
        small = encode_batch([NewRecord(b"ok", timestamp=1)])
        response = client.call(produce_request("small", 0, small), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 0)


def test_bad_acks(broker):
    with RawClient(broker.address) as client:
        response = client.call(produce_request("t", 0, batch(), acks=5), ProduceResponse)
        assert (
            response.responses[0].partition_responses[0].error_code
            == ErrorCode.INVALID_REQUIRED_ACKS
        )


def test_fetch_out_of_range_and_unknown(broker):
    with RawClient(broker.address) as client:
        client.call(produce_request("t", 1, batch(3)), ProduceResponse)
        response = client.call(fetch_request("t", 1, 10), FetchResponse)
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert part.high_watermark == 3
        response = client.call(fetch_request("nope", 0, 0), FetchResponse)
        assert (
            response.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    _still_serving(broker)


def test_a_fetch_cannot_make_the_broker_build_an_answer_past_fetch_max_bytes(broker):
    """A Fetch listing a partition 40 times, each up to 2 GiB: the answer is bounded
    by Kafka's fetch.max.bytes (55 MiB), not 200 copies of the partition. It built a 1.6 GB
    answer (6.3 GB resident), and past 2 GiB failed packing it (a helper's fuzz of the
    broker). A well-formed answer, and the broker serves on."""
    from storage.broker.handlers import FETCH_MAX_BYTES

    records = encode_batch([NewRecord(os.urandom(900_000), timestamp=1)])
    with RawClient(broker.address) as client:
        for _ in range(3):
            produced = client.call(produce_request("t", 0, records), ProduceResponse)
            assert produced.responses[0].partition_responses[0].error_code == 0
        request = fetch_request("t", 0, 0)
        one = request.topics[0].partitions[0]
        one.partition_max_bytes = 0x7FFFFFFF
        request.topics[0].partitions = [one] * 40  # 40 x 2.7 MB unbounded
        request.max_bytes = 0x7FFFFFFF
        response = client.call(request, FetchResponse)
        got = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        assert 2_700_000 <= got <= FETCH_MAX_BYTES + 1_000_000
    _still_serving(broker)


@pytest.mark.parametrize(
    ("broker_id", "error"),
    [(-1, ValueError), (1 << 31, ValueError), (True, TypeError), ("0", TypeError)],
)
def test_a_broker_id_is_a_kafka_node_id(tmp_path, broker_id, error):
    """node.id is an int32 of 0 or more; a broker of id -1 was started (-1 is "no broker"
    in Kafka's answers)."""
    with pytest.raises(error, match="broker_id"):
        BrokerConfig(data_dir=tmp_path, broker_id=broker_id)
    assert BrokerConfig(data_dir=tmp_path, broker_id=(1 << 31) - 1).broker_id == (1 << 31) - 1


def test_a_disk_error_in_a_topic_admin_request_is_kafkas_code_not_a_dropped_client(
    broker, monkeypatch
) -> None:
    """An OSError of the data directory's (a file name too long, a full or read-only disk)
    in CreateTopics or DeleteTopics was taken for the peer's connection error: the broker
    closed the connection without a word (an attack on the broker, 2026-12-06). It is
    KAFKA_STORAGE_ERROR now, and the connection serves the next request."""
    import errno

    from kafka.protocol.admin.topics import (
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
    )

    from storage import DataDir
    from storage.broker.errors import ErrorCode

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DataDir, "delete_topic", full)
    monkeypatch.setattr(DataDir, "create_topic", full)
    with RawClient(broker.address) as client:
        deleted = client.call(
            DeleteTopicsRequest[3](topic_names=["t"], timeout_ms=5000), DeleteTopicsResponse
        )
        assert deleted.responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        r = CreateTopicsRequest[4]
        topic = r.CreatableTopic(
            name="new", num_partitions=1, replication_factor=1, assignments=[], configs=[]
        )
        created = client.call(
            r(topics=[topic], timeout_ms=5000, validate_only=False), CreateTopicsResponse
        )
        assert created.topics[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "No space left" in created.topics[0].error_message
