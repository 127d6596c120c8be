"""rationalizer/rules.py: one method of the rule table per PROTOCOL.md rule, one freshness classifier."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rationalizer import FRESH, STALE, UNKNOWN, rules
from rationalizer.messages import MAX_HEARTBEAT_INTERVAL_MS

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
