"""Real, unmodified Kafka clients against the broker: kcat, confluent-kafka, kafka-python."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

N = 10_000
PARTITIONS = 3


def _create(broker, name: str, partitions: int = PARTITIONS, config=None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication_factor=1, config=config or {})])[
        name
    ].result(10)


def _expected(i: int, base_ts: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    return b"key-%d" % i, b"value-%d" % i, [("n", b"%d" % i), ("src", b"t")], base_ts + i


def _confluent_produce(bootstrap: str, topic: str, base_ts: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors = []
    for i in range(N):
        key, value, headers, ts = _expected(i, base_ts)
        producer.produce(
            topic,
            value,
            key,
            partition=i % PARTITIONS,
            timestamp=ts,
            headers=headers,
            on_delivery=lambda e, _m: e and errors.append(e),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors


def _kafka_python_produce(bootstrap: str, topic: str, base_ts: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    futures = []
    for i in range(N):
        key, value, headers, ts = _expected(i, base_ts)
        futures.append(
            producer.send(
                topic, value, key, headers=headers, partition=i % PARTITIONS, timestamp_ms=ts
            )
        )
    producer.flush(30)
    for future in futures:
        future.get(10)
    producer.close(10)


def _confluent_consume(bootstrap: str, topic: str, n: int = N) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "interop",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTP(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                out.append(
                    (m.partition(), m.offset(), m.key(), m.value(), m.headers(), ts_type, ts)
                )
    finally:
        consumer.close()
    return out


def _kafka_python_consume(bootstrap: str, topic: str, n: int = N) -> list[tuple]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            for _tp, records in consumer.poll(500, max_records=5000).items():
                for r in records:
                    ts_type = (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME)[r.timestamp_type]
                    out.append(
                        (
                            r.partition,
                            r.offset,
                            r.key,
                            r.value,
                            list(r.headers),
                            ts_type,
                            r.timestamp,
                        )
                    )
    finally:
        consumer.close()
    return out


def _check(rows: list[tuple], base_ts: int, create_time: bool = True) -> None:
    assert len(rows) == N
    by_value = {}
    for partition, offset, key, value, headers, ts_type, ts in rows:
        by_value[value] = (partition, offset, key, list(headers or []), ts_type, ts)
    for i in range(N):
        key, value, headers, ts = _expected(i, base_ts)
        partition, offset, got_key, got_headers, ts_type, got_ts = by_value[value]
        assert (partition, offset, got_key) == (i % PARTITIONS, i // PARTITIONS, key)
        assert got_headers == headers
        if create_time:
            assert (ts_type, got_ts) == (TIMESTAMP_CREATE_TIME, ts)


@pytest.mark.parametrize(
    "produce,consume",
    [
        (_confluent_produce, _confluent_consume),
        (_confluent_produce, _kafka_python_consume),
        (_kafka_python_produce, _confluent_consume),
        (_kafka_python_produce, _kafka_python_consume),
    ],
    ids=[
        "confluent->confluent",
        "confluent->kafka-python",
        "kafka-python->confluent",
        "kafka-python->kafka-python",
    ],
)
def test_round_trip_10k(broker, produce, consume):
    _create(broker, "rt")
    base_ts = 1_700_000_000_000
    produce(broker.bootstrap, "rt", base_ts)
    _check(consume(broker.bootstrap, "rt"), base_ts)


def test_kcat_metadata_produce_consume(broker, kcat):
    _create(broker, "kc")
    listing = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-L"], capture_output=True, text=True, timeout=30
    )
    assert listing.returncode == 0, listing.stderr
    assert f"at {broker.bootstrap}" in listing.stdout
    assert 'topic "kc" with 3 partitions' in listing.stdout
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(N))
    produced = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-P", "-t", "kc", "-K:", "-H", "src=kcat", "-p", "-1"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            "kc",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%k|%s|%h|%T\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("|") for line in consumed.stdout.splitlines()]
    assert len(rows) == N
    assert sorted(r[1] for r in rows) == sorted(f"value-{i}" for i in range(N))
    assert all(
        r[0] == "key-" + r[1].split("-")[1] and r[2] == "src=kcat" and int(r[3]) > 0 for r in rows
    )
    # What kcat wrote, the Python clients read.
    assert len(_confluent_consume(broker.bootstrap, "kc")) == N


def test_log_append_time_on_marshal_topic(broker, kcat):
    from logmarshal.marshaler import COORDINATION_TOPIC, coordination_topic_config
    from logmarshal.network import NetworkCluster

    with NetworkCluster(broker.bootstrap) as cluster:
        cluster.create_topic(COORDINATION_TOPIC, PARTITIONS, coordination_topic_config())
        assert cluster.topic_config(COORDINATION_TOPIC)["message.timestamp.type"] == "LogAppendTime"
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(PARTITIONS):
        producer.produce(COORDINATION_TOPIC, b"v", b"k", partition=p, timestamp=1)
    assert producer.flush(10) == 0
    rows = _confluent_consume(broker.bootstrap, COORDINATION_TOPIC, PARTITIONS)
    assert {r[5] for r in rows} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(r[6] >= before for r in rows)
    rows = _kafka_python_consume(broker.bootstrap, COORDINATION_TOPIC, PARTITIONS)
    assert {r[5] for r in rows} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(r[6] >= before for r in rows)
    consumed = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-C", "-t", COORDINATION_TOPIC, "-e", "-q", "-f", "%T\n"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert all(int(t) >= before for t in consumed.stdout.split())
