"""A compacted topic (offsets with gaps) read back by kcat, confluent-kafka and kafka-python."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CTP

from storage import DataDir, NewRecord, TopicConfig, encode_batch
from storage.broker import BrokerConfig, BrokerThread


def _prepare(data) -> list[tuple[int, bytes, bytes]]:
    cfg = TopicConfig(cleanup_policy="compact", segment_bytes=1000, retention_ms=-1)
    now = int(time.time() * 1000)
    with DataDir(data, clean_interval_s=0) as d:
        d.create_topic("compacted", 1, cfg)
        plog = d.partition("compacted", 0)
        for i in range(300):
            # keys written once (every 10th early record) survive between removed offsets
            key = b"static-%d" % i if i % 10 == 0 and i < 200 else b"key-%d" % (i % 17)
            plog.append(encode_batch([NewRecord(b"value-%d" % i, key=key, timestamp=now)]))
        assert d.clean() > 200
        survivors = []
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            from storage._records import decode_records

            recs = [r for r in decode_records(plog.read(offset).data) if r.offset >= offset]
            survivors += [(r.offset, r.key, r.value) for r in recs]
            offset = recs[-1].offset + 1
    offsets = [o for o, _, _ in survivors]
    assert len(survivors) < 100 and offsets[-1] == 299
    assert offsets != list(range(offsets[0], 300))  # there really are gaps
    return survivors


def test_three_clients_read_a_compacted_topic(tmp_path, kcat) -> None:
    data = tmp_path / "data"
    expected = _prepare(data)
    with BrokerThread(BrokerConfig(data_dir=data, port=0)) as broker:
        out = subprocess.run(
            [
                kcat,
                "-b",
                broker.bootstrap,
                "-C",
                "-t",
                "compacted",
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%o %k %s\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split("\n")
        got = [
            (int(o), k.encode(), v.encode()) for o, k, v in (line.split() for line in out if line)
        ]
        assert got == expected

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "c",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([CTP("compacted", 0, 0)])
        rows = []
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None:
                    continue
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF
                    break
                rows.append((m.offset(), m.key(), m.value()))
        finally:
            consumer.close()
        assert rows == expected

        from kafka import KafkaConsumer, TopicPartition

        kc = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None
        )
        tp = TopicPartition("compacted", 0)
        kc.assign([tp])
        kc.seek_to_beginning(tp)
        rows = []
        try:
            deadline = time.monotonic() + 30
            while kc.position(tp) < 300 and time.monotonic() < deadline:
                for records in kc.poll(500).values():
                    rows += [(r.offset, r.key, r.value) for r in records]
        finally:
            kc.close()
        assert rows == expected
