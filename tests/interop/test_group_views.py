"""Kafka's tools see a Marshal group on logmarshal's broker, read-only.

A real logmarshal Consumer consumes over the network; confluent-kafka's and kafka-python's
admin clients (and kcat) list the group, describe its fresh holders and read its positions
as committed offsets. A classic Kafka consumer is refused at once, with the explanation.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

import logmarshal
from logmarshal import _direct as direct
from logmarshal._broker_groups import MarshalGroupView
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.groups import CLASSIC_REFUSED
from tests.marshal_group import consuming_group, wait_for

TOPIC = "orders"
GROUP = "billing"
N = 20


@pytest.fixture
def group_broker(tmp_path) -> Iterator[BrokerThread]:
    config = BrokerConfig(data_dir=tmp_path / "data", port=0, group_view=MarshalGroupView)
    with BrokerThread(config) as running:
        yield running


@pytest.fixture
def consuming(group_broker) -> Iterator[str]:
    """A Marshal group consuming TOPIC (2 partitions) until the test ends."""
    with consuming_group(group_broker.bootstrap, TOPIC, GROUP, N):
        yield group_broker.bootstrap


def _confluent_offsets(admin: AdminClient) -> dict[tuple[str, int], int]:
    req = [ConsumerGroupTopicPartitions(GROUP)]
    result = admin.list_consumer_group_offsets(req)[GROUP].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def test_confluent_admin_lists_describes_and_reads_positions(consuming):
    admin = AdminClient({"bootstrap.servers": consuming})
    listed = admin.list_consumer_groups().result(10)
    assert GROUP in [g.group_id for g in listed.valid]
    # positions arrive with the heartbeats that carry the commits
    expected = {(TOPIC, 0): N // 2, (TOPIC, 1): N // 2}
    wait_for(lambda: _confluent_offsets(admin) == expected, what="committed offsets")

    def described():
        d = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
        return d if d.members else None

    d = wait_for(described, what="a fresh member")
    assert d.group_id == GROUP and str(d.state).endswith("STABLE")
    (member,) = d.members
    assert member.client_id == "worker-1"
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
    assert {tp.topic for tp in member.assignment.topic_partitions} == {TOPIC}


def test_kafka_python_admin_lists_describes_and_reads_positions(consuming):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    admin = KafkaAdminClient(bootstrap_servers=consuming)
    try:
        listed = admin.list_groups()
        assert {"group_id": GROUP, "protocol_type": "consumer"}.items() <= next(
            g for g in listed if g["group_id"] == GROUP
        ).items()
        expected = {KTP(TOPIC, 0): N // 2, KTP(TOPIC, 1): N // 2}
        wait_for(
            lambda: (
                {tp: o.offset for tp, o in admin.list_group_offsets(GROUP)[GROUP].items()}
                == expected
            ),
            what="committed offsets",
        )
        group = wait_for(
            lambda: (g := admin.describe_groups([GROUP])[GROUP])["members"] and g,
            what="a fresh member",
        )
        assert group["group_state"] == "Stable" and group["protocol_type"] == "consumer"
        assert group["error"] is None
        (member,) = group["members"]
        assert member["client_id"] == "worker-1"
        assert member["member_assignment"]["assigned_partitions"] == [
            {"topic": TOPIC, "partitions": [0, 1]}
        ]
        assert member["member_metadata"]["topics"] == [TOPIC]
    finally:
        admin.close()


def test_kcat_and_consumer_committed_give_the_lag(consuming, kcat):
    """Lag as a Kafka operator computes it: kcat's end offsets minus committed offsets."""
    listing = subprocess.run(
        [kcat, "-b", consuming, "-L"], capture_output=True, text=True, timeout=20
    )
    assert listing.returncode == 0 and f'topic "{TOPIC}" with 2 partitions' in listing.stdout
    ends = subprocess.run(
        [kcat, "-b", consuming, "-Q", "-t", f"{TOPIC}:0:-1", "-t", f"{TOPIC}:1:-1"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert ends.returncode == 0, ends.stderr
    assert ends.stdout.split("\n")[:2] == [f"{TOPIC} [{p}] offset {N // 2}" for p in (0, 1)]
    consumer = KafkaConsumer({"bootstrap.servers": consuming, "group.id": GROUP})
    try:
        wait_for(
            lambda: (
                [tp.offset for tp in consumer.committed([CTP(TOPIC, 0), CTP(TOPIC, 1)], timeout=10)]
                == [N // 2, N // 2]
            ),
            what="committed offsets through OffsetFetch",
        )
    finally:
        consumer.close()


def test_classic_subscribe_fails_fast_with_the_explanation(group_broker):
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})

    admin.create_topics([NewTopic("plain", 1, replication_factor=1)])["plain"].result(10)
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "group.id": "classic",
            "session.timeout.ms": 45000,
        }
    )
    started = time.monotonic()
    errors = []
    try:
        consumer.subscribe(["plain"])
        while time.monotonic() - started < 10 and not any("logmarshal" in e.str() for e in errors):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
        explained = time.monotonic() - started
        # a commit fails too, at once (it used to wait 46 s for a coordinator)
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[CTP("plain", 0, 1)], asynchronous=False)
        committed = time.monotonic() - started - explained
    finally:
        consumer.close()
    assert errors, "the classic consumer never saw an error"
    assert all(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors)
    assert any(CLASSIC_REFUSED in e.str() for e in errors), [e.str() for e in errors]
    # bounds against a hang (librdkafka used to wait 46 s), not performance figures
    assert explained < 10 and committed < 10
    assert raised.value.args[0].code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError._WAIT_COORD,
    )


