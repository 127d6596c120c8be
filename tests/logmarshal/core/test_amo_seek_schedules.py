"""Schedules an attack on be2c639 (a seek moves only what was handed out) built around an
AMO seek; they hold: nothing is handed out twice, nothing below the seek target is handed
out by the member that sought, and the member goes on from the target."""

from __future__ import annotations

import pytest

from logmarshal.core import Tick
from rationalizer import decode

from .stepper import GROUP, HB, TOPIC, Group, describe

CAPS = [None, 6, 4]


def _group(cap):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1")
    g.hand_out_ahead(i1)
    return g, i1


def _after(g, m, n_before):
    return g.handed_by(m)[n_before:]


def _in_flight(g, i1):
    """A poll hands out 35..44 and writes the next reservation and its heartbeat; not landed."""
    i1.budget = 10
    g.poll(i1)
    kinds = [w.kind for w in i1.outbox]
    assert kinds == ["reserve", "heartbeat"], kinds
    r = decode(i1.outbox[0].key, i1.outbox[0].value)
    return r.proposed_last_offset  # 74


def _ok(g, m, target, n_before):
    assert not g.repeats(), describe(g)
    after = _after(g, m, n_before)
    assert after and min(after) >= target, (after[:5], describe(g))
    assert after[:5] == list(range(target, target + 5)), (after[:5], describe(g))
    assert not any("rejected" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("target", [70, 74, 75, 100])
def test_seek_before_the_answer_of_a_reservation_in_flight(cap, target):
    g, i1 = _group(cap)
    last = _in_flight(g, i1)
    assert last == 74
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, target)
    g.land(i1)
    g.replay(i1)
    i1.budget = 40
    g.run([i1], until=g.now + 3 * HB)
    _ok(g, i1, target, n)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("target", [70, 100])
def test_seek_between_the_reservation_and_its_heartbeat(cap, target):
    g, i1 = _group(cap)
    _in_flight(g, i1)
    n = len(g.handed_by(i1))
    g.land(i1, 1)  # the reservation lands and is answered
    g.replay(i1)
    i1.core.seek(g.now, TOPIC, 0, target)
    g.land(i1)  # its heartbeat
    g.replay(i1)
    i1.budget = 40
    g.run([i1], until=g.now + 3 * HB)
    _ok(g, i1, target, n)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_twice_quickly(cap):
    g, i1 = _group(cap)
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 80)
    i1.budget = 5
    g.run([i1], until=g.now + 10)  # fetched at 80, reserved 65..109 (in flight or landed)
    i1.core.seek(g.now, TOPIC, 0, 300)
    with pytest.raises(ValueError):
        i1.core.seek(g.now, TOPIC, 0, 299)  # AMO: only forward of what was handed out
    i1.budget = 40
    g.run([i1], until=g.now + 3 * HB)
    after = _after(g, i1, n)
    assert not g.repeats(), describe(g)
    assert all(80 <= o < 85 or o >= 300 for o in after), (after, describe(g))
    assert after[-5:] == list(range(after[-1] - 4, after[-1] + 1)) and after[-1] >= 330


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("target", [50, 100])
def test_seek_then_close_the_next_holder_starts_at_the_target(cap, target):
    g, i1 = _group(cap)
    i1.core.seek(g.now, TOPIC, 0, target)
    g.run([i1], until=g.now + HB)  # no poll: nothing reserved past 64
    g.close(i1)
    g.land(i1)
    assert g.position() == target, describe(g)
    c2 = g.start("c2", "i1", budget=20)
    g.run([c2], until=g.now + 3 * HB)
    assert g.handed_by(c2)[:3] == [target, target + 1, target + 2], describe(g)
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("target", [70, 100])
def test_seek_then_give_up_while_a_reservation_is_in_flight(cap, target):
    g, i1 = _group(cap)
    _in_flight(g, i1)  # R 65..74 and its heartbeat, not landed
    i1.core.seek(g.now, TOPIC, 0, target)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    assert [w.kind for w in i1.outbox] == ["reserve", "heartbeat", "release"]
    g.land(i1)
    g.replay(i1)
    assert g.position() == target, describe(g)
    c2 = g.start("c2", "i1", budget=20)
    g.run([i1, c2], until=g.now + 4 * HB)
    assert g.handed_by(c2)[:3] == [target, target + 1, target + 2], describe(g)
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_then_give_up_the_reservation_refused_after_the_release(cap):
    """Release carried past a reservation in flight: R lands, then the release; the next
    holder's reservations start at the release's position (writes in order)."""
    g, i1 = _group(cap)
    i1.core.seek(g.now, TOPIC, 0, 200)
    i1.budget = 5
    g.poll(i1)
    g.step(i1, Tick())
    g.serve(i1)
    g.poll(i1)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "gives it up"))
    g.land(i1)
    g.replay(i1)
    c2 = g.start("c2", "i1", budget=20)
    g.run([i1, c2], until=g.now + 4 * HB)
    assert not g.repeats(), describe(g)
    assert min(g.handed_by(c2)) >= 200, describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_then_crash_and_a_restart_takeover_by_a_new_instance(cap):
    g, i1 = _group(cap)
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 100)
    i1.budget = 10
    g.run([i1], until=g.now + HB // 2)  # reserved 65..129, handed 100..109
    assert _after(g, i1, n) == list(range(100, 110)), describe(g)
    i1b = g.start("c1", "i1b", budget=20)  # i1 is gone: its client restarted
    g.run([i1b], until=g.now + 4 * HB)
    assert not g.repeats(), describe(g)
    assert g.handed_by(i1b) and min(g.handed_by(i1b)) >= 110, describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_while_the_reservation_failed_outright_past_its_window(cap):
    g, i1 = _group(cap)
    _in_flight(g, i1)
    n = len(g.handed_by(i1))
    g.fail(i1, 0)  # R 65..74 failed outright; its heartbeat still in flight
    i1.core.seek(g.now, TOPIC, 0, 100)
    g.fail(i1, 0)  # the heartbeat failed outright too
    i1.transit.clear()
    i1.budget = 30
    g.run([i1], until=g.now + 3 * HB)
    _ok(g, i1, 100, n)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_far_past_the_data_log_end_waits_for_the_log(cap):
    g, i1 = _group(cap)
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 5000)
    i1.budget = 20
    g.run([i1], until=g.now + 3 * HB)  # nothing there yet: heartbeats only
    assert _after(g, i1, n) == [], describe(g)
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me
    g.produced = 6000
    g.run([i1], until=g.now + 2 * HB)
    _ok(g, i1, 5000, n)
