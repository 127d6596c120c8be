"""logmarshal itself over the network: NetworkCluster, Producer, Marshaler, CLI --bootstrap."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from logmarshal import Marshaler, Producer, connect
from logmarshal import _coordlog as coordlog
from logmarshal import _direct as direct
from logmarshal.consumer.writer import CoordinationWriter
from logmarshal.core import WriteFailed, Written
from logmarshal.errors import (
    InvalidTopicName,
    NetworkError,
    OffsetOutOfRange,
    RecordTooLarge,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from logmarshal.marshaler import COORDINATION_TOPIC, CoordinationTopicError
from logmarshal.network import NetworkCluster
from logmarshal.network import cluster as cluster_module
from storage import NewRecord
from storage._records import decode_columns_from
from tests.logmarshal.consumer.test_writer import _write


@pytest.fixture
def cluster(broker):
    with connect(bootstrap=broker.bootstrap) as opened:
        yield opened


def test_cluster_interface(cluster):
    created = cluster.create_topic("events", 2, {"retention.ms": "60000"})
    assert created.partitions == 2 and created.config["retention.ms"] == "60000"
    assert "events" in cluster.topics()
    with pytest.raises(TopicExists):
        cluster.create_topic("events", 1)
    with pytest.raises(InvalidTopicName):
        cluster.create_topic("no/slash")
    records = [
        NewRecord(b"v%d" % i, key=b"k", headers=[("h", b"x")], timestamp=1000 + i) for i in range(5)
    ]
    result = cluster.produce("events", 1, records, durable=True)
    assert (result.base_offset, result.last_offset, result.log_append_time) == (0, 4, -1)
    messages = cluster.fetch("events", 1, 2)  # max_wait=0 still returns stored records
    assert [(m.offset, m.value, m.timestamp, m.headers) for m in messages] == [
        (i, b"v%d" % i, 1000 + i, (("h", b"x"),)) for i in range(2, 5)
    ]
    assert cluster.fetch("events", 1, 5, max_wait=0.2) == []
    with pytest.raises(OffsetOutOfRange):
        cluster.fetch("events", 1, 99)
    assert (cluster.earliest_offset("events", 1), cluster.latest_offset("events", 1)) == (0, 5)
    assert cluster.offset_for_time("events", 1, 1003) == 3
    assert cluster.offset_for_time("events", 1, 9999) is None
    with pytest.raises(UnknownTopic):
        cluster.partitions("missing")
    with pytest.raises((UnknownPartition, UnknownTopic)):
        cluster.produce("events", 7, records)
    grown = cluster.add_partitions("events", 3)
    assert grown.partitions == 3
    # (librdkafka refused a partition its cached metadata lacked, for up to 5 min)
    assert cluster.produce("events", 2, records[:1]).base_offset == 0
    with pytest.raises((UnknownPartition, UnknownTopic)):
        cluster.produce("events", 3, records)
    cluster.delete_topic("events")
    assert "events" not in cluster.topics()


def test_a_created_topics_partitions_not_known_yet_are_waited_for(cluster, monkeypatch):
    """Kafka's brokers learn a new topic's partitions one by one: right after CreateTopics,
    the broker asked for a partition's offsets may not know it (UNKNOWN_TOPIC_OR_PARTITION).
    The creator waits, as it waits for the topic itself; a Marshaler that won the race to
    create ``__marshal`` died of it once (CI, a 3-node Kafka, 2026-11-30)."""
    real = type(cluster)._watermarks
    unknown = {"left": 3}

    def not_yet(self, topic, partition):
        if topic == COORDINATION_TOPIC and unknown["left"]:
            unknown["left"] -= 1
            raise UnknownPartition(topic, partition)
        return real(self, topic, partition)

    monkeypatch.setattr(type(cluster), "_watermarks", not_yet)
    marshaler = Marshaler(
        cluster, client_id="c", group_id="g", heartbeat_interval=1.0, coordination_partitions=2
    )
    try:
        assert unknown["left"] == 0  # the describe after the create met them all
        assert cluster.partitions(COORDINATION_TOPIC) == 2
    finally:
        marshaler.close()


def test_producer_over_network(cluster):
    cluster.create_topic("p", 3)
    with Producer(cluster) as producer:
        futures = [producer.send("p", b"%d" % i, key=b"user-%d" % (i % 7)) for i in range(2000)]
        metas = [f.result(30) for f in futures]
    seen = {}
    for p in range(3):
        offset = 0
        while offset < cluster.latest_offset("p", p):
            batch = cluster.fetch("p", p, offset)
            for m in batch:
                seen[(p, m.offset)] = m.value
            offset = batch[-1].offset + 1
    assert len(seen) == 2000
    assert all(seen[(m.partition, m.offset)] == b"%d" % i for i, m in enumerate(metas))


def check_a_call_refused_in_part(cluster, topic: str) -> None:
    """One produce call of 20,000 records, one of them over the topic's max.message.bytes:
    librdkafka sends the call in several batches, the broker refuses the one with the big
    record, and batches after it are stored all the same (idempotent or not). The call raises
    RecordTooLarge; its note says how many records were stored. (A call's records are not
    one batch: why a streams commit marker goes alone over the network.) Where the batches
    fall is librdkafka's timing: up to ten calls, until one has a batch stored after the
    refused one."""
    n, big = 20_000, 2_000
    cluster.create_topic(topic, 1, {"max.message.bytes": 100_000})
    # the idempotent producer's id first, so that the calls are sent as they are produced
    cluster.produce(topic, 0, [NewRecord(b"warm", key=b"-1", timestamp=1)], durable=True)
    records = [
        NewRecord(b"x" * (200_000 if i == big else 10), key=b"%d" % i, timestamp=1000 + i)
        for i in range(n)
    ]
    later = []
    for _ in range(10):
        start = cluster.latest_offset(topic, 0)
        with pytest.raises(RecordTooLarge) as raised:
            cluster.produce(topic, 0, records, durable=True)
        stored = []
        offset = start
        while offset < cluster.latest_offset(topic, 0):
            batch = cluster.fetch(topic, 0, offset)
            stored += [int(m.key) for m in batch]
            offset = batch[-1].offset + 1
        assert len(stored) < n and big not in stored
        assert stored == sorted(stored)
        if stored:
            note = "".join(getattr(raised.value, "__notes__", []))
            assert f"{len(stored)} of the call's {n} records were stored all the same" in note
        later.append(sum(i > big for i in stored))
        if later[-1]:
            break
    assert later[-1], f"no batch after the refused one was stored in {len(later)} calls"


def test_a_call_refused_in_part_is_stored_in_part(cluster):
    check_a_call_refused_in_part(cluster, "partly")
    assert cluster.produce_is_atomic is False


def test_marshaler_over_network(cluster):
    cluster.create_topic("work", 2)
    with Marshaler(
        cluster, "client-a", "group", heartbeat_interval=5.0, coordination_partitions=4
    ) as marshaler:
        description = cluster.describe_topic(COORDINATION_TOPIC)
        assert description.config["message.timestamp.type"] == "LogAppendTime"
        written = direct.claim_partition(marshaler, "work", 0)
        verdict = direct.wait_verdict(marshaler, written, timeout=10)
        assert verdict is not None and verdict.accepted
        assert marshaler.holder("work", 0) == marshaler.identity


def test_fetch_batches_many_one_request_for_several_partitions(cluster):
    cluster.create_topic("many", 3)
    for p in range(3):
        cluster.produce(
            "many", p, [NewRecord(b"p%d-%d" % (p, i), timestamp=1) for i in range(p + 1)]
        )
    got = cluster.fetch_batches_many("many", {0: 0, 1: 1, 2: 5}, max_wait=0.1)
    assert set(got) == {0, 1, 2}
    assert decode_columns_from(got[0], 0)[3] == [b"p0-0"]
    assert decode_columns_from(got[1], 1)[3] == [b"p1-1"]
    assert isinstance(got[2], OffsetOutOfRange)  # its own error; the others still answered
    # a long poll answered by an append to any of them, well before max_wait
    started = time.monotonic()
    threading.Timer(
        0.2, lambda: cluster.produce("many", 2, [NewRecord(b"late", timestamp=1)])
    ).start()
    got = cluster.fetch_batches_many("many", {0: 1, 2: 3}, max_wait=5.0)
    assert time.monotonic() - started < 4
    assert got[0] == b"" and decode_columns_from(got[2], 3)[3] == [b"late"]
    cols = coordlog.fetch_columns_many(cluster, "many", {1: 0, 2: 0})
    assert cols is not None and cols[1][0] == [0, 1] and cols[2][0] == [0, 1, 2, 3]


def test_marshaler_over_network_replays_in_one_thread(cluster):
    cluster.create_topic("work", 8)
    with (
        Marshaler(cluster, "a", "g", heartbeat_interval=5.0, fetch_wait=0.5) as a,
        Marshaler(cluster, "b", "g", heartbeat_interval=5.0, fetch_wait=0.5) as b,
    ):
        names = [t.name for t in threading.enumerate() if t.name.startswith("logmarshal-tail:g:a")]
        assert names == ["logmarshal-tail:g:a:all"]
        started = time.monotonic()
        for p in range(8):  # a claim's verdict is fetched without the linger (HB/10 = 0.5 s)
            verdict = direct.wait_verdict(a, direct.claim_partition(a, "work", p), timeout=10)
            assert verdict is not None and verdict.accepted
        assert time.monotonic() - started < 4
        assert b.wait_caught_up(10)
        assert all(b.holder("work", p) == a.identity for p in range(8))


def test_a_network_consumers_coordination_writes_go_through_one_thread(cluster, monkeypatch):
    """Over the network one writer thread hands every coordination partition's writes over
    without waiting (the cluster's reports thread answers them): each partition's in the
    order asked, a write to a partition that does not exist failing only its own tokens; a
    Marshaler whose class overrides write_records keeps a thread per partition."""
    answered: list[list] = []
    want = threading.Event()

    def answer(answers):
        answered.append(list(answers))
        if sum(len(a) for a in answered) >= 5:
            want.set()

    with Marshaler(cluster, "a", "g", heartbeat_interval=5.0, coordination_partitions=4) as m:
        assert m.writes_async and not m.writes_together
        ends = {cp: cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in (0, 3)}
        # the replay's checks of our writes may read the log back: on the writer's thread,
        # before the answer goes on, never on the thread that serves every delivery report
        checked_on: list[str] = []
        mark_written = m._tailer.mark_written

        def recording(*args, **kwargs):
            checked_on.append(threading.current_thread().name)
            return mark_written(*args, **kwargs)

        monkeypatch.setattr(m._tailer, "mark_written", recording)
        writer = CoordinationWriter(m, answer, "wa", asynchronous=True)
        try:
            names = [t.name for t in threading.enumerate() if t.name.startswith("wa:write:")]
            assert names == ["wa:write:all"]
            writer.write([_write(1, 0), _write(2, 3), _write(3, 0), _write(4, 3), _write(5, 99)])
            assert want.wait(10)
        finally:
            writer.stop(10)
        got = {a.token: a for call in answered for a in call}
        assert {t: type(a) for t, a in got.items()} == {
            1: Written,
            2: Written,
            3: Written,
            4: Written,
            5: WriteFailed,
        }
        assert [got[1].offset, got[3].offset] == [ends[0], ends[0] + 1]
        assert [got[2].offset, got[4].offset] == [ends[3], ends[3] + 1]
        assert not [t for t in threading.enumerate() if t.name.startswith("wa:write:")]
        assert checked_on and set(checked_on) == {"wa:write:all"}

    class Gated(Marshaler):
        def write_records(self, cp, records):
            return super().write_records(cp, records)

    with Gated(cluster, "b", "g", heartbeat_interval=5.0, coordination_partitions=4) as gated:
        assert not gated.writes_async  # every write goes through its write_records


def test_marshalers_sharing_a_cluster_long_poll_at_once(cluster, monkeypatch):
    """Two Marshalers on one NetworkCluster (two groups of one process): each replay long-polls
    ``__marshal`` on a connection of its own. On a shared one, each waited for the other's
    long poll (``fetch_wait``) before its own began, so a write's verdict could wait a whole
    ``fetch_wait`` more."""
    from logmarshal.network.fetch_client import _BatchReader

    real = _BatchReader.fetch_many
    polls: list[tuple[str, float, float]] = []

    def timed(self, offsets, max_bytes, max_wait):
        started = time.monotonic()
        try:
            return real(self, offsets, max_bytes, max_wait)
        finally:
            if len(offsets) > 1:  # the replay's long poll (not a cold start's snapshot read)
                polls.append((threading.current_thread().name, started, time.monotonic()))

    monkeypatch.setattr(_BatchReader, "fetch_many", timed)
    with (
        Marshaler(cluster, "a", "g1", heartbeat_interval=5.0, fetch_wait=0.5) as a,
        Marshaler(cluster, "b", "g2", heartbeat_interval=5.0, fetch_wait=0.5) as b,
    ):
        assert a.wait_caught_up(10) and b.wait_caught_up(10)
        deadline = time.monotonic() + 10
        overlapped = False
        while not overlapped and time.monotonic() < deadline:
            time.sleep(0.2)
            done = list(polls)
            mine = [(s, e) for name, s, e in done if ":g1:" in name]
            theirs = [(s, e) for name, s, e in done if ":g2:" in name]
            overlapped = any(s1 < e2 and s2 < e1 for s1, e1 in mine for s2, e2 in theirs)
        assert overlapped, "the two replays' long polls never ran at the same time"
    # their replay threads ended: the next reader opened closes theirs
    cluster.fetch_batches(COORDINATION_TOPIC, 0, 0)
    alive = {t.ident for t in threading.enumerate()}
    assert all(key[2] in alive for key in cluster._batch_readers)


def test_a_network_marshalers_close_ends_its_long_poll(cluster, caplog, monkeypatch):
    """A closing Marshaler cancels its replay's long poll (its own connection's) instead of
    waiting it out: with ``fetch_wait`` 30 s a close took 30 s; every network consumer,
    admin command and streams app paid up to ``fetch_wait`` (0.5 s by default) on exit.
    Another Marshaler's replay on the same cluster goes on."""
    from logmarshal.network.fetch_client import _BatchReader

    real = _BatchReader.fetch_many
    in_flight: dict[str, float] = {}  # thread name -> when its fetch in flight began

    def tracked(self, offsets, max_bytes, max_wait):
        name = threading.current_thread().name
        in_flight[name] = time.monotonic()
        try:
            return real(self, offsets, max_bytes, max_wait)
        finally:
            in_flight.pop(name, None)

    monkeypatch.setattr(_BatchReader, "fetch_many", tracked)
    with Marshaler(cluster, "other", "g2", heartbeat_interval=5.0, fetch_wait=30.0) as other:
        marshaler = Marshaler(cluster, "c", "g", heartbeat_interval=5.0, fetch_wait=30.0)
        assert marshaler.wait_caught_up(10) and other.wait_caught_up(10)
        replay = "logmarshal-tail:g:c:all"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until its replay is well into a long poll
            began = in_flight.get(replay)
            if began is not None and time.monotonic() - began > 0.5:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the replay never long-polled")
        started = time.monotonic()
        marshaler.close()
        assert time.monotonic() - started < 10
        assert not [t for t in threading.enumerate() if t.name == replay]
        claim = direct.claim_partition(other, "work", 0)
        verdict = direct.wait_verdict(other, claim, timeout=10)
        assert verdict is not None and verdict.accepted  # the other replay was not cancelled
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_marshaler_refuses_create_time_topic(cluster):
    cluster.create_topic(COORDINATION_TOPIC, 2)  # CreateTime: wrong
    with pytest.raises(CoordinationTopicError):
        Marshaler(cluster, "c", "g", heartbeat_interval=5.0)


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_with_bootstrap(broker, tmp_path):
    bootstrap = ["--bootstrap", broker.bootstrap]
    assert _cli(*bootstrap, "topic", "create", "cli", "-p", "2").returncode == 0
    produced = _cli(
        *bootstrap, "produce", "cli", "--partition", "1", "--key-separator", ":", stdin="a:1\nb:2\n"
    )
    assert produced.returncode == 0, produced.stderr
    read = _cli(*bootstrap, "--json", "read", "cli", "-p", "1")
    assert [json.loads(line)["value"] for line in read.stdout.splitlines()] == ["1", "2"]
    both = _cli(*bootstrap, "--data-dir", str(tmp_path), "topic", "list")
    assert both.returncode == 1 and "exclude each other" in both.stderr
    missing = _cli(*bootstrap, "topic", "describe", "nope")
    assert missing.returncode == 1 and "unknown topic" in missing.stderr
    # a line over the size limit, refused by librdkafka at the send: the lines around it are
    # written and said, as on the embedded cluster (it printed librdkafka's error alone)
    big = "x" * 2_000_000
    partly = _cli(
        *bootstrap, "produce", "cli", "--partition", "0", stdin=f"small1\n{big}\nsmall3\n"
    )
    assert partly.returncode == 1 and "produced 2 record(s)" in partly.stdout, partly.stderr
    assert "line 2 was not written" in partly.stderr and "2 of 3 were" in partly.stderr