def test_kafka_python_group_consumer_is_refused_at_once(group_broker):
    from kafka import KafkaConsumer as KPConsumer
    from kafka.errors import GroupAuthorizationFailedError

    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    admin.create_topics([NewTopic("plain2", 1, replication_factor=1)])["plain2"].result(10)
    consumer = KPConsumer("plain2", bootstrap_servers=group_broker.bootstrap, group_id="classic")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.poll(10_000)
    finally:
        consumer.close()


@contextlib.contextmanager
def _brokers(tmp_path, n: int = 2) -> Iterator[tuple[list[BrokerThread], str]]:
    """A cluster of ``n`` logmarshal brokers, each with the group view; (brokers, bootstrap)."""
    from storage.broker import BrokerAddress, format_cluster_file
    from tests.storage.broker.helpers import free_ports

    ports = free_ports(n)
    addresses = [BrokerAddress(i, "127.0.0.1", ports[i - 1]) for i in range(1, n + 1)]
    cluster_file = tmp_path / "cluster"
    cluster_file.write_text(format_cluster_file(addresses))
    with contextlib.ExitStack() as stack:
        brokers = [
            stack.enter_context(
                BrokerThread(
                    BrokerConfig(
                        data_dir=tmp_path / f"b{a.node_id}",
                        host=a.host,
                        port=a.port,
                        broker_id=a.node_id,
                        cluster_file=cluster_file,
                        group_view=MarshalGroupView,
                    )
                )
            )
            for a in addresses
        ]
        yield brokers, ",".join(b.bootstrap for b in brokers)


def test_every_broker_of_a_cluster_sees_every_group(tmp_path):
    with _brokers(tmp_path) as (brokers, bootstrap), contextlib.ExitStack() as stack:
        cluster = stack.enter_context(contextlib.closing(logmarshal.connect(bootstrap=bootstrap)))
        cluster.create_topic(TOPIC, partitions=6)
        marshaler = logmarshal.Marshaler(cluster, "w", GROUP, 30.0, coordination_partitions=4)
        stack.callback(marshaler.close)
        for p in range(6):
            landed = direct.claim_partition(marshaler, TOPIC, p)
            assert direct.wait_verdict(marshaler, landed, 10).accepted
            landed = direct.heartbeat(marshaler, TOPIC, p, 10 * p)
            assert direct.wait_verdict(marshaler, landed, 10).accepted
        leaders = {brokers[0].server.handlers.layout.leader("__marshal", cp) for cp in range(4)}
        assert leaders == {1, 2}  # the coordination log really is spread
        expected = {(TOPIC, p): 10 * p + 1 for p in range(6)}
        for broker in brokers:
            snap = broker.server.handlers.groups.provider.group(GROUP)
            assert dict(snap.positions) == expected
            (member,) = snap.members
            assert member.assignment == ((TOPIC, tuple(range(6))),)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert _confluent_offsets(admin) == expected


