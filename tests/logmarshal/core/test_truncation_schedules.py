"""Schedules around OutOfRange, truncation of the data log, seeks and hand-overs that hold
(an attack on fa85478 built them; they held before its fixes and after): nothing is handed
out twice (AMO), nothing still in the log is skipped (ALO), no member stalls on a healthy
log, one holder at a time."""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import OutOfRange, Poll, Tick

from .stepper import GROUP, HB, TOPIC, Group, describe

CAPS = [None, 6]


def _gaps(offsets):
    return [(a, b) for a, b in itertools.pairwise(sorted(set(offsets))) if b != a + 1]


def _all_handed(g):
    return sorted(g.handed)


def _hand_over(g, holder, other):
    """``holder`` gives p0 up (landed, replayed) and hands out no more; an HB for ``other``
    to claim it. The new (holder, other)."""
    g.carry(holder, holder.core.give_up(g.now, TOPIC, 0, "back and forth"))
    g.land(holder)
    g.replay(holder)
    holder.budget = 0
    g.run([other, holder], until=g.now + HB)
    return other, holder


def _commit_all(m):
    """ALO user code: commit everything it was handed."""
    m.core.commit(TOPIC, 0, [o for o in range(0, 100000)])  # (unknown ones are ignored)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_amo_release_then_retention_past_the_position_next_holder(cap, reset):
    """i1 hands out 0..34 (reserved through 64) and gives the partition up (the group
    resumes at 35); retention moves the log start to 50; c2 claims: it starts at 50
    (earliest) or 1000 (latest), never below 35, and goes on."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset=reset if reset == "earliest" else "earliest")
    g.hand_out_ahead(i1)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    g.land(i1)
    g.replay(i1)
    assert g.position() == 35, describe(g)
    g.data_start = 50
    if reset == "latest":
        g.produced = 1000
    c2 = g.start("c2", "i2", budget=60, auto_offset_reset=reset)
    g.run([i1, c2], until=g.now + 4 * HB)
    got = g.handed_by(c2)
    first = 50 if reset == "earliest" else 1000
    if reset == "latest":
        g.produced = 1060
        g.run([i1, c2], until=g.now + 3 * HB)
        got = g.handed_by(c2)
    assert got and got[0] == first and not _gaps(got), (got[:5], describe(g))
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("cap", CAPS)
def test_amo_back_and_forth_with_truncations(cap):
    """i1 and c2 hand the partition back and forth (give up, claim) three times, the log
    start moving up past the group's position between hand-overs: nothing twice, each
    holder starts at the log start (earliest) or the group's position, whichever is higher."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap, produced=5000)
    a = g.start("c1", "i1", auto_offset_reset="earliest")
    b = g.start("c2", "i2", auto_offset_reset="earliest")
    holder, other = a, b
    g.run([a], until=HB // 2)
    for round_, start in enumerate([0, 300, 900, 1500]):
        g.data_start = start
        before = len(g.handed_by(holder))
        holder.budget = 80
        g.run([holder, other], until=g.now + 3 * HB)
        assert len(g.handed_by(holder)) > before, (
            f"round {round_}: {holder.me} handed out nothing\n" + describe(g)
        )
        holder, other = _hand_over(g, holder, other)
    assert not g.repeats(), describe(g)
    assert len(g.handed) >= 4 * 60


@pytest.mark.parametrize("cap", CAPS)
def test_amo_out_of_range_of_a_fetch_from_before_the_release_reaches_the_new_tenure(cap):
    """i1's fetch is in flight when it gives the partition up; c2 takes it, hands out and
    gives it up; i1 claims it again (its cooldown over) and only then is the old fetch
    answered OutOfRange (with bounds past i1's new position): ignored, nothing twice."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest")
    g.hand_out_ahead(i1)
    g.step(i1, Tick())
    i1.budget = 10
    g.poll(i1)
    g.step(i1, Tick())
    g.land(i1)
    g.replay(i1)
    old = list(i1.fetches)
    i1.fetches.clear()
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "gives it up"))
    g.land(i1)
    g.replay(i1)
    c2 = g.start("c2", "i2", budget=30, auto_offset_reset="earliest")
    g.run([c2], until=g.now + 3 * HB)
    g.carry(c2, c2.core.give_up(g.now, TOPIC, 0, "gives it back"))
    g.land(c2)
    g.replay(c2)
    i1.budget = 0
    g.run([i1, c2], until=g.now + 4 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me, describe(g)
    for f in old:  # the stale answer: bounds that put any position "below the start"
        g.step(i1, OutOfRange(f.token, f.topic, f.partition, 900, 1000))
    i1.budget = 40
    g.run([i1, c2], until=g.now + 3 * HB)
    assert not g.repeats(), describe(g)
    assert min(g.handed_by(i1)[-40:]) < 900, "a stale answer moved the new tenure"


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_alo_back_and_forth_with_truncations_commits(reset):
    """ALO: two members hand the partition back and forth, committing what they handle;
    the log start passes the group's position between hand-overs. Every offset that was in
    the log from the group's position on while a holder read it is handed out."""
    g = Group(batch=10, produced=3000)
    a = g.start("c1", "i1", mode="alo", auto_offset_reset="earliest")
    b = g.start("c2", "i2", mode="alo", auto_offset_reset=reset)
    holder, other = a, b
    g.run([a], until=HB // 2)
    truncated: set[int] = set()
    for start in [0, 300, 900]:
        truncated |= {o for o in range(g.data_start, start) if o not in g.handed}
        g.data_start = start
        holder.budget = 150
        g.run([holder, other], until=g.now + 3 * HB)
        _commit_all(holder)
        g.run([holder, other], until=g.now + HB)
        holder, other = _hand_over(g, holder, other)
    handed = set(g.handed)
    top = max(handed)
    missing = [o for o in range(0, top) if o not in handed and o not in truncated]
    if reset == "latest":  # a position below the log start genuinely fell out: skipped
        missing = [o for o in missing if o >= 900]
    assert not missing, (missing[:10], describe(g))


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_stale_out_of_range_after_a_seek_is_ignored(mode):
    """The fetch from before a seek is answered OutOfRange afterwards (bounds below the
    seek): ignored; the member goes on from the seek."""
    g = Group(batch=10, max_reserved=30)
    i1 = g.start("c1", "i1", mode=mode, auto_offset_reset="latest")
    g.produced = 1000
    g.run([i1], until=HB // 2)
    g.produced = 1100
    i1.budget = 20
    g.run([i1], until=g.now + HB)
    g.step(i1, Tick())
    pending = list(i1.fetches)
    i1.fetches.clear()
    i1.core.seek(g.now, TOPIC, 0, 1090)
    for f in pending:
        g.step(i1, OutOfRange(f.token, f.topic, f.partition, 1095, 1100))
    n = len(g.handed_by(i1))
    i1.budget = 10
    g.run([i1], until=g.now + 3 * HB)
    assert g.handed_by(i1)[n : n + 5] == [1090, 1091, 1092, 1093, 1094], describe(g)
    assert not g.repeats(), describe(g)


def test_alo_restart_after_the_read_ahead_was_refused_in_range():
    """ALO: the read-ahead fetch is refused with bounds holding it, then the client restarts
    (a new instance takes over): it goes on from the committed position, nothing skipped."""
    g = Group(batch=10, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", auto_offset_reset="latest")
    g.run([i1], until=HB // 2)
    g.produced = 1100
    g.step(i1, Tick())
    g.serve(i1)
    g.step(i1, Poll(50))
    _commit_all(i1)
    g.step(i1, Tick())
    for f in i1.fetches:
        g.step(i1, OutOfRange(f.token, f.topic, f.partition, 0, 1100))
    i1.fetches.clear()
    g.run([i1], until=g.now + HB)
    i1b = g.start("c1", "i1b", budget=200, mode="alo", auto_offset_reset="latest")
    g.run([i1b], until=g.now + 5 * HB)
    handed = set(g.handed)
    assert all(o in handed for o in range(1000, 1100)), describe(g)
