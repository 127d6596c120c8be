"""``logmarshal --json group mirror-offsets`` on Apache Kafka: one JSON document per round,
naming what it committed (the one command tests/logmarshal/cli/test_json_every_command.py cannot run
on a data directory)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from logmarshal import Consumer, Marshaler, NewRecord, connect
from tests.cli_runner import in_process_cli

pytestmark = pytest.mark.kafka

N = 5  # records per partition


def test_mirror_offsets_prints_one_json_document(kafka, capsys, monkeypatch) -> None:
    topic, group = f"mirror-cli-{uuid.uuid4().hex[:8]}", f"marshal-{uuid.uuid4().hex[:8]}"
    network = connect(bootstrap=kafka.bootstrap)
    try:
        network.create_topic(topic, 2)
        for p in range(2):
            now = int(time.time() * 1000)
            network.produce(topic, p, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(N)])
        marshaler = Marshaler(network, "c1", group, 0.5)
        consumer = Consumer(marshaler, topic, mode="alo", mirror_offsets=False)
        try:
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 2 * N:
                assert time.monotonic() < deadline, f"got {len(got)} of {2 * N} messages"
                got.extend(consumer.poll(0.2, max_records=2 * N - len(got)))
            consumer.commit(*got)
        finally:
            consumer.close()  # its release writes both positions to __marshal
            marshaler.close()
    finally:
        network.close()
    cli = in_process_cli(capsys, monkeypatch)
    code, out, err = cli(
        "--bootstrap",
        kafka.bootstrap,
        "--json",
        "group",
        "mirror-offsets",
        group,
        "--kafka-group",
        f"{group}-mirror",
    )
    assert code == 0, err
    assert json.loads(out) == {
        "group": group,
        "kafka_group": f"{group}-mirror",
        "committed": 2,
        "partitions": 2,
    }
