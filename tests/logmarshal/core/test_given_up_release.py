"""A release given up, and a tenure taken up again under it (an attack on 58b20f6, 2026-12-02).

c1/i1 (AMO) handed out 0..29 of p0 and gives p0 up; every attempt of its ReleasingPartition
(``release_attempts``, 3) is reported failed and stays in the transport, and i1 gives the
release up. Its replay still shows it holding p0, in the same tenure. Before the core's
"given-up" rule, i1 took that tenure up again (``claims.adopt_orphans``, "recovered") and
reserved, confirmed and handed out 100..129 under it. Then one of the stray releases landed:
it names that very tenure and comes from its holder, so property f accepts it, and it set the
resume point back to 30; c2 claimed p0 and handed 100..129 out a second time.

Now a tenure whose release was given up is never taken up again: it lapses (i1 heartbeats it
no more), and is claimed anew, a tenure the stray release does not name (NOT_HOLDER). It
needs writes that overtake each other: in order, the release lands before anything i1
writes after it. Caps 4 and 5 write releases that name no tenure, the hole
test_late_release.py states, and so does any member releasing a tenure without a name (the
last test here).
"""

from __future__ import annotations

import pytest

from logmarshal.core import Tick

from .stepper import GROUP, HB, TOPIC, Group, Member, describe


def _gives_up_its_release(g: Group) -> tuple[Member, int | None]:
    """i1 hands out 0..29, gives p0 up, every attempt of the release reported failed and
    kept, and goes on for 12 HB, asked for 30 more; returns i1 and the tenure it gave up."""
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=3 * HB)
    assert g.handed_by(i1) == list(range(30)), describe(g)
    tenure = g.oracle.partition_state(GROUP, TOPIC, 0).tenure
    assert tenure is not None
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    i1.budget = 30
    g.run([i1], until=12 * HB, dropped=lambda w: w.kind == "release")
    assert len(i1.transit) == 3, describe(g)  # release_attempts, all given up
    return i1, tenure


def _c2_takes_over(g: Group) -> Member:
    """i1 stops (a crash: frozen); c2 claims p0 once i1's lease lapsed and hands out."""
    c2 = g.start("c2", "i2", budget=300)
    g.run([c2], until=g.now + 8 * HB)
    assert g.handed_by(c2), "c2 never took p0 over\n" + describe(g)
    return c2