@pytest.mark.parametrize(
    ("kwargs", "raised", "says"),
    [
        ({"timeout": float("nan")}, ValueError, "timeout must be seconds above 0"),
        ({"timeout": -1.0}, ValueError, "timeout must be seconds above 0"),
        ({"timeout": "5"}, TypeError, "timeout must be seconds"),
        ({"config": {"bogus.key": 1}}, ValueError, 'No such configuration property: "bogus.key"'),
        ({"config": [("a", 1)]}, TypeError, "config must map"),
        ({"bootstrap": 123}, ValueError, "bootstrap needs"),
    ],
)
def test_bad_arguments_are_refused_before_connecting(kwargs, raised, says) -> None:
    """Found by an attack on the API, against a live broker: ``timeout=nan`` said "cannot
    reach brokers", ``timeout=-1`` was taken, an unknown librdkafka key was a raw
    KafkaException. Each is refused at once (no broker is listening at this address)."""
    options = {"bootstrap": "127.0.0.1:9", **kwargs}
    started = time.monotonic()
    with pytest.raises(raised, match=re.escape(says)):
        NetworkCluster(**options)
    assert time.monotonic() - started < 5


def test_an_offsets_consumer_replaced_for_stale_metadata_stays_usable(cluster):
    """A partition just added is unknown to the offsets consumer's metadata; it is replaced.
    The old one was closed at once, and another thread in a call on it got
    RuntimeError("Consumer closed"), which stopped a replay's start for good (a helper's
    attack, 2026-12-06). It is kept until the cluster closes."""
    cluster.create_topic("grown", 1)
    cluster.produce("grown", 0, [NewRecord(b"x", timestamp=1)])
    in_use = cluster._offsets()  # what another thread is calling
    cluster._reset_offsets_consumer()
    assert cluster._offsets() is not in_use
    low, high = in_use.get_watermark_offsets(TopicPartition("grown", 0), timeout=10)
    assert (low, high) == (0, 1)
    assert cluster.latest_offset("grown", 0) == 1


