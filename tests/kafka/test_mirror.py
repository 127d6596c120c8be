"""On Apache Kafka, a Marshal group's members mirror their positions into Kafka's group
offsets: Kafka's own kafka-consumer-groups shows the group's offsets and lag; a live Kafka
consumer group of the same name is refused; the throttle holds against the real broker; a
refusing Kafka does not stop consumption."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from logmarshal import Consumer, Marshaler, Message, NewRecord, connect
from logmarshal.admin.mirror import KafkaOffsetSink
from logmarshal.consumer.mirror import MirrorConflict, OffsetMirror
from logmarshal.localkafka import KafkaCluster, tools

pytestmark = pytest.mark.kafka

HB = 0.5
N = 12  # messages per partition


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def network(kafka: KafkaCluster) -> Iterator:
    cluster = connect(bootstrap=kafka.bootstrap)
    yield cluster
    cluster.close()


def _topic(network, partitions: int) -> str:
    topic = _name("mirror")
    network.create_topic(topic, partitions)
    for p in range(partitions):
        network.produce(
            topic,
            p,
            [NewRecord(value=b"%d" % i, timestamp=int(time.time() * 1000)) for i in range(N)],
        )
    return topic


def _wait(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _drain(consumer: Consumer, count: int, timeout: float = 60.0) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} messages"
        out.extend(consumer.poll(0.2, max_records=count - len(out)))
    return out


def _describe(kafka: KafkaCluster, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """kafka-consumer-groups --describe: (topic, partition) -> (current offset, log end, lag)."""
    run = kafka.tool(
        tools()["kafka-consumer-groups"],
        "--bootstrap-server",
        kafka.bootstrap,
        "--describe",
        "--group",
        group,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    rows = {}
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GROUP", "TOPIC"])
    for line in lines[header + 1 :]:
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group:
            rows[(cells[1], int(cells[2]))] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


def _live_kafka_group(
    bootstrap: str, group: str, topic: str, protocol: str = "classic"
) -> KafkaConsumer:
    member = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    member.subscribe([topic])
    deadline = time.monotonic() + 60
    while not member.assignment():
        assert time.monotonic() < deadline, "the Kafka consumer got no assignment"
        member.poll(0.2)
    return member


def test_kafka_consumer_groups_shows_the_marshal_groups_offsets_and_lag(kafka, network):
    topic, group = _topic(network, 3), _name("marshal")
    committed = {0: 5, 1: N, 2: 0}  # next offset to consume, per partition
    marshaler = Marshaler(network, "c1", group, HB)
    consumer = Consumer(marshaler, topic, mode="alo")  # mirror_offsets: auto, on Kafka
    try:
        mirror = consumer._mirror
        assert isinstance(mirror, OffsetMirror)
        got = _drain(consumer, 3 * N)
        consumer.commit(*[m for m in got if m.offset < committed[m.partition]])
        expected = {(topic, p): o for p, o in committed.items()}
        _wait(lambda: mirror.mirrored() == expected, what=f"the mirror to reach {expected}")
        shown = _describe(kafka, group)
        assert shown == {(topic, p): (o, N, N - o) for p, o in committed.items()}
        assert consumer.lag() == {(topic, p): N - o for p, o in committed.items()}

        consumer.commit(*[m for m in got if m.partition == 0])  # partition 0 done too
    finally:
        consumer.close()
        marshaler.close()
    # the release's positions, mirrored at close
    assert _describe(kafka, group)[(topic, 0)] == (N, N, 0)
    assert mirror.failures == 0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])  # consumer: KIP-848's groups
def test_a_marshal_group_named_as_a_live_kafka_group_is_refused(kafka, network, protocol):
    topic, group = _topic(network, 1), _name("taken")
    member = _live_kafka_group(kafka.bootstrap, group, topic, protocol)
    marshaler = Marshaler(network, "c1", group, HB)
    try:
        with pytest.raises(
            MirrorConflict,
            match=rf"group '{group}' is also a live Kafka "
            r"consumer group \(state STABLE, 1 member",
        ):
            Consumer(marshaler, topic, mode="alo")
        consumer = Consumer(marshaler, topic, mode="alo", mirror_offsets=False)  # opted out
        try:
            assert len(_drain(consumer, N)) == N
        finally:
            consumer.close()
    finally:
        marshaler.close()
        member.close()
    # the Kafka group, now empty, no longer stands in the way
    marshaler = Marshaler(network, "c2", group, HB)
    try:
        consumer = Consumer(marshaler, topic, mode="alo")
        assert consumer._mirror is not None
        consumer.close()
    finally:
        marshaler.close()


class _Counted(KafkaOffsetSink):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commits = 0

    def commit(self, group, offsets) -> None:
        self.commits += 1
        super().commit(group, offsets)


def test_the_throttle_holds_against_kafka(kafka, network):
    topic, group = _topic(network, 2), _name("throttled")
    sink = _Counted(kafka.bootstrap)
    now = [0.0]
    current = {(topic, 0): 1, (topic, 1): 2}
    mirror = OffsetMirror(group, sink, lambda: current, interval=HB, clock=lambda: now[0])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})

    def in_kafka() -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group)]
        found = admin.list_consumer_group_offsets(request)[group].result(30)
        return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}

    deadline = time.monotonic() + 30
    while mirror.mirror_once() != 2:  # a new Kafka's group coordinator may still be loading
        assert time.monotonic() < deadline, f"no first commit: {mirror.failures} failures"
        now[0] += HB  # a failed attempt holds the next one back for an interval
        time.sleep(0.2)
    first = sink.commits
    assert in_kafka() == current
    current[(topic, 0)] = 7
    for _ in range(5):  # within the interval: nothing reaches Kafka
        now[0] += HB / 10
        assert mirror.mirror_once() == 0
    assert sink.commits == first and in_kafka() == {(topic, 0): 1, (topic, 1): 2}
    now[0] += HB
    assert mirror.mirror_once() == 1  # only the partition that moved
    assert sink.commits == first + 1 and in_kafka() == {(topic, 0): 7, (topic, 1): 2}


def test_a_refusing_kafka_does_not_stop_consumption(kafka, network, caplog):
    topic, group = _topic(network, 1), _name("refused")
    other = _topic(network, 1)
    caplog.set_level(logging.WARNING, logger="logmarshal.consumer.mirror")
    marshaler = Marshaler(network, "c1", group, HB)
    consumer = Consumer(marshaler, topic, mode="alo")
    member = None
    try:
        mirror = consumer._mirror
        assert mirror is not None
        consumer.commit(*_drain(consumer, 4))
        _wait(lambda: mirror.mirrored() == {(topic, 0): 4}, what="the first mirror")
        # a classic Kafka group of the same name comes alive after the check at start:
        # Kafka now refuses the memberless commits (UNKNOWN_MEMBER_ID)
        member = _live_kafka_group(kafka.bootstrap, group, other)
        consumer.commit(*_drain(consumer, 4))
        _wait(lambda: mirror.failures >= 1, what="a refused mirror commit")
        consumer.commit(*_drain(consumer, N - 8))  # consumption goes on
        assert consumer.position(topic, 0) == N - 1
        assert mirror.mirrored() == {(topic, 0): 4}
        refusals = [r.getMessage() for r in caplog.records if "cannot mirror" in r.getMessage()]
        assert len(refusals) == 1 and "UNKNOWN_MEMBER_ID" in refusals[0], refusals
    finally:
        consumer.close()
        marshaler.close()
        if member is not None:
            member.close()


def test_a_kafka_consumer_group_moving_to_marshal_resumes_at_its_committed_offsets(kafka, network):
    """A Kafka consumer group commits its offsets and stops; a Marshal group of its name,
    with nothing in ``__marshal`` for it, starts where Kafka's group was (not where
    ``auto_offset_reset`` says: "earliest" handed out everything again)."""
    topic, group = _topic(network, 3), _name("moving")
    committed = {0: 5, 1: N, 2: 0}
    member = _live_kafka_group(kafka.bootstrap, group, topic)
    member.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False
    )
    member.close()  # (the group is Empty: a Marshal group may take its name)
    marshaler = Marshaler(network, "c1", group, HB)
    consumer = Consumer(marshaler, topic, mode="alo", auto_offset_reset="earliest")
    try:
        got = _drain(consumer, sum(N - o for o in committed.values()))
        assert sorted((m.partition, m.offset) for m in got) == [
            (p, o) for p, start in sorted(committed.items()) for o in range(start, N)
        ]
        assert not consumer.poll(1.0)  # nothing before the committed offsets
    finally:
        consumer.close()
        marshaler.close()


def test_an_amo_group_whose_marshal_topic_was_deleted_hands_nothing_out_again(kafka, network):
    """``__marshal`` (and its snapshots) deleted while the group was stopped, then made again
    by its next member: the group's positions are gone from the log, and AMO handed every
    record out again (2,000 of 2,000 in an attack). Its mirrored offsets in Kafka are where
    it starts now: only the records produced since are handed out."""
    from .test_marshal_topic import drop_topic

    topic, group = _topic(network, 3), _name("amo")
    marshaler = Marshaler(network, "c1", group, HB)
    consumer = Consumer(marshaler, topic, mode="amo", auto_offset_reset="earliest")
    try:
        assert len(_drain(consumer, 3 * N)) == 3 * N
    finally:
        consumer.close()  # (its release's positions mirrored at close)
        marshaler.close()
    for name in ("__marshal", "__marshal_snapshots"):
        drop_topic(network, name)
    for p in range(3):
        network.produce(topic, p, [NewRecord(value=b"new", timestamp=int(time.time() * 1000))] * 2)
    marshaler = Marshaler(network, "c2", group, HB)
    consumer = Consumer(marshaler, topic, mode="amo", auto_offset_reset="earliest")
    try:
        got = _drain(consumer, 3 * 2)
        assert sorted((m.partition, m.offset) for m in got) == [
            (p, o) for p in range(3) for o in (N, N + 1)
        ]
        assert not consumer.poll(1.0)
    finally:
        consumer.close()
        marshaler.close()


@pytest.mark.long  # (15 s: the node paused for the sink's timeout)
def test_a_kafka_away_at_the_consumers_start_does_not_turn_the_mirror_off(kafka, network, caplog):
    """Brokers that stop answering right after the cluster connected (the node paused for
    the sink's 10 s timeout): the mirror opens on what the connection said (Apache Kafka)
    and commits once Kafka answers again. It asked Kafka again and, failing, turned itself
    off for the Consumer's life: no offsets for Kafka's tools, and no committed-offset start
    for a partition the coordination log has no position for."""
    from logmarshal.consumer.mirror import open_mirror

    topic = _topic(network, 1)
    group = _name("away")
    kafka.pause(1)
    try:
        with caplog.at_level(logging.WARNING):
            mirror = open_mirror(group, network, None, lambda: {(topic, 0): 5},
                                 interval=HB, clock=time.monotonic, name="m")  # fmt: skip
    finally:
        kafka.resume(1)
    assert mirror is not None, caplog.text
    try:
        _wait(lambda: mirror.mirror_once(force=True) == 1, what="a commit once Kafka is back")
        sink = KafkaOffsetSink(kafka.bootstrap)
        try:
            assert sink.committed(group, [(topic, 0)]) == {(topic, 0): 5}
        finally:
            sink.close()
    finally:
        mirror.close()
