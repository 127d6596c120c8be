"""Bounded requests (docs/broker.md). A 65535-partition request, a CreateTopics flood and too many topics
per request get Kafka error codes; other clients are served throughout; a creation either
completes or leaves nothing behind, also across a SIGKILL in the middle; a null array is
answered with INVALID_REQUEST (tests/storage/broker/test_nulls.py), never an unexpected error."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from kafka.protocol.producer.produce import ProduceResponse

from logmarshal.localbroker import LocalBroker
from storage import DataDir, LimitExceeded
from storage._errors import InvalidConfig
from storage.broker import BrokerConfig, BrokerThread
from tests.storage.broker.helpers import RawClient, batch, produce_request

INVALID_PARTITIONS, POLICY_VIOLATION = 37, 44


def _grow(client: RawClient, topic: str, count: int, validate_only: bool = False) -> int:
    r = CreatePartitionsRequest[0]
    req = r(
        topics=[r.CreatePartitionsTopic(name=topic, count=count, assignments=None)],
        timeout_ms=10_000,
        validate_only=validate_only,
    )
    return client.call(req, CreatePartitionsResponse).results[0].error_code


def _create(
    client: RawClient, names: list[str], partitions: int = 1, validate_only: bool = False
) -> list[int]:
    r = CreateTopicsRequest[4]
    req = r(
        topics=[
            r.CreatableTopic(
                name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]
            )
            for n in names
        ],
        timeout_ms=10_000,
        validate_only=validate_only,
    )
    return [t.error_code for t in client.call(req, CreateTopicsResponse).topics]


def _partition_dirs(data: Path, topic: str) -> int:
    return sum(1 for e in data.iterdir() if e.is_dir() and e.name.rsplit("-", 1)[0] == topic)


def _metadata_partitions(data: Path, topic: str) -> int:
    return json.loads((data / "topics.json").read_text())["topics"][topic]["partitions"]


def test_65535_partitions_refused_and_nothing_created(broker, tmp_path) -> None:
    with RawClient(broker.address) as client:
        assert _grow(client, "t", 65535) == INVALID_PARTITIONS
        # the broker still serves this client and others
        with RawClient(broker.address) as other:
            resp = other.call(produce_request("t", 0, batch()), ProduceResponse)
            assert resp.responses[0].partition_responses[0].error_code == 0
    data = tmp_path / "data"
    assert _partition_dirs(data, "t") == 2


def test_create_topics_flood_hits_the_budget_while_others_are_served(tmp_path) -> None:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    cfg = BrokerConfig(data_dir=data, port=0, max_partitions=60)
    with BrokerThread(cfg) as running:
        produced: list[int] = []
        stop = threading.Event()

        def other_client() -> None:
            with RawClient(running.address) as c:
                while not stop.is_set():
                    resp = c.call(produce_request("t", 0, batch(1)), ProduceResponse)
                    produced.append(resp.responses[0].partition_responses[0].error_code)

        thread = threading.Thread(target=other_client)
        thread.start()
        try:
            codes: list[int] = []
            with RawClient(running.address) as client:
                for i in range(40):
                    codes.extend(_create(client, [f"flood{i}"], partitions=3))
                too_many = _create(client, [f"bulk{i}" for i in range(101)])
        finally:
            stop.set()
            thread.join(30)
        assert codes[:19] == [0] * 19  # 1 + 19 * 3 = 58 partitions fit in 60
        assert set(codes[19:]) == {POLICY_VIOLATION}
        assert too_many == [POLICY_VIOLATION] * 101
        assert produced and set(produced) == {0}
    with DataDir(data) as d:
        assert len(d.topics()) == 20 and not any(n.startswith("bulk") for n in d.topics())
    assert not any(e.name.startswith(("flood19-", "bulk")) for e in data.iterdir())


def test_datadir_limits(tmp_path) -> None:
    with DataDir(tmp_path / "d", max_partitions=5, max_partitions_per_topic=4) as d:
        with pytest.raises(InvalidConfig):
            d.create_topic("a", 5)
        d.create_topic("a", 3)
        with pytest.raises(LimitExceeded):
            d.create_topic("b", 3)
        with pytest.raises(InvalidConfig):
            d.add_partitions("a", 5)
        d.create_topic("c", 2)
        with pytest.raises(LimitExceeded):
            d.add_partitions("a", 4)
        assert d.describe("a").partitions == 3
    assert _partition_dirs(tmp_path / "d", "b") == 0


def test_failed_creation_leaves_no_directories(tmp_path, monkeypatch) -> None:
    with DataDir(tmp_path / "d") as d:
        d.create_topic("a", 2)
        real = d._open_log
        calls = {"n": 0}

        def failing(name, p, config):
            calls["n"] += 1
            if calls["n"] == 5:
                raise OSError(24, "Too many open files")
            return real(name, p, config)

        monkeypatch.setattr(d, "_open_log", failing)
        with pytest.raises(OSError):
            d.add_partitions("a", 10)
        assert d.describe("a").partitions == 2
        with pytest.raises(OSError):
            calls["n"] = 2
            d.create_topic("b", 6)
    assert _partition_dirs(tmp_path / "d", "a") == 2
    assert _partition_dirs(tmp_path / "d", "b") == 0


def test_sigkill_in_the_middle_of_a_creation_leaves_metadata_and_disk_agreeing(tmp_path) -> None:
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("big", 1)
    broker = LocalBroker(tmp_path, data_dir=data)
    with broker:
        assert "listening" in broker.first_line()
        client = RawClient(broker.address)
        client.send_raw(
            client.request_bytes(
                CreatePartitionsRequest[0](
                    topics=[
                        CreatePartitionsRequest[0].CreatePartitionsTopic(
                            name="big", count=4000, assignments=None
                        )
                    ],
                    timeout_ms=60_000,
                    validate_only=False,
                )
            )
        )
        deadline = time.monotonic() + 30
        while _partition_dirs(data, "big") < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.kill()
        client.close()
    assert _partition_dirs(data, "big") >= 200  # the kill really landed mid-creation
    with DataDir(data) as d:
        count = d.describe("big").partitions
    assert count in (1, 4000)
    assert _partition_dirs(data, "big") == count == _metadata_partitions(data, "big")


def test_null_array_is_answered_as_invalid_not_unexpected(broker, caplog) -> None:
    """A null list of topics: an answer (no entries to mirror), the connection stays."""
    r = CreateTopicsRequest[4]
    req = r(topics=None, timeout_ms=1000, validate_only=False)
    with (
        caplog.at_level(logging.INFO, logger="storage.broker"),
        RawClient(broker.address) as client,
    ):
        response = client.call(req, CreateTopicsResponse)
        assert response.topics == []
        assert _create(client, ["after"]) == [0]
    assert "topics is null" in caplog.text
    assert "unexpected" not in caplog.text


def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_buffers_of_a_closed_connection_are_given_back(tmp_path) -> None:
    """A connection that declared a 100 MiB frame, sent 20 MiB and left used to
    leave the broker 20 MiB bigger each time."""
    import socket
    import struct

    with LocalBroker(tmp_path, data_dir=tmp_path / "d") as broker:
        assert "listening" in broker.first_line()
        pid = broker.pid
        assert pid is not None
        with RawClient(broker.address) as client:  # warm up the request path
            assert _create(client, ["warm"]) == [0]
        before = _rss_mib(pid)
        for _ in range(3):
            with socket.create_connection(broker.address) as s:
                s.sendall(struct.pack(">i", 100 << 20) + b"\0" * 10 + b"x" * (20 << 20))
                time.sleep(0.3)  # let the broker take the bytes in before the peer leaves
        deadline = time.monotonic() + 10
        while _rss_mib(pid) > before + 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _rss_mib(pid) <= before + 10  # not +60 MiB
        with RawClient(broker.address) as client:
            assert _create(client, ["after"]) == [0]


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_an_idle_partition_holds_one_descriptor(tmp_path) -> None:
    """Index files are opened at their first entry: 100 never-written partitions hold 100
    descriptors (their log files), not 300."""
    with DataDir(tmp_path / "d") as d:
        before = len(os.listdir("/proc/self/fd"))
        d.create_topic("idle", 100)
        assert len(os.listdir("/proc/self/fd")) - before <= 100


def test_a_client_that_never_takes_its_answer_is_closed(tmp_path, caplog) -> None:
    """Ten sockets each sent one Fetch of a 50 MB partition and never read: the broker held
    every answer in memory (63 MB -> 1 GB resident) for as long as they stayed connected,
    well past its request timeout (a helper's attack). An answer not taken within
    ``response_timeout`` (librdkafka's socket.timeout.ms, 60 s by default) now closes the
    connection; other clients are served meanwhile."""
    import socket

    from storage._kafka_framing import encode_request
    from tests.storage.broker.helpers import fetch_request

    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("big", 1)
        plog = d.partition("big", 0)
        for i in range(24):  # 24 MB: more than the kernel buffers both ends of the socket
            plog.append(_one_mb_batch(i))
    config = BrokerConfig(data_dir=data, port=0, response_timeout=1.0)
    with BrokerThread(config) as running:
        request = fetch_request("big", 0, 0)
        request.max_bytes = 64 << 20
        request.topics[0].partitions[0].partition_max_bytes = 64 << 20
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.connect(running.address)
        with caplog.at_level(logging.WARNING, logger="storage.broker.server"):
            sock.sendall(encode_request(request, 1, "stuck"))
            with RawClient(running.address) as other:  # served while the first one hangs
                produced = other.call(produce_request("big", 0, batch(3)), ProduceResponse)
                assert produced.responses[0].partition_responses[0].error_code == 0
            deadline = time.monotonic() + 20
            while "was not taken within" not in caplog.text:
                assert time.monotonic() < deadline, "the stuck connection was never closed"
                time.sleep(0.05)
        sock.settimeout(10)
        received = 0
        try:
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        sock.close()
        assert received < 24 << 20  # closed before the answer was sent


def _one_mb_batch(i: int) -> bytes:
    from storage import NewRecord, encode_batch

    return encode_batch([NewRecord(os.urandom(1_000_000), key=b"%d" % i, timestamp=1)])


def test_a_fetch_reads_each_partition_once_and_waits_a_bounded_time(tmp_path, monkeypatch):
    """A helper's attack (2026-12-05): Fetches that listed one partition 200,000 times with a
    24-day wait and min_bytes, from clients that then went away, held 1 GB through their
    long-polls, and each later append to that partition re-read every listing on the event
    loop (11.7 s of stall for one record). A Fetch now reads each partition once, as Kafka
    keeps them in a map, and waits at most FETCH_MAX_WAIT_S whatever it asks."""
    from kafka.protocol.consumer.fetch import FetchResponse

    from storage.broker import handlers
    from tests.storage.broker.helpers import fetch_request

    monkeypatch.setattr(handlers, "FETCH_MAX_WAIT_S", 0.5)
    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as running:
        with RawClient(running.address) as client:
            client.call(produce_request("t", 0, batch(2)), ProduceResponse)
            request = fetch_request("t", 0, 0, max_wait_ms=0x7FFFFFFF, min_bytes=0x7FFFFFFF)
            one = request.topics[0].partitions[0]
            request.topics[0].partitions = [one] * 20_000
            started = time.monotonic()
            answer = client.call(request, FetchResponse)
            waited = time.monotonic() - started
        parts = [p for t in answer.responses for p in t.partitions]
        assert [(p.partition_index, p.error_code, p.high_watermark) for p in parts] == [(0, 0, 2)]
        assert parts[0].records  # (below min_bytes, answered at the bound with what there is)
        assert waited < 10, waited  # (the bound is 0.5 s here; it waited 24 days before)


def test_a_metadata_question_names_each_topic_once_and_a_large_one_is_not_kept(tmp_path):
    """A helper's attack (2026-12-05): Metadata requests naming a million topics (one name
    repeated) were answered a million times over and their answers kept, 150 MB each, 64 of
    them. Names are now taken once each, as Kafka takes them (a set), and an answer to a
    question of more than 100 names is not kept."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as running:
        kept = running.server.handlers._metadata_answers
        r = MetadataRequest[1]
        with RawClient(running.address) as client:
            names = ["t"] * 20_000 + [f"nope{i}" for i in range(150)]
            answer = client.call(r(topics=[r.MetadataRequestTopic(name=n) for n in names]),
                                 MetadataResponse)  # fmt: skip
            got = [(t.name, t.error_code, len(t.partitions)) for t in answer.topics]
            assert got[0] == ("t", 0, 1)
            assert got[1:] == [(f"nope{i}", 3, 0) for i in range(150)]
            assert len(kept) == 0
            small = client.call(r(topics=[r.MetadataRequestTopic(name="t")]), MetadataResponse)
            assert [t.name for t in small.topics] == ["t"] and len(kept) == 1


@pytest.mark.parametrize("codec", [0, 4])
def test_compressed_records_are_checked_off_the_event_loop(tmp_path, monkeypatch, codec):
    """A helper's attack (2026-12-05): an acks=1 Produce of 250 zstd batches of 2 KB, each
    60 MiB of zeros decompressed, held the event loop (every other client) 10 s while its
    records were checked. Compressed records are now appended, and so checked, on the
    worker threads, as acks=all ones always were; uncompressed acks=1 ones stay on the loop."""
    from storage import NewRecord, encode_batch
    from storage._records import Compression
    from storage.broker import handlers

    threads: list[str] = []
    real = handlers._append_all

    def noting(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(handlers, "_append_all", noting)
    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    records = encode_batch(
        [NewRecord(b"\0" * 100_000, timestamp=1)], compression=Compression(codec)
    )
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as running:
        with RawClient(running.address) as client:
            answer = client.call(produce_request("t", 0, records, acks=1), ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == 0
        loop_thread = running._thread.name  # (the event loop's)
    assert len(threads) == 1
    on_loop = threads[0] == loop_thread
    assert on_loop == (codec == 0), (threads, loop_thread)


def test_validate_only_answers_what_the_change_would(tmp_path):
    """A helper's attack (2026-12-05): CreateTopics with validate_only answered NONE for the
    names 'a/b', '..' and one of 300 characters, and for 1,000,000 partitions, and
    CreatePartitions with validate_only for 10**9 partitions, which the change itself
    refuses. validate_only now makes every check the change makes, and changes nothing."""
    data = tmp_path / "d"
    with DataDir(data) as d:
        d.create_topic("t", 1)
    cases = [(["a/b"], 1), ([".."], 1), (["x" * 300], 1), (["big"], 1_000_000), (["ok"], 3)]
    with (
        BrokerThread(BrokerConfig(data_dir=data, port=0)) as running,
        RawClient(running.address) as client,
    ):
        for names, partitions in cases:
            asked = _create(client, names, partitions, validate_only=True)
            assert asked == _create(client, names, partitions), (names, partitions)
        assert _create(client, ["ok"], 3) == [36]  # TOPIC_ALREADY_EXISTS: made above
        assert _create(client, ["fresh"], 2, validate_only=True) == [0]
        assert _create(client, ["t"], 2, validate_only=True) == [36]
        for count in (10**9, 1, 2):
            asked = _grow(client, "t", count, validate_only=True)
            assert asked == (0 if count == 2 else INVALID_PARTITIONS), count
    with DataDir(data) as d:  # validate_only changed nothing
        assert sorted(d.topics()) == ["ok", "t"] and d.partition_count("t") == 1
