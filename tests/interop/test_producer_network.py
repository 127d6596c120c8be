"""logmarshal.Producer over the network, against a broker process.

Over a NetworkCluster the Producer hands records straight to a librdkafka producer of its
own (its batching, its murmur2 partitioner, its delivery reports). These tests check, against
``logmarshal broker start`` in a process of its own, that what the caller is told is what the
broker stored: each result's and each callback's offset and partition are where the record is
read back, keyed records land where the embedded Producer puts them, and the errors a caller
can fix still raise at send().
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from logmarshal import Producer, RecordMetadata
from logmarshal.errors import ClosedError, RecordTooLarge, UnknownTopic
from logmarshal.network import NetworkCluster
from logmarshal.partitioners import Murmur2Partitioner
from logmarshal.serializers import json_serializer, string_serializer
from tests.broker_process import broker_process

_topics = itertools.count()


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory) -> Iterator[str]:
    """One broker process for the module (each test uses topics of its own)."""
    with broker_process(tmp_path_factory.mktemp("producer-broker")) as bootstrap:
        yield bootstrap


@pytest.fixture
def network(bootstrap) -> Iterator[NetworkCluster]:
    with NetworkCluster(bootstrap, timeout=10.0) as cluster:
        yield cluster


def new_topic(cluster: NetworkCluster, partitions: int) -> str:
    name = f"producer-{next(_topics)}"
    cluster.create_topic(name, partitions)
    return name


def read_all(cluster: NetworkCluster, topic: str, partition: int) -> list:
    out: list = []
    end = cluster.latest_offset(topic, partition)
    while len(out) < end:
        out.extend(cluster.fetch(topic, partition, len(out), max_wait=1.0))
    return out


def test_results_are_where_the_broker_stored_each_record(network) -> None:
    topic = new_topic(network, 3)
    with Producer(network) as producer:
        sent = [
            (producer.send(topic, b"v%d" % i, key=b"key-%d" % (i % 11)), b"v%d" % i, i % 11)
            for i in range(300)
        ]
        producer.flush()
        metas = [d.result(10) for d, _, _ in sent]
    stored = {p: read_all(network, topic, p) for p in range(3)}
    assert sum(map(len, stored.values())) == 300
    expected = Murmur2Partitioner()
    for meta, (_, value, key) in zip(metas, sent, strict=True):
        assert meta.topic == topic
        # the same partition as the embedded Producer's murmur2 (librdkafka murmur2_random)
        assert meta.partition == expected(b"key-%d" % key, 3)
        message = stored[meta.partition][meta.offset]
        assert (message.offset, message.value, message.key) == (
            meta.offset,
            value,
            b"key-%d" % key,
        )
        assert meta.timestamp == message.timestamp


def test_result_serves_its_own_report_without_flush(network) -> None:
    topic = new_topic(network, 1)
    with Producer(network, linger_ms=1) as producer:
        first = producer.send(topic, b"a")
        assert not first.done() or first.result(0).offset == 0
        assert first.result(10) == RecordMetadata(topic, 0, 0, first.result(0).timestamp)
        assert first.done() and first.exception(0) is None
        assert producer.send(topic, b"b").result(10).offset == 1


def test_callbacks_report_the_stored_offsets(network) -> None:
    topic = new_topic(network, 2)
    seen: list[tuple[RecordMetadata | None, BaseException | None]] = []
    with Producer(network) as producer:
        results = [
            producer.send(
                topic, b"%d" % i, key=b"k%d" % i, on_delivery=lambda m, e: seen.append((m, e))
            )
            for i in range(50)
        ]
        producer.flush()  # serves librdkafka's delivery reports: every callback has run
        assert len(seen) == 50
    assert all(error is None for _, error in seen)
    assert sorted((m.partition, m.offset) for m, _ in seen) == sorted(
        (r.result(0).partition, r.result(0).offset) for r in results
    )
    for meta, _ in seen:
        assert read_all(network, topic, meta.partition)[meta.offset].value is not None


def test_a_callback_that_raises_is_logged_not_raised(network, caplog) -> None:
    topic = new_topic(network, 1)

    def broken(meta, error):
        raise RuntimeError("user bug")

    with Producer(network) as producer:
        delivery = producer.send(topic, b"x", on_delivery=broken)
        producer.flush()
    assert delivery.result(0).offset == 0
    assert "a delivery callback raised" in caplog.text


def test_serializers_headers_and_timestamps_round_trip(network) -> None:
    topic = new_topic(network, 1)
    with Producer(
        network, key_serializer=string_serializer, value_serializer=json_serializer
    ) as producer:
        meta = producer.send(
            topic, {"n": 1}, key="k", headers=[("h", b"x"), ("n", None)], timestamp=1_234
        ).result(10)
    assert meta.timestamp == 1_234
    (message,) = read_all(network, topic, 0)
    assert (message.key, message.value, message.timestamp) == (b"k", b'{"n":1}', 1_234)
    assert message.headers == (("h", b"x"), ("n", None))


def test_custom_and_keyless_partitioning_happen_here(network) -> None:
    topic = new_topic(network, 3)
    with Producer(network, partitioner=lambda key, n: n - 1) as producer:
        assert producer.send(topic, b"a", key=b"k").result(10).partition == 2
        assert producer.send(topic, b"b", partition=0).result(10).partition == 0
    with Producer(network) as producer:  # murmur2's keyless records: round-robin, as embedded
        partitions = [producer.send(topic, b"x").result(10).partition for _ in range(6)]
    assert sorted(partitions) == [0, 0, 1, 1, 2, 2]


def test_mistakes_raise_at_send(network) -> None:
    topic = new_topic(network, 2)
    producer = Producer(network)
    with pytest.raises(UnknownTopic):
        producer.send("no-such-topic", b"v")
    with pytest.raises(TypeError, match="value must be bytes or None, got str"):
        producer.send(topic, "text")
    with pytest.raises(TypeError, match="header names are str"):
        producer.send(topic, b"v", headers=[(b"h", b"v")])
    with pytest.raises(TypeError, match="partition must be an int"):
        producer.send(topic, b"v", partition="0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"partitions 0\.\.1, not 2"):
        producer.send(topic, b"v", partition=2)
    with pytest.raises(RecordTooLarge):  # librdkafka refuses it before sending
        producer.send(topic, b"x" * 2_000_000)
    kept = producer.send(topic, b"kept", partition=1)
    producer.close()
    producer.close()
    producer.flush()  # nothing left: a no-op
    with pytest.raises(ClosedError):
        producer.send(topic, b"late")
    assert kept.result(0).offset == 0  # a result outlives its producer


class Wrapper:
    """A cluster wrapper delegating everything but produce (as a test's or the fault
    injector's): the Producer must go through its produce(), not librdkafka's."""

    def __init__(self, inner: NetworkCluster) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def produce(self, topic, partition, records, *, durable=False):
        self.calls += 1
        return self.inner.produce(topic, partition, records, durable=durable)


def test_a_wrapped_network_cluster_gets_batches_through_its_produce(network) -> None:
    topic = new_topic(network, 1)
    wrapper = Wrapper(network)
    with Producer(wrapper, linger_ms=50) as producer:  # type: ignore[arg-type]
        results = [producer.send(topic, b"%d" % i) for i in range(20)]
    assert [r.result(10).offset for r in results] == list(range(20))
    assert 1 <= wrapper.calls < 20


def test_send_nowait_records_are_stored(network) -> None:
    topic = new_topic(network, 2)
    with Producer(network) as producer:
        for i in range(500):
            producer.send_nowait(topic, b"%d" % i, key=b"k%d" % (i % 7))
        producer.flush()  # no failure to raise
    stored = [m for p in range(2) for m in read_all(network, topic, p)]
    assert sorted(int(m.value) for m in stored) == list(range(500))
    expected = Murmur2Partitioner()
    assert all(expected(m.key, 2) == p for p in range(2) for m in read_all(network, topic, p))


def test_durable_and_a_client_partitioner_of_ones_own(network) -> None:
    topic = new_topic(network, 3)
    # another librdkafka partitioner: keyed records are then placed here, by murmur2 still
    with Producer(
        network, durable=True, client_config={"partitioner": "consistent_random"}
    ) as producer:
        metas = [producer.send(topic, b"v", key=b"k%d" % i).result(10) for i in range(30)]
    expected = Murmur2Partitioner()
    assert [m.partition for m in metas] == [expected(b"k%d" % i, 3) for i in range(30)]
