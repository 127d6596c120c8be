"""AMO reservations ahead of the fetches, up to the log end the fetch answers told.

A reader faster than its fetches had a reservation per fetch: the window held only what one
fetch had brought, whatever ``max_reserved`` allowed. Where the edge tells the log's end
(``Fetched.log_end``: librdkafka's high watermark, the embedded log's end), a reservation
covers the window in offsets, up to that end, once half of the last one is handed out. The
loss bound stays ``max_reserved``: a crash loses at most the window; a graceful close loses
nothing; nothing is handed out twice.
"""

from __future__ import annotations

import pytest

from .stepper import GROUP, HB, TOPIC, Group, Member, describe
from .test_amo_window import _claimed_through, _hand_out, _reservations

WINDOW = 300
BATCH = 10


def _running(produced: int = 1000, tell: bool = True) -> tuple[Group, Member]:
    g = Group(batch=BATCH, max_reserved=WINDOW, produced=produced, tell_log_end=tell)
    i1 = g.start("c1", "i1")
    g.run([i1], until=HB // 2)  # claimed, positioned, fetched; nobody polled yet
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me, describe(g)
    assert _reservations(g) == [], "reserved before anyone asked\n" + describe(g)
    return g, i1


def _hand_out_fetching(g: Group, m: Member) -> None:
    """A poll of a batch, with the fetches it needs answered."""
    g.serve(m)
    _hand_out(g, m, BATCH)


def _ahead_by(g: Group, i1: Member, handed: int) -> int:
    """Batches handed out (fetches answered) until ``handed`` is; the last offset handed."""
    for _ in range(handed):  # (bounded: polls that stop handing out fail the test)
        if g.handed_by(i1) and g.handed_by(i1)[-1] >= handed:
            break
        _hand_out_fetching(g, i1)
    assert g.handed_by(i1) and g.handed_by(i1)[-1] >= handed, describe(g)
    return g.handed_by(i1)[-1]


def test_a_reservation_covers_the_window_not_only_what_was_fetched():
    g, i1 = _running()
    assert len(i1.core._st.held[(TOPIC, 0)].buffer) < WINDOW  # (one fetch's worth)
    _hand_out(g, i1, BATCH)
    assert _reservations(g) == [(0, WINDOW - 1)], describe(g)


def test_without_the_log_end_only_what_was_fetched_is_reserved():
    g, i1 = _running(tell=False)
    fetched = len(i1.core._st.held[(TOPIC, 0)].buffer)
    _hand_out(g, i1, BATCH)
    assert _reservations(g) == [(0, fetched - 1)], describe(g)


def test_never_past_the_log_end():
    g, i1 = _running(produced=120)
    _hand_out(g, i1, BATCH)
    assert _reservations(g) == [(0, 119)], describe(g)


def test_the_next_window_once_half_of_it_is_handed_out():
    g, i1 = _running()
    _hand_out(g, i1, BATCH)  # reserves 0..299
    _ahead_by(g, i1, WINDOW // 2 - BATCH - 1)  # 0..139 handed: 160 reserved, not handed out
    assert g.handed_by(i1)[-1] == WINDOW // 2 - BATCH - 1, describe(g)
    assert _reservations(g) == [(0, WINDOW - 1)], describe(g)
    _hand_out_fetching(g, i1)  # 140..149 handed: 150 left, the next window goes out
    last = g.handed_by(i1)[-1]
    assert _reservations(g) == [(0, WINDOW - 1), (WINDOW, last + WINDOW)], describe(g)
    assert _claimed_through(g) - last == WINDOW
    assert g.repeats() == {}, describe(g)


def test_a_crash_loses_at_most_the_window():
    g, i1 = _running()
    handed = _ahead_by(g, i1, 420)
    reserved = _claimed_through(g)
    assert handed < reserved <= handed + WINDOW, describe(g)
    c2 = g.start("c2", "i2", budget=40)  # i1 crashed: it never runs again
    g.run([c2], until=g.now + 4 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == c2.me, describe(g)
    assert g.handed_by(c2)[0] == reserved + 1, describe(g)
    assert g.repeats() == {}, describe(g)


@pytest.mark.parametrize("handed", [5, 420])
def test_a_graceful_close_loses_nothing(handed):
    g, i1 = _running()
    handed = _ahead_by(g, i1, handed)
    assert _claimed_through(g) > handed + BATCH  # reserved ahead of what was fetched
    g.close(i1)
    g.run([i1], until=g.now + 20)
    assert i1.core.closed, describe(g)
    assert g.oracle.resume_offset(GROUP, TOPIC, 0) == handed + 1
    c2 = g.start("c2", "i2", budget=40)
    g.run([c2], until=g.now + 2 * HB)
    assert g.handed_by(c2)[0] == handed + 1, describe(g)
    assert g.repeats() == {}, describe(g)


def test_a_poll_waits_for_a_verdict_only_while_a_reservation_awaits_one():
    """``reserved_waiting`` (a poll with nothing to hand out at its time waits a verdict's
    time more): only while the log holds a reservation our heartbeat has not confirmed, not
    whenever reserved records are buffered (nearly always, reservations running ahead)."""
    g, i1 = _running()
    held = i1.core._st.held[(TOPIC, 0)]
    i1.budget = BATCH
    g.poll(i1)  # the window's reservation and the heartbeat behind it go out
    assert len(i1.outbox) == 2, describe(g)
    g.land(i1, 1)  # the reservation alone lands: reserved, not confirmed
    g.replay(i1)
    assert held.claimed_through == WINDOW - 1 > held.confirmed_through, describe(g)
    assert i1.core.reserved_waiting()
    g.land(i1)  # its heartbeat confirms it
    g.replay(i1)
    assert held.confirmed_through == held.claimed_through, describe(g)
    assert not i1.core.reserved_waiting()
    _hand_out(g, i1, BATCH)
    assert g.handed_by(i1) == list(range(BATCH)), describe(g)
    g.now += 5 * HB  # i1 stalls: its lease lapses with confirmed records buffered
    assert not i1.core.may_hand_out(TOPIC, 0, g.now)
    assert held.handed_through < held.claimed_through and held.buffer
    assert not i1.core.reserved_waiting()  # no verdict is due: a poll returns at its time
