"""An AMO reservation confirmed by a heartbeat, step by step with real cores and real worlds
(docs/protocol-notes.md, "A heartbeat that names no tenure" and "A group of mixed caps").

A heartbeat's accepted verdict moves the position (``last_offset``) to what it carries, but
a heartbeat that names no tenure (version 1: members capped below 7) landing late may set
it back, and no rule can tell it is late: only the reservation in the log
(``claimed_through``, which no claim or heartbeat lowers) keeps every later holder past a
window. So a member hands a window out only once the log holds its reservation, whatever
heartbeat confirmed it (``reserved-confirm``); else it starts again after the heartbeat's
position, that window lost, never repeated. Three schedules: a member capped at 6 whose
heartbeat overtook its reservation; an uncapped member in a group of mixed caps, whose
position a capped member's late heartbeat of an earlier tenure sets back below the floor of
its next one; and a write that failed outright, whose reservation is written again, so
nothing is lost to it.
"""

from __future__ import annotations

import pytest

from logmarshal.core import Tick
from rationalizer import ClaimingMessages, Heartbeat, decode

from . import stepper
from .stepper import GROUP, HB, TOPIC, Group, describe


def _kinds(writes) -> list[type]:
    return [type(decode(w.key, w.value)) for w in writes]


@pytest.mark.parametrize("switched_off", [False, True])
def test_a_heartbeat_that_overtook_its_reservation_confirms_nothing(switched_off):
    off = frozenset({"reserved-confirm"}) if switched_off else frozenset()
    g = Group(batch=10, max_reserved=30, protocol_version=6, core_off=off)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)  # claimed, positioned, fetched
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me, describe(g)
    i1.budget = 10
    g.poll(i1)  # the first window's reservation, and the heartbeat that confirms it behind
    assert _kinds(i1.outbox) == [ClaimingMessages, Heartbeat], describe(g)
    reservation = g.fail(i1, 0)  # its write reported failed (kept: it may land later)
    g.land(i1)  # the heartbeat lands first and is accepted
    g.replay(i1)
    assert g.verdicts[-1].endswith("accepted renewed"), describe(g)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).claimed_through < 29
    g.poll(i1)
    if switched_off:  # the heartbeat's verdict alone confirmed: handed out on its word
        assert g.handed_by(i1) == list(range(10)), describe(g)
        return
    assert g.handed_by(i1) == [], describe(g)
    # it starts again after the heartbeat's position: 0..29 are never handed out by anyone
    # (lost, as a crash would lose them), whatever lands later
    g.land_late(i1, reservation)
    g.run([i1], until=g.now + 3 * HB)
    handed = g.handed_by(i1)
    assert handed and handed[0] == 30, describe(g)
    assert g.repeats() == {}, describe(g)


def _reservation(w) -> bool:
    return type(decode(w.key, w.value)) is ClaimingMessages


@pytest.mark.parametrize("next_holder", ["another member capped at 6", "its own next instance"])
@pytest.mark.parametrize("switched_off", [False, True])
def test_in_a_group_of_mixed_caps_a_named_heartbeat_confirms_only_a_reservation_in_the_log(
    switched_off, next_holder
):
    off = frozenset({"reserved-confirm"}) if switched_off else frozenset()
    g = Group(batch=10, max_reserved=10, protocol_version=6, core_off=off)
    a = g.start("c1", "i1", budget=10)  # capped at 6: version 1 Heartbeats
    g.run([a], until=3 * HB)
    assert g.handed_by(a) == list(range(10)), describe(g)
    stale = None  # one of a's heartbeats: its write reported failed, kept to land late
    while stale is None:
        g.now += 10
        g.step(a, Tick())
        beats = [i for i, w in enumerate(a.outbox) if type(decode(w.key, w.value)) is Heartbeat]
        if beats:
            stale = g.fail(a, beats[0])
        g.land(a)
        g.replay(a)
    assert decode(stale.key, stale.value).last_offset > 9
    g.carry(a, a.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    g.land(a)
    g.replay(a)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).holder is None, describe(g)

    g.protocol_version = None  # c runs uncapped: MemberHeartbeats, which name its tenure
    c = g.start("c2", "i2", budget=30)
    g.run([c], until=g.now + 3 * HB, dropped=_reservation)  # no reservation of c lands
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.holder == c.me and state.claimed_through == 9, describe(g)
    if switched_off:  # c confirmed on its heartbeats' verdicts alone
        assert g.handed_by(c) == list(range(10, 40)), describe(g)
    else:  # nothing without a reservation in the log
        assert g.handed_by(c) == [], describe(g)
    # c stops (frozen for good); a, still capped at 6, takes the partition again once c's
    # lease lapsed: a new tenure, whose floor is the position c's heartbeats left
    a.budget = 0
    g.run([a], until=g.now + 6 * HB)
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.holder == a.me and state.tenure_floor > 19, describe(g)
    g.land_late(a, stale)  # a's heartbeat of its earlier tenure: accepted, no name to judge
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.last_offset == decode(stale.key, stale.value).last_offset, describe(g)
    # a stops; the next holder resumes where the late heartbeat set the position
    if next_holder == "its own next instance":  # a rolling restart removing the cap
        d = g.start("c1", "i1b", budget=40)
    else:
        g.protocol_version = 6
        d = g.start("c3", "i3", budget=40)
    g.run([d], until=g.now + 8 * HB)
    handed = g.handed_by(d)
    assert handed and handed[0] == state.last_offset + 1, describe(g)
    if switched_off:
        assert set(g.repeats()) == set(range(handed[0], 40)), describe(g)
    else:
        assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [6, None])
