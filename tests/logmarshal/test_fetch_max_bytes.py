"""A fetch's ``max_bytes`` is Kafka's int32 of at least 1, on every cluster and every fetch:
``fetch(max_bytes=-5)`` returned records on the embedded cluster and sent -5 to a broker
over the network; a Consumer or Marshaler given one refuses it at construction, before
any thread starts, rather than fail every fetch of its threads."""

from __future__ import annotations

import pytest

import logmarshal
from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler
from storage.broker import BrokerConfig, BrokerThread

BAD = [
    (-5, ValueError, "max_bytes must be in"),
    (0, ValueError, "max_bytes must be in"),
    (1 << 31, ValueError, "max_bytes must be in"),
    (1.5, TypeError, "max_bytes must be an int"),
    (True, TypeError, "max_bytes must be an int"),
]


def _fetches(cluster) -> dict:
    calls = {
        "fetch": lambda b: cluster.fetch("t", 0, 0, max_bytes=b),
        "fetch_columns": lambda b: cluster.fetch_columns("t", 0, 0, max_bytes=b),
        "fetch_batches_many": lambda b: cluster.fetch_batches_many("t", {0: 0}, max_bytes=b),
        "open_reader": lambda b: cluster.open_reader(max_bytes=b),
    }
    if hasattr(cluster, "fetch_batches"):
        calls["fetch_batches"] = lambda b: cluster.fetch_batches("t", 0, 0, max_bytes=b)
    return calls


@pytest.mark.parametrize(("max_bytes", "error", "says"), BAD)
def test_the_embedded_cluster_refuses_a_bad_max_bytes(tmp_path, max_bytes, error, says) -> None:
    with EmbeddedCluster(tmp_path / "d") as cluster:
        cluster.create_topic("t", 1)
        cluster.produce("t", 0, [NewRecord(b"x", timestamp=1)])
        for name, call in _fetches(cluster).items():
            with pytest.raises(error, match=says):
                call(max_bytes)
            assert call(1) is not None, name  # the smallest bound still reads


def test_a_network_cluster_refuses_a_bad_max_bytes(tmp_path) -> None:
    with (
        BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker,
        logmarshal.connect(bootstrap=broker.bootstrap) as cluster,
    ):
        cluster.create_topic("t", 1)
        cluster.produce("t", 0, [NewRecord(b"x", timestamp=1)])
        for name, call in _fetches(cluster).items():
            for max_bytes, error, says in BAD:
                with pytest.raises(error, match=says):
                    call(max_bytes)
            assert call(1 << 20) is not None, name


@pytest.mark.parametrize("value", [-5, 0])
def test_a_consumer_or_marshaler_refuses_a_bad_max_partition_fetch_bytes(tmp_path, value) -> None:
    with EmbeddedCluster(tmp_path / "d") as cluster:
        cluster.create_topic("t", 1)
        with pytest.raises(ValueError, match="max_partition_fetch_bytes must be in"):
            Marshaler(cluster, "a", "g", 1.0, max_partition_fetch_bytes=value)
        with Marshaler(cluster, "a", "g", 1.0) as marshaler:
            with pytest.raises(ValueError, match="max_partition_fetch_bytes must be in"):
                Consumer(marshaler, "t", max_partition_fetch_bytes=value)
            Consumer(marshaler, "t").close()  # its name was given back
