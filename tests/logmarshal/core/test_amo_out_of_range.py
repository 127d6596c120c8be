"""AMO out-of-range resets (``fetching.on_out_of_range`` -> ``move`` ->
``AtMostOnce.start``), built by an attack on be2c639 (a seek or reset moves only what was
handed out): what they hold."""

from __future__ import annotations

import pytest

from logmarshal.core import Tick

from .stepper import HB, TOPIC, Group, describe

CAPS = [None, 6]


def _group(cap, reset):
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    if reset != "earliest":  # c0 (earliest) gives the group a position at 35 first
        c0 = g.start("c0", "i1", auto_offset_reset="earliest")
        g.hand_out_ahead(c0)
        g.close(c0)
        g.land(c0)
        g.handed.clear()
        g.now += 10
    i1 = g.start("c1", "i1", auto_offset_reset=reset)
    g.hand_out_ahead(i1, 0 if reset == "earliest" else 35)
    return g, i1


@pytest.mark.parametrize("cap", CAPS)
def test_seek_past_the_end_reset_latest_goes_to_the_end(cap):
    g, i1 = _group(cap, "latest")
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 5000)
    i1.budget = 20
    g.run([i1], until=g.now + HB)
    assert g.out_of_range >= 1
    g.produced = 1100
    g.run([i1], until=g.now + 3 * HB)
    after = g.handed_by(i1)[n:]
    assert after[:3] == [1000, 1001, 1002], describe(g)
    assert not g.repeats() and not any("rejected" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_seek_past_the_end_reset_earliest_waits_for_the_log(cap):
    """earliest (0) is below what the log reserved (64): AMO waits for the log to reach 5000,
    fetching at 5000 again every HB/4 meanwhile (each refusal comes back at once: a fetch
    after each would spin at the round trip's pace, a tick's here)."""
    g, i1 = _group(cap, "earliest")
    n = len(g.handed_by(i1))
    i1.core.seek(g.now, TOPIC, 0, 5000)
    i1.budget = 20
    g.run([i1], until=g.now + 2 * HB)
    assert 3 <= g.out_of_range <= 9 and g.handed_by(i1)[n:] == [], g.out_of_range
    g.produced = 6000
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[n:][:3] == [5000, 5001, 5002], describe(g)
    assert not g.repeats() and not any("rejected" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_retention_passes_the_fetch_position_while_a_reservation_is_in_flight(cap):
    """R 65..74 in flight; the log start moves to 200 (retention); the user seeks to 150:
    the fetch there is out of range, the reset moves to 200 (above claimed 64 as i1 knows
    it); R and its heartbeat land after: the next reservation starts at 75 (the log's
    resume point) and i1 goes on at 200."""
    g, i1 = _group(cap, "earliest")
    i1.budget = 10
    g.poll(i1)  # hands 35..44, writes R 65..74 + heartbeat
    assert [w.kind for w in i1.outbox] == ["reserve", "heartbeat"]
    n = len(g.handed_by(i1))
    g.data_start = 200
    i1.core.seek(g.now, TOPIC, 0, 150)
    g.step(i1, Tick())
    g.serve(i1)  # out of range: reset to 200
    assert g.out_of_range == 1
    g.land(i1)
    g.replay(i1)
    i1.budget = 30
    g.run([i1], until=g.now + 3 * HB)
    after = g.handed_by(i1)[n:]
    assert after[:3] == [200, 201, 202], describe(g)
    assert not g.repeats() and not any("rejected" in v for v in g.verdicts), describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_fresh_claim_seek_past_the_end_reset_earliest_resets_to_the_start(cap):
    """Nothing reserved yet (a fresh claim at 0, never polled): a seek past the log end and
    reset earliest start at the log start, as Kafka resets an out-of-range seek (before
    be2c639 AMO waited for the log to reach the target)."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest")
    g.run([i1], until=HB // 2)
    i1.core.seek(g.now, TOPIC, 0, 5000)
    i1.budget = 20
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[:3] == [0, 1, 2], describe(g)
    assert not g.repeats() and not any("rejected" in v for v in g.verdicts), describe(g)
