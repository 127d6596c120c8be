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


def _outcomes(call) -> str:
    try:
        got = call()
    except InjectedFault as exc:
        return str(exc)[:8]
    return "ok" if not isinstance(got, Exception) else str(got)[:8]


def test_produce_many_meets_each_partitions_faults_as_produce_would(cluster) -> None:
    """The embedded edge writes a heartbeat pass in one call: each partition's share meets
    the dice a ``produce`` of its own would (same seed, counted per partition), a failed one
    is not written and a dropped one is."""
    cluster.create_topic("t", 3)
    plan = FaultPlan(produce_fail=0.3, produce_drop=0.3, produce_delay=0.3)
    one = FaultyCluster(cluster, plan, seed=7, name="m", sleep=lambda _s: None)
    many = FaultyCluster(cluster, plan, seed=7, name="m", sleep=lambda _s: None)
    alone = [
        [_outcomes(lambda p=p: one.produce("t", p, _record())) for p in range(3)] for _ in range(16)
    ]
    together = []
    for _ in range(16):
        before = [cluster.latest_offset("t", p) for p in range(3)]
        got = many.produce_many("t", {p: _record() for p in range(3)})
        row = ["ok" if not isinstance(r, Exception) else str(r)[:8] for r in got.values()]
        together.append(row)
        for p, kind in enumerate(row):  # "produce " (lost before the log): nothing written
            assert cluster.latest_offset("t", p) == before[p] + (kind != "produce ")
    assert together == alone
    assert {k for row in together for k in row} == {"ok", "produce ", "the answ"}


def test_fetch_batches_many_meets_each_partitions_faults(cluster) -> None:
    cluster.create_topic("t", 2)
    cluster.produce("t", 0, _record())
    cluster.produce("t", 1, _record())
    failing = FaultyCluster(cluster, FaultPlan(fetch_fail=1.0))
    got = failing.fetch_batches_many("t", {0: 0, 1: 0}, max_wait=30)
    assert all(isinstance(v, InjectedFault) for v in got.values())
    dropping = FaultyCluster(cluster, FaultPlan(fetch_drop=1.0, topics={"t"}))
    started = time.monotonic()
    assert dropping.fetch_batches_many("t", {0: 0, 1: 0}, max_wait=30) == {0: b"", 1: b""}
    assert time.monotonic() - started < 10  # "nothing yet", not a long poll
    clean = FaultyCluster(cluster)
    assert all(clean.fetch_batches_many("t", {0: 0, 1: 0}).values())
    clean.kill()
    with pytest.raises(InjectedFault, match="dead"):
        clean.fetch_batches_many("t", {0: 0})
    with pytest.raises(InjectedFault, match="dead"):
        clean.produce_many("t", {0: _record()})


def test_a_wrapper_offers_only_what_its_inner_cluster_offers(cluster) -> None:
    """Over a cluster without several partitions in one call (the network one writes a
    thread per partition), the wrapper has none either: a Marshaler over it then keeps the
    edge that cluster would get."""

    class Bare:
        def __init__(self, inner) -> None:
            self.produce = inner.produce

    faulty = FaultyCluster(cluster)
    assert callable(faulty.produce_many) and callable(faulty.fetch_batches_many)
    bare = FaultyCluster(Bare(cluster))  # type: ignore[arg-type]  # a cluster of one call
    assert not hasattr(bare, "produce_many") and not hasattr(bare, "fetch_batches_many")
    assert not hasattr(bare, "wake_fetches") and not hasattr(bare, "cancel_fetches")
    assert not hasattr(faulty, "cancel_fetches")  # the embedded cluster wakes, never cancels

    class Cancelling(Bare):
        def __init__(self, inner) -> None:
            super().__init__(inner)
            self.cancelled: list[list[int]] = []

        def cancel_fetches(self, threads) -> None:
            self.cancelled.append(list(threads))

    inner = Cancelling(cluster)
    FaultyCluster(inner).cancel_fetches([7])  # type: ignore[arg-type]  # (the same)
    assert inner.cancelled == [[7]]


