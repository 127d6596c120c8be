"""The audit reading ``__marshal`` straight from Apache Kafka with Spark's own Kafka source
(``logmarshal audit --source kafka``) equals, table by table, the audit of a Parquet export
of the same log on Spark and the in-process audit; it reads a fixed cut; it refuses a log
not stamped by the broker's clock.

The history is real: members of one group on Kafka (two joining, a clean leave, a crash
taken over when stale, a third member) and an admin reset, all through logmarshal's own
Marshaler and Consumer on the session's Kafka.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logmarshal import Consumer, Marshaler, NewRecord, connect
from logmarshal.audit.engine import load_tables, replay_config_for
from logmarshal.audit.export import capture_cut
from logmarshal.audit.job import main as job_main
from logmarshal.audit.kafkasource import KafkaSourceError
from logmarshal.cli.main import main
from logmarshal.localkafka import KafkaCluster

from .conftest import _unavailable

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

HB = 0.5
PARTITIONS = 4
N = 10  # records per data partition


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_spark(spark, monkeypatch):
    """The session's Spark, which must carry Spark's Kafka source (tests/conftest.py), and
    which the CLI, run in this process, must not stop."""
    if "spark-sql-kafka-0-10" not in spark.conf.get("spark.jars", ""):
        _unavailable("Spark's Kafka source jars are not on this Spark session (needs mvn: "
                     "python -m logmarshal.audit.kafkasource fetch)")  # fmt: skip
    monkeypatch.setattr(spark, "stop", lambda: None)
    return spark


@pytest.fixture
def network(kafka: KafkaCluster) -> Iterator:
    cluster = connect(bootstrap=kafka.bootstrap)
    yield cluster
    cluster.close()


def _cli(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _serve(consumers: list[Consumer], until, what: str, timeout: float = 60.0) -> None:
    """Poll (and commit) every consumer until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for consumer in consumers:
            batch = consumer.poll(0.05, max_records=50)
            if batch:
                consumer.commit(*batch)


def _held(consumer: Consumer) -> set[int]:
    return {partition for _topic, partition in consumer.claims()}


def _history(bootstrap: str, network, group: str, topic: str) -> None:
    """Two members share the topic, one leaves cleanly, one crashes and is taken over once
    stale by a third, everything closes, then an admin resets the group's positions."""
    network.create_topic(topic, PARTITIONS)
    now = int(time.time() * 1000)
    for p in range(PARTITIONS):
        network.produce(topic, p, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(N)])
    conns = [connect(bootstrap=bootstrap) for _ in range(3)]
    m1, m2, m3 = (Marshaler(c, f"c{i + 1}", group, HB) for i, c in enumerate(conns))
    c1 = Consumer(m1, topic, mode="alo", auto_offset_reset="earliest")
    try:
        _serve([c1], lambda: len(_held(c1)) == PARTITIONS, "c1 to hold every partition")
        c2 = Consumer(m2, topic, mode="alo", auto_offset_reset="earliest")
        _serve([c1, c2], lambda: len(_held(c1)) == len(_held(c2)) == 2, "c1 and c2 to share")
        c1.close()  # a clean leave: its partitions are released, c2 takes them
        _serve([c2], lambda: len(_held(c2)) == PARTITIONS, "c2 to take c1's partitions")
        c3 = Consumer(m3, topic, mode="alo", auto_offset_reset="earliest")
        _serve([c2, c3], lambda: len(_held(c2)) == len(_held(c3)) == 2, "c2 and c3 to share")
        c2.close(release=False)  # a crash: nothing released, its claims go stale
        m2.close()
        _serve([c3], lambda: len(_held(c3)) == PARTITIONS, "c3 to take c2's stale partitions")
        c3.close()
    finally:
        for m in (m1, m2, m3):
            m.close()
        for c in conns:
            c.close()
    code = _cli("--bootstrap", bootstrap, "group", "reset", group, "--topic", topic,
                "--to-earliest", "--execute")  # fmt: skip
    assert code == 0


