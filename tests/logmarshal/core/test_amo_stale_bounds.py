"""AMO and an OutOfRange whose bounds were read after the fetch was refused (the librdkafka
reader reads the watermarks after the error; on Apache Kafka ``fetch_client._bound`` lists
offsets after it): when the log grew past the position meanwhile, the answer says start <=
position <= end. 4f14d66 (wait only beyond the log's end) took that for "below the start"
and reset to the policy's target even below what was handed out (earliest: the log start),
and handed 0..34 out again (found by an attack on 4f14d66). AMO fetches again then. Writes
in order, none failing."""

from __future__ import annotations

import pytest

from logmarshal.core import Bounds, OutOfRange, Tick

from .stepper import HB, TOPIC, Group, describe


def _answer_fetch_out_of_range(g, m, start, end):
    """The pending fetch is refused (the position was past the log end when it was read),
    the bounds reported with it are read a moment later."""
    g.step(m, Tick())
    assert m.fetches, describe(g)
    fetches, m.fetches = m.fetches, []
    for a in fetches:
        g.step(m, OutOfRange(a.token, a.topic, a.partition, start, end))


@pytest.mark.parametrize("cap", [None, 6])
def test_seek_past_the_end_bounds_read_after_the_log_grew(cap):
    """i1 handed out 0..34, holds 35..64 reserved; the user seeks to 5000 (past the end
    1000, the AMO move the docs promise waits for the log); the fetch at 5000 is refused;
    before the edge reads the bounds the log grows to 6000: OutOfRange(0, 6000). Reset
    earliest moves to 0 and i1 hands out 0..34 again. Writes in order, none failing."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest")
    g.hand_out_ahead(i1)
    i1.core.seek(g.now, TOPIC, 0, 5000)
    g.produced = 6000  # the log grows while the edge reads the bounds
    _answer_fetch_out_of_range(g, i1, 0, 6000)
    i1.budget = 60
    g.run([i1], until=g.now + 3 * HB)
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_log_end_truncated_then_grows_before_the_bounds_are_read(cap):
    """No seek. The data log holds 0..99; i1 handed out 0..34, holds 35..64 reserved and
    confirmed, and fetches at 100 (the end). The log's tail is truncated below 100 (an
    unclean leader election: the case the AMO wait is for) and the fetch at 100 is refused;
    by the time the edge reads the bounds, new records made the log 0..149: OutOfRange(0,
    150). Reset earliest moves to 0: 0..34 are handed out again (and 35..64 after them).
    Writes in order, none failing."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap, produced=100)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest", prefetch=1000)
    g.hand_out_ahead(i1)
    g.step(i1, Tick())
    g.serve(i1)  # the fetch at 100 (the end): nothing yet, asked again
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [100], (i1.fetches, describe(g))
    g.produced = 150  # truncated to 90, then written to 150 while the bounds were read
    _answer_fetch_out_of_range(g, i1, 0, 150)
    i1.budget = 60
    g.run([i1], until=g.now + 3 * HB)
    assert not g.repeats(), describe(g)


@pytest.mark.parametrize("cap", [None, 6])
def test_next_holder_starts_past_the_end_and_the_bounds_come_late(cap):
    """i1 hands out 0..34 (reserved through 64), seeks to 5000 (past the end 1000) and
    closes: its release carries 4999, the group resumes at 5000. c2 claims: its start is
    5000 (AMO: past the end it waits for the log), claimed = confirmed = 4999 by on_bounds;
    its fetch at 5000 is refused, and the bounds, read once the log grew to 6000, say
    (0, 6000). Reset earliest moves c2 to 0 with 0..4999 counted as confirmed: c2 hands out
    0..34 again (i1's) without reserving anything. Writes in order, none failing."""
    g = Group(batch=10, max_reserved=30, protocol_version=cap)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest")
    g.hand_out_ahead(i1)
    i1.core.seek(g.now, TOPIC, 0, 5000)
    g.close(i1)
    g.land(i1)
    g.replay(i1)
    assert g.position() == 5000, describe(g)
    g.now += 10
    c2 = g.start("c2", "i2", auto_offset_reset="earliest")
    for _ in range(40):  # c2 claims and learns its start (5000), fetches there
        g.now += 5
        g.step(c2, Tick())
        g.land(c2)
        g.replay(c2)
        lookups, c2.lookups = c2.lookups, []
        for a in lookups:
            g.step(c2, Bounds(a.token, a.topic, a.partition, 0, 1000))
        if c2.fetches:
            break
    assert [f.offset for f in c2.fetches] == [5000], describe(g)
    g.produced = 6000
    _answer_fetch_out_of_range(g, c2, 0, 6000)
    c2.budget = 50
    g.run([c2], until=g.now + 3 * HB)
    assert not g.repeats(), describe(g)
