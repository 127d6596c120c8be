"""AMO reservations that run ahead, step by step with real cores and real worlds.

c1/i1 consumes p0 at most once with a window of 30 (``max_reserved``) and polls of 10: the
next window is reserved while the confirmed one is handed out (each starts where the previous
one ended: PROTOCOL.md "Version 4", property c). Then i1 either crashes, losing at most its
window (the next holder resumes after the reserved end), or closes gracefully, releasing at
what it handed out, so the next holder hands out the unhanded rest (rule 6 and the tenure's
floor, property b). Nothing is ever handed out twice.
"""

from __future__ import annotations

import pytest

from rationalizer import ClaimingMessages, ReleasingPartition, decode

from .stepper import GROUP, HB, TOPIC, Group, Member, describe

WINDOW = 30


def _records(g: Group, kind: type) -> list[tuple[object, bool]]:
    """The records of ``kind`` in the log, with whether the log accepted them."""
    out = []
    for offset, (_, key, value) in enumerate(g.log):
        msg = decode(key, value)
        if isinstance(msg, kind):
            verdict = g.oracle.verdict(offset)
            out.append((msg, verdict is not None and verdict.accepted))
    return out


def _reservations(g: Group) -> list[tuple[int, int]]:
    """(first, last) of every accepted ClaimingMessages, in log order."""
    return [
        (m.first_offset, m.proposed_last_offset) for m, ok in _records(g, ClaimingMessages) if ok
    ]


def _claimed_through(g: Group) -> int:
    return g.oracle.partition_state(GROUP, TOPIC, 0).claimed_through


def _hand_out(g: Group, m: Member, budget: int) -> None:
    """User code polls ``m`` for ``budget`` records; every write lands and is replayed."""
    m.budget = budget
    g.poll(m)
    g.land(m)
    g.replay(m)


def _running_ahead() -> tuple[Group, Member]:
    """i1 holds p0, handed out 0..34 and reserved ahead through 64 (a window of 30)."""
    g = Group(batch=10, max_reserved=WINDOW)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)  # claimed, positioned, fetched; user code has not polled yet
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me, describe(g)
    assert _reservations(g) == [], "reserved before anyone asked\n" + describe(g)

    _hand_out(g, i1, 10)  # nothing confirmed yet: the poll asks for the first window
    assert _reservations(g) == [(0, 29)], describe(g)
    assert g.handed_by(i1) == [], describe(g)

    _hand_out(g, i1, 10)  # hands out 0..9 and reserves the next window behind it
    assert g.handed_by(i1) == list(range(10)), describe(g)
    # two windows reserved before the first is fully handed out: 30..39 starts where 0..29
    # ended, while 10..29 wait for the polls (30 reserved and not handed out: the window)
    assert _reservations(g) == [(0, 29), (30, 39)], describe(g)
    assert _claimed_through(g) - g.handed_by(i1)[-1] == WINDOW

    _hand_out(g, i1, 25)  # 10..34 in one poll of 25 (all confirmed), and 40..64 ahead
    assert g.handed_by(i1) == list(range(35)), describe(g)
    assert _reservations(g) == [(0, 29), (30, 39), (40, 64)], describe(g)
    assert _claimed_through(g) == 64
    assert not any("rejected" in v for v in g.verdicts), describe(g)
    return g, i1


def test_the_next_window_is_reserved_while_the_confirmed_one_is_handed_out():
    g, i1 = _running_ahead()
    # one reservation in flight at a time: the next one is written only once the log has
    # confirmed where it starts
    i1.budget = 10
    g.poll(i1)  # hands out 35..44 and writes the reservation of 65..74
    g.poll(i1)  # nothing more confirmed is asked for, and no second reservation goes out
    pending = [w.kind for w in i1.outbox]
    assert pending.count("reserve") == 1, pending
    g.land(i1)
    g.replay(i1)
    assert _reservations(g)[-1] == (65, 74), describe(g)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("in_flight", [False, True], ids=["landed", "in-flight"])
def test_a_crash_mid_window_loses_at_most_the_window(in_flight):
    """i1 dies with 35..64 reserved and not handed out (and, ``in_flight``, the reservation
    of the next window written but never landed): c2 takes the stale claim over and resumes
    after what the log reserved, never below it."""
    g, i1 = _running_ahead()
    if in_flight:
        i1.budget = 10
        g.poll(i1)  # hands out 35..44; the reservation of 65..74 is lost with the process
        assert [w.kind for w in i1.outbox].count("reserve") == 1
    handed = g.handed_by(i1)[-1]
    reserved = _claimed_through(g)  # what the log holds at the crash
    assert reserved - handed <= WINDOW
    c2 = g.start("c2", "i2", budget=40)  # i1 crashed: it never runs again
    g.run([c2], until=g.now + 4 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == c2.me, describe(g)
    assert g.handed_by(c2)[0] == reserved + 1, describe(g)  # lost: handed + 1 .. reserved
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("in_flight", [False, True], ids=["landed", "in-flight"])
def test_a_graceful_close_gives_back_what_was_never_handed_out(in_flight):
    """i1 closes with 35..64 reserved and not handed out (``in_flight``: after handing out
    35..44, with the reservation of 65..74 still in the transport, where it lands before the
    release): its release carries what it handed out, the log's resume point falls back to
    the next offset (never below its tenure's floor), and c2 hands out the rest: nothing
    lost, nothing twice."""
    g, i1 = _running_ahead()
    if in_flight:
        i1.budget = 10
        g.poll(i1)
        assert [w.kind for w in i1.outbox].count("reserve") == 1
    handed = g.handed_by(i1)[-1]
    g.close(i1)
    g.run([i1], until=g.now + 20)
    assert i1.core.closed, describe(g)
    # the last window was reserved (accepted) before the release gave it back
    assert _reservations(g)[-1] == ((65, 74) if in_flight else (40, 64)), describe(g)
    assert _claimed_through(g) == handed
    [(release, accepted)] = _records(g, ReleasingPartition)
    assert accepted and release.last_offset == handed, describe(g)
    assert g.oracle.resume_offset(GROUP, TOPIC, 0) == handed + 1
    c2 = g.start("c2", "i2", budget=40)
    g.run([c2], until=g.now + 2 * HB)
    assert g.handed_by(c2)[0] == handed + 1, describe(g)
    assert sorted(g.handed) == list(range(handed + 1 + 40)), describe(g)  # no gap, none twice
    assert g.repeats() == {}, describe(g)


def test_a_seek_may_skip_within_the_reserved_window_never_back():
    """What i1 reserved and has not handed out is its alone: a seek may skip into it (what
    it skips is lost, as AMO allows), never back to what it handed out."""
    g, i1 = _running_ahead()
    with pytest.raises(ValueError, match="already handed out"):
        i1.core.seek(g.now, TOPIC, 0, 34)
    i1.core.seek(g.now, TOPIC, 0, 50)  # inside 35..64, reserved and not handed out
    i1.budget = 20
    g.run([i1], until=g.now + 50)
    assert g.handed_by(i1) == list(range(35)) + list(range(50, 70)), describe(g)
    assert not any("rejected" in v for v in g.verdicts), describe(g)
    assert g.repeats() == {}, describe(g)
