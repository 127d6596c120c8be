"""A member's driver reads partition counts once per HB, bounded: the same thread answers the
core's catch-ups and ticks it, so a metadata look-up that hangs (a Kafka cluster whose
controller is overloaded: 30 s, the network cluster's own bound, in the 3-node fault test)
must not hold it, and one that fails must not cost the pass its other work."""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import pytest

from logmarshal import EmbeddedCluster, Marshaler
from logmarshal.consumer import Consumer
from logmarshal.errors import RETRIABLE, NetworkError
from logmarshal.localbroker import LocalBroker
from logmarshal.network.cluster import NetworkCluster
from storage import NewRecord

from ..consumer_world import wait_until

HB = 0.4


class _Counts:
    """The cluster, with partition counts that can be made to fail; records the bound each
    look-up of a count was given."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self._inner = inner
        self.bounds: list[float | None] = []
        self.failing = False

    def partitions(self, topic: str, timeout: float | None = None) -> int:
        self.bounds.append(timeout)
        if self.failing:
            raise NetworkError("Failed to get metadata: Local: Timed out")
        return self._inner.partitions(topic, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_the_driver_reads_partition_counts_bounded_and_goes_on_when_it_cannot(
    tmp_path, caplog
) -> None:
    with EmbeddedCluster(tmp_path / "data") as inner:
        inner.create_topic("t", 2)
        cluster = _Counts(inner)
        marshaler = Marshaler(cluster, "m", "g", HB)  # type: ignore[arg-type]
        consumer = Consumer(marshaler, "t", rebalance="none", greedy=True)
        try:
            wait_until(lambda: len(consumer.claims()) == 2, 10)
            cluster.bounds.clear()
            wait_until(lambda: len(cluster.bounds) >= 2, 10)  # two passes' look-ups
            # every look-up of the driver's is bounded, by about 2 HB (at least 2 s)
            assert all(b is not None and b <= max(2.0, 2 * HB) for b in cluster.bounds)

            cluster.failing = True
            caplog.set_level(logging.WARNING, logger="logmarshal.consumer.consumer")
            failed_from = len(cluster.bounds)
            wait_until(lambda: len(cluster.bounds) >= failed_from + 2, 10)
            # the member goes on: what is produced now is handed out
            inner.produce("t", 0, [NewRecord(value=b"after", timestamp=0)])
            got: list[bytes | None] = []
            deadline = time.monotonic() + 10
            while b"after" not in got and time.monotonic() < deadline:
                batch = consumer.poll(0.2)
                got.extend(m.value for m in batch)
                consumer.commit(*batch)
            assert b"after" in got
            assert "cannot read partition counts" in caplog.text
            assert "a coordination pass failed" not in caplog.text  # a warning, not a crash

            # once counts can be read again, growth is seen
            cluster.failing = False
            inner.add_partitions("t", 3)
            wait_until(lambda: len(consumer.claims()) == 3, 10)
        finally:
            consumer.close()
            marshaler.close()


def test_a_network_clusters_count_look_up_keeps_to_its_bound(tmp_path) -> None:
    """A broker that stops answering (SIGSTOP: its connections stay open, nothing comes
    back): the count look-up gives up at the bound it was given, not at the cluster's own
    30 s."""
    with LocalBroker(tmp_path) as broker:
        cluster = NetworkCluster(broker.bootstrap, timeout=30.0)
        try:
            cluster.create_topic("t", 3)
            assert cluster.partitions("t", timeout=5.0) == 3
            broker.signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(RETRIABLE):
                    cluster.partitions("t", timeout=0.5)
                assert time.monotonic() - started < 10.0
            finally:
                broker.signal(signal.SIGCONT)
            assert cluster.partitions("t") == 3
        finally:
            cluster.close()
