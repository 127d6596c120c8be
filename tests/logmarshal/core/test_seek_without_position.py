"""auto_offset_reset="error", no position, and the user's seek (``MemberCore.seek``): the
seek's target is the first position the log records, in ALO as in AMO. Under ALO the seek
moved nothing the heartbeat carries (``move`` restarts the commit tracker only when seeking
back of ``next_fetch``, which ``on_bounds`` put at 0): the first heartbeat carried -1, the
log recorded "resume at 0", and after a crash a successor (also "error") handed out 0..T-1,
records the user skipped (an attack on 4f14d66); under AMO, be2c639 (a seek moves only what
was handed out) made it carry -1 too (an attack on be2c639). Writes in order, none
failing."""

from __future__ import annotations

import pytest

from logmarshal.core import NoStart, Poll

from .stepper import HB, Group, describe

T = 500


def _sought(mode, cap=None):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="error", mode=mode)
    g.run([i1], until=HB // 2)  # claimed, looked up: no position, NoStart
    assert g.position() is None, describe(g)
    out = i1.core.step(g.now, Poll(10))
    assert any(isinstance(a, NoStart) for a in out)
    i1.core.seek(g.now, "t", 0, T)  # the user answers NoStart with a seek
    return g, i1


@pytest.mark.parametrize("cap", [None, 6, 4])
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_error_policy_seek_the_first_heartbeat_records_the_target(mode, cap):
    g, i1 = _sought(mode, cap)
    g.run([i1], until=g.now + HB)  # heartbeats only (user code does not poll yet)
    assert g.position() in (None, T), f"log resumes at {g.position()}\n" + describe(g)


@pytest.mark.parametrize("cap", [None, 6])
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_error_policy_seek_then_crash_the_successor_does_not_start_below_the_target(mode, cap):
    g, i1 = _sought(mode, cap)
    g.run([i1], until=g.now + HB)  # i1's heartbeats land; it never polls; it crashes
    c2 = g.start("c2", "i1", budget=40, auto_offset_reset="error", mode=mode)
    g.run([c2], until=g.now + 4 * HB)
    below = [o for o in g.handed_by(c2) if o < T]
    assert not below, f"c2 handed out {below[:3]}..{below[-3:]}\n" + describe(g)
