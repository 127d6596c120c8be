"""An AMO reservation confirmed by a heartbeat that names no tenure, step by step with real
cores and real worlds (docs/protocol-notes.md, "A heartbeat that names no tenure").

A member capped below 7 confirms its reservation with a version 1 Heartbeat, which names no
tenure: an earlier heartbeat of its own that lands late may set the position back (no rule
can tell it is late), so only the reservation in the log keeps the position where the
heartbeat said. Here the reservation's write is reported failed and the heartbeat behind it
lands: the member must not hand out on the heartbeat's word (``unnamed-confirm``); it starts
again after the heartbeat's position instead, that window lost, never repeated.
"""

from __future__ import annotations

import pytest

from rationalizer import ClaimingMessages, Heartbeat, decode

from .stepper import GROUP, HB, TOPIC, Group, describe


def _kinds(writes) -> list[type]:
    return [type(decode(w.key, w.value)) for w in writes]


@pytest.mark.parametrize("switched_off", [False, True])
def test_a_heartbeat_that_overtook_its_reservation_confirms_nothing(switched_off):
    off = frozenset({"unnamed-confirm"}) if switched_off else frozenset()
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