def test_connecting_to_nothing_is_one_error_and_no_librdkafka_noise(tmp_path):
    """``NetworkCluster`` to a port nothing listens on raised its NetworkError after
    librdkafka printed a FAIL line on stderr at every reconnection (194 over 10 s): its
    bootstrap check now goes through a client that logs nothing."""
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    code = (
        "from logmarshal.errors import NetworkError\n"
        "from logmarshal.network import NetworkCluster\n"
        "try:\n"
        f"    NetworkCluster('127.0.0.1:{port}', timeout=2)\n"
        "except NetworkError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith(f"refused: cannot reach brokers at 127.0.0.1:{port}")
    assert done.stderr == ""  # (a FAIL line per reconnection, before)


def test_an_admin_client_whose_metadata_requests_all_fail_is_replaced(cluster, monkeypatch):
    """After Kafka nodes restarted, one member's admin client answered "Broker transport
    failure" for 147 s while the other clients of its process reached the brokers; its
    replay, which asks that client for leaders, stood still (CI, 2026-12-06). An admin
    client whose every metadata request failed for ``_ADMIN_STALL_AFTER`` is replaced."""

    class _Stuck:
        def list_topics(self, *args, **kwargs):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(cluster_module, "_ADMIN_STALL_AFTER", 0.3)
    cluster.create_topic("t", 1)
    stuck = cluster._admin = _Stuck()
    with pytest.raises(NetworkError):
        cluster._leader("t", 0)
    with pytest.raises(NetworkError):
        cluster.partitions("t")
    assert cluster._admin is stuck  # (failing, not for long yet)
    time.sleep(0.4)
    with pytest.raises(NetworkError):
        cluster._leader("t", 0)  # failing for 0.4 s: replaced
    assert cluster._admin is not stuck and cluster.admin_renewals == 1
    assert cluster._leader("t", 0)[1] > 0 and cluster.partitions("t") == 1
