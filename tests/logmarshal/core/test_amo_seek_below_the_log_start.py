"""AMO, reset "earliest", a seek below the log start but inside what the member itself
reserved (found by an attack on be2c639, 2026-12-02; older than it). i1 handed out 0..34 and
holds 35..64 reserved and confirmed; retention moves the log start to 50; the user seeks to
40. The fetch at 40 was out of range and the reset target 50 <= claimed_through, so the core
"waited for the log to reach" 40 (meant for a position beyond the log's end), which never
came: nothing handed out, the partition kept. Below the start the target is above what was
handed out: it moves on there, as Kafka resets. Writes in order, none failing."""

from __future__ import annotations

import pytest

from .stepper import GROUP, HB, TOPIC, Group, describe


@pytest.mark.parametrize("target", [40, 36])
def test_seek_below_the_log_start_inside_our_reserved_window_moves_on(target):
    g = Group(batch=10, max_reserved=30)
    i1 = g.start("c1", "i1", auto_offset_reset="earliest")
    g.hand_out_ahead(i1)
    n = len(g.handed_by(i1))
    g.data_start = 50
    i1.core.seek(g.now, TOPIC, 0, target)
    i1.budget = 40
    g.run([i1], until=g.now + 10 * HB)
    assert g.oracle.holder(GROUP, TOPIC, 0) == i1.me  # still held, heartbeats renew it
    after = g.handed_by(i1)[n:]
    assert after, f"{g.out_of_range} fetches out of range, nothing handed out\n" + describe(g)
