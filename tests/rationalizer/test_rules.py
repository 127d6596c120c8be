"""rationalizer/_rules.py: one method of the rule table per PROTOCOL.md rule, one freshness classifier."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rationalizer import FRESH, STALE, UNKNOWN, WorldState
from rationalizer import _rules as rules
from rationalizer._codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_HEARTBEATING_TASK,
    T_RELEASING_PARTITION,
    T_RELEASING_TASK,
)
from rationalizer._messages import MAX_HEARTBEAT_INTERVAL_MS

PROTOCOL = Path(__file__).resolve().parents[2] / "PROTOCOL.md"
RULE_FUNCTIONS = {
    1: rules.Rules.fenced,
    2: rules.Rules.release_group,
    3: rules.Rules.paused,
    4: rules.Rules.claim,
    5: rules.Rules.heartbeat,
    6: rules.Rules.release,
    7: rules.Rules.claim_messages,
}


def test_freshness_boundaries():
    hb = 1000
    assert rules.freshness(-5, hb) == FRESH  # a beat "in the future" of a query time
    assert rules.freshness(0, hb) == FRESH
    assert rules.freshness(hb - 1, hb) == FRESH
    assert rules.freshness(hb, hb) == UNKNOWN
    assert rules.freshness(2 * hb, hb) == UNKNOWN
    assert rules.freshness(2 * hb + 1, hb) == STALE


@given(
    beat=st.integers(-(2**62), 2**62),
    hb=st.integers(1, MAX_HEARTBEAT_INTERVAL_MS),
    dt=st.integers(-5, 5),
)
def test_stale_from_inverts_freshness(beat, hb, dt):
    t = rules.stale_from(beat, hb) + dt
    assert (rules.freshness(t - beat, hb) is STALE) == (dt >= 0)


def test_each_rule_function_names_its_rule():
    for n, fn in RULE_FUNCTIONS.items():
        assert inspect.getdoc(fn).startswith(f"Rule {n}:"), fn.__name__


def test_protocol_says_where_each_rule_lives():
    text = PROTOCOL.read_text(encoding="utf-8")
    section = text.split("## Transitions and verdicts", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\d) [^|]*\| `([\w.]+)`", section, re.M))
    for n, fn in RULE_FUNCTIONS.items():
        assert rows.get(str(n)) == fn.__name__, n
    assert rows.get("0") == "WorldState._slow"
    assert "`freshness`" in section


def test_the_transition_table_sends_every_partition_type_to_its_rule():
    """Every record type ``apply_many`` judges by rules 4-7 has a transition, and no other."""
    table = rules.RULES.transitions({}, {})
    assert set(table) == {
        T_HEARTBEAT,
        T_HEARTBEATING_TASK,
        T_CLAIMING_PARTITION,
        rules.T_CLAIM_V5,
        rules.T_CLAIM_V6,
        T_RELEASING_PARTITION,
        T_RELEASING_TASK,
        rules.T_RELEASE_V6,
        rules.T_RELEASE_TASK_V6,
        T_CLAIMING_MESSAGES,
        rules.T_MEMBER_BEAT,
        rules.T_TASK_BEAT_V8,
        rules.T_NAME_V9,
    }
    derived = {
        rules.T_CLAIM_V5,
        rules.T_CLAIM_V6,
        rules.T_RELEASE_V6,
        rules.T_RELEASE_TASK_V6,
        rules.T_MEMBER_BEAT,
        rules.T_TASK_BEAT_V8,
        rules.T_NAME_V9,
    }
    assert len(derived) == 7 and not derived & set(range(256))


def test_each_property_method_names_its_property():
    for letter, name in {
        "a": "carries_position",
        "b": "gives_back",
        "c": "starts_at_resume",
        "e": "lease_runs",
        "f": "names_tenure",
        "g": "keeps_position",
        "h": "beats_in_tenure",
        "i": "task_beats_in_tenure",
        "j": "names_own_tenure",
    }.items():
        assert inspect.getdoc(getattr(rules.Rules, name)).startswith(f"Property {letter} "), name


def test_a_world_takes_only_a_rule_table():
    with pytest.raises(TypeError, match=r"rules must be a rules\.Rules"):
        WorldState(rules=frozenset({"fenced_lease"}))  # type: ignore[arg-type]
    assert WorldState()._rules is rules.RULES
