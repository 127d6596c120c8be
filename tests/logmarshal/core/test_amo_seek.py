"""AMO seek forward past what the log has reserved (``Consumer.seek``: "AMO can only move
forward"; found by an attack on 770572e, 2026-12-02, with writes in order and none failing).

The core moved ``claimed_through`` and ``confirmed_through`` to the target
(``AtMostOnce.start``), while the log's resume point stayed where it was: the next
reservation named the target as its first offset, the log refused it (OFFSET_REGRESSION,
property c), the heartbeat behind it, carrying the window's end, was accepted, and the member
started again after it: a whole window past the target handed out by nobody, and the
partition revoked and assigned again. Now a seek moves only what was handed out: the next
reservation starts at the log's resume point and spans the records skipped, which are never
handed out."""

from __future__ import annotations

from logmarshal.core import Tick
from rationalizer import decode

from .stepper import HB, TOPIC, Group, describe
from .test_amo_window import _running_ahead


def test_seek_past_the_reserved_window_loses_a_window_past_the_target():
    g, i1 = _running_ahead()  # handed 0..34, reserved through 64
    i1.core.seek(g.now, TOPIC, 0, 80)
    i1.budget = 40
    g.run([i1], until=g.now + 3 * HB)
    assert not any("rejected" in v for v in g.verdicts), describe(g)
    assert g.handed_by(i1)[35:40] == list(range(80, 85)), describe(g)


def test_seek_into_a_window_whose_reservation_failed_outright():
    """Through fix 2's path: R1 (60..69) failed outright while its heartbeat H1 is still in
    flight (another batch); the user seeks to 65; H1 then fails outright too: the re-sent R1
    names first_offset 65 (``claimed_through + 1`` after the seek), the log (resume 60)
    refuses it, H1' behind it is accepted at 69, the member restarts at 70: 65..69 lost."""
    g = Group(batch=10, max_reserved=30)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)
    for budget in (10, 10, 20):
        i1.budget = budget
        g.poll(i1)
        g.land(i1)
        g.replay(i1)
    i1.budget = 10
    g.poll(i1)
    g.now += 1
    g.step(i1, Tick())
    assert [w.kind for w in i1.outbox] == ["reserve", "heartbeat"], describe(g)
    r1 = decode(i1.outbox[0].key, i1.outbox[0].value)
    assert (r1.first_offset, r1.proposed_last_offset) == (60, 69), describe(g)
    assert g.handed_by(i1) == list(range(40)), describe(g)
    g.fail(i1, 0)  # R1 failed outright; H1 still in flight
    i1.core.seek(g.now, TOPIC, 0, 65)
    g.fail(i1, 0)  # H1 failed outright too
    i1.transit.clear()
    i1.budget = 30
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[40:45] == list(range(65, 70)), describe(g)