def test_every_broker_restores_a_snapshot_after_truncation(tmp_path):
    """Each broker's view restores the newest snapshot once truncation deleted records it
    had not read (the idle partitions' positions live only there): of the ``__marshal``
    partition it leads, read in place, with that partition's snapshots from the broker that
    leads them (on four brokers another one), and of those the others lead, over the
    network. Until 2026-12-04 the view started over from the new start over the network,
    and looked for snapshots only in its own data directory: it lost those positions (fails
    without either: no position for the idle partitions of those cps)."""
    from logmarshal._coordlog import SNAPSHOT_TOPIC

    with _brokers(tmp_path, 4) as (brokers, bootstrap), contextlib.ExitStack() as stack:
        cluster = stack.enter_context(contextlib.closing(logmarshal.connect(bootstrap=bootstrap)))
        layout = brokers[0].server.handlers.layout
        marshaler = logmarshal.Marshaler(
            cluster,
            "w",
            GROUP,
            30.0,
            coordination_partitions=4,
            snapshot_records=20,
            snapshot_interval=None,
            fetch_wait=0.05,
        )
        stack.callback(marshaler.close)
        cps = set(range(4))
        assert {layout.leader("__marshal", cp) for cp in cps} == {1, 2, 3, 4}
        # a broker leading a __marshal cp whose snapshots another broker leads
        assert any(
            layout.leader("__marshal", cp) != layout.leader(SNAPSHOT_TOPIC, cp) for cp in cps
        )
        idle = {marshaler.coordination_partition(TOPIC, p): p for p in range(64)}
        busy = {marshaler.coordination_partition("busy", p): p for p in range(64)}
        assert set(idle) == set(busy) == cps
        cluster.create_topic(TOPIC, partitions=64)
        for p in idle.values():  # idle once released: their positions are written once
            assert direct.wait_verdict(marshaler, direct.claim_partition(marshaler, TOPIC, p), 10)
            landed = direct.release_partition(marshaler, TOPIC, p, 10 * p + 5)
            assert direct.wait_verdict(marshaler, landed, 10).accepted
        expected = {(TOPIC, p): 10 * p + 6 for p in idle.values()}
        for broker in brokers:  # read once before the truncation: they are behind it after
            assert dict(broker.server.handlers.groups.provider.group(GROUP).positions) == expected
        read = {cp: cluster.latest_offset("__marshal", cp) for cp in cps}
        for p in busy.values():
            assert direct.wait_verdict(marshaler, direct.claim_partition(marshaler, "busy", p), 10)
        for n in range(40):  # traffic in every cp moves snapshots and truncation on
            for p in busy.values():
                landed = direct.heartbeat(marshaler, "busy", p, n)
                assert direct.wait_verdict(marshaler, landed, 10).accepted
        deadline = time.monotonic() + 20
        while any(cluster.earliest_offset("__marshal", cp) < read[cp] for cp in cps):
            assert time.monotonic() < deadline, "__marshal was not truncated"
            time.sleep(0.05)
        for broker in brokers:
            view = broker.server.handlers.groups.provider
            fresh = MarshalGroupView(broker.server._data_dir, broker.server.handlers.layout)
            stack.callback(fresh.close)
            for v in (view, fresh):
                positions = dict(v.group(GROUP).positions)
                assert {k: positions.get(k) for k in expected} == expected
