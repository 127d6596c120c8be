"""The offset mirror without Kafka: its throttle on an injected clock, its failures, the
Consumer's hook (positions handed to a sink, a refused group, consumption through failures),
and the auto setting on an embedded cluster and on logmarshal's broker.

On Apache Kafka: tests/kafka/test_mirror.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

import pytest

from logmarshal import NewRecord, connect
from logmarshal.admin import read_coordination
from logmarshal.admin.mirror import positions
from logmarshal.consumer import Consumer
from logmarshal.consumer.mirror import MirrorConflict, OffsetMirror, open_mirror
from logmarshal.network import NetworkCluster

from ..consumer_world import TOPIC, World, drain, no_threads_left, produce, wait_until

G = "g"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingSink:
    """Records every commit; ``fail`` makes the next commits raise; ``live_as`` makes the
    group look taken by a live Kafka group."""

    def __init__(self, fail: bool = False, live_as: str | None = None) -> None:
        self.commits: list[dict[tuple[str, int], int]] = []
        self.fail = fail
        self.live_as = live_as
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def live(self, group: str) -> str | None:
        self.asked.append(group)
        return self.live_as

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        assert group == G
        with self._lock:
            if self.fail:
                raise RuntimeError("broker said no")
            self.commits.append(dict(offsets))

    def latest(self) -> dict[tuple[str, int], int]:
        with self._lock:
            out: dict[tuple[str, int], int] = {}
            for commit in self.commits:
                out.update(commit)
            return out


def _mirror(sink: CountingSink, current: dict, clock: FakeClock, **kw) -> OffsetMirror:
    return OffsetMirror(G, sink, lambda: current, interval=1.0, clock=clock, **kw)


# -- the throttle, on an injected clock --------------------------------------------------------


def test_at_most_one_commit_per_interval_and_only_what_moved() -> None:
    sink, clock = CountingSink(), FakeClock()
    current = {("t", 0): 5, ("t", 1): 7}
    mirror = _mirror(sink, current, clock)
    assert mirror.mirror_once() == 2
    assert sink.commits == [{("t", 0): 5, ("t", 1): 7}]

    current[("t", 0)] = 9
    clock.now += 0.99
    assert mirror.mirror_once() == 0  # moved, but within the interval of the last commit
    assert len(sink.commits) == 1
    clock.now += 0.01
    assert mirror.mirror_once() == 1
    assert sink.commits[-1] == {("t", 0): 9}  # partition 1 did not move: not sent again

    clock.now += 5
    assert mirror.mirror_once() == 0  # nothing moved: no commit at all
    assert len(sink.commits) == 2
    current[("t", 1)] = 3  # moved back (a reset): mirrored too, at once (the last commit
    assert mirror.mirror_once() == 1  # was more than an interval ago)
    assert sink.commits[-1] == {("t", 1): 3}
    assert mirror.attempts == 3 and mirror.failures == 0


def test_a_partition_given_up_and_taken_back_is_mirrored_again() -> None:
    sink, clock = CountingSink(), FakeClock()
    current = {("t", 0): 5}
    mirror = _mirror(sink, current, clock)
    mirror.mirror_once()
    del current[("t", 0)]
    clock.now += 1
    assert mirror.mirror_once() == 0 and mirror.mirrored() == {}
    current[("t", 0)] = 5  # another holder may have moved Kafka's copy meanwhile
    clock.now += 1
    assert mirror.mirror_once() == 1
    assert len(sink.commits) == 2


def test_failures_are_retried_per_interval_and_warned_at_most_once_per_minute(caplog) -> None:
    sink, clock = CountingSink(fail=True), FakeClock()
    current = {("t", 0): 5}
    mirror = _mirror(sink, current, clock, log_every=60.0)
    caplog.set_level(logging.INFO, logger="logmarshal.consumer.mirror")
    assert mirror.mirror_once() == 0  # never raises
    assert mirror.mirror_once() == 0  # within the interval: not even attempted
    assert mirror.attempts == 1
    for _ in range(10):
        clock.now += 1.0
        mirror.mirror_once()
    assert mirror.attempts == mirror.failures == 11
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "broker said no" in warnings[0].getMessage()
    clock.now += 60
    mirror.mirror_once()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "10 more failure(s)" in warnings[1].getMessage()
    sink.fail = False
    clock.now += 1
    assert mirror.mirror_once() == 1  # retried: nothing was marked mirrored while failing
    assert sink.commits == [{("t", 0): 5}]
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_close_commits_the_final_positions_regardless_of_the_throttle() -> None:
    sink, clock = CountingSink(), FakeClock()
    mirror = _mirror(sink, {("t", 0): 5}, clock)
    mirror.mirror_once()
    mirror.close({("t", 0): 8})  # never started: the caller's thread commits
    assert sink.commits[-1] == {("t", 0): 8}


# -- open_mirror: the setting ------------------------------------------------------------------


def test_auto_is_off_on_an_embedded_cluster_and_true_is_an_error(cluster) -> None:
    args = dict(interval=1.0, clock=FakeClock(), name="m")
    assert open_mirror(G, cluster, None, dict, **args) is None
    assert open_mirror(G, cluster, False, dict, **args) is None
    with pytest.raises(ValueError, match="needs a network cluster"):
        open_mirror(G, cluster, True, dict, **args)


def test_auto_is_off_on_logmarshals_broker_and_true_says_why(tmp_path) -> None:
    from storage.broker import BrokerConfig, BrokerThread

    args = dict(interval=1.0, clock=FakeClock(), name="m")
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker:
        network = connect(bootstrap=broker.bootstrap)
        try:
            assert open_mirror(G, network, None, dict, **args) is None
            with pytest.raises(ValueError, match="logmarshal's broker refuses OffsetCommit"):
                open_mirror(G, network, True, dict, **args)
        finally:
            network.close()


def test_whose_brokers_is_known_from_the_connection(tmp_path) -> None:
    """The broker's kind comes from the cluster id the cluster read when it connected: asked
    again, brokers away for the sink's 10 s timeout turned the mirror (and the committed-offset
    start) off for the Consumer's life under auto, and gave the wrong reason under True."""
    from storage.broker import BrokerConfig, BrokerThread

    args = dict(interval=1.0, clock=FakeClock(), name="m")
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker:
        network = NetworkCluster(broker.bootstrap, timeout=5.0)
    try:  # (the broker is gone)
        assert network.cluster_id is not None and network.cluster_id.startswith("logmarshal")
        started = time.monotonic()
        with pytest.raises(ValueError, match="logmarshal's broker refuses OffsetCommit"):
            open_mirror(G, network, True, dict, **args)
        assert time.monotonic() - started < 5.0
    finally:
        network.close()


