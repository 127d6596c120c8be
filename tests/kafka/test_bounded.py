"""The bounded coordination log on Apache Kafka (docs/bounded-log.md): a Marshaler publishes
snapshots to ``__marshal_snapshots`` and truncates ``__marshal`` behind them with Kafka's
DeleteRecords; a new Marshaler then cold-starts from the snapshots and agrees, world for
world, with one that replayed every record from offset 0 as it was written."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from logmarshal import _coordlog as coordlog
from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.errors import OffsetOutOfRange
from logmarshal.marshaler import Marshaler
from logmarshal.network import NetworkCluster
from tests.kafka.test_marshal_topic import drop_topic

pytestmark = pytest.mark.kafka

HB = 1.0
N_COORD = 2
EVERY = 15  # snapshot_records
QUIET = {"snapshot_records": None, "snapshot_interval": None}


@pytest.fixture
def cluster(bootstrap: str) -> Iterator[NetworkCluster]:
    """A fresh ``__marshal`` (the session's Kafka is shared); left absent afterwards."""
    with NetworkCluster(bootstrap, timeout=30.0) as c:
        for name in (COORDINATION_TOPIC, SNAPSHOT_TOPIC):
            drop_topic(c, name)
        try:
            yield c
        finally:
            for name in (COORDINATION_TOPIC, SNAPSHOT_TOPIC):
                drop_topic(c, name)


def marshaler(cluster: NetworkCluster, name: str, group: str, **options) -> Marshaler:
    return Marshaler(
        cluster, name, group, HB, coordination_partitions=N_COORD, fetch_wait=0.05, **options
    )


def wait_for(what: str, check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)  # Kafka and the replay threads run on their own clocks


def worlds(m: Marshaler) -> tuple[dict[int, int], list[bytes]]:
    """Replay offsets and canonical world bytes, read while the replay is held still."""
    with m.replay_paused():
        return m.replay_offsets(), [w.to_bytes() for w in m.worlds()]


def test_truncation_by_delete_records_and_a_cold_start_from_snapshots(
    cluster: NetworkCluster, caplog
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    # replays every record from offset 0 as it is written: the reference
    observer = marshaler(
        cluster, "observer", group, truncate=False, restore_snapshots=False, **QUIET
    )
    writer = marshaler(cluster, "a", group, snapshot_records=EVERY, snapshot_interval=None)
    cold = None
    try:
        # claims and heartbeats on partitions of both coordination partitions
        units = [("orders", p) for p in range(6)]
        assert {writer.coordination_partition(*u) for u in units} == set(range(N_COORD))
        for u in units:
            assert direct.wait_verdict(writer, direct.claim_partition(writer, *u), 20).accepted
        for i in range(40):
            for u in units:
                landed = direct.heartbeat(writer, *u, i)
                assert direct.wait_verdict(writer, landed, 20).accepted
        assert writer.wait_caught_up(20)

        # Kafka moved each partition's log start to exactly what the two newest snapshots
        # leave (DeleteRecords is per offset on Kafka, per segment on logmarshal's broker)
        for cp in range(N_COORD):

            def truncated(cp: int = cp) -> bool:
                bound = coordlog.truncation_bounds(cp, coordlog.read_snapshots(cluster, cp))
                return bound[0] > 0 and cluster.earliest_offset(COORDINATION_TOPIC, cp) == bound[0]

            wait_for(f"__marshal/{cp} truncated to its snapshots' bound", truncated)
            snapshots = coordlog.read_snapshots(cluster, cp)
            marshal_before, snapshots_before = coordlog.truncation_bounds(cp, snapshots)
            assert cluster.earliest_offset(COORDINATION_TOPIC, cp) == marshal_before
            assert cluster.earliest_offset(SNAPSHOT_TOPIC, cp) == snapshots_before
            assert len(snapshots) >= coordlog.KEEP_SNAPSHOTS
            earliest = cluster.earliest_offset(COORDINATION_TOPIC, cp)
            latest = cluster.latest_offset(COORDINATION_TOPIC, cp)
            assert 0 < earliest < latest
            # what went is gone for every reader
            with pytest.raises(OffsetOutOfRange):
                cluster.fetch_batches(COORDINATION_TOPIC, cp, earliest - 1)
            cols = coordlog.fetch_columns(cluster, COORDINATION_TOPIC, cp, earliest)
            assert cols[0][0] == earliest

        # a cold start: the newest snapshot of each partition, then the tail
        caplog.set_level(logging.INFO, logger="logmarshal._tailer")
        cold = marshaler(cluster, "b", group, **QUIET)
        assert cold.wait_caught_up(30) and observer.wait_caught_up(30)
        started = [
            r.getMessage()
            for r in caplog.records
            if "starting from the snapshot covering" in r.getMessage()
        ]
        assert len(started) == N_COORD, started
        assert not [r for r in caplog.records if "no valid snapshot covers" in r.getMessage()]

        assert worlds(cold) == worlds(observer)
        for u in units:
            assert cold.holder(*u) == observer.holder(*u) == writer.identity
            assert cold.resume_offset(*u) == observer.resume_offset(*u) == 40
        # and they keep agreeing on what follows
        for u in units:
            assert direct.wait_verdict(writer, direct.heartbeat(writer, *u, 99), 20).accepted
        assert cold.wait_caught_up(30) and observer.wait_caught_up(30)
        assert worlds(cold) == worlds(observer)
        assert {cold.resume_offset(*u) for u in units} == {100}
    finally:
        writer.close()
        observer.close()
        if cold is not None:
            cold.close()
