"""auto_offset_reset="error": a partition without a position is handed out by nobody until
the user seeks (``NoStart`` -> ``seek``). The heartbeat that tells the log the position the
seek chose must carry ``target - 1``: with be2c639 (a seek moves only what was handed out) it
carried -1, and the log recorded "resume at 0", a position the user never chose (found by an
attack on be2c639). Writes in order, none failing."""

from __future__ import annotations

import pytest

from logmarshal.core import NoStart, Poll

from .stepper import HB, Group, describe

T = 500


def _sought(cap=None):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="error")
    g.run([i1], until=HB // 2)  # claimed, looked up: no position, NoStart
    assert g.position() is None, describe(g)
    out = i1.core.step(g.now, Poll(10))
    assert any(isinstance(a, NoStart) for a in out)
    i1.core.seek(g.now, "t", 0, T)  # the user answers NoStart with a seek
    return g, i1


@pytest.mark.parametrize("cap", [None, 6, 4])
def test_error_policy_seek_then_the_first_heartbeat_records_the_target(cap):
    g, i1 = _sought(cap)
    # i1 runs, but user code does not poll yet (e.g. the partition is paused, or the user
    # handles NoStart for every partition before polling again): heartbeats only
    g.run([i1], until=g.now + HB)
    assert g.position() in (None, T), f"log resumes at {g.position()}\n" + describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_error_policy_seek_then_crash_the_successor_starts_at_the_target(cap):
    """i1 seeks to 500 and crashes after its heartbeat landed; c2 (also "error") takes the
    partition over after the lease and hands out 0.. : records the user skipped, under a
    policy that promised nobody starts without a position (before the fix)."""
    g, i1 = _sought(cap)
    g.run([i1], until=g.now + HB)  # heartbeats land; i1 never polls; then i1 crashes
    c2 = g.start("c2", "i1", budget=40, auto_offset_reset="error")
    g.run([c2], until=g.now + 4 * HB)
    below = [o for o in g.handed_by(c2) if o < T]
    assert not below, f"c2 handed out {below[:3]}..{below[-3:]}\n" + describe(g)