# -- the Consumer's hook -----------------------------------------------------------------------


def test_the_consumer_mirrors_its_committed_positions_and_its_release(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 2)
    produce(realtime.cluster, 0, 10)
    produce(realtime.cluster, 1, 6)
    sink = CountingSink()
    consumer = realtime.consumer("c1", mirror_offsets=sink)
    assert sink.asked == [G]
    got = drain(consumer, 16, commit=False)
    consumer.commit(*[m for m in got if m.partition == 0 and m.offset < 4])
    consumer.commit(*[m for m in got if m.partition == 1])
    # Kafka's committed offset is the next to consume: the heartbeated position plus one
    wait_until(lambda: sink.latest() == {(TOPIC, 0): 4, (TOPIC, 1): 6}, what="the mirror")
    consumer.commit(*[m for m in got if m.partition == 0])
    consumer.close()
    assert sink.latest() == {(TOPIC, 0): 10, (TOPIC, 1): 6}  # the final positions, at close
    assert consumer._mirror is not None and consumer._mirror.failures == 0


def test_a_failing_mirror_does_not_stop_consumption(realtime, caplog) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 50)
    sink = CountingSink(fail=True)
    caplog.set_level(logging.WARNING, logger="logmarshal.consumer.mirror")
    consumer = realtime.consumer("c1", mirror_offsets=sink)
    first = drain(consumer, 20)
    mirror = consumer._mirror
    assert mirror is not None
    wait_until(lambda: mirror.failures >= 2, what="failed mirror attempts")
    produce(realtime.cluster, 0, 10)
    rest = drain(consumer, 40)  # still consuming, while every mirror attempt fails
    assert [m.offset for m in first + rest] == list(range(60))
    assert consumer.position(TOPIC, 0) == 59
    assert sum("cannot mirror offsets" in r.getMessage() for r in caplog.records) == 1
    assert sink.commits == []


