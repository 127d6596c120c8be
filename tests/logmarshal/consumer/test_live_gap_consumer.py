"""A live gap on the Consumer's edge (PROTOCOL.md, "A coordination log that loses records"):
the instance is the Marshaler's, so a gap found where any Consumer of it wrote stops every
Consumer of it, those built later on it too (found by an attack: a Consumer closed when it
was fenced and built again on the same Marshaler took the gap for a cold start's and acted
as the instance the lost records may have fenced; step by step:
tests/logmarshal/core/test_live_gap_schedules.py). ``run()`` returns once fenced, so that
whoever runs it can restart it; a gap found before the instance wrote anything stops nothing.

The replay's gap is made by calling the tailer where its recovery calls it (``_gap``, after
an out-of-range answer once truncation passed a replay that fell behind)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from logmarshal import Consumer, EmbeddedCluster, NewRecord
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.marshaler import Marshaler

from ..consumer_world import wait_until

HB = 0.5


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as c:
        c.create_topic(
            COORDINATION_TOPIC, 1, {"message.timestamp.type": "LogAppendTime", "retention.ms": -1}
        )
        c.create_topic(SNAPSHOT_TOPIC, 1, {"retention.ms": -1})
        c.create_topic("events", 1)
        now = int(time.time() * 1000)
        c.produce("events", 0, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(100)])
        yield c


def _marshaler(cluster: EmbeddedCluster) -> Marshaler:
    return Marshaler(
        cluster,
        "c1",
        "g",
        HB,
        coordination_partitions=1,
        fetch_wait=0.05,
        snapshot_records=None,
        snapshot_interval=None,
    )


def _lose_records(m: Marshaler, count: int = 5) -> None:
    """The replay finds ``count`` records past where it is deleted unseen."""
    tail = m._tailer._tails[0]
    m._tailer._gap(tail, tail.next_offset, tail.next_offset + count)


def test_every_consumer_of_an_instance_that_lost_records_where_it_wrote_stops(cluster):
    m = _marshaler(cluster)
    try:
        first = Consumer(m, "events", mode="amo", rebalance="none")
        wait_until(lambda: first.claims() == [("events", 0)], 10)
        assert not m.is_fenced() and m.lost() == frozenset()
        # run() on the first consumer, until the gap fences it
        returned: list[int] = []
        runner = threading.Thread(target=lambda: returned.append(first.run(lambda msg: None)))
        runner.start()
        wait_until(lambda: first.marshaler is m and len(first.claims()) == 1, 5)
        _lose_records(m)
        wait_until(lambda: first.fenced, 5)
        runner.join(10)
        assert not runner.is_alive() and returned, "run() went on polling a fenced consumer"
        assert m.is_fenced() and [h.cp for h in m.lost()] == [0]
        first.close()
        # user code restarts "it": a new Consumer of the same Marshaler, the same instance
        second = Consumer(m, "events", mode="amo", rebalance="none")
        try:
            assert second.marshaler.instance_id == first.marshaler.instance_id
            wait_until(lambda: second.fenced, 5, "the same instance, after a live gap, acted")
            time.sleep(3 * HB)
            assert second.claims() == [] and second.poll(0.1) == []
        finally:
            second.close()
    finally:
        m.close()


def test_a_gap_found_before_the_instance_wrote_stops_nothing(cluster):
    m = _marshaler(cluster)
    try:
        assert m.wait_caught_up(10)
        _lose_records(m)  # found at start-up, before any consumer of it wrote: a cold start
        assert m.halts()[0].why == "gap" and m.lost() == frozenset() and not m.is_fenced()
        consumer = Consumer(m, "events", mode="amo", rebalance="none")
        try:
            time.sleep(3 * HB)
            assert not consumer.fenced
        finally:
            consumer.close()
    finally:
        m.close()


def test_a_loop_over_a_fenced_consumer_ends(cluster):
    """``for message in consumer`` ends once the consumer is fenced, as ``run()`` returns:
    it would otherwise wait for good on a consumer that never hands out again."""
    m = _marshaler(cluster)
    try:
        consumer = Consumer(m, "events", mode="alo", rebalance="none")
        wait_until(lambda: consumer.claims() == [("events", 0)], 10)
        seen: list[int] = []
        ended = threading.Event()

        def loop() -> None:
            for message in consumer:
                seen.append(message.offset)
                consumer.commit(message)
            ended.set()

        looper = threading.Thread(target=loop, daemon=True)
        looper.start()
        wait_until(lambda: len(seen) == 100, 10)
        _lose_records(m)
        wait_until(lambda: consumer.fenced, 5)
        assert ended.wait(5), "the loop went on polling a fenced consumer"
        assert not consumer.closed and seen == list(range(100))
        consumer.close()
    finally:
        m.close()
