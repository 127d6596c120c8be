"""The target assignment (logmarshal.core.assignment): balanced, sticky, a fixed point, and a
function of its arguments only (every member must compute the same one)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmarshal.core.assignment import WHOLE_TOPIC, target, units_of
from rationalizer.membership import Member


def member(client: str, topics=(("t", 24),), weight=1, cap=0, whole=False) -> Member:
    return Member("g", client, "i", 0, 1000, 1000, weight, cap, whole, tuple(topics))


def sizes(result) -> dict[str, int]:
    return {c: len(u) for c, u in result.items()}


def holders_of(result) -> dict:
    return {u: c for c, units in result.items() for u in units}


_GROUPS = st.tuples(
    st.integers(1, 12),  # members
    st.integers(0, 60),  # partitions
    st.lists(st.integers(0, 13), max_size=60),  # current holders (index >= members: nobody)
)


@settings(max_examples=200, deadline=None)
@given(_GROUPS)
def test_uniform_subscriptions_are_balanced_within_one_and_a_fixed_point(group):
    n, p, holding = group
    members = [member(f"m{i:02d}", (("t", p),)) for i in range(n)]
    current = {("t", q): f"m{h:02d}" for q, h in enumerate(holding[:p]) if h < n}
    result = target("balanced", members, current)
    assert sorted(u for units in result.values() for u in units) == [("t", q) for q in range(p)]
    assert all(p // n <= k <= -(-p // n) for k in sizes(result).values())
    assert target("balanced", members, holders_of(result)) == result  # then nothing moves


@settings(max_examples=200, deadline=None)
@given(_GROUPS)
def test_sticky_a_member_within_its_share_keeps_everything_it_holds(group):
    n, p, holding = group
    members = [member(f"m{i:02d}", (("t", p),)) for i in range(n)]
    current = {("t", q): f"m{h:02d}" for q, h in enumerate(holding[:p]) if h < n}
    result = target("balanced", members, current)
    for m in members:
        held = {u for u, c in current.items() if c == m.client_id}
        if len(held) <= len(result[m.client_id]):
            assert held <= result[m.client_id]
        else:  # over its share: it gives up exactly the surplus
            assert result[m.client_id] <= held


@settings(max_examples=100, deadline=None)
@given(_GROUPS, st.randoms(use_true_random=False))
def test_the_order_members_are_listed_in_does_not_matter(group, rnd):
    n, p, holding = group
    members = [member(f"m{i:02d}", (("t", p),)) for i in range(n)]
    current = {("t", q): f"m{h:02d}" for q, h in enumerate(holding[:p]) if h < n}
    shuffled = list(members)
    rnd.shuffle(shuffled)
    assert target("balanced", shuffled, current) == target("balanced", members, current)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
            st.integers(1, 4),  # weight
            st.integers(0, 5),  # max_claims (0: none)
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 2**32),
)
def test_mixed_subscriptions_weights_and_caps(specs, seed):
    counts = {"a": 5, "b": 3, "c": 8}
    members = [
        member(f"m{i}", tuple((t, counts[t]) for t in sorted(topics)), weight, cap)
        for i, (topics, weight, cap) in enumerate(specs)
    ]
    rng = random.Random(seed)
    units = units_of(members)
    current = {u: rng.choice(members).client_id for u in units if rng.random() < 0.5}
    result = target("balanced", members, current)
    by_id = {m.client_id: m for m in members}
    taken = [u for units in result.values() for u in units]
    assert len(taken) == len(set(taken))  # one target owner per unit
    for client, units in result.items():
        assert all(t in by_id[client].subscribed for t, _ in units)  # only what it reads
        assert by_id[client].max_claims == 0 or len(units) <= by_id[client].max_claims
    left = set(units) - set(taken)
    for t, _ in left:  # a unit is left out only when everyone who reads it is full
        readers = [m for m in members if t in m.subscribed]
        assert all(m.max_claims and len(result[m.client_id]) == m.max_claims for m in readers)
    assert target("balanced", members, holders_of(result)) == result


def test_weights_share_in_proportion():
    result = target("balanced", [member("a", weight=3), member("b")], {})
    assert sizes(result) == {"a": 18, "b": 6}


def test_a_topic_is_one_unit_when_every_subscriber_takes_whole_topics():
    topics = (("x", 4), ("y", 2), ("z", 3))
    whole = [member("a", topics, whole=True), member("b", topics, whole=True)]
    assert units_of(whole) == [("x", WHOLE_TOPIC), ("y", WHOLE_TOPIC), ("z", WHOLE_TOPIC)]
    assert sorted(sizes(target("balanced", whole, {})).values()) == [1, 2]
    mixed = [member("a", topics, whole=True), member("b", topics)]
    assert ("x", 0) in units_of(mixed)  # not every subscriber: partitions are the units


def test_the_largest_announced_partition_count_wins():
    members = [member("a", (("t", 2),)), member("b", (("t", 6),))]
    assert units_of(members) == [("t", p) for p in range(6)]


def test_a_callable_strategy_is_used_and_kept_to_known_units_and_members():
    def everything_to_b(members, units, holders):
        return {"b": [*units, ("nope", 0)], "ghost": units}

    result = target(everything_to_b, [member("a"), member("b")], {})
    assert sizes(result) == {"a": 0, "b": 24}


def test_an_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown rebalance strategy"):
        target("fair", [member("a")], {})
