"""The broker's answers, API by API, seen through raw requests."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse

from logmarshal.localbroker import LocalBroker
from storage import DataDir, NewRecord, decode_records, encode_batch
from storage._records import TimestampType, crc32c, read_header
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.errors import ErrorCode

from .helpers import RawClient, batch, fetch_request, free_port, produce_request


def test_api_versions_v0_and_v3(broker):
    with RawClient(broker.address) as client:
        for version in (0, 3):
            response = client.call(ApiVersionsRequest[version](), ApiVersionsResponse)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert response.error_code == 0
            assert ranges[0][0] <= 3 <= ranges[0][1]  # Produce 3 (Debian's kcat)
            assert ranges[1][0] <= 4 <= ranges[1][1]  # Fetch 4
            assert ranges[3][0] <= 4 <= ranges[3][1]  # Metadata 4 (kafka-python's probe)


def test_metadata_advertises_bound_address(broker):
    with RawClient(broker.address) as client:
        response = client.call(
            MetadataRequest[8](
                topics=None,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ),
            MetadataResponse,
        )
        (only,) = response.brokers
        assert (only.host, only.port) == broker.address
        assert response.controller_id == only.node_id
        topics = {t.name: len(t.partitions) for t in response.topics}
        assert topics == {"t": 2, "lat": 1}


def test_metadata_answers_follow_topic_changes(broker):
    """Metadata answers are kept while nothing changes: each still carries its own
    correlation id, and a new topic, more partitions or a deleted topic show at once."""

    def ask(client, topics=None):
        names = (
            None
            if topics is None
            else [MetadataRequest[8].MetadataRequestTopic(name=n) for n in topics]
        )
        response = client.call(
            MetadataRequest[8](
                topics=names,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ),
            MetadataResponse,
        )  # call() checks the correlation id
        return {t.name: (t.error_code, len(t.partitions)) for t in response.topics}

    data_dir = broker.server.handlers.data_dir
    with RawClient(broker.address) as client:
        assert ask(client) == ask(client) == {"t": (0, 2), "lat": (0, 1)}
        assert ask(client, ["t", "new"]) == {"t": (0, 2), "new": (3, 0)}
        data_dir.create_topic("new", 1)
        assert ask(client) == {"t": (0, 2), "lat": (0, 1), "new": (0, 1)}
        assert ask(client, ["t", "new"]) == {"t": (0, 2), "new": (0, 1)}
        data_dir.add_partitions("new", 3)
        assert ask(client, ["t", "new"]) == {"t": (0, 2), "new": (0, 3)}
        data_dir.delete_topic("new")
        assert ask(client) == {"t": (0, 2), "lat": (0, 1)}
        assert ask(client, ["new"]) == {"new": (3, 0)}


def test_produce_fetch_round_trip_served_as_stored(broker):
    with RawClient(broker.address) as client:
        sent = batch(5)
        response = client.call(produce_request("t", 0, sent, acks=1), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 0)
        response = client.call(fetch_request("t", 0, 0), FetchResponse)
        fetched = response.responses[0].partitions[0]
        assert fetched.high_watermark == 5
        assert bytes(fetched.records)[8:] == sent[8:]  # only the base offset may differ
        assert [r.value for r in decode_records(fetched.records)] == [b"v%d" % i for i in range(5)]


def test_log_append_time_is_assigned_and_returned(broker):
    with RawClient(broker.address) as client:
        before = int(time.time() * 1000)
        response = client.call(produce_request("lat", 0, batch(2, ts=1)), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert part.log_append_time_ms >= before
        fetched = client.call(fetch_request("lat", 0, 0), FetchResponse).responses[0].partitions[0]
        header = read_header(fetched.records)
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert {r.timestamp for r in decode_records(fetched.records)} == {part.log_append_time_ms}


def test_acks_zero_sends_no_response(broker):
    with RawClient(broker.address) as client:
        client.send_raw(client.request_bytes(produce_request("t", 1, batch(2), acks=0)))
        response = client.call(fetch_request("t", 1, 0, max_wait_ms=2000), FetchResponse)
        assert response.responses[0].partitions[0].high_watermark == 2  # the next frame is ours


def test_fetch_long_poll_waits_and_wakes(broker):
    with RawClient(broker.address) as client:
        start = time.monotonic()
        client.call(fetch_request("t", 0, 0, max_wait_ms=300), FetchResponse)
        assert 0.25 <= time.monotonic() - start < 2.0

        def later() -> None:
            time.sleep(0.3)
            with RawClient(broker.address) as producer:
                producer.call(produce_request("t", 0, batch(1)), ProduceResponse)

        thread = threading.Thread(target=later)
        start = time.monotonic()
        thread.start()
        response = client.call(fetch_request("t", 0, 0, max_wait_ms=10_000), FetchResponse)
        elapsed = time.monotonic() - start
        thread.join()
        assert response.responses[0].partitions[0].high_watermark == 1
        assert elapsed < 3.0


def test_list_offsets_earliest_latest_and_time(broker):
    with RawClient(broker.address) as client:
        client.call(produce_request("t", 0, batch(3, ts=1000)), ProduceResponse)
        client.call(produce_request("t", 0, batch(3, start=3, ts=5000)), ProduceResponse)
        r = ListOffsetsRequest[5]

        def ask(ts: int) -> tuple[int, int, int]:
            request = r(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    r.ListOffsetsTopic(
                        name="t",
                        partitions=[
                            r.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=0, current_leader_epoch=-1, timestamp=ts
                            )
                        ],
                    )
                ],
            )
            part = client.call(request, ListOffsetsResponse).topics[0].partitions[0]
            return part.error_code, part.offset, part.timestamp

        assert ask(-2)[:2] == (0, 0)
        assert ask(-1)[:2] == (0, 6)
        assert ask(3000) == (0, 3, 5000)
        assert ask(9000)[:2] == (0, -1)


def test_create_topics_errors(broker):
    r = CreateTopicsRequest[4]

    def create(name: str, partitions: int = 1, rf: int = -1, configs=()):
        topic = r.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            assignments=[],
            configs=[r.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in configs],
        )
        request = r(topics=[topic], timeout_ms=5000, validate_only=False)
        with RawClient(broker.address) as client:
            return client.call(request, CreateTopicsResponse).topics[0].error_code

    assert create("fresh", 3) == 0
    assert create("fresh") == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create("bad/name") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create("evil\n") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create("x", rf=3) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create("y", configs=[("no.such.config", "1")]) == ErrorCode.INVALID_CONFIG
    assert create("z", 0) == ErrorCode.INVALID_PARTITIONS
    # a bad value of a known config was INVALID_PARTITIONS (an attack on the wire, 2026-12-06)
    for bad in (("retention.ms", "abc"), ("cleanup.policy", "bogus"), ("segment.bytes", "1")):
        assert create("w", configs=[bad]) == ErrorCode.INVALID_CONFIG, bad


def test_metadata_of_a_name_no_topic_can_have_is_invalid_topic(broker):
    """It was UNKNOWN_TOPIC_OR_PARTITION, which clients retry; Kafka answers
    INVALID_TOPIC_EXCEPTION, on which they fail at once."""
    names = ["", "..", "a/b", "x" * 300, "no-such-topic"]
    with RawClient(broker.address) as client:
        response = client.call(
            MetadataRequest[8](
                topics=[MetadataRequest[8].MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ),
            MetadataResponse,
        )
    codes = {t.name: t.error_code for t in response.topics}
    assert codes.pop("no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert set(codes.values()) == {ErrorCode.INVALID_TOPIC_EXCEPTION}, codes


def test_a_producer_cannot_stamp_log_append_time_on_a_create_time_topic(broker):
    """A batch saying LogAppendTime (attribute 0x08) was stored as sent on a CreateTime
    topic: its maxTimestamp (1 here, the records' now) became every record's time."""
    now = int(time.time() * 1000)
    lying = bytearray(
        encode_batch([NewRecord(b"v", timestamp=now)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    lying[35:43] = (1).to_bytes(8, "big")  # maxTimestamp (inside the CRC: computed again)
    lying[17:21] = crc32c(bytes(lying[21:])).to_bytes(4, "big")
    with RawClient(broker.address) as client:
        response = client.call(produce_request("t", 0, bytes(lying)), ProduceResponse)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.INVALID_RECORD
        ends = client.call(fetch_request("t", 0, 0), FetchResponse).responses[0].partitions[0]
        assert ends.high_watermark == 0


def test_subprocess_sigterm_flushes_and_exits_cleanly(tmp_path):
    data = tmp_path / "data"
    with LocalBroker(tmp_path, data_dir=data) as broker:
        assert broker.first_line().startswith("listening on 127.0.0.1:")
        with RawClient(broker.address) as client:
            r = CreateTopicsRequest[4]
            client.call(
                r(
                    topics=[
                        r.CreatableTopic(
                            name="s",
                            num_partitions=1,
                            replication_factor=1,
                            assignments=[],
                            configs=[],
                        )
                    ],
                    timeout_ms=5000,
                    validate_only=False,
                ),
                CreateTopicsResponse,
            )
            client.call(produce_request("s", 0, batch(4), acks=1), ProduceResponse)
        assert broker.stop(timeout=20) == 0  # SIGTERM
    with DataDir(data) as d:
        assert d.partition("s", 0).log_end_offset == 4


def test_tls(tmp_path):
    import ssl

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
    )
    if made.returncode != 0:
        import pytest

        pytest.skip("openssl cannot make a test certificate here")
    config = BrokerConfig(data_dir=tmp_path / "d", port=0, tls_cert=str(cert), tls_key=str(key))
    with BrokerThread(config) as running:
        ctx = ssl.create_default_context(cafile=str(cert))
        import socket

        with (
            socket.create_connection(running.address, timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            client = RawClient.__new__(RawClient)
            client.sock, client._correlation = tls, 0
            assert (
                client.call(
                    ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                    ApiVersionsResponse,
                ).error_code
                == 0
            )


def test_port_in_use_is_a_clean_error(tmp_path, broker):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "logmarshal",
            "--data-dir",
            str(tmp_path / "other"),
            "broker",
            "start",
            "--listen",
            f"127.0.0.1:{broker.address[1]}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
    assert free_port() > 0


@pytest.mark.parametrize("version", [4, 5, 11])
def test_fetch_answers_decode_at_every_version(broker, version) -> None:
    """Found while hardening the broker: Fetch v4 answers carried v5's log start offset (8 bytes a
    partition more than the v4 schema), so a v4 client read garbage after the first field."""
    with RawClient(broker.address) as client:
        client.call(produce_request("t", 0, batch(3)), ProduceResponse)
        fetched = client.call(fetch_request("t", 0, 0, version=version), FetchResponse)
        part = fetched.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, 3)
        assert [r.offset for r in decode_records(part.records)] == [0, 1, 2]
        assert client.call(MetadataRequest[1](topics=None), MetadataResponse).topics
