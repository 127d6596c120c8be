from __future__ import annotations

import threading
import time

import pytest

from logmarshal import NewRecord
from logmarshal._faults import FaultPlan, FaultyCluster, InjectedFault
from logmarshal.cluster import Cluster


def _record() -> list[NewRecord]:
    return [NewRecord(value=b"x", timestamp=0)]


def _kinds(seed: int, cluster, plan: FaultPlan) -> list[str]:
    faulty = FaultyCluster(cluster, plan, seed=seed, name="m", sleep=lambda _s: None)
    out = []
    for _ in range(40):
        try:
            faulty.produce("t", 0, _record())
            out.append("ok")
        except InjectedFault as exc:
            out.append(str(exc)[:8])
    return out


def test_the_same_seed_injects_the_same_faults(cluster) -> None:
    cluster.create_topic("t", 1)
    plan = FaultPlan(produce_fail=0.2, produce_drop=0.2, produce_delay=0.3)
    assert _kinds(5, cluster, plan) == _kinds(5, cluster, plan)
    assert _kinds(5, cluster, plan) != _kinds(6, cluster, plan)


def test_fail_writes_nothing_and_drop_writes_but_raises(cluster) -> None:
    cluster.create_topic("t", 1)
    failing = FaultyCluster(cluster, FaultPlan(produce_fail=1.0))
    with pytest.raises(InjectedFault, match="lost before"):
        failing.produce("t", 0, _record())
    assert cluster.latest_offset("t", 0) == 0
    dropping = FaultyCluster(cluster, FaultPlan(produce_drop=1.0))
    with pytest.raises(InjectedFault, match="answer"):
        dropping.produce("t", 0, _record())
    assert cluster.latest_offset("t", 0) == 1
    assert dropping.injected() == {"drop": 1}


def test_fetch_faults_and_topic_filter(cluster) -> None:
    cluster.create_topic("t", 1)
    cluster.create_topic("u", 1)
    cluster.produce("t", 0, _record())
    cluster.produce("u", 0, _record())
    faulty = FaultyCluster(cluster, FaultPlan(fetch_drop=1.0, topics={"t"}))
    assert faulty.fetch("t", 0, 0) == []
    assert len(faulty.fetch("u", 0, 0)) == 1
    faulty.plan = FaultPlan(fetch_fail=1.0)
    with pytest.raises(InjectedFault):
        faulty.fetch("u", 0, 0)


def test_freeze_blocks_calls_until_thawed_and_kill_fails_them(cluster) -> None:
    cluster.create_topic("t", 1)
    faulty = FaultyCluster(cluster)
    faulty.freeze()
    done = threading.Event()
    thread = threading.Thread(target=lambda: (faulty.produce("t", 0, _record()), done.set()))
    thread.start()
    time.sleep(0.1)
    assert not done.is_set() and cluster.latest_offset("t", 0) == 0
    faulty.thaw()
    thread.join(5)
    assert done.is_set() and cluster.latest_offset("t", 0) == 1
    faulty.freeze()
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            faulty.latest_offset("t", 0)
        except InjectedFault as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    faulty.kill()
    thread.join(5)
    assert errors and faulty.killed
    with pytest.raises(InjectedFault, match="dead"):
        faulty.topics()


def test_every_cluster_call_passes_through_the_gate(cluster) -> None:
    """The wrapper is a whole Cluster (alter_topic_config included), and a killed one fails
    each call instead of reaching the shared cluster."""
    cluster.create_topic("t", 1)
    faulty = FaultyCluster(cluster)
    assert isinstance(faulty, Cluster)
    faulty.alter_topic_config("t", {"retention.ms": 60_000})
    assert cluster.describe_topic("t").config["retention.ms"] == "60000"
    faulty.kill()
    with pytest.raises(InjectedFault, match="dead"):
        faulty.alter_topic_config("t", {"retention.ms": 120_000})
    assert cluster.describe_topic("t").config["retention.ms"] == "60000"
