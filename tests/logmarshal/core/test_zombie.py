"""The zombie schedule (docs/protocol-notes.md), step by step with real cores and real worlds.

c1/i1 (AMO) holds p0 and handed out 0..29 (and reserved 30..59 ahead of its polls, a window
of 30), then freezes past 2·HB: the window it never handed out is lost, as AMO allows. c3
takes the stale claim over (i1 is not fenced: the taker is another client) and releases it.
c1's new instance i2 claims p0 and hands out 60..89. i1 thaws and its tick runs before its replay catches up, so
it heartbeats p0 as if it still held it. Then either (a) it reserves and hands out, or (b) it
closes and releases, and a fourth client claims and hands out. Either way no offset may be
handed out twice: the log, not the woken member's memory, must decide.
"""

from __future__ import annotations

from logmarshal.core import Tick

from .stepper import GROUP, HB, TOPIC, Group, Member, describe


def _until_thaw() -> tuple[Group, Member, Member]:
    """Everything up to i1's first step after waking; returns (group, i1, i2)."""
    g = Group(batch=30, max_reserved=30)
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=3 * HB)
    assert g.handed_by(i1) == list(range(30)), describe(g)
    c3 = g.start("c3", "i3")
    g.run([i1, c3], until=4 * HB)
    # i1 freezes (SIGSTOP, a GC pause, a stalled VM): only c3 runs, past i1's 2·HB
    g.run([c3], until=7 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == ("c3", "i3"), describe(g)
    assert any("c3', 'i3'): accepted took_over_stale" in v for v in g.verdicts), describe(g)
    g.close(c3)  # c3 leaves gracefully: it releases p0 where the group is (59)
    g.run([c3], until=7 * HB + 50)
    assert g.oracle.holder(GROUP, TOPIC, 0) is None, describe(g)
    i2 = g.start("c1", "i2", budget=30)  # c1 restarted elsewhere
    g.run([i2], until=10 * HB)
    assert g.handed_by(i2) == list(range(60, 90)), describe(g)
    # i1 thaws: its tick runs before its replay has seen anything since it froze
    g.step(i1, Tick())
    g.land(i1)
    g.replay(i1)
    return g, i1, i2


def test_zombie_woken_instance_does_not_reserve_again():
    """(a): the woken i1 keeps running and user code polls it."""
    g, i1, i2 = _until_thaw()
    i1.budget = 30
    g.run([i1, i2], until=15 * HB)
    assert g.repeats() == {}, describe(g)


def test_zombie_woken_instance_release_gives_back_nothing_handed_out():
    """(b): the woken i1 closes (SIGTERM) and releases; c4 joins and takes p0 over."""
    g, i1, i2 = _until_thaw()
    g.close(i1)
    g.run([i1, i2], until=11 * HB)
    c4 = g.start("c4", "i4", budget=30)
    g.run([i2, c4], until=14 * HB)
    g.close(i2)  # if i2 still holds p0, it leaves too, so c4 gets it either way
    g.run([i2, c4], until=18 * HB)
    assert g.handed_by(c4), "c4 never held p0: the schedule did not reach its end\n" + describe(g)
    assert g.repeats() == {}, describe(g)
