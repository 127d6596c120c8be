"""Schedules that hold (an attack on 2757f24 built them): ALO, a reset forward (retention passed the
read-ahead fetch) keeps the buffer and fetches on from the target; while that buffer drains
the user pauses, seeks, gives the partition up, restarts, or retention passes again. Every
offset that is in the log from the member's target on is handed out (what the user sought
past aside), what was read is handed out unless the partition moved, and no heartbeat or
release carries a position past an offset still in the log that nobody handed out."""

from __future__ import annotations

import pytest

from logmarshal.core import Poll, Tick

from .stepper import GROUP, HB, TOPIC, Group, describe


def _kept(reset):
    """i1 handed out 1000..1090, read 1091..1099; retention passes its fetch at 1100:
    OutOfRange(1150, 1300). Returns (g, i1, target)."""
    g = Group(batch=10, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", auto_offset_reset=reset, prefetch=1000)
    g.run([i1], until=HB // 2)
    i1.core.seek(g.now, TOPIC, 0, 1000)
    g.produced = 1100
    for _ in range(2):
        g.step(i1, Tick())
        g.serve(i1)
    i1.budget = 91
    g.step(i1, Poll(91))
    i1.core.commit(TOPIC, 0, range(1000, 1091))
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [1100], i1.fetches
    g.data_start, g.produced = 1150, 1300
    g.serve(i1)
    assert g.out_of_range == 1
    target = 1150 if reset == "earliest" else 1300
    return g, i1, target


def _committing(g, members, until):
    """Run, every member committing what it was handed (ALO user code)."""
    while g.now < until:
        g.run(members, until=min(until, g.now + 20))
        for m in members:
            if not m.core.closed and m.core.position(TOPIC, 0) is not None:
                m.core.commit(TOPIC, 0, [o for o in g.handed_by(m)])


def _position_never_passes(g, m, floor):
    """``m``'s heartbeat position does not pass an offset >= ``floor`` in the log that
    nobody handed out."""
    pos = m.core.position(TOPIC, 0)
    if pos is None:
        return
    never = [
        o for o in range(max(floor, g.data_start), min(pos + 1, g.produced)) if o not in g.handed
    ]
    assert not never, f"{m.me} position {pos} passes {never[:5]}\n" + describe(g)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_alo_kept_buffer_paused_then_retention_again(reset):
    g, i1, target = _kept(reset)
    g.produced = target + 100
    i1.core.pause([(TOPIC, 0)])
    _committing(g, [i1], g.now + 2 * HB)
    assert not [o for o in g.handed if o > 1090], "handed out while paused"
    # retention passes the read-ahead again while paused (the member read target..+99)
    g.data_start = target + 50
    g.produced = target + 300
    i1.core.resume([(TOPIC, 0)])
    i1.budget = 1000
    _committing(g, [i1], g.now + 6 * HB)
    handed = set(g.handed)
    missing = [
        o for o in list(range(1091, 1100)) + list(range(target, target + 300)) if o not in handed
    ]
    assert not missing, (missing[:10], describe(g))
    _position_never_passes(g, i1, target)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
@pytest.mark.parametrize("to", [1095, 1120, 1200, 1400])
def test_alo_kept_buffer_then_seek(reset, to):
    g, i1, _ = _kept(reset)
    i1.core.seek(g.now, TOPIC, 0, to)
    g.produced = 1500
    i1.budget = 1000
    _committing(g, [i1], g.now + 6 * HB)
    handed = set(g.handed)
    first = max(to, g.data_start)
    if reset == "latest" and to < g.data_start:
        first = 1500  # the sought position fell out of the log: "latest" applies to it
    missing = [o for o in range(first, 1500) if o not in handed]
    assert not missing, (missing[:10], describe(g))
    _position_never_passes(g, i1, first)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
@pytest.mark.parametrize("how", ["give_up", "restart"])
def test_alo_kept_buffer_then_hand_over(reset, how):
    """i1 hands out part of the kept buffer and of what it read from the target, then the
    partition moves; the next holder goes on from the committed position."""
    g, i1, target = _kept(reset)
    g.produced = target + 100
    i1.budget = 20
    _committing(g, [i1], g.now + 2 * HB)
    if how == "give_up":
        g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
        g.land(i1)
        g.replay(i1)
        i1.budget = 0
        nxt = g.start("c2", "i2", budget=1000, mode="alo", auto_offset_reset=reset)
        running = [i1, nxt]
    else:
        nxt = g.start("c1", "i1b", budget=1000, mode="alo", auto_offset_reset=reset)
        running = [nxt]
    _position_never_passes(g, nxt, target)
    g.produced = target + 300
    _committing(g, running, g.now + 8 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == nxt.me, describe(g)
    handed = set(g.handed)
    missing = [o for o in range(target, target + 300) if o not in handed]
    assert not missing, (missing[:10], describe(g))
    _position_never_passes(g, nxt, target)