def _rows(table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


@pytest.mark.long  # (30 s: .ci/run's second stage; the two below read Kafka in the default run)
def test_the_audit_read_from_kafka_equals_the_export_and_inprocess_audits(
    kafka: KafkaCluster, kafka_spark, network, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap
    group, topic = _name("audited"), _name("events")
    started_ms = int(time.time() * 1000)
    _history(bootstrap, network, group, topic)
    ended_ms = int(time.time() * 1000)

    via_kafka, via_export, in_process = tmp_path / "kafka", tmp_path / "export", tmp_path / "local"
    via_job = tmp_path / "job"
    assert _cli("--bootstrap", bootstrap, "audit", "--engine", "spark", "--source", "kafka",
                "--out", str(via_kafka), "--verify", "--no-report") == 0  # fmt: skip
    assert _cli("--bootstrap", bootstrap, "coord", "export", "--out", str(tmp_path / "x")) == 0
    assert _cli("audit", "--input", str(tmp_path / "x"), "--engine", "spark",
                "--out", str(via_export), "--verify", "--no-report") == 0  # fmt: skip
    assert _cli("--bootstrap", bootstrap, "audit", "--engine", "local",
                "--out", str(in_process), "--verify", "--no-report") == 0  # fmt: skip
    # what spark-submit runs, in this process (the session is the shared one, with the jars)
    assert job_main(["--kafka-bootstrap", bootstrap, "--out", str(via_job), "--no-report"]) == 0

    # the same cut of __marshal, whichever way it was read
    cut = json.loads((via_kafka / "kafka-cut" / "export.json").read_text())
    exported = json.loads((tmp_path / "x" / "export.json").read_text())
    assert cut["stored"] == "kafka" and exported["stored"] == "parquet"
    assert cut["partitions"] == exported["partitions"]

    tables = {path: load_tables(path) for path in (via_kafka, via_export, in_process, via_job)}
    for name, want in tables[in_process].items():
        for path in (via_kafka, via_export, via_job):
            assert _rows(tables[path][name]) == _rows(want), (path.name, name)
    summaries = {p: json.loads((p / "summary.json").read_text()) for p in tables}
    assert {s["engine"] for s in summaries.values()} == {"spark", "in-process"}
    assert len({s["records"] for s in summaries.values()}) == 1
    assert all(summaries[p]["verify"]["ok"] for p in (via_kafka, via_export, in_process))

    # the history is there, on the log's clock in epoch milliseconds (a timestamp off by a
    # unit would put it a thousand times away from this test's run, and differ above)
    got = tables[via_kafka]
    own = [o for o in got["ownership"].to_pylist() if o["group"] == group]
    assert {o["client_id"] for o in own} == {"c1", "c2", "c3"}
    assert all(started_ms - 1000 <= o["start_ms"] <= ended_ms + 1000 for o in own)
    causes = {f["cause"] for f in got["failovers"].to_pylist() if f["group"] == group}
    assert {"released", "stale_takeover"} <= causes, causes
    verdicts = {(v["outcome"], v["reason"]) for v in got["verdicts"].to_pylist()
                if v["group"] == group}  # fmt: skip
    # the admin reset: ReleaseGroup paused the group, the admin's heartbeats set positions
    assert {("accepted", "group_paused"), ("accepted", "position_set")} <= verdicts, verdicts
    coordination = got["coordination"].to_pylist()
    assert sum(c["records"] for c in coordination) == summaries[via_kafka]["records"]
    assert all(c["last_ms"] <= ended_ms + 1000 for c in coordination)
    assert max(c["last_ms"] for c in coordination) >= started_ms


def _topic_with(kafka: KafkaCluster, timestamps: str, values: list[bytes]) -> str:
    topic = _name("cut")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    config = {"message.timestamp.type": timestamps}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    _produce(kafka, topic, values)
    return topic


def _produce(kafka: KafkaCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for value in values:
        producer.produce(topic, value, key=b"k", partition=0, timestamp=1)  # CreateTime: 1 ms
    assert producer.flush(30) == 0


def test_the_kafka_read_is_of_the_cut_fixed_at_the_start(kafka, kafka_spark, network, tmp_path):
    from logmarshal.audit.job import run_spark

    topic = _topic_with(kafka, "LogAppendTime", [b"x%d" % i for i in range(5)])
    before = int(time.time() * 1000)
    info = capture_cut(network, tmp_path / "cut", topic=topic)
    _produce(kafka, topic, [b"later"] * 3)  # written after the cut: not audited
    run_spark(kafka_spark, info, tmp_path / "out", replay_config_for(info),
              kafka_bootstrap=kafka.bootstrap)  # fmt: skip
    (row,) = load_tables(tmp_path / "out")["coordination"].to_pylist()
    assert (row["records"], row["first_offset"], row["last_offset"]) == (5, 0, 4)
    # LogAppendTime, not the producer's 1 ms: the broker's clock, in epoch milliseconds
    assert before - 60_000 <= row["first_ms"] <= row["last_ms"] <= before


def test_a_log_not_on_the_brokers_clock_is_refused(kafka, kafka_spark, network, tmp_path):
    from logmarshal.audit.job import run_spark

    topic = _topic_with(kafka, "CreateTime", [b"y"])
    info = capture_cut(network, tmp_path / "cut", topic=topic)
    with pytest.raises(
        KafkaSourceError,
        match=rf"{topic}/0 offset 0 has timestampType 0 "
        r"\(CreateTime\), not LogAppendTime \(1\)",
    ):
        run_spark(kafka_spark, info, tmp_path / "out", replay_config_for(info),
                  kafka_bootstrap=kafka.bootstrap)  # fmt: skip
