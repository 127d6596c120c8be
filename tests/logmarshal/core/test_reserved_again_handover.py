"""A reservation reported failed and written again (``Held.unknown_reservation``; from an
attack on 58b20f6, 2026-12-02): the failed reservation R1 (kept in the transport) lands
late after (a) a restart takeover by a new instance of the same client, (b) the partition was
released and claimed by another member, or released and claimed again by the same instance
at the same resume point, (c) a close. Nothing may be handed out twice."""

from __future__ import annotations

import pytest

from logmarshal.core import Tick
from rationalizer import ClaimingMessages, decode

from .stepper import GROUP, HB, TOPIC, Group, describe


def _failed_window(cap, handed_first: bool = True):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", budget=10 if handed_first else 0)
    g.run([i1], until=2 * HB)
    if handed_first:
        assert g.handed_by(i1) == list(range(10)), describe(g)
    i1.budget = 10
    g.poll(i1)
    g.now += 1
    g.step(i1, Tick())
    ws = [w for w in i1.outbox if type(decode(w.key, w.value)) is ClaimingMessages]
    assert ws, describe(g)
    r1 = g.fail(i1, i1.outbox.index(ws[0]))
    for _ in range(len(i1.outbox)):
        g.fail(i1)  # its heartbeat too
    i1.budget = 0  # nothing more handed out by this tenure: its release gives R1's window back
    return g, i1, r1


@pytest.mark.parametrize("cap", [6, None])
@pytest.mark.parametrize("when", ["before the takeover lands", "after the takeover"])
def test_failed_reservation_lands_around_a_restart_takeover(cap, when):
    g, i1, r1 = _failed_window(cap)
    i1b = g.start("c1", "i1b", budget=100)  # i1 is frozen from here: a restart
    if when == "before the takeover lands":
        g.now += 10
        g.step(i1b, Tick())
        g.land_late(i1, r1)
    g.run([i1b], until=g.now + 2 * HB)
    if when == "after the takeover":
        g.land_late(i1, r1)
    g.run([i1b], until=g.now + 4 * HB)
    assert g.handed_by(i1b), describe(g)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [6, None])
@pytest.mark.parametrize("handed_first", [True, False])
@pytest.mark.parametrize("next_holder", ["c2", "i1 again"])
def test_failed_reservation_lands_after_release_and_new_claim(cap, handed_first, next_holder):
    g, i1, r1 = _failed_window(cap, handed_first)
    g.run([i1], until=g.now + HB // 2)  # the re-sent window may land
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    g.land(i1)
    g.replay(i1)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).holder is None, describe(g)
    if next_holder == "c2":
        c2 = g.start("c2", "i2", budget=0)  # claims, hands nothing out yet
        g.run([c2], until=g.now + HB)
        g.land_late(i1, r1)
        c2.budget = 50
        g.run([c2], until=g.now + 3 * HB)
        other = c2
    else:
        i1.budget = 0  # (R1 lands before the new tenure reserves: at its resume point)
        g.run([i1], until=g.now + 4 * HB)  # i1 claims again once its cooldown ends
        assert g.oracle.partition_state(GROUP, TOPIC, 0).holder == i1.me, describe(g)
        g.land_late(i1, r1)
        i1.budget = 50
        g.run([i1], until=g.now + 3 * HB)
        other = g.start("c2", "i2", budget=100)
        g.run([other], until=g.now + 6 * HB)  # i1 frozen
    assert g.handed_by(other), describe(g)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [6, None])
def test_failed_reservation_lands_after_close(cap):
    g, i1, r1 = _failed_window(cap)
    g.close(i1)
    g.run([i1], until=g.now + HB)
    g.land_late(i1, r1)
    c2 = g.start("c2", "i2", budget=100)
    g.run([c2], until=g.now + 4 * HB)
    assert g.handed_by(c2), describe(g)
    assert g.repeats() == {}, describe(g)
