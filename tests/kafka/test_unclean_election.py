"""A coordination log that goes back in time on Apache Kafka: an unclean leader election.

Three KRaft nodes. ``__marshal/0`` lives on nodes 1 (leader) and 2, with
``min.insync.replicas=1`` and ``unclean.leader.election.enable=true``; the data topic lives on
node 3, which no fault touches. Member ``p`` consumes a while and closes (its release is in
both replicas). Node 2 is paused (SIGSTOP) until Kafka drops it from the ISR; member ``a``
(AMO, slow) then claims ``events/0`` and hands out, its coordination records acknowledged by
node 1 alone. Node 1 is killed (SIGKILL) and node 2 resumed: Kafka elects node 2, uncleanly,
and ``__marshal/0`` loses every record ``a`` wrote. Member ``c`` then starts on the log as it
now is, where ``events/0`` is unheld at ``p``'s position.

- With the detection, ``a``'s replay sees the log end below what it applied and halts:
  one error line, ``logmarshal_marshaler_halts_total``, and nothing of ``events/0`` handed
  out by ``a`` after that, so no offset is handed out by both after the election.
- Without it (``Marshaler(_check_rewind=False)``, the switch only these tests use), ``a``
  acts on its old world while ``c`` claims the partition in the rewound log: both hand out
  the same offsets after the election.

What nobody can repair from the log: ``c`` resumes where the rewound log says, below what
``a`` reserved and handed out during the pause (those acknowledged reservations are gone).
docs/bounded-log.md, "A coordination log that loses records", gives the recovery path.
"""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logmarshal.coordlog import COORDINATION_TOPIC
from logmarshal.localkafka import KafkaCluster
from logmarshal.metrics import MarshalerMetrics
from logmarshal.network import NetworkCluster
from tests.rewinding import PollingMember

from .conftest import start_cluster

pytestmark = [pytest.mark.kafka_cluster, pytest.mark.slow]

TOPIC = "events"
HB = 0.5
SERVER = {
    # a paused follower leaves the ISR after 2 s, a killed node is fenced after 3 s
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
}


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _member(bootstrap: str, name: str, pause: float, *, check: bool,
            metrics: MarshalerMetrics | None = None) -> PollingMember:
    # mirror_offsets=False: Kafka's group coordinator may sit on the paused node
    return PollingMember(bootstrap, name, pause, check=check, hb=HB, metrics=metrics,
                         mirror_offsets=False)  # fmt: skip


def _partition(kafka: KafkaCluster, topic: str) -> tuple[int, list[int]]:
    """(leader, ISR) of ``topic``/0, asked of node 3: a paused node would hold the request."""
    admin = AdminClient({"bootstrap.servers": kafka.node(3).bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return int(meta.leader), list(meta.isrs)


def _run(tmp_path, *, check: bool, caplog: pytest.LogCaptureFixture) -> dict:
    kafka = start_cluster(tmp_path / "kafka", nodes=3, heap="384m", server=SERVER)
    members: list[PollingMember] = []
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        marshal = NewTopic(COORDINATION_TOPIC, 1, replica_assignment=[[1, 2]], config={
            "message.timestamp.type": "LogAppendTime", "cleanup.policy": "delete",
            "retention.ms": "-1", "retention.bytes": "-1", "min.insync.replicas": "1",
            "unclean.leader.election.enable": "true",
        })  # fmt: skip
        events = NewTopic(TOPIC, 1, replica_assignment=[[3]])
        for future in admin.create_topics([marshal, events]).values():
            future.result(30)
        _wait(lambda: _partition(kafka, COORDINATION_TOPIC) == (1, [1, 2]), 30, "the ISR")
        producer = Producer({"bootstrap.servers": kafka.node(3).bootstrap, "linger.ms": 5})
        for i in range(20_000):
            producer.produce(TOPIC, b"%d" % i, partition=0)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0

        # p consumes a while and closes while both replicas are in sync: its release is the
        # position the elected log keeps
        nodes_1_3 = f"{kafka.node(1).bootstrap},{kafka.node(3).bootstrap}"
        p = _member(nodes_1_3, "p", 0.0, check=check)
        members.append(p)
        _wait(lambda: len(p.handed) >= 300, 60, "p to hand out")
        p.close()
        members.remove(p)
        kafka.pause(2)
        _wait(lambda: _partition(kafka, COORDINATION_TOPIC)[1] == [1], 30, "node 2 out of ISR")
        # a claims and hands out with its records acknowledged by node 1 alone
        metrics = MarshalerMetrics()
        a = _member(nodes_1_3, "a", 0.2, check=check, metrics=metrics)
        members.append(a)
        _wait(lambda: len(a.handed) >= 100, 60, "a to hand out alone on node 1")
        applied = a.marshaler.replay_offsets()[0]
        caplog.clear()
        kafka.kill(1)
        kafka.resume(2)
        _wait(lambda: _partition(kafka, COORDINATION_TOPIC)[0] == 2, 60, "the unclean election")
        elected = time.monotonic()
        with NetworkCluster(kafka.node(3).bootstrap) as probe:
            log_end = probe.latest_offset(COORDINATION_TOPIC, 0)
        assert log_end < applied, (log_end, applied)
        c = _member(f"{kafka.node(2).bootstrap},{kafka.node(3).bootstrap}", "c", 0.0,
                    check=check)  # fmt: skip
        members.append(c)
        _wait(lambda: len(c.offsets()) >= 300 or bool(a.halted_at and c.offsets()), 30,
              "c to hand out")  # fmt: skip
        time.sleep(4 * HB)  # a window for a to show whether it still hands out
        return {
            "applied": applied,
            "log_end": log_end,
            "halts": a.marshaler.halts(),
            "a_handed": list(a.handed),
            "a_after": a.offsets(elected),
            "a_halted_at": list(a.halted_at),
            "c": c.offsets(),
            "errors": [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR],
            "metric": metrics.registry.get_sample_value(
                "logmarshal_marshaler_halts_total",
                {"group": "g", "client_id": "a", "coordination_partition": "0",
                 "why": "rewound"},
            ),
        }
    finally:
        for m in members:
            m.close()
        kafka.stop()


def test_an_unclean_election_halts_the_member_that_replayed_across_it(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    got = _run(tmp_path, check=True, caplog=caplog)
    halt = got["halts"].get(0)
    assert halt is not None and halt.why == "rewound", got["halts"]
    assert [m for m in got["errors"] if "went back" in m], got["errors"]
    assert got["metric"] == 1.0
    assert len(got["a_halted_at"]) == 1
    late = [o for o, t in got["a_handed"] if t > got["a_halted_at"][0] + 0.2]
    assert late == [], late[:10]
    assert got["c"], "c must hand out (the log it sees is consistent)"
    assert not (got["a_after"] & got["c"]), sorted(got["a_after"] & got["c"])[:10]


def test_without_the_detection_members_act_on_the_elected_log(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    got = _run(tmp_path, check=False, caplog=caplog)
    assert got["halts"] == {} and got["metric"] is None
    twice = got["a_after"] & got["c"]
    assert twice, (len(got["a_after"]), len(got["c"]))