class _Async:
    """An embedded cluster that also writes without waiting (as the network one does): each
    call's partitions are written and answered together from a thread of its own."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.produce = inner.produce
        self.latest_offset = inner.latest_offset
        self.threads: list[threading.Thread] = []

    def produce_async(self, topic, batches, done) -> None:
        def run() -> None:
            done({p: self.inner.produce(topic, p, r, durable=True) for p, r in batches.items()})

        thread = threading.Thread(target=run)
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)


def _heard(calls: list[dict]) -> dict[int, str]:
    """What each partition was answered, over every call of ``done``."""
    out: dict[int, str] = {}
    for results in calls:
        for p, r in results.items():
            assert p not in out, f"partition {p} answered twice"
            out[p] = "ok" if not isinstance(r, Exception) else str(r)[:8]
    return out


def test_produce_async_meets_each_partitions_faults_as_produce_would(cluster) -> None:
    """The network edge's writer hands a heartbeat pass over in one call: each partition's
    share meets the dice a ``produce`` of its own would, a failed one is not written and
    is answered with the fault, a dropped one is written and answered with the fault; each
    partition is answered once."""
    cluster.create_topic("t", 3)
    plan = FaultPlan(produce_fail=0.3, produce_drop=0.3, produce_delay=0.3)
    one = FaultyCluster(cluster, plan, seed=7, name="m", sleep=lambda _s: None)
    inner = _Async(cluster)
    many = FaultyCluster(inner, plan, seed=7, name="m", sleep=lambda _s: None)  # type: ignore[arg-type]
    alone = [
        [_outcomes(lambda p=p: one.produce("t", p, _record())) for p in range(3)] for _ in range(16)
    ]
    together = []
    for _ in range(16):
        before = [cluster.latest_offset("t", p) for p in range(3)]
        calls: list[dict] = []
        many.produce_async("t", {p: _record() for p in range(3)}, calls.append)
        inner.join()
        heard = _heard(calls)
        row = [heard[p] for p in range(3)]
        together.append(row)
        for p, kind in enumerate(row):  # "produce " (lost before the log): nothing written
            assert cluster.latest_offset("t", p) == before[p] + (kind != "produce ")
    assert together == alone
    assert {k for row in together for k in row} == {"ok", "produce ", "the answ"}


def test_produce_async_answers_wait_while_frozen_and_are_the_fault_once_killed(cluster) -> None:
    """A frozen member hears no answer until it thaws (its threads would not run), without
    holding up the cluster's thread that answers; a killed one hears only the fault, also
    for what landed while it was frozen. The wrapper offers ``produce_async`` only over a
    cluster that does (a Marshaler over it then writes as over that cluster)."""
    cluster.create_topic("t", 2)
    inner = _Async(cluster)
    faulty = FaultyCluster(inner)  # type: ignore[arg-type]
    calls: list[dict] = []
    faulty.freeze()
    blocked = threading.Thread(
        target=lambda: faulty.produce_async("t", {0: _record()}, calls.append)
    )
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # a frozen member's own call waits at the gate
    faulty.thaw()
    blocked.join(10)
    inner.join()
    assert _heard(calls) == {0: "ok"}
    calls.clear()
    faulty.produce_async("t", {1: _record()}, calls.append)  # handed over, then frozen
    faulty.freeze()
    inner.join()  # the cluster's thread answered (it is not held up) ...
    assert cluster.latest_offset("t", 1) == 1
    assert calls == []  # ... and the frozen member heard nothing yet
    faulty.thaw()
    assert _heard(calls) == {1: "ok"}
    calls.clear()
    faulty.produce_async("t", {0: _record()}, calls.append)
    faulty.freeze()
    inner.join()
    faulty.kill()  # what landed while it was frozen: a killed process never hears of it
    assert cluster.latest_offset("t", 0) == 2
    assert {p: type(r) for results in calls for p, r in results.items()} == {0: InjectedFault}
    with pytest.raises(InjectedFault, match="dead"):
        faulty.produce_async("t", {0: _record()}, calls.append)
    assert not hasattr(FaultyCluster(cluster), "produce_async")  # (the embedded one has none)


def test_a_wrapper_says_whether_a_call_lands_whole_as_its_cluster_does(cluster) -> None:
    """(A streams commit's marker goes in its records' call only where calls land whole.)"""
    assert FaultyCluster(cluster).produce_is_atomic is cluster.produce_is_atomic is True

    class Unsaid:  # a cluster that does not say: taken as one that may store part of a call
        pass

    assert FaultyCluster(Unsaid()).produce_is_atomic is False  # type: ignore[arg-type]
