"""Schedules that hold (an attack on 2757f24 built them): AMO, the read-ahead fetch refused
past a tail cut while the member's first buffered record is still in the log
(``on_out_of_range`` keeps what the log holds and fetches on from the end). The cut lands
below, at or above what the member reserved; the log grows again with other records at the
cut offsets; then the member hands out on, gives the partition up, restarts (a new instance
takes over), or seeks; a second cut while the rest drains. Nothing is handed out twice, the
member goes on."""

from __future__ import annotations

import pytest

from logmarshal.core import Tick

from .stepper import GROUP, HB, TOPIC, Group, describe

CUTS = [36, 50, 64, 65, 80, 99]


def _cut_below_read_ahead(cut, cap=None, reset="earliest"):
    """i1 hands out 0..34, reserved through 64, reads ahead 35..99 and fetches at 100; the
    tail is cut to ``cut`` before that fetch is answered."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap, produced=0)
    i1 = g.start("c1", "i1", auto_offset_reset=reset, prefetch=1000)
    g.run([i1], until=HB // 2)
    g.produced = 100
    g.hand_out_ahead(i1)
    g.step(i1, Tick())
    g.serve(i1)
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [100], i1.fetches
    g.produced = cut
    g.serve(i1)
    assert g.out_of_range == 1
    return g, i1


def _no_handed_twice(g):
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
@pytest.mark.parametrize("cap", [None, 6])
@pytest.mark.parametrize("cut", CUTS)
def test_amo_cut_then_regrow_hands_on(cut, cap, reset):
    g, i1 = _cut_below_read_ahead(cut, cap, reset)
    g.produced = 400
    i1.budget = 500
    g.run([i1], until=g.now + 8 * HB)
    _no_handed_twice(g)
    assert max(g.handed_by(i1)) >= 300, describe(g)
    # nothing handed out is above what the log reserved (the group's position)
    assert max(g.handed) <= g.position() - 1, (max(g.handed), g.position())


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("how", ["give_up", "restart", "close"])
def test_amo_cut_then_hand_over(cut, how):
    g, i1 = _cut_below_read_ahead(cut)
    g.produced = 150
    i1.budget = 20
    g.run([i1], until=g.now + 2 * HB)
    if how == "give_up":
        g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
        g.land(i1)
        g.replay(i1)
        i1.budget = 0
        nxt = g.start("c2", "i2", budget=300, auto_offset_reset="earliest", prefetch=1000)
        running = [i1, nxt]
    elif how == "close":
        g.close(i1)
        g.run([i1], until=g.now + HB)
        nxt = g.start("c2", "i2", budget=300, auto_offset_reset="earliest", prefetch=1000)
        running = [nxt]
    else:
        nxt = g.start("c1", "i1b", budget=300, auto_offset_reset="earliest", prefetch=1000)
        running = [nxt]  # i1 is gone (frozen)
    g.produced = 400
    g.run(running, until=g.now + 10 * HB)
    _no_handed_twice(g)
    assert g.oracle.holder(GROUP, TOPIC, 0) == nxt.me, describe(g)
    assert max(g.handed_by(nxt)) >= 300, describe(g)


@pytest.mark.parametrize("cut", [50, 80])
def test_amo_cut_then_seek_forward_past_the_end(cut):
    """After the cut the user seeks past the log's end (AMO: forward only), the log grows
    to it later: nothing twice, it goes on from the seek."""
    g, i1 = _cut_below_read_ahead(cut, reset="latest")
    i1.core.seek(g.now, TOPIC, 0, 200)
    g.produced = 150
    i1.budget = 100
    g.run([i1], until=g.now + 3 * HB)
    g.produced = 400
    i1.budget = 300
    g.run([i1], until=g.now + 6 * HB)
    _no_handed_twice(g)
    assert max(g.handed_by(i1)) >= 300, describe(g)


@pytest.mark.parametrize("second", [40, 60, 70])
def test_amo_second_cut_while_the_rest_drains(second):
    """The tail is cut to 80, then (the log grown to 120 and read on) to ``second``."""
    g, i1 = _cut_below_read_ahead(80)
    g.produced = 120
    g.step(i1, Tick())
    g.serve(i1)
    g.step(i1, Tick())
    g.produced = second
    g.serve(i1)
    g.produced = 400
    i1.budget = 500
    g.run([i1], until=g.now + 8 * HB)
    _no_handed_twice(g)
    assert max(g.handed_by(i1)) >= 300, describe(g)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
@pytest.mark.parametrize("alo", [False, True])
def test_log_deleted_and_made_again_below_the_read_ahead(reset, alo):
    """The data log is deleted and made again (start 0, end 60) while the member's first
    buffered record (35) is below the new end: rule (b) hands out the buffered records below
    60 (read from the old log) and fetches on from 60 in the new one. Offsets are what the
    invariants count: nothing twice (AMO), no gap from the position on (ALO), it goes on."""
    g = Group(batch=10, max_reserved=30, produced=0)
    opts = dict(auto_offset_reset=reset, prefetch=1000)
    if alo:
        opts["mode"] = "alo"
    i1 = g.start("c1", "i1", **opts)
    g.run([i1], until=HB // 2)
    g.produced = 100
    if alo:
        g.step(i1, Tick())
        g.serve(i1)
        i1.budget = 35
        g.poll(i1)
        assert g.handed_by(i1) == list(range(35)), describe(g)
    else:
        g.hand_out_ahead(i1)
    g.step(i1, Tick())
    g.serve(i1)
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [100], i1.fetches
    g.data_start, g.produced = 0, 60  # made again, 60 records in it already
    g.serve(i1)
    g.produced = 300
    i1.budget = 1000
    g.run([i1], until=g.now + 8 * HB)
    handed = g.handed_by(i1)
    assert not g.repeats(), describe(g)
    assert handed == list(range(len(handed))) and handed[-1] >= 250, describe(g)
