"""``__marshal`` on Apache Kafka: created with what the protocol needs, set on the topic
itself (so a broker whose defaults differ cannot hand it compaction or a retention), and a
pre-existing one that breaks the protocol refused when a Marshaler is created.

These tests drop and recreate ``__marshal`` on the session's Kafka; each leaves it absent,
so the next user creates it as the library does."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.errors import TopicExists
from logmarshal.marshaler import CoordinationTopicError, Marshaler
from logmarshal.network import NetworkCluster
from rationalizer import ClaimingPartition, encode
from storage._records import TimestampType, iter_batches

pytestmark = pytest.mark.kafka

LAT = {"message.timestamp.type": "LogAppendTime"}
KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}


def drop_topic(cluster: NetworkCluster, name: str) -> None:
    """Delete ``name`` and wait until Kafka no longer lists it."""
    if name in cluster.topics():
        cluster.delete_topic(name)
    deadline = time.monotonic() + 30
    while name in cluster.topics():
        assert time.monotonic() < deadline, f"{name} still listed 30 s after its deletion"
        time.sleep(0.1)  # Kafka deletes asynchronously: no clock of ours to advance


def create_topic(
    cluster: NetworkCluster, name: str, partitions: int, config: Mapping[str, str]
) -> None:
    """create_topic, retried while Kafka still finishes deleting an earlier one."""
    deadline = time.monotonic() + 30
    while True:
        try:
            cluster.create_topic(name, partitions, dict(config))
            return
        except TopicExists:
            assert time.monotonic() < deadline, f"{name} could not be recreated"
            time.sleep(0.2)


@pytest.fixture
def cluster(bootstrap: str) -> Iterator[NetworkCluster]:
    with NetworkCluster(bootstrap, timeout=30.0) as c:
        drop_topic(c, COORDINATION_TOPIC)
        drop_topic(c, SNAPSHOT_TOPIC)
        try:
            yield c
        finally:
            drop_topic(c, COORDINATION_TOPIC)
            drop_topic(c, SNAPSHOT_TOPIC)


def test_a_marshaler_creates_marshal_with_the_protocols_settings_on_the_topic(
    cluster: NetworkCluster, bootstrap: str
) -> None:
    m = Marshaler(
        cluster,
        "a",
        "g-create",
        1.0,
        coordination_partitions=3,
        fetch_wait=0.1,
        snapshot_interval=None,
    )
    try:
        landed = direct.claim_partition(m, "events", 0)
        assert direct.wait_verdict(m, landed, timeout=20) is not None
    finally:
        m.close()
    assert cluster.partitions(COORDINATION_TOPIC) == 3
    resource = ConfigResource("topic", COORDINATION_TOPIC)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = admin.describe_configs([resource])[resource].result(30)
    wanted = {
        "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "flush.messages": "1",
        "segment.bytes": str(4 << 20),
    }
    assert {k: entries[k].value for k in wanted} == wanted
    # set on the topic, even where equal to Kafka's defaults: a cluster whose
    # log.cleanup.policy or log.retention.bytes differ cannot hand them to __marshal
    topic_level = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert {k: entries[k].source for k in wanted} == dict.fromkeys(wanted, topic_level)
    # and the claim was stamped by the broker's clock
    data = cluster.fetch_batches(COORDINATION_TOPIC, landed.coordination_partition, 0) or b""
    stamped = [h.timestamp_type for h, _ in iter_batches(data)]
    assert stamped and set(stamped) == {TimestampType.LOG_APPEND_TIME}


@pytest.mark.parametrize(
    ("config", "named"),
    [
        pytest.param(KEEP, "message.timestamp.type=CreateTime", id="CreateTime"),
        pytest.param(
            {**LAT, **KEEP, "cleanup.policy": "compact"}, "cleanup.policy=compact", id="compact"
        ),
        pytest.param(
            {**LAT, **KEEP, "cleanup.policy": "compact,delete"},
            "cleanup.policy=compact,delete",
            id="compact-delete",
        ),
        pytest.param(
            {**LAT, **KEEP, "retention.ms": "604800000"},
            "retention.ms=604800000",
            id="retention-ms",
        ),
        pytest.param(
            {**LAT, **KEEP, "retention.bytes": "1073741824"},
            "retention.bytes=1073741824",
            id="retention-bytes",
        ),
    ],
)
def test_a_misconfigured_marshal_is_refused_when_a_marshaler_is_created(
    cluster: NetworkCluster, config: dict[str, str], named: str
) -> None:
    create_topic(cluster, COORDINATION_TOPIC, 2, config)
    with pytest.raises(CoordinationTopicError) as raised:
        Marshaler(cluster, "a", "g-refused", 1.0, coordination_partitions=2, fetch_wait=0.1)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"refusing to coordinate on {COORDINATION_TOPIC}"
    )
    assert named in message
    # only what is wrong is named
    for other in ("message.timestamp.type", "cleanup.policy", "retention.ms", "retention.bytes"):
        if not named.startswith(other + "="):
            assert f"{other}=" not in message
    # nothing was written to the refused topic
    assert [cluster.latest_offset(COORDINATION_TOPIC, p) for p in range(2)] == [0, 0]


def test_every_problem_is_named_in_one_line(cluster: NetworkCluster) -> None:
    create_topic(
        cluster, COORDINATION_TOPIC, 1, {"cleanup.policy": "compact", "retention.ms": "3600000"}
    )
    with pytest.raises(CoordinationTopicError) as raised:
        Marshaler(cluster, "a", "g-refused", 1.0, coordination_partitions=1, fetch_wait=0.1)
    message = str(raised.value)
    assert "\n" not in message
    for named in (
        "message.timestamp.type=CreateTime",
        "cleanup.policy=compact",
        "retention.ms=3600000",
    ):
        assert named in message
    assert "retention.bytes=" not in message


def test_a_well_configured_existing_marshal_is_used_as_it_is(cluster: NetworkCluster) -> None:
    create_topic(cluster, COORDINATION_TOPIC, 2, {**LAT, **KEEP, "cleanup.policy": "delete"})
    m = Marshaler(
        cluster,
        "a",
        "g-existing",
        1.0,
        coordination_partitions=4,
        fetch_wait=0.1,
        snapshot_interval=None,
    )
    try:
        landed = direct.claim_partition(m, "events", 0)
        assert direct.wait_verdict(m, landed, timeout=20) is not None
    finally:
        m.close()
    assert cluster.partitions(COORDINATION_TOPIC) == 2  # the count is fixed once created


def _wait_end(cluster: NetworkCluster, end: int) -> None:
    deadline = time.monotonic() + 30
    while cluster.latest_offset(COORDINATION_TOPIC, 0) != end:
        assert time.monotonic() < deadline, f"__marshal/0 never ended at {end}"
        time.sleep(0.05)  # Kafka's transaction coordinator: no clock of ours


def _worlds(m: Marshaler) -> tuple[dict[int, int], list[bytes]]:
    with m.replay_paused():
        return m.replay_offsets(), [w.to_bytes() for w in m.worlds()]


def _foreign_transactions(bootstrap: str, group: str, outcomes: list[tuple[int, bool]]) -> None:
    """A transactional producer that is no Marshaler writes, per (partition, commit), a
    valid claim of orders/partition to __marshal/0 in a transaction of its own."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"foreign-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    for partition, commit in outcomes:
        key, value = encode(
            ClaimingPartition(
                client_id="foreign",
                instance_id="f1",
                group_id=group,
                topic="orders",
                partition=partition,
                heartbeat_interval_ms=600_000,
                version=6,  # (the newest ClaimingPartition layout)
            )
        )
        producer.begin_transaction()
        producer.produce(COORDINATION_TOPIC, value=value, key=key, partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _replayer(cluster: NetworkCluster, client_id: str, group: str) -> Marshaler:
    """A Marshaler of ``group`` on one coordination partition, without snapshots."""
    return Marshaler(
        cluster,
        client_id,
        group,
        1.0,
        coordination_partitions=1,
        fetch_wait=0.1,
        snapshot_interval=None,
    )


def test_foreign_transactions_in_marshal_replay_alike_on_both_read_paths(
    cluster: NetworkCluster, bootstrap: str, librdkafka_only: NetworkCluster
) -> None:
    """__marshal is replayed as stored (docs/broker.md, "Apache Kafka"): a transaction
    marker is never a record, and a record of an aborted transaction counts like any other
    (logmarshal never writes transactionally; a foreign writer could write the same record
    outside a transaction, and a read_committed replay would wait on any open transaction).
    The stored-batch reader and librdkafka's read (the fallback where the batches cannot be
    fetched, e.g. SASL) give the same worlds."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    m = _replayer(cluster, "a", group)
    other = None
    try:
        _foreign_transactions(bootstrap, group, [(1, True), (2, False)])
        _wait_end(cluster, 4)  # Kafka writes the markers after the transaction returns
        landed = direct.claim_partition(m, "orders", 0)
        assert landed.offset == 4  # claim, COMMIT, claim, ABORT
        assert direct.wait_verdict(m, landed, 20).accepted
        assert m.replay_offsets() == {0: 5}
        foreign = ("foreign", "f1")
        assert [m.holder("orders", p) for p in range(3)] == [m.identity, foreign, foreign]
        assert m.skipped_batches == 0

        other = _replayer(librdkafka_only, "b", group)
        assert librdkafka_only.fetch_batches(COORDINATION_TOPIC, 0, 0) is None
        assert other.wait_caught_up(20)
        assert _worlds(other) == _worlds(m)
    finally:
        m.close()
        if other is not None:
            other.close()


def test_a_replay_is_caught_up_when_marshal_ends_with_a_transaction_marker(
    cluster: NetworkCluster, bootstrap: str, librdkafka_only: NetworkCluster
) -> None:
    """A transaction marker takes an offset and is no record: the replay's position moves past
    it (``_coordlog.PastMarkers``), or a catch-up to the log's end (after a stall, at start-up)
    would wait at a trailing marker for a record that may never come. On both read paths:
    librdkafka's (where the batches cannot be fetched, e.g. SASL) answers it too."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    m = _replayer(cluster, "a", group)
    other = None
    try:
        _foreign_transactions(bootstrap, group, [(1, True)])
        _wait_end(cluster, 2)  # the claim, its COMMIT
        assert m.wait_caught_up(5)
        assert m.replay_offsets() == {0: 2}  # past the marker
        other = _replayer(librdkafka_only, "b", group)
        assert other.wait_caught_up(5)
        assert other.replay_offsets() == {0: 2}
        assert _worlds(other) == _worlds(m)
    finally:
        m.close()
        if other is not None:
            other.close()
