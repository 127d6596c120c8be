"""An OutOfRange whose bounds hold the member's position (start <= next_fetch <= end): the
member fetches again, in ALO as in AMO. ALO applied the reset policy, and "latest" jumped to
the end, skipping next_fetch..end-1, records the user never skipped and nobody handed out
(found by an attack on 972f4ba, which fetched again under AMO only).

Real edges that answer so: the multi-partition librdkafka reader (network/readers.py
``_error``) reports the OutOfRange librdkafka met at *its* fetch position, which runs ahead
of the core's (read-ahead in ``_ahead``), with watermarks read afterwards; and
fetch_client._bound / readers._out_of_range read the bounds after the refusal."""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import NoStart, OutOfRange, Poll, Tick

from .stepper import HB, TOPIC, Group, describe


def _refuse_pending_fetch(g, m, start, end):
    g.step(m, Tick())
    assert m.fetches, describe(g)
    fetches, m.fetches = m.fetches, []
    for a in fetches:
        g.step(m, OutOfRange(a.token, a.topic, a.partition, start, end))
    return [a.offset for a in fetches]


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_bounds_holding_the_position_latest_skips_nothing(mode):
    g = Group(batch=10, max_reserved=30, produced=1000)
    i1 = g.start("c1", "i1", auto_offset_reset="latest", mode=mode)
    g.run([i1], until=HB // 2)  # claimed; no position: latest -> starts at 1000
    g.produced = 1050
    i1.budget = 50
    g.run([i1], until=g.now + HB)
    assert g.handed_by(i1) == list(range(1000, 1050)), describe(g)
    g.produced = 1100  # the tail grew (or: truncated, then grew, while bounds were read)
    # the next fetch (at next_fetch, inside 0..1100) is refused with bounds (0, 1100): the
    # reader's read-ahead ran into a truncated tail, or the bounds were read after regrowth
    asked = _refuse_pending_fetch(g, i1, 0, 1100)
    assert all(0 <= o <= 1100 for o in asked), asked
    g.produced = 1200  # more records come
    i1.budget = 200
    g.run([i1], until=g.now + 4 * HB)
    handed = g.handed_by(i1)
    gaps = [(a, b) for a, b in itertools.pairwise(handed) if b != a + 1]
    assert not gaps, f"{mode}: fetch at {asked} skipped {gaps}\n" + describe(g)
    assert not g.repeats(), describe(g)


# Under auto_offset_reset="error" too (an attack on fa85478: its "error" branch came before
# the bounds check, so every poll raised NoStart for a position inside the log, "position
# 1050 is outside the log (0..1100)", and nothing more was handed out until user code
# sought; under AMO the natural answer, a seek to the reported start, is refused)


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_bounds_holding_the_position_under_error_raise_nothing(mode):
    g = Group(batch=10, max_reserved=30, produced=1000)
    i1 = g.start("c1", "i1", auto_offset_reset="error", mode=mode)
    g.run([i1], until=HB // 2)  # claimed: no position, NoStart
    i1.core.seek(g.now, TOPIC, 0, 1000)  # the user starts it at the end
    g.produced = 1050
    i1.budget = 50
    g.run([i1], until=g.now + HB)
    assert g.handed_by(i1) == list(range(1000, 1050)), describe(g)
    g.produced = 1100
    # the fetch at 1050 is refused with bounds (0, 1100), which hold it: in ALO and AMO
    # alike (3463a12) the member must fetch again, not apply the reset policy
    asked = _refuse_pending_fetch(g, i1, 0, 1100)
    assert all(0 <= o <= 1100 for o in asked), asked
    no_starts = [a for a in i1.core.step(g.now, Poll(1)) if isinstance(a, NoStart)]
    g.produced = 1200
    i1.budget = 150
    g.run([i1], until=g.now + 4 * HB)
    handed = g.handed_by(i1)
    bogus = [n for n in no_starts if n.start <= n.offset <= n.end]
    assert not bogus, f"{mode}: NoStart for a position inside the log: {bogus}"
    gaps = [(a, b) for a, b in itertools.pairwise(handed) if b != a + 1]
    assert not gaps and handed[-1] == 1199, (
        f"{mode}: stalled at {handed[-1]} (log end 1200)\n" + describe(g)
    )
    assert not g.repeats(), describe(g)


# Bounds the edge could not read (-1, -1: the network reader's ``fetch_client._bound``
# leaves them unknown when its ListOffsets fails, and Apache Kafka answers an out-of-range
# fetch without them): an attack on b4c442a found the core took -1 for the log's start and
# end, and ALO reset to offset -1 (its heartbeat carried -2, which the codec refuses at every
# pass). It looks again after a pause and moves nothing.


@pytest.mark.parametrize("reset", ["earliest", "latest"])
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_unknown_bounds_move_nothing(mode, reset):
    g = Group(batch=10, produced=50)
    if reset == "latest":  # a group position at 0 first (else "latest" starts at the end)
        g.produced = 0
    i1 = g.start("c1", "i1", mode=mode, auto_offset_reset=reset, budget=10**6)
    g.run([i1], until=3 * HB)
    for _ in range(200):
        if i1.fetches:
            break
        g.now += 1
        g.step(i1, Tick())
    fetch = i1.fetches.pop()
    assert fetch.offset == g.produced
    before = i1.core.position(TOPIC, 0)
    g.step(i1, OutOfRange(fetch.token, TOPIC, 0, -1, -1))
    g.run([i1], until=g.now + HB)  # (the stepper's serve answers the fetches: in range)
    assert i1.core.position(TOPIC, 0) == before
    top = g.produced
    g.produced = top + 10
    g.run([i1], until=g.now + 2 * HB)
    assert max(g.handed_by(i1)) == top + 9 and not g.repeats()