def test_a_group_taken_by_a_live_kafka_group_is_refused_at_start(cluster) -> None:
    world = World(cluster, hb=0.3)
    cluster.create_topic(TOPIC, 1)
    sink = CountingSink(live_as="state STABLE, 1 member(s)")
    try:
        with pytest.raises(
            MirrorConflict,
            match=r"group 'g' is also a live Kafka consumer "
            r"group \(state STABLE, 1 member\(s\)\)",
        ):
            world.consumer("c1", mirror_offsets=sink)
        assert world.consumers == []
        assert world.consumer("c2", mirror_offsets=False)._mirror is None  # opted out: runs
    finally:
        world.close()
    no_threads_left()


def test_a_task_mirrors_each_source_partition(realtime) -> None:
    for topic in ("a", "b"):
        realtime.cluster.create_topic(topic, 2)
    realtime.cluster.produce("a", 1, [NewRecord(value=b"x", timestamp=0)] * 3)
    realtime.cluster.produce("b", 1, [NewRecord(value=b"y", timestamp=0)] * 2)
    sink = CountingSink()
    marshaler = realtime.marshaler("c1")
    consumer = Consumer(marshaler, (), tasks={"job": ("a", "b")}, mirror_offsets=sink)
    realtime.consumers.append(consumer)
    consumer.commit(*drain(consumer, 5, commit=False))
    # Kafka knows the sources, not the task: one committed offset per source partition
    expected = {("a", 0): 0, ("b", 0): 0, ("a", 1): 3, ("b", 1): 2}
    wait_until(lambda: sink.latest() == expected, what=f"the mirror to reach {expected}")


def test_amo_mirrors_what_it_reserved_and_at_close_what_it_handed_out(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 50)
    sink = CountingSink()
    consumer = realtime.consumer("c1", mode="amo", batch_size=5, max_reserved=20)
    assert consumer._mirror is None  # auto: an embedded cluster has no Kafka group offsets
    consumer.close()
    consumer = realtime.consumer(
        "c2", mode="amo", batch_size=5, max_reserved=20, mirror_offsets=sink
    )
    handed = drain(consumer, 5, max_records=5)
    assert [m.offset for m in handed] == list(range(5))
    reserved = consumer.position(TOPIC, 0)
    assert reserved is not None and reserved > 4  # the window runs ahead of the hand-out
    # running: the position the heartbeats carry (reserved offsets count as consumed)
    wait_until(lambda: sink.latest().get((TOPIC, 0), 0) >= reserved + 1, what="the mirror")
    consumer.close()
    # released: the reserved but unhanded messages are given back, and Kafka is told so
    assert sink.latest() == {(TOPIC, 0): 5}
    state = read_coordination(realtime.cluster)
    assert positions(state, G) == {(TOPIC, 0): 5}  # the log agrees


def test_the_mirror_connects_as_the_cluster_does(tmp_path) -> None:
    """The settings given to the cluster (TLS, SASL, client id, ...) reach the mirror's own
    client; its bootstrap is given apart."""
    from logmarshal.consumer.mirror import _client_config
    from storage.broker import BrokerConfig, BrokerThread

    settings = {"client.id": "mirror-test", "socket.keepalive.enable": True}
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "b", port=0)) as broker:
        network = connect(bootstrap=broker.bootstrap, client_config=settings)
        try:
            got = _client_config(network)
            assert {k: got[k] for k in settings} == settings
            assert "bootstrap.servers" not in got
            got["client.id"] = "changed"
            assert network.client_config["client.id"] == "mirror-test"  # a copy
        finally:
            network.close()
