"""The target assignment (logmarshal.core.assignment): balanced, sticky, a fixed point, and a
function of its arguments only (every member must compute the same one)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmarshal.core.assignment import WHOLE_TOPIC, balanced, target, units_of
from rationalizer._membership import Member


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


def test_a_capped_member_takes_what_only_it_can_read_once_balancing_made_room():
    """Found by the property above: m1 (cap 2) held a3 and b1; balancing gave b1 to m0,
    and the free a-partitions only m1 reads were left out although m1 had room again."""
    members = [member("m0", (("b", 3),), weight=2), member("m1", (("a", 5), ("b", 3)), cap=2)]
    current = {("a", 3): "m1", ("b", 1): "m1", ("b", 0): "m0", ("b", 2): "m0"}
    result = target("balanced", members, current)
    assert len(result["m1"]) == 2 and ("a", 3) in result["m1"]
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


def _plain_balanced(members, units, holders):
    """The rules of ``balanced`` written as plainly as they read (O(P·M) placement, every
    pair looked at per move): the oracle the heap-based one must equal exactly, since every
    member of a group must compute the same target whichever code it runs."""
    by_id = {m.client_id: m for m in members}
    ids = sorted(by_id)
    cap = {c: by_id[c].max_claims or len(units) + 1 for c in ids}

    def eligible(c, unit):
        return unit[0] in by_id[c].subscribed and (unit[1] == WHOLE_TOPIC) == by_id[c].entire_topic

    owned = {c: [] for c in ids}
    free = []
    for unit in units:
        h = holders.get(unit)
        if h in by_id and eligible(h, unit) and len(owned[h]) < cap[h]:
            owned[h].append(unit)
        else:
            free.append(unit)

    def move_one():
        ranked = sorted(ids, key=lambda c: (len(owned[c]) / by_id[c].weight, c))
        for a in reversed(ranked):
            na, wa = len(owned[a]), by_id[a].weight
            if na == 0:
                return False
            for b in ranked:
                nb, wb = len(owned[b]), by_id[b].weight
                if b == a or nb >= cap[b] or (2 * nb + 1) * wa >= (2 * na - 1) * wb:
                    continue
                for unit in reversed(owned[a]):
                    if eligible(b, unit):
                        owned[a].remove(unit)
                        owned[b] = sorted([*owned[b], unit])
                        return True
        return False

    while True:
        left = []
        for unit in free:
            room = [c for c in ids if len(owned[c]) < cap[c] and eligible(c, unit)]
            if room:
                c = min(room, key=lambda c: ((len(owned[c]) + 1) / by_id[c].weight, c))
                owned[c] = sorted([*owned[c], unit])
            else:
                left.append(unit)
        moved = False
        while move_one():
            moved = True
        if not left or (len(left) == len(free) and not moved):
            return owned
        free = left


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
            st.integers(1, 3),  # weight
            st.sampled_from([0, 0, 1, 2, 5]),  # max_claims (0: none)
            st.booleans(),  # entire_topic
        ),
        min_size=1,
        max_size=9,
    ),
    st.booleans(),  # equal weights (balanced's fast path)
    st.booleans(),  # every member subscribes alike (its heap-balanced path)
    st.booleans(),  # one member holds everything it may
    st.integers(0, 2**32),
)
def test_balanced_equals_its_rules_written_plainly(specs, equal, alike, hog, seed):
    counts = {"a": 7, "b": 3, "c": 16}
    if alike:
        specs = [(specs[0][0], w, cap, specs[0][3]) for _, w, cap, _ in specs]
    members = [
        member(
            f"m{i}", tuple((t, counts[t]) for t in sorted(topics)), 1 if equal else w, cap, whole
        )
        for i, (topics, w, cap, whole) in enumerate(specs)
    ]
    rng = random.Random(seed)
    units = units_of(members)
    holders = {
        u: "m0" if hog else f"m{rng.randrange(len(members) + 2)}"
        for u in units
        if rng.random() < 0.7
    }
    ordered = sorted(members, key=lambda m: m.client_id)
    assert balanced(ordered, units, holders) == _plain_balanced(ordered, units, holders)


def test_of_two_equally_most_loaded_members_the_last_client_id_gives():
    """Ties are broken by client_id, the same way in every member's code: here one move
    balances the group, and it is m1's highest partition that moves (m0's would be as
    balanced, and a member computing that would disagree with the rest)."""
    members = [member(c, (("t", 7),)) for c in ("m0", "m1", "m2")]
    holders = {
        ("t", p): c for c, ps in (("m0", (0, 1, 2)), ("m1", (3, 4, 5)), ("m2", (6,))) for p in ps
    }
    expected = {
        "m0": [("t", 0), ("t", 1), ("t", 2)],
        "m1": [("t", 3), ("t", 4)],
        "m2": [("t", 5), ("t", 6)],
    }
    assert _plain_balanced(members, units_of(members), holders) == expected
    assert balanced(members, units_of(members), holders) == expected
