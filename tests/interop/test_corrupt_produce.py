"""Record validation (docs/broker.md): a batch with a valid CRC but corrupt records is refused over the wire, nothing of
it is stored, and kcat, confluent-kafka and kafka-python still read the partition to its end."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CTP
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceResponse

from storage import DataDir
from storage._records import iter_batches
from storage.broker import BrokerConfig, BrokerThread
from tests.storage.broker.helpers import RawClient, fetch_request, produce_request
from tests.storage.corruptions import CORRUPTIONS, good

REFUSED = {2, 87}  # CORRUPT_MESSAGE, INVALID_RECORD


@pytest.fixture
def broker(tmp_path):
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("poison", 1)
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as running:
        yield running


def _produce(client: RawClient, records: bytes) -> tuple[int, int]:
    resp = client.call(produce_request("poison", 0, records), ProduceResponse)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_corruption_refused_over_the_wire_and_nothing_stored(broker, name) -> None:
    with RawClient(broker.address) as client:
        assert _produce(client, good()) == (0, 0)
        error, _ = _produce(client, CORRUPTIONS[name][0]())
        assert error in REFUSED
        assert _produce(client, good()) == (0, 1)  # offset 1: nothing of the bad batch stored


def _kcat_values(kcat: str, bootstrap: str) -> list[str]:
    out = subprocess.run(
        [
            kcat,
            "-b",
            bootstrap,
            "-C",
            "-t",
            "poison",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split()


def _confluent_to_end(bootstrap: str) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "poison",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTP("poison", 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                return offsets
            offsets.append(m.offset())
    finally:
        consumer.close()
    raise AssertionError(f"confluent consumer never reached the end (read {offsets})")


def _kafka_python_to_end(bootstrap: str, end: int) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tp = TopicPartition("poison", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                offsets.extend(r.offset for r in records)
    finally:
        consumer.close()
    return offsets


def test_after_every_corruption_three_clients_read_to_the_end(broker, kcat) -> None:
    with RawClient(broker.address) as client:
        stored = 0
        for name in sorted(CORRUPTIONS):
            assert _produce(client, good(2)) == (0, stored)
            stored += 2
            assert _produce(client, CORRUPTIONS[name][0]())[0] in REFUSED, name
        assert _produce(client, good()) == (0, stored)
        stored += 1
    expected = list(range(stored))
    assert [int(o) for o in _kcat_values(kcat, broker.bootstrap)] == expected
    assert _confluent_to_end(broker.bootstrap) == expected
    assert _kafka_python_to_end(broker.bootstrap, stored) == expected


def _confluent_compressed(bootstrap: str, codec: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
    )
    errors: list = []
    for i in range(500):
        producer.produce(
            "poison",
            b"value-%d " % i * 10,
            b"k%d" % (i % 7),
            partition=0,
            headers=[("h", b"x")],
            on_delivery=lambda e, _m: e and errors.append(e),
        )
    assert producer.flush(30) == 0 and not errors


def _kafka_python_compressed(bootstrap: str, codec: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
    futures = [
        producer.send(
            "poison", b"value-%d " % i * 10, b"k%d" % (i % 7), partition=0, headers=[("h", b"x")]
        )
        for i in range(500)
    ]
    producer.flush(30)
    for f in futures:
        f.get(10)
    producer.close(10)


# librdkafka sends lz4 only to a broker that advertises FindCoordinator: kafka-python covers it
@pytest.mark.parametrize(
    "produce,codec",
    [
        (_confluent_compressed, "gzip"),
        (_confluent_compressed, "snappy"),
        (_confluent_compressed, "zstd"),
        (_kafka_python_compressed, "gzip"),
        (_kafka_python_compressed, "lz4"),
        (_kafka_python_compressed, "zstd"),
    ],
)
def test_compressed_batches_of_real_clients_pass_validation(broker, produce, codec) -> None:
    produce(broker.bootstrap, codec)
    assert _confluent_to_end(broker.bootstrap) == list(range(500))
    with RawClient(broker.address) as client:
        resp = client.call(fetch_request("poison", 0, 0), FetchResponse)
    stored = resp.responses[0].partitions[0].records
    codecs = {h.compression.name.lower() for h, _ in iter_batches(stored)}
    assert codecs == {codec}  # stored as sent: the test really covered the codec
