"""A data partition's log cut under a live group on Apache Kafka: an unclean leader election.

Three KRaft nodes. ``__marshal`` lives on node 3, which no fault touches; ``events/0`` on
nodes 1 (leader) and 2, with ``min.insync.replicas=1`` and unclean elections on. 1,000
records are written to both replicas; node 2 is paused (SIGSTOP) until it leaves the ISR and
500 more are written to node 1 alone (acks=1). An ALO and an AMO member hand out all 1,500.
Node 1 is killed (SIGKILL) and node 2 resumed: Kafka elects it uncleanly, and ``events/0``
ends at 1,000 again. 800 records are then written with acks=all, at offsets 1,000..1,799:
the log grows back past both members' position, 1,500.

- ALO hands out every one of the 800 (KIP-320: the leader epochs of what the member read
  tell the cut, ``logmarshal/network/epochs.py``), and says that records were lost. Before,
  the member's offset was in the log again and it fetched on from it: 500 records
  acknowledged after the election, at 1,000..1,499, were never handed out, and nothing was
  logged.
- AMO hands no offset out twice: it goes on from 1,500, and says that the records written
  at 1,000..1,499 since the election are not handed out.

A member that starts after the cut (a restart, a new holder) read nothing before: its
position comes from ``__marshal``, an offset without a leader epoch. The offsets mirror
commits the epoch with each position, and the new member checks it (KIP-320,
``logmarshal/consumer/cut_checks.py``): an ALO group stopped before the cut, started again
after it, hands out the 800, each once (before: only the 300 past its position). Not covered: a start
where the mirror had not caught up with the position (a member killed while busy).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logmarshal import Consumer, Marshaler
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.consumer.cut_checks import CHECK_HOLD
from logmarshal.localkafka import KafkaCluster
from logmarshal.network import NetworkCluster

from .conftest import FAULT_SERVER, start_cluster, wait_for

pytestmark = [pytest.mark.kafka_cluster, pytest.mark.slow]

TOPIC = "events"
HB = 0.5
SERVER = FAULT_SERVER
BOTH, ALONE, AFTER = 1000, 500, 800


_wait = wait_for


def _partition(kafka: KafkaCluster) -> tuple[int, list[int]]:
    """(leader, ISR) of ``events/0``, asked of node 3 (a paused node would hold it)."""
    admin = AdminClient({"bootstrap.servers": kafka.node(3).bootstrap})
    partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    if 0 not in partitions:
        return -1, []
    return int(partitions[0].leader), list(partitions[0].isrs)


def _produce(bootstrap: str, prefix: str, count: int, acks: str) -> dict[str, int]:
    """``count`` records ``prefix-i`` to ``events/0``: value -> offset of those acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": False, "message.timeout.ms": 30000})  # fmt: skip
    acked: dict[str, int] = {}

    def report(err, msg) -> None:
        if err is None:
            acked[msg.value().decode()] = msg.offset()

    for i in range(count):
        producer.produce(TOPIC, f"{prefix}-{i}".encode(), partition=0, on_delivery=report)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def _topics_and_records(kafka: KafkaCluster) -> str:
    """``__marshal`` on node 3; ``events/0`` on nodes 1 (leader) and 2, unclean elections on,
    with 1,000 records on both: the bootstrap of nodes 1 and 3."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    marshal = NewTopic(COORDINATION_TOPIC, 1, replica_assignment=[[3]], config={
        "message.timestamp.type": "LogAppendTime", "cleanup.policy": "delete",
        "retention.ms": "-1", "retention.bytes": "-1",
    })  # fmt: skip
    events = NewTopic(TOPIC, 1, replica_assignment=[[1, 2]], config={
        "min.insync.replicas": "1", "unclean.leader.election.enable": "true",
    })  # fmt: skip
    for future in admin.create_topics([marshal, events]).values():
        future.result(30)
    _wait(lambda: _partition(kafka) == (1, [1, 2]), 60, "the ISR")
    nodes_1_3 = f"{kafka.node(1).bootstrap},{kafka.node(3).bootstrap}"
    _produce(nodes_1_3, "both", BOTH, "all")
    return nodes_1_3


class _Member:
    """A Consumer of ``events`` polled by a thread of its own (ALO commits what it got)."""

    def __init__(self, bootstrap: str, name: str, mode: str, group: str = "", mirror=False) -> None:
        self.cluster = NetworkCluster(bootstrap, timeout=5.0)
        self.marshaler = Marshaler(self.cluster, name, group or f"g-{mode}", HB,
                                   coordination_partitions=1, snapshot_records=None,
                                   truncate=False)  # fmt: skip
        self.consumer = Consumer(self.marshaler, TOPIC, mode=mode, rebalance="none",
                                 mirror_offsets=mirror)  # fmt: skip
        self.handed: list[tuple[int, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poll-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self.consumer.poll(0.2)
            now = time.monotonic()
            self.handed.extend((m.offset, (m.value or b"").decode(), now) for m in got)
            if got and self.consumer.mode == "alo":
                self.consumer.commit(*got)

    def values(self, since: float) -> dict[str, int]:
        return {value: offset for offset, value, t in list(self.handed) if t >= since}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close(timeout=5)
        self.marshaler.close(timeout=5)
        self.cluster.close()


def test_a_live_group_hands_out_what_was_written_after_the_cut(tmp_path, caplog) -> None:
    kafka = start_cluster(tmp_path / "kafka", nodes=3, heap="384m", server=SERVER)
    members: list[_Member] = []
    try:
        nodes_1_3 = _topics_and_records(kafka)
        alo, amo = _Member(nodes_1_3, "alo", "alo"), _Member(nodes_1_3, "amo", "amo")
        members += [alo, amo]
        for m in members:
            _wait(lambda m=m: len(m.handed) >= BOTH, 90, "the records on both replicas")
        kafka.pause(2)
        _wait(lambda: _partition(kafka)[1] == [1], 30, "node 2 out of the ISR")
        alone = _produce(nodes_1_3, "alone", ALONE, "1")
        assert sorted(alone.values()) == list(range(BOTH, BOTH + ALONE))
        for m in members:
            _wait(lambda m=m: len(m.handed) >= BOTH + ALONE, 60, "the records on node 1 alone")
        time.sleep(2 * HB)  # (ALO's commits land)
        with caplog.at_level(logging.ERROR, logger="logmarshal.core.fetching"):
            kafka.kill(1)
            kafka.resume(2)
            _wait(lambda: _partition(kafka)[0] == 2, 60, "the unclean election")
            elected = time.monotonic()
            nodes_2_3 = f"{kafka.node(2).bootstrap},{kafka.node(3).bootstrap}"
            after = _produce(nodes_2_3, "after", AFTER, "all")
            assert sorted(after.values()) == list(range(BOTH, BOTH + AFTER)), "not cut"
            _wait(lambda: set(after) <= set(alo.values(elected)), 60, "ALO to hand them out")
            _wait(lambda: amo.values(elected).keys() >= {f"after-{i}" for i in range(500, 800)},
                  60, "AMO to hand out what lies past its position")  # fmt: skip
            time.sleep(4 * HB)  # (anything more either would hand out)
        handed = alo.values(elected)
        assert all(handed[v] == o for v, o in after.items()), "handed at other offsets"
        offsets = [o for o, _, _ in amo.handed]
        assert len(offsets) == len(set(offsets)), "AMO handed an offset out twice"
        assert min(o for o, _, t in amo.handed if t >= elected) == BOTH + ALONE
        said = [r.getMessage() for r in caplog.records]
        assert any("the log was cut at 1000, below the position 1500" in s
                   and "was handed out before the cut is gone" in s for s in said), said  # fmt: skip
        assert any("cut at 1000" in s and "are not handed out (AMO" in s for s in said), said
    finally:
        for m in members:
            m.close()
        kafka.stop()


@pytest.mark.parametrize("idle", [False, True], ids=["busy", "idle"])
def test_a_member_started_after_the_cut_hands_out_what_was_written_there(
    tmp_path, caplog, idle
) -> None:
    """The ALO group hands out all 1,500 and stops (its mirror commits position and epoch);
    the log is cut at 1,000 and written to 1,800; a new member of the group starts.

    ``idle`` (an attack on 766b7cb): a member that read nothing starts and stops before the
    cut (its mirror erased the epoch: the next start was not checked); the new member
    starts when the log is back at 1,500 exactly, and the last 300 records come after the
    hold of its first records (its check, waiting for them, was never told they came)."""
    kafka = start_cluster(tmp_path / "kafka", nodes=3, heap="384m", server=SERVER)
    members: list[_Member] = []
    try:
        nodes_1_3 = _topics_and_records(kafka)
        kafka.pause(2)
        _wait(lambda: _partition(kafka)[1] == [1], 30, "node 2 out of the ISR")
        assert sorted(_produce(nodes_1_3, "alone", ALONE, "1").values()) == list(
            range(BOTH, BOTH + ALONE)
        )
        first = _Member(nodes_1_3, "first", "alo", "g-restart", mirror=True)
        members.append(first)
        _wait(lambda: len(first.handed) >= BOTH + ALONE, 90, "the first member to hand out")
        time.sleep(2 * HB)  # (its commits land)
        first.close()  # (its mirror commits the position it releases, with the epoch)
        members.remove(first)
        if idle:
            between = _Member(nodes_1_3, "between", "alo", "g-restart", mirror=True)
            time.sleep(4 * HB)  # (it claims, reads nothing, and its mirror passes)
            between.close()
        with caplog.at_level(logging.INFO, logger="logmarshal"):
            kafka.kill(1)
            kafka.resume(2)
            _wait(lambda: _partition(kafka)[0] == 2, 60, "the unclean election")
            nodes_2_3 = f"{kafka.node(2).bootstrap},{kafka.node(3).bootstrap}"
            after = _produce(nodes_2_3, "after", ALONE if idle else AFTER, "all")
            second = _Member(nodes_2_3, "second", "alo", "g-restart", mirror=True)
            members.append(second)
            if idle:
                time.sleep(CHECK_HOLD + 1)  # (at the log's end: nothing to read yet)
                after.update(_produce(nodes_2_3, "late", AFTER - ALONE, "all"))
            assert sorted(after.values()) == list(range(BOTH, BOTH + AFTER)), "not cut"
            _wait(lambda: set(after) <= set(second.values(0)), 60, "the new member to hand out")
        handed = second.values(0)
        assert all(handed[v] == o for v, o in after.items()), "handed at other offsets"
        # its first records waited for the check: nothing handed out before the cut was told
        assert sorted(o for o, _, _ in second.handed) == list(range(BOTH, BOTH + AFTER))
        said = [r.getMessage() for r in caplog.records]
        assert any("its log was cut at 1000, below 1500" in s for s in said), said
        assert any("the log was cut at 1000, below the position 1500" in s for s in said), said
    finally:
        for m in members:
            m.close()
        kafka.stop()