@pytest.mark.parametrize("cap", [None, 6])
def test_a_tenure_whose_release_was_given_up_lapses_and_is_claimed_anew(cap) -> None:
    g = Group(batch=30, protocol_version=cap)
    i1, tenure = _gives_up_its_release(g)
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.holder == i1.me and state.tenure != tenure, describe(g)  # a new tenure
    assert [o for o in g.handed_by(i1) if o >= 30], "i1 never took p0 back\n" + describe(g)
    g.land_transit(i1)  # overtaken by everything i1 wrote since
    late = [v for v in g.verdicts if "LATE ReleasingPartition" in v]
    assert len(late) == 3 and all(v.endswith("rejected not_holder") for v in late), describe(g)
    _c2_takes_over(g)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_without_the_rule_a_late_release_ends_the_tenure_taken_up_again(cap) -> None:
    """The schedule the rule closes, with it switched off: i1 takes the same tenure up again
    and hands out under it; the first stray release is accepted, c2 hands the same out."""
    g = Group(batch=30, protocol_version=cap, core_off=frozenset({"given-up"}))
    i1, tenure = _gives_up_its_release(g)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).tenure == tenure  # the same tenure
    again = [o for o in g.handed_by(i1) if o >= 30]
    assert again, "i1 did not take p0 up again\n" + describe(g)
    g.land_transit(i1)
    assert any("LATE ReleasingPartition ('c1', 'i1'): accepted" in v for v in g.verdicts)
    _c2_takes_over(g)
    assert set(g.repeats()) == set(again), describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_given_up_release_then_a_restart_takeover_by_a_new_instance(cap):
    """i1 gives its release up, stops at once (crash) while its tenure is fresh; i1b takes
    it over (restart); the stray releases land after: not the holder."""
    g = Group(batch=30, protocol_version=cap)
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=3 * HB)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    # every attempt fails, quickly (the replay is not consulted: writes just fail)
    for _ in range(12):
        g.now += HB // 2
        g.step(i1, Tick())
        for w in [w for w in i1.outbox if w.kind == "release"]:
            g.fail(i1, i1.outbox.index(w))
        g.land(i1)
        g.replay(i1)
    assert len(i1.transit) == 3 and g.oracle.holder(GROUP, TOPIC, 0) == i1.me, describe(g)
    i1b = g.start("c1", "i1b", budget=100)
    g.run([i1b], until=g.now + 3 * HB)
    assert g.handed_by(i1b), describe(g)
    g.land_transit(i1)
    i1b.budget = 100
    g.run([i1b], until=g.now + 3 * HB)
    c2 = g.start("c2", "i2", budget=300)
    g.run([c2], until=g.now + 8 * HB)
    assert g.handed_by(c2) and g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_resent_reservation_after_lapse_when_another_member_claimed_unseen(cap):
    """i1's reservation and heartbeat fail; its writes keep failing past 2·HB and it does not
    replay; c2 claims and hands out; i1 (replay behind) writes the reservation again: the
    log refuses it (not the holder) and i1 lets p0 go; nothing twice."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)
    i1.budget = 10
    g.poll(i1)
    i1.stuck = True
    g.land(i1)
    i1.transit.clear()
    c2 = g.start("c2", "i2", budget=60)
    g.run([c2], until=g.now + 4 * HB)  # i1 frozen: lapsed, c2 claims and hands out
    assert g.handed_by(c2), describe(g)
    i1.stuck = False
    g.now += 10
    g.step(i1, Tick())  # i1 wakes without replaying: re-sends its reservation
    assert "reserve" in [w.kind for w in i1.outbox], describe(g)
    g.land(i1)
    g.replay(i1)
    assert i1.core.held() == [], describe(g)
    i1.budget = 100
    g.run([i1, c2], until=g.now + 4 * HB)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("cap", [8, None])
def test_a_given_up_release_of_an_unnamed_tenure_ends_the_next_one_below_cap_9(cap):
    """The hole PROTOCOL.md states for tenures without a name ("Upgrading a running group"),
    and how version 9 closes it: ``c1:i1`` took over by restart the tenure its earlier
    instance, capped at 5, began with a claim that names none. Capped at 8, its release of
    it is version 1, names no tenure, and given up it ends the next tenure the same
    instance claims (writes that overtake each other): what that tenure handed out is
    handed out again; no core rule can tell the stray release from a real one (an attack on
    770572e, 2026-12-02). Uncapped (9), it names the tenure it took over (NamingTenure,
    property j), so its release names it too, and the stray release is refused in the next
    tenure: nothing twice."""
    g = Group(batch=30, protocol_version=5)
    i0 = g.start("c1", "i0", budget=30)
    g.run([i0], until=3 * HB)
    assert g.handed_by(i0) == list(range(30)), describe(g)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).tenure is None
    # i0 restarts as i1, capped at 8 or not capped: it takes the unnamed tenure over
    g.protocol_version = cap
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=g.now + 3 * HB)
    st = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert st.holder == i1.me, describe(g)
    assert (st.tenure is None) == (cap == 8), describe(g)  # named by i1 at 9
    first = g.handed_by(i1)
    assert first, describe(g)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    i1.budget = 30
    g.run([i1], until=g.now + 12 * HB, dropped=lambda w: w.kind == "release")
    assert len(i1.transit) == 3, describe(g)
    st = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert st.holder == i1.me and st.tenure is not None, describe(g)  # claimed anew
    again = [o for o in g.handed_by(i1) if o > first[-1]]
    assert again, describe(g)
    g.land_transit(i1)
    c2 = g.start("c2", "i2", budget=300)
    g.run([c2], until=g.now + 8 * HB)
    assert g.handed_by(c2), describe(g)
    assert set(g.repeats()) == (set(again) if cap == 8 else set()), describe(g)
