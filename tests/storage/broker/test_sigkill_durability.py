"""The broker SIGKILLed under an idempotent acks=all producer, with segments rolling, three
times: no acknowledged record is lost, none is stored twice, and every segment's indexes
are sound after the restarts (an attack on the broker, 2026-12-03, held: this keeps it).
A SIGKILL keeps the page cache, so what was written before the acknowledgement is on disk;
what is at stake is the newest segment's recovery, its indexes, and the producer state
rebuilt from the log (a retried batch answered as a duplicate, not stored again)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from logmarshal.localbroker import LocalBroker
from storage import DataDir, TopicConfig, decode_records

pytestmark = pytest.mark.long

PARTITIONS = 2
CYCLES = 3


def _read_all(bootstrap: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition("d", p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got[m.partition()].append(m.value())
    finally:
        consumer.close()
    return got


def test_acknowledged_records_survive_three_sigkills(tmp_path, caplog):
    data = tmp_path / "data"
    with DataDir(data) as dd:
        dd.create_topic("d", PARTITIONS, TopicConfig(segment_bytes=64 * 1024))
    broker = LocalBroker(tmp_path, data_dir=data, global_args=["-v"])  # (INFO: the log's)
    acked: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
    failed: list[str] = []

    def report(err, msg) -> None:
        if err is None:
            acked[msg.partition()].add(msg.value())
        else:
            failed.append(err.name())

    broker.start()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.size": 16384,  # (a batch over segment.bytes is refused, as by Kafka)
            "message.timeout.ms": 120_000,
            "reconnect.backoff.max.ms": 200,
            "log_level": 0,
        }
    )
    stop = threading.Event()
    sent = 0

    def produce() -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                producer.produce(
                    "d", b"r%08d" % sent, partition=sent % PARTITIONS, on_delivery=report
                )
                sent += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    try:
        for _ in range(CYCLES):
            time.sleep(1.5)
            broker.kill()  # SIGKILL, by its pid
            time.sleep(0.3)
            broker.start()  # same port, same data
        time.sleep(1.0)
        stop.set()
        writer.join(30)
        assert not writer.is_alive()
        assert producer.flush(90) == 0, "records still unanswered after 90 s"
        assert not failed, f"{len(failed)} records failed: {sorted(set(failed))}"
        assert sum(map(len, acked.values())) > 2000
        ends = {p: len(acked[p]) for p in acked}
        got = _read_all(broker.bootstrap, ends)
    finally:
        stop.set()
        broker.stop(timeout=30)
    for p in range(PARTITIONS):
        assert len(got[p]) == len(set(got[p])), f"partition {p}: a record stored twice"
        assert acked[p] <= set(got[p]), f"partition {p}: {len(acked[p] - set(got[p]))} lost"
        # one producer, in order: each partition holds its records in the order sent
        assert got[p] == sorted(got[p])
    caplog.set_level(logging.WARNING)
    with DataDir(data) as dd:
        for p in range(PARTITIONS):
            plog = dd.partition("d", p)
            assert plog.segment_count >= 3
            offset, values = 0, []
            while offset < plog.log_end_offset:
                records = decode_records(plog.read(offset, 64 * 1024).data)
                values += [r.value for r in records]
                offset = records[-1].offset + 1
            assert values == got[p]
    assert "index" not in caplog.text and "segment" not in caplog.text, caplog.text
    # each restart recovered the data the SIGKILL left: in the broker process, whose log
    # (its stderr, a file per start) says what recovery found
    starts = sorted(tmp_path.glob(f"{broker.name}.*.err"))
    assert len(starts) == CYCLES + 1, starts
    logs = "".join(path.read_text(errors="replace") for path in starts)
    assert logs.count(" listening on ") == CYCLES + 1  # (the broker's log is in these files)
    for unsound in _UNSOUND:
        assert unsound not in logs, logs[-3000:]


#: what the storage logs when a segment or an index it opens is not sound (a newest
#: segment's torn tail, truncated, is not among them: a SIGKILL may leave one)
_UNSOUND = (
    "index missing or inconsistent",
    "damaged sealed segment",
    "index rebuilt",
    "offset index was rebuilt",
    "out of order or out of range",
    "is not a multiple of",
    "but the next segment starts at",
)
