"""Real idempotent producers (confluent-kafka, kafka-python) against the sequence checks."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from storage import DataDir, decode_records
from storage._producers import batch_identities


def test_idempotent_producers_store_each_message_once(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("idem", 2, replication_factor=1)])["idem"].result(10)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )
    errors = []
    for i in range(3000):
        producer.produce(
            "idem", b"c%d" % i, partition=i % 2, on_delivery=lambda e, _m: e and errors.append(e)
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors

    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=2)
    futures = [kp.send("idem", b"k%d" % i, partition=i % 2) for i in range(3000)]
    kp.flush(30)
    for f in futures:
        f.get(10)
    kp.close(10)
    broker.stop()
    values = []
    with DataDir(broker.config.data_dir) as d:
        for p in range(2):
            plog = d.partition("idem", p)
            offset = 0
            while offset < plog.log_end_offset:
                data = plog.read(offset, 1 << 20).data
                assert all(b.producer_id >= 0 for b in batch_identities(data))
                recs = decode_records(data)
                values += [r.value for r in recs]
                offset = recs[-1].offset + 1
    assert sorted(values) == sorted(
        [b"c%d" % i for i in range(3000)] + [b"k%d" % i for i in range(3000)]
    )
