"""A reservation written again (``Held.unknown_reservation``), against writes that overtake
each other (from an attack on 58b20f6, 2026-12-02): a reservation R1 and its heartbeat H1
reported failed (kept in the transport), the pair written again, R2 and H2, landing in every
order, the member replaying after each landing or only at the end; then the member stops
and another takes the partition over. Nothing is handed out twice: where H1 lands first it
moves the resume point, both reservations are refused and the window is lost (AMO), else
exactly one reservation is accepted and the other's refusal is taken as its answer."""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import Tick
from rationalizer import ClaimingMessages, decode

from .stepper import GROUP, HB, TOPIC, Group, describe


def _setup(cap, twice: bool):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)
    i1.budget = 10
    g.poll(i1)
    assert type(decode(i1.outbox[0].key, i1.outbox[0].value)) is ClaimingMessages
    stale = [g.fail(i1), g.fail(i1)]  # R1, H1: reported failed, kept
    g.now += 10
    g.step(i1, Tick())
    if twice:  # the re-sent pair fails too: a third is written
        stale += [g.fail(i1), g.fail(i1)]
        g.now += 10
        g.step(i1, Tick())
    fresh = list(i1.outbox)  # the re-sent reservation and its heartbeat
    kinds = [type(decode(w.key, w.value)) for w in fresh]
    assert kinds[0] is ClaimingMessages and len(fresh) == 2, describe(g)
    return g, i1, stale, fresh


def _finish(g: Group, i1) -> None:
    i1.budget = 40
    g.run([i1], until=g.now + 4 * HB)
    # i1 stops (frozen); c2 takes over once its lease lapsed
    c2 = g.start("c2", "i2", budget=200)
    g.run([c2], until=g.now + 8 * HB)
    assert g.handed_by(c2), describe(g)
    assert g.repeats() == {}, describe(g)
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.holder == c2.me, describe(g)


@pytest.mark.parametrize("replay_each", [True, False])
@pytest.mark.parametrize("cap", [6, None])
@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_resent_pair_and_the_stale_pair_land_in_any_order(order, cap, replay_each):
    g, i1, stale, fresh = _setup(cap, twice=False)
    writes = stale + fresh  # R1 H1 R2 H2
    for k in order:
        g.land_late(i1, writes[k], answered=k >= 2)
        if replay_each:
            g.replay(i1)
    g.replay(i1)
    _finish(g, i1)


@pytest.mark.parametrize("cap", [6, None])
@pytest.mark.parametrize("late_first", [True, False])
def test_resent_twice_then_the_stale_ones_land(cap, late_first):
    g, i1, stale, fresh = _setup(cap, twice=True)
    if late_first:
        for w in stale:
            g.land_late(i1, w)
    for w in fresh:
        g.land_late(i1, w, answered=True)
    g.replay(i1)
    if not late_first:
        for w in reversed(stale):
            g.land_late(i1, w)
        g.replay(i1)
    _finish(g, i1)
