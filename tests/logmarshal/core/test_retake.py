"""Restart recovery racing a live earlier instance (issue 33, item 5), step by step with real
cores and real worlds on a manual clock.

c1/i1 (AMO) holds p0 and keeps handing out: every 10 ms it reserves a batch and heartbeats,
so the partition's position moves all the time. c1 restarts as i2 while i1 is still alive
(a restart before the old process died). i2's restart takeover carries the position its
replay showed when it sent it; i1 moves the position before it lands, so the log refuses
it (NOT_HOLDER, PROTOCOL.md property a). The core then tries again with the position the
replay shows at the refusal (``claims.retake``), at once and then at most once per HB, for
at most 2·HB; without that (``retake`` off) i2 waits until i1's claim lapses or is released,
which never happens while i1 runs.
"""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import Tick
from rationalizer._rules import stale_from

from .stepper import GROUP, HB, TOPIC, Group, Member, describe

#: (a cap-7 takeover of a named tenure is a one-entry MemberHeartbeat naming it, property h;
#: the stepper shows its entry's verdict)
REFUSED = "MemberHeartbeat ('c1', 'i2'): rejected not_holder"
TAKEN = "MemberHeartbeat ('c1', 'i2'): accepted restart_takeover"


def _takeovers(m: Member) -> list[int]:
    return [i for i, w in enumerate(m.outbox) if w.kind == "takeover"]


def _move(g: Group, old: Member) -> None:
    """Run ``old`` alone until the log's position of p0 moved (its reservation or heartbeat)."""
    before = g.oracle.resume_offset(GROUP, TOPIC, 0)
    deadline = g.now + HB
    while g.oracle.resume_offset(GROUP, TOPIC, 0) == before:
        assert g.now < deadline, "the old instance did not move the position\n" + describe(g)
        g.run([old], until=g.now + 10)


def _restart_while_alive(core_off: frozenset[str] = frozenset()) -> tuple[Group, Member, Member]:
    """i1 hands out; i2 starts and sends its takeover; i1 moves the position before it lands:
    refused. Returns (group, i1, i2) right after i2's replay has seen the refusal."""
    g = Group(produced=100_000, batch=10, max_reserved=20, core_off=core_off)
    i1 = g.start("c1", "i1", budget=10**6)
    g.run([i1], until=3 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i1"), describe(g)
    i2 = g.start("c1", "i2", budget=10**6)  # its replay is at the log end: it takes over
    assert len(_takeovers(i2)) == 1, describe(g)
    _move(g, i1)
    g.land(i2)
    assert g.verdicts[-2].endswith(REFUSED) or g.verdicts[-1].endswith(REFUSED), describe(g)
    g.replay(i2)
    return g, i1, i2


def test_a_refused_restart_takeover_is_tried_again_and_wins_while_the_old_claim_is_fresh():
    g, i1, i2 = _restart_while_alive()
    refused_at = g.now
    last_beat = g.oracle.partition_state(GROUP, TOPIC, 0).last_beat
    assert len(_takeovers(i2)) == 1, "no second takeover after the refusal\n" + describe(g)
    g.land(i2)
    g.replay(i2)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i2"), describe(g)
    assert any(v == f"{g.now} {TAKEN}" for v in g.verdicts), describe(g)
    # taken well before i1's claim could have lapsed (i1 is alive: it never would)
    assert g.now - refused_at < HB // 2
    assert g.now < stale_from(last_beat, HB) - HB
    assert i2.core.held() == [(TOPIC, 0)]
    handed_by_i1 = g.handed_by(i1)
    g.run([i1, i2], until=g.now + 3 * HB)
    assert i1.core.fenced, describe(g)
    assert g.handed_by(i2), "i2 handed nothing out\n" + describe(g)
    assert min(g.handed_by(i2)) > max(handed_by_i1), describe(g)
    assert g.repeats() == {}, describe(g)


def test_without_the_retry_the_new_instance_waits_while_the_old_one_runs():
    """Today's behaviour before item 5, kept as the ``retake`` switch: a refused takeover
    is not tried again; the partition stays with the live old instance."""
    g, i1, i2 = _restart_while_alive(frozenset({"retake"}))
    assert _takeovers(i2) == [], describe(g)
    g.run([i1, i2], until=g.now + 5 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i1"), describe(g)
    assert i2.core.held() == [] and not i1.core.fenced, describe(g)
    assert sum(REFUSED in v for v in g.verdicts) == 1, describe(g)
    assert g.repeats() == {}, describe(g)


def _race(g: Group, old: Member, new: Member, until: int) -> list[int]:
    """Both run until ``until``; before each takeover of ``new`` lands, ``old`` moves the
    position (so the log refuses every one). Returns the times ``new`` sent a takeover."""
    sent = []
    while g.now < until:
        while _takeovers(new):  # (written at g.now: at a tick, or at the last refusal)
            sent.append(g.now)
            _move(g, old)
            g.land(new)
            g.replay(new)
        g.land(new)
        g.replay(new)
        g.run([old], until=g.now + 10)
        g.step(new, Tick())
    return sent


@pytest.mark.parametrize("core_off", [frozenset(), frozenset({"retake"})])
def test_retries_are_bounded_in_hb_then_the_partition_is_claimed_once_the_old_claim_lapses(
    core_off,
):
    """The old instance moves the position before every try lands: at most one retry at once
    and then one per HB, none later than 2·HB after the first refusal. When i1 then dies,
    i2 claims p0 the ordinary way once i1's claim is stale, and nothing is handed out twice."""
    g, i1, i2 = _restart_while_alive(core_off)
    first_refusal = g.now
    sent = _race(g, i1, i2, until=first_refusal + 8 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i1"), describe(g)
    assert sum(REFUSED in v for v in g.verdicts) == 1 + len(sent), describe(g)
    if core_off:
        assert sent == [], describe(g)
    else:
        assert sent[0] == first_refusal, describe(g)  # at once
        assert all(b - a >= HB for a, b in itertools.pairwise(sent)), sent
        assert sent[-1] <= first_refusal + 2 * HB, sent
        assert len(sent) == 3, sent  # at once, +HB, +2·HB
    # i1 dies (it runs no more): its claim lapses and i2 claims p0 as anyone would
    died = g.now
    last_beat = g.oracle.partition_state(GROUP, TOPIC, 0).last_beat
    handed_by_i1 = g.handed_by(i1)
    g.run([i2], until=died + 4 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c1", "i2"), describe(g)
    claimed = [v for v in g.verdicts if "ClaimingPartition ('c1', 'i2'): accepted" in v]
    assert claimed and int(claimed[0].split()[0]) >= stale_from(last_beat, HB), describe(g)
    assert g.handed_by(i2) and min(g.handed_by(i2)) > max(handed_by_i1), describe(g)
    assert g.repeats() == {}, describe(g)
