"""Seeks lost, and one that handed out twice (an attack on be2c639, 2026-12-02): a restart
forgot a seek the log had not seen (be2c639's; it starts now at least after what the seek
skipped), and a seek made before the start was known (older)."""

from __future__ import annotations

import pytest

from logmarshal.core import Fetched, Tick

from .stepper import HB, TOPIC, Group, Member, describe


@pytest.mark.parametrize("cap", [None, 6])
def test_a_restart_keeps_the_seek(cap):
    """R 65..74 and its heartbeat H are written; the user seeks to 100; R fails outright,
    H lands and is accepted without R in the log: restart() starts again from the replay at
    max(resume 65, beaten 74 + 1) = 75 and handed out 75..99, below the seek target (now it
    starts after what the seek skipped). Needs a write that fails (R) while the one behind
    it lands (H)."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.hand_out_ahead(i1)
    i1.budget = 10
    g.poll(i1)
    assert [w.kind for w in i1.outbox] == ["reserve", "heartbeat"]
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 100)
    g.fail(i1, 0)  # R failed outright
    i1.transit.clear()
    g.land(i1)  # H lands, accepted
    g.replay(i1)
    i1.budget = 40
    g.run([i1], until=g.now + 4 * HB)
    after = g.handed_by(i1)[n:]
    assert not g.repeats(), describe(g)
    assert after and min(after) >= 100, (after[:5], describe(g))


def _claims_with_its_start_looked_up(g: Group) -> Member:
    """c0 hands out 0..49 and closes (the group's position: 50); c1/i1 claims p0, and its
    LookUp of the start is not answered yet."""
    c0 = g.start("c0", "i0", budget=50)
    g.run([c0], until=3 * HB)
    assert g.handed_by(c0) == list(range(50)), describe(g)
    g.close(c0)
    g.run([c0], until=g.now + HB)
    assert g.position() == 50, describe(g)
    i1 = g.start("c1", "i1")
    for _ in range(40):
        g.now += 5
        g.step(i1, Tick())
        g.land(i1)
        g.replay(i1)
        if i1.lookups:
            break
    assert i1.lookups, describe(g)
    return i1


def test_a_seek_before_the_start_is_known_is_refused():
    """A seek accepted before the LookUp was answered was overwritten by the answer (the
    seek lost), or, below the group's position with its fetch answered first, handed out
    again what c0 had handed out (AMO, in order, no failure: 45 offsets twice; found by an
    attack on be2c639). The partition is not assigned (``Assigned``) before its start is
    known: a seek then is refused, as Kafka refuses one of a partition not assigned."""
    g = Group(batch=10, max_reserved=30)
    i1 = _claims_with_its_start_looked_up(g)
    with pytest.raises(ValueError, match="not assigned yet"):
        i1.core.seek(g.now, TOPIC, 0, 5)
    i1.budget = 60
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[:1] == [50] and g.repeats() == {}, describe(g)


def test_records_read_before_the_start_was_known_are_not_handed_out():
    """The start's answer drops what was read before it (a fetch from anywhere, as the
    refused seek above issued: moved here by hand), so nothing below the group's position
    is handed out whatever answers first."""
    g = Group(batch=10, max_reserved=30)
    i1 = _claims_with_its_start_looked_up(g)
    held = i1.core._st.held[(TOPIC, 0)]
    token, held.lookup_token = held.lookup_token, None  # the seek as it was before the
    i1.core.seek(g.now, TOPIC, 0, 5)  # refusal: it went through
    held.lookup_token = token
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [5], describe(g)
    for a in i1.fetches:  # the fetch at 5 is answered before the LookUp
        records = tuple((o, b"") for o in range(a.offset, a.offset + 100))
        g.step(i1, Fetched(a.token, a.topic, a.partition, records))
    i1.fetches.clear()
    g.serve(i1)
    i1.budget = 60
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[:1] == [50] and g.repeats() == {}, describe(g)