def test_a_reservation_whose_write_failed_outright_is_written_again_and_nothing_is_lost(cap):
    """A reservation and its heartbeat reported failed, neither landed: the member writes
    the reservation again with its heartbeat behind it (not the heartbeat alone, which would
    confirm nothing), and hands the window out once it is in the log."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)  # claimed, positioned, fetched
    i1.budget = 10
    g.poll(i1)  # the first window's reservation, and its heartbeat behind
    assert _kinds(i1.outbox)[0] is ClaimingMessages, describe(g)
    for _ in range(len(i1.outbox)):  # the write failed outright: none of it ever lands
        g.fail(i1)
    i1.transit.clear()
    g.run([i1], until=g.now + 2 * HB)
    reservations = [v for v in g.verdicts if "ClaimingMessages" in v]
    assert reservations and reservations[0].endswith("accepted messages_claimed"), describe(g)
    assert g.handed_by(i1) == list(range(10)), describe(g)
    assert not any("without the reservation" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", [6, None])
def test_a_failed_reservation_is_written_again_after_the_lease_lapsed(cap):
    """The same, with every write of the member failing outright for 2·HB, so its lease
    lapses before anything is written again (an attack on 58b20f6, 2026-12-02): the
    reservation is written again all the same (the log refuses it unless the member still
    holds the partition), not the due heartbeat alone, which carried the window's end
    (``beaten_through``), was accepted without the reservation and moved the resume point
    past a window nobody had handed out."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)
    i1.budget = 10
    g.poll(i1)
    assert _kinds(i1.outbox)[0] is ClaimingMessages, describe(g)
    i1.stuck = True  # every write reported failed (kept in transit, dropped below)
    g.land(i1)
    g.run([i1], until=g.now + 2 * HB)
    i1.stuck = False
    assert not i1.core.may_hand_out(TOPIC, 0, g.now), "the lease did not lapse"
    i1.transit.clear()
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[:10] == list(range(10)), describe(g)
    assert not any("without the reservation" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", [6, None])
def test_a_heartbeat_reported_failed_before_its_reservation_waits_for_it(cap):
    """The heartbeat's failure stepped before its reservation's (the stepper's order; the
    Consumer's writer reports a batch in order): the member wrote the heartbeat again alone,
    carrying the window's end, while the reservation was in flight, and lost the window. It
    now waits for the reservation's answer, then writes both again."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)
    i1.budget = 10
    g.poll(i1)
    assert _kinds(i1.outbox)[:1] == [ClaimingMessages], describe(g)
    g.fail(i1, 1)  # the heartbeat's failure first...
    assert [w.kind for w in i1.outbox] == ["reserve"], "a heartbeat went out alone, ahead"
    g.fail(i1, 0)  # ...then the reservation's; neither ever lands
    i1.transit.clear()
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[:10] == list(range(10)), describe(g)
    assert not any("without the reservation" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("fail", [True, False])
@pytest.mark.parametrize("hb", [100, 10])
def test_a_heartbeat_waiting_for_its_reservation_leaves_the_core_idle(monkeypatch, hb, fail):
    """While a heartbeat waits for its reservation's answer (``handout.act_held``), ``due``
    is not ``now`` at every tick (an edge would spin): at HB 10 ms the wait's re-check was 0
    ms away (found by an attack on 770572e)."""
    monkeypatch.setattr(stepper, "HB", hb)
    g = Group(batch=10, max_reserved=30)
    i1 = g.start("c1", "i1")
    g.run([i1], until=hb // 2, every=max(1, hb // 10))
    i1.budget = 10
    g.poll(i1)
    assert [w.kind for w in i1.outbox][:2] == ["reserve", "heartbeat"], describe(g)
    if fail:
        g.fail(i1, 1)  # the heartbeat's answer first (a batch of its own); R still in flight
    g.now += 1
    ticks = 0
    for _ in range(50):  # an edge on a clock that does not move: Tick while due() <= now
        if i1.core.due(g.now, g.now) > g.now:
            break
        g.step(i1, Tick())
        ticks += 1
    assert ticks < 5, f"{ticks} Ticks at the same instant: due() stays at now"
