"""A member capped at 9 names a tenure without a name (PROTOCOL.md, "Version 9"), and never
releases one that has none (an attack on 894f942, 2026-12-07).

c1:i0, capped at 5, claims p0 with a version 5 claim: its tenure has no name. It restarts as
c1:i1 (cap 9), which takes the tenure over by restart (a takeover keeps a tenure as it is)
and names it with a NamingTenure behind its first heartbeat. If i1 gives p0 up before it
read its naming's verdict, or while its naming writes fail, its release named no tenure
(version 1): given up and landing late, such a release ends the next tenure i1 claims, and
the next holder hands out again what i1 handed out there (AMO). The attack found three
schedules; since then a member capped at 9 writes no release without a name: it takes the
name its replay shows, or names the tenure first (``closing.write_releases``).
"""

from __future__ import annotations

import pytest

from logmarshal.core import Tick
from rationalizer import HeartbeatingTask, NamingTenure, ReleasingPartition, decode

from .stepper import GROUP, HB, TOPIC, Group, Member, describe


def _taken_over_unnamed(g: Group) -> Member:
    """c1:i0 (cap 5) hands out 0..29 of p0 in a tenure without a name; then c1:i1 starts,
    capped at 9 (the group's cap removed)."""
    i0 = g.start("c1", "i0", budget=30)
    g.run([i0], until=3 * HB)
    assert g.handed_by(i0) == list(range(30)), describe(g)
    assert g.oracle.partition_state(GROUP, TOPIC, 0).tenure is None
    g.protocol_version = None
    return g.start("c1", "i1", budget=30)


def _releases_of(g: Group, who: Member) -> list[ReleasingPartition]:
    msgs = [decode(k, v) for _, k, v in g.log]
    return [
        m
        for m in msgs
        if isinstance(m, ReleasingPartition) and (m.client_id, m.instance_id) == who.me
    ]


def _released_late_then_next_holder(g: Group, i1: Member, first: list[int]) -> None:
    """i1 goes on for 12 HB asked for 30 more (its release attempts kept in the transport),
    they land; c2 joins: nothing is handed out twice, and i1 wrote no release without a
    name."""
    i1.budget = 30
    g.run([i1], until=g.now + 12 * HB, dropped=lambda w: w.kind in ("release", "name"))
    again = [o for o in g.handed_by(i1) if o not in first]
    assert again, describe(g)  # i1 claimed p0 anew and handed out more
    g.land_transit(i1)
    c2 = g.start("c2", "i2", budget=300)
    g.run([c2], until=g.now + 8 * HB)
    assert g.handed_by(c2), describe(g)
    assert g.repeats() == {}, describe(g)
    assert all(m.tenure is not None for m in _releases_of(g, i1)), describe(g)


def test_a_release_given_up_one_round_trip_after_the_naming_names_the_tenure():
    """The naming lands (NAMED) and i1 gives p0 up before it replays that verdict: its
    release, written once the takeover's lease wait is over, takes the name the replay
    shows; given up and landing late, it is refused in i1's next tenure."""
    g = Group(batch=30, protocol_version=5)
    i1 = _taken_over_unnamed(g)

    def named_out() -> bool:
        return any(w.kind == "name" for w in i1.outbox)

    for _ in range(100):  # until i1 has written its NamingTenure
        g.now += 10
        g.step(i1, Tick())
        if named_out():
            break
        g.land(i1)
        g.replay(i1)
        g.serve(i1)
        if named_out():
            break
        g.poll(i1)
        if named_out():
            break
        g.land(i1)
        g.replay(i1)
    assert named_out(), describe(g)
    g.land(i1)  # the NamingTenure lands: NAMED; i1 has not replayed it yet
    assert g.verdicts[-1].endswith("accepted named"), describe(g)
    first = g.handed_by(i1)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "rebalance"))
    _released_late_then_next_holder(g, i1, first)


@pytest.mark.parametrize("lands", [True, False])
def test_a_release_of_a_tenure_whose_naming_failed_names_it_first(lands):
    """Every NamingTenure i1 writes is reported failed and kept in the transport; the first
    lands late (``lands``: NAMED, a verdict i1 never reads) or never. i1 gives p0 up: it
    writes no release without a name (it names the tenure first; while those writes fail
    too, the release is given up having written none), so nothing of its can end the
    tenure it claims next."""
    g = Group(batch=30, protocol_version=5)
    i1 = _taken_over_unnamed(g)
    g.run([i1], until=g.now + 3 * HB, dropped=lambda w: w.kind == "name")
    state = g.oracle.partition_state(GROUP, TOPIC, 0)
    assert state.holder == i1.me and state.tenure is None, describe(g)
    first = g.handed_by(i1)
    assert first, describe(g)
    names = [w for w in i1.transit if w.kind == "name"]
    assert names, describe(g)
    if lands:
        g.land_late(i1, names[0])
        assert g.verdicts[-1].endswith("accepted named"), describe(g)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    _released_late_then_next_holder(g, i1, first)


def test_a_task_taken_over_without_a_name_is_named_once_and_beats_as_version_8():
    tasks = (("T", ("a", "b")),)
    opts = {"mode": "alo", "topics": (("T", 1),), "tasks": tasks}
    g = Group(batch=30, protocol_version=5)
    i0 = g.start("c1", "i0", budget=30, **opts)
    g.run([i0], until=3 * HB)
    state = g.oracle.partition_state(GROUP, "T", 0)
    assert state.holder == i0.me and state.tenure is None, describe(g)
    g.protocol_version = None
    i1 = g.start("c1", "i1", budget=30, **opts)
    g.run([i1], until=g.now + 3 * HB)
    state = g.oracle.partition_state(GROUP, "T", 0)
    assert state.holder == i1.me and state.tenure is not None, describe(g)
    msgs = [decode(k, v) for _, k, v in g.log]
    names = [m for m in msgs if isinstance(m, NamingTenure)]
    v8 = [m for m in msgs if isinstance(m, HeartbeatingTask) and m.version == 8]
    assert len(names) == 1 and v8 and all(m.tenure == state.tenure for m in v8), describe(g)
