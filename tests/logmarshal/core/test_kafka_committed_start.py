"""A partition the coordination log has no position for starts at Kafka's committed offset
of the group when the edge read one (``Bounds.committed``), as a Kafka consumer resumes at
its committed offset: a group moving from Kafka's consumer groups keeps its place, and a
``__marshal`` deleted and made again does not make an AMO group hand its records out again
(an attack, 2026-12-06: records 0..1999 handed out a second time). Out of the log's range it
is reset by the policy, as Kafka resets an out-of-range committed offset; a position in the
log always wins."""

from __future__ import annotations

import pytest

from logmarshal.core import Bounds, Tick

from .stepper import HB, Group, describe


def _first_fetch(g: Group, m, committed: int | None, end: int = 1000) -> tuple[bool, int]:
    """Step ``m`` until it fetches; its look-ups answered with the log 0..end-1 and
    ``committed``. Returns (whether the look-up said the log has no position, the offset)."""
    unpositioned = None
    for _ in range(60):
        g.now += 5
        g.step(m, Tick())
        g.land(m)
        g.replay(m)
        lookups, m.lookups = m.lookups, []
        for a in lookups:
            unpositioned = a.unpositioned
            g.step(m, Bounds(a.token, a.topic, a.partition, 0, end, committed))
        if m.fetches:
            assert unpositioned is not None, describe(g)
            return unpositioned, m.fetches[0].offset
    raise AssertionError(describe(g))


@pytest.mark.parametrize("mode", ["alo", "amo"])
@pytest.mark.parametrize(
    ("committed", "reset", "start"),
    [
        (500, "earliest", 500),  # inside the log: there
        (500, "latest", 500),
        (None, "earliest", 0),  # none: the policy
        (None, "latest", 1000),
        (1000, "earliest", 1000),  # the log end itself is inside
        (1500, "earliest", 0),  # past the end: the policy, as Kafka (ALO)
    ],
)
def test_an_unpositioned_partition_starts_at_the_kafka_committed_offset(
    mode, committed, reset, start
):
    g = Group(batch=10, max_reserved=30)
    m = g.start("c1", "i1", auto_offset_reset=reset, mode=mode)
    unpositioned, offset = _first_fetch(g, m, committed)
    assert unpositioned
    if mode == "amo" and committed == 1500:
        start = 1500  # AMO past the end waits for the log to reach it (as a position does)
    assert offset == start, describe(g)


def test_a_position_in_the_log_wins_over_the_kafka_committed_offset():
    """c1 hands out 0..34 and closes: the log's position is 35. c2's look-up says the log
    has a position, and a committed offset from Kafka (older, 10) is not taken."""
    g = Group(batch=10, max_reserved=30)
    c1 = g.start("c1", "i1", auto_offset_reset="earliest", mode="amo")
    g.hand_out_ahead(c1)
    g.close(c1)
    g.land(c1)
    g.replay(c1)
    assert g.position() == 35, describe(g)
    g.now += 3 * HB
    c2 = g.start("c2", "i2", auto_offset_reset="earliest", mode="amo")
    unpositioned, offset = _first_fetch(g, c2, 10)
    assert not unpositioned and offset == 35, describe(g)
