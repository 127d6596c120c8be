"""Rebalancing through the log (docs/rebalancing.md) with real Consumers in threads: joins, graceful
leaves, mixed subscriptions, max_claims, whole topics, partition growth, a restart under the
same client_id, weights, and "none" keeping Go Marshal's behaviour. The simulator and the
``rebalance`` scenario cover the same on many schedules and in real processes."""

from __future__ import annotations

import re
from collections import Counter

from logmarshal.consumer import Consumer

from ..consumer_world import TOPIC, drain, produce, wait_passes, wait_until


def counts(*consumers: Consumer) -> list[int]:
    return [len(c.claims()) for c in consumers]


def test_a_joining_member_gets_its_share_and_nothing_is_repeated(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 6)
    a = realtime.consumer("a")
    wait_until(lambda: counts(a) == [6], what="a owning all six")
    for p in range(6):
        produce(realtime.cluster, p, 20)
    seen = drain(a, 120)
    b = realtime.consumer("b")
    wait_until(lambda: counts(a, b) == [3, 3], timeout=10, what="3 + 3")
    for p in range(6):
        produce(realtime.cluster, p, 10)
    for consumer in (a, b):
        seen += drain(consumer, 30, timeout=10)
    offsets = Counter((m.partition, m.offset) for m in seen)
    assert sorted(offsets) == [(p, o) for p in range(6) for o in range(30)]
    assert max(offsets.values()) == 1  # a graceful move repeats nothing


def test_a_graceful_leave_hands_its_partitions_to_the_others(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 6)
    members = [realtime.consumer(c) for c in ("a", "b", "c")]
    wait_until(lambda: counts(*members) == [2, 2, 2], timeout=10, what="2 + 2 + 2")
    members[1].close()
    wait_until(lambda: counts(members[0], members[2]) == [3, 3], timeout=10, what="3 + 3")


def test_mixed_subscriptions_share_each_topic_among_its_subscribers(realtime) -> None:
    cluster = realtime.cluster
    cluster.create_topic("x", 4)
    cluster.create_topic("y", 4)
    a = Consumer(realtime.marshaler("a"), ["x"])
    b = Consumer(realtime.marshaler("b"), ["x", "y"])
    realtime.consumers += [a, b]

    def settled() -> bool:
        return {t for t, _ in a.claims()} == {"x"} and len(a.claims()) == 4 and len(b.claims()) == 4

    # a can only take x, so b (which can take both) takes y: 4 each, not 2 + 6
    wait_until(settled, timeout=10, what="a with x, b with y")
    assert {t for t, _ in b.claims()} == {"y"}


def test_max_claims_caps_a_member_and_the_rest_go_to_the_others(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 6)
    a = realtime.consumer("a", max_claims=1)
    b = realtime.consumer("b")
    wait_until(lambda: counts(a, b) == [1, 5], timeout=10, what="1 + 5")


def test_weights_share_in_proportion(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 8)
    a = realtime.consumer("a", weight=3)
    b = realtime.consumer("b")
    wait_until(lambda: counts(a, b) == [6, 2], timeout=10, what="6 + 2")


def test_whole_topics_are_the_unit_with_claim_entire_topic(realtime) -> None:
    cluster = realtime.cluster
    for name in ("t1", "t2", "t3", "t4"):
        cluster.create_topic(name, 2)
    a = Consumer(realtime.marshaler("a"), re.compile(r"t\d"), claim_entire_topic=True)
    realtime.consumers.append(a)
    wait_until(lambda: len(a.claims()) == 8, what="a holding the four topics")
    b = Consumer(realtime.marshaler("b"), re.compile(r"t\d"), claim_entire_topic=True)
    realtime.consumers.append(b)

    def two_whole_topics_each() -> bool:
        views = [a.claims(), b.claims()]
        return all(len(v) == 4 and Counter(t for t, _ in v) == {t: 2 for t, _ in v} for v in views)

    wait_until(two_whole_topics_each, timeout=10, what="two whole topics each")


def test_partition_growth_is_spread_over_the_members(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 2)
    a = realtime.consumer("a")
    b = realtime.consumer("b")
    wait_until(lambda: counts(a, b) == [1, 1], timeout=10, what="1 + 1")
    realtime.cluster.add_partitions(TOPIC, 6)
    wait_until(lambda: counts(a, b) == [3, 3], timeout=10, what="3 + 3 after the growth")


def test_a_restart_under_the_same_client_id_keeps_its_partitions(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 4)
    a = realtime.consumer("a")
    b = realtime.consumer("b")
    wait_until(lambda: counts(a, b) == [2, 2], timeout=10, what="2 + 2")
    before = a.claims()
    a.close(release=False)  # dies without releasing (its claims stay fresh for a moment)
    a2 = realtime.consumer("a")  # the same client_id, a new instance
    wait_until(lambda: a2.claims() == before, timeout=10, what="a's partitions back to a")
    wait_passes(b, 10)
    assert len(b.claims()) == 2  # b was never given them


def test_none_keeps_go_marshal_behaviour_a_late_member_gets_nothing(manual) -> None:
    manual.cluster.create_topic(TOPIC, 4)
    a = manual.consumer("a", rebalance="none", greedy=True)
    wait_until(lambda: counts(a) == [4], what="a owning all")
    b = manual.consumer("b", rebalance="none")
    for _ in range(10):
        manual.clock.advance(0.5)
        wait_passes(a)
        wait_passes(b)
    assert counts(a, b) == [4, 0]


def test_in_steady_state_nothing_moves(manual) -> None:
    manual.cluster.create_topic(TOPIC, 5)
    a = manual.consumer("a")
    b = manual.consumer("b")
    for _ in range(20):
        manual.clock.advance(0.25)
        wait_passes(a)
        wait_passes(b)
    settled = (a.claims(), b.claims())
    assert sorted(counts(a, b)) == [2, 3]
    for _ in range(60):  # 30·HB at HB = 0.5 s of the manual clock
        manual.clock.advance(0.25)
        wait_passes(a)
        wait_passes(b)
        assert (a.claims(), b.claims()) == settled


def test_a_new_topic_matching_the_pattern_is_spread_over_the_members(realtime) -> None:
    cluster = realtime.cluster
    cluster.create_topic("orders-eu", 2)
    a = Consumer(realtime.marshaler("a"), re.compile(r"orders-.*"))
    b = Consumer(realtime.marshaler("b"), re.compile(r"orders-.*"))
    realtime.consumers += [a, b]
    wait_until(lambda: counts(a, b) == [1, 1], timeout=10, what="1 + 1")
    cluster.create_topic("orders-us", 4)
    wait_until(lambda: counts(a, b) == [3, 3], timeout=10, what="3 + 3 with the new topic")
