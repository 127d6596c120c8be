"""Several brokers from one static cluster file: placement, leaders, NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import contextlib
import time

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse

from storage.broker import BrokerAddress, BrokerConfig, BrokerThread, format_cluster_file
from storage.broker.errors import ErrorCode

from .helpers import RawClient, batch, free_ports, produce_request


@pytest.fixture
def two_brokers(tmp_path):
    addresses = [
        BrokerAddress(i, "127.0.0.1", p) for i, p in zip((1, 2), free_ports(2), strict=True)
    ]
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
                    )
                )
            )
            for a in addresses
        ]
        yield brokers


def test_partitions_spread_and_wrong_broker_refuses(two_brokers):
    from logmarshal.network import NetworkCluster

    bootstrap = ",".join(b.bootstrap for b in two_brokers)
    with NetworkCluster(bootstrap) as cluster:
        cluster.create_topic("spread", 4, {"message.timestamp.type": "LogAppendTime"})
        for p in range(4):
            result = cluster.produce("spread", p, _records(p), durable=True)
            assert result.base_offset == 0
        for p in range(4):
            messages = cluster.fetch("spread", p, 0, max_wait=5)
            assert [m.value for m in messages] == [b"%d-%d" % (p, i) for i in range(3)]
        # The non-controller mirrors the topic's config from the controller.
        assert cluster.describe_topic("spread").config["message.timestamp.type"] == "LogAppendTime"

    with RawClient(two_brokers[1].address) as client:
        meta = client.call(MetadataRequest[1](topics=None), MetadataResponse)
        assert meta.controller_id == 1
        assert {(b.node_id, b.port) for b in meta.brokers} == {
            (1, two_brokers[0].address[1]),
            (2, two_brokers[1].address[1]),
        }
        (topic,) = [t for t in meta.topics if t.name == "spread"]
        leaders = {p.partition_index: p.leader_id for p in topic.partitions}
        assert set(leaders.values()) == {1, 2}
        for broker, node_id in zip(two_brokers, (1, 2), strict=True):
            not_led = next(p for p, leader in leaders.items() if leader != node_id)
            with RawClient(broker.address) as raw:
                response = raw.call(produce_request("spread", not_led, batch()), ProduceResponse)
                error = response.responses[0].partition_responses[0].error_code
                assert error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_non_controller_refuses_create_and_learns_deletes(two_brokers):
    from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse

    r = CreateTopicsRequest[4]
    request = r(
        topics=[
            r.CreatableTopic(
                name="x", num_partitions=1, replication_factor=1, assignments=[], configs=[]
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    with RawClient(two_brokers[1].address) as raw:
        assert (
            raw.call(request, CreateTopicsResponse).topics[0].error_code == ErrorCode.NOT_CONTROLLER
        )
    with RawClient(two_brokers[0].address) as raw:
        assert raw.call(request, CreateTopicsResponse).topics[0].error_code == 0
    from logmarshal.network import NetworkCluster

    with NetworkCluster(two_brokers[1].bootstrap) as cluster:
        assert "x" in cluster.topics()
        cluster.delete_topic("x")
    # The non-controller's copy is at most a second stale for a full Metadata request.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.3)
        with RawClient(two_brokers[1].address) as raw:
            meta = raw.call(MetadataRequest[1](topics=None), MetadataResponse)
        if "x" not in {t.name for t in meta.topics}:
            break
    else:
        raise AssertionError("broker 2 still lists a topic deleted on the controller")


def _records(p: int):
    from storage import NewRecord

    return [NewRecord(b"%d-%d" % (p, i), key=b"k", timestamp=1) for i in range(3)]


def test_config_changes_on_the_controller_reach_the_other_broker(two_brokers):
    from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse

    from logmarshal.network import NetworkCluster

    with NetworkCluster(two_brokers[0].bootstrap) as cluster:
        cluster.create_topic("conf", 2)
        cluster.alter_topic_config("conf", {"retention.ms": "4242"})
    r = DescribeConfigsRequest[1]
    request = r(
        resources=[
            r.DescribeConfigsResource(
                resource_type=2, resource_name="conf", configuration_keys=["retention.ms"]
            )
        ],
        include_synonyms=False,
    )
    data_dir = two_brokers[1].server._data_dir
    deadline = time.monotonic() + 10
    seen = None
    while time.monotonic() < deadline:
        with RawClient(two_brokers[1].address) as raw:  # the non-controller itself
            seen = raw.call(request, DescribeConfigsResponse).results[0].configs[0].value
        if seen == "4242":
            break
        time.sleep(0.3)
    assert seen == "4242"
    assert all(data_dir.partition("conf", p).config.retention_ms == 4242 for p in range(2))
    # a setting given its default value is the topic's own on the other broker too (it took
    # only values that differ from the default for given)
    week = str(7 * 24 * 3600 * 1000)
    with NetworkCluster(two_brokers[0].bootstrap) as cluster:
        cluster.alter_topic_config("conf", {"segment.ms": week})
    request = r(
        resources=[r.DescribeConfigsResource(2, "conf", ["segment.ms"])], include_synonyms=False
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with RawClient(two_brokers[1].address) as raw:  # (a request makes it look again)
            source = raw.call(request, DescribeConfigsResponse).results[0].configs[0].config_source
        if source == 1:  # DYNAMIC_TOPIC_CONFIG
            break
        time.sleep(0.3)
    assert data_dir.describe("conf").config.explicit == {"retention.ms", "segment.ms"}


def test_replay_over_several_leaders_falls_back_to_a_thread_each(two_brokers):
    """``__marshal`` spread over two brokers cannot be long-polled in one request: the
    partitions asked together are refused (None), and a Marshaler's replay then runs a
    thread per partition, seeing its claims as before."""
    import threading

    from logmarshal import Marshaler
    from logmarshal import _direct as direct
    from logmarshal.network import NetworkCluster

    bootstrap = ",".join(b.bootstrap for b in two_brokers)
    with NetworkCluster(bootstrap) as cluster:
        cluster.create_topic("spread", 4)
        assert cluster.fetch_batches_many("spread", {p: 0 for p in range(4)}) is None
        assert cluster.fetch_batches_many("spread", {0: 0}) == {0: b""}  # one leader: served
        cluster.create_topic("work", 4)
        with Marshaler(cluster, "a", "g", 5.0, fetch_wait=0.2, coordination_partitions=4) as a:
            for p in range(4):
                verdict = direct.wait_verdict(a, direct.claim_partition(a, "work", p), timeout=10)
                assert verdict is not None and verdict.accepted
            names = {
                t.name for t in threading.enumerate() if t.name.startswith("logmarshal-tail:g:a")
            }
            assert names == {f"logmarshal-tail:g:a:{cp}" for cp in range(4)}
