"""A data log cut below the member's position and written on (an unclean leader election),
told by the edge (``OutOfRange.diverged``: the leader epochs of what it read, KIP-320).

The bounds hold the member's offset again once the log grew back, so before, the member
fetched on from it: the records written from the cut point to its position since were
skipped, ALO too, without a word (measured on Apache Kafka 4.4: 500 of 800 acknowledged
records; tests/kafka/test_unclean_election.py). ALO goes back to the cut point and hands
them out; AMO goes on from its position (no offset twice); a cut into what was only read
ahead is read again from the cut point."""

from __future__ import annotations

import pytest

from logmarshal.core import Fetched, OutOfRange, Tick

from .stepper import HB, Group, describe


def _pending_fetch(g: Group, m) -> list:
    g.step(m, Tick())
    fetches, m.fetches = m.fetches, []
    assert fetches, describe(g)
    return fetches


def _handed_out_then_cut(mode: str) -> tuple[Group, object]:
    """``mode``'s member hands out 0..99; the log is then cut at 60 and written on to 150,
    and its fetch at 100 is refused naming the cut."""
    g = Group(batch=10, max_reserved=30, produced=100)
    m = g.start("c1", "i1", mode=mode, budget=100)
    g.run([m], until=4 * HB)
    assert g.handed_by(m) == list(range(100)), describe(g)
    g.produced = 150
    for a in _pending_fetch(g, m):
        assert a.offset == 100, describe(g)
        g.step(m, OutOfRange(a.token, a.topic, a.partition, 0, 150, 60))
    m.budget = 200
    g.run([m], until=g.now + 4 * HB)
    return g, m


def test_alo_hands_out_what_was_written_from_the_cut_point_on() -> None:
    g, _ = _handed_out_then_cut("alo")
    again = [o for o, h in g.handed.items() if len(h) == 2]
    assert again == list(range(60, 100)), describe(g)
    assert sorted(g.handed) == list(range(150)), describe(g)


def test_amo_goes_on_from_its_position_and_hands_nothing_out_twice() -> None:
    g, m = _handed_out_then_cut("amo")
    assert not g.repeats(), describe(g)
    assert g.handed_by(m) == list(range(150)), describe(g)


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_a_cut_into_what_was_only_read_ahead_is_read_again_from_the_cut(mode: str) -> None:
    g = Group(batch=10, max_reserved=30, produced=100)
    m = g.start("c1", "i1", mode=mode, budget=100, prefetch=50)
    g.run([m], until=4 * HB)
    assert g.handed_by(m) == list(range(100)), describe(g)
    g.produced = 200
    for a in _pending_fetch(g, m):  # read ahead 100..119, nothing of it handed out
        assert a.offset == 100, describe(g)
        g.step(m, Fetched(a.token, a.topic, a.partition, tuple((o, b"") for o in range(100, 120))))
    for a in _pending_fetch(g, m):
        assert a.offset == 120, describe(g)
        g.step(m, OutOfRange(a.token, a.topic, a.partition, 0, 200, 105))
    g.step(m, Tick())
    assert [a.offset for a in m.fetches] == [105], describe(g)  # (answered by the run)
    m.budget = 100
    g.run([m], until=g.now + 4 * HB)
    assert not g.repeats(), describe(g)  # 100..104 from what was read, 105.. read again
    assert g.handed_by(m) == list(range(200)), describe(g)


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_a_cut_at_or_above_the_fetch_changes_nothing(mode: str) -> None:
    """The edge names a cut point only below what it read; one at the fetch offset (a log
    that merely ends there) is an ordinary refusal."""
    g = Group(batch=10, max_reserved=30, produced=100)
    m = g.start("c1", "i1", mode=mode, budget=100)
    g.run([m], until=4 * HB)
    for a in _pending_fetch(g, m):
        g.step(m, OutOfRange(a.token, a.topic, a.partition, 0, 100, a.offset))
    assert [a.offset for a in _pending_fetch(g, m)] == [100], describe(g)
