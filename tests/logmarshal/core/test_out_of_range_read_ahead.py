"""A read-ahead fetch refused while the member's own position (the first record read and not
handed out) is still inside the log, or was read before the log lost it: what the member read
is handed out, and the reset policy says only where to fetch on from (an attack on fa85478;
both older than it). Kafka's consumer fetches only at its position, so it never meets these.

- The tail cut below the read-ahead (an unclean leader election; any OutOfRange a read-ahead
  meets past the end, network/readers.py): ALO "latest" moved to the end through ``move``,
  which restarted the commit tracker at end-1 and cleared the buffer; the records between
  what was handed out and the end, which never left the log, were handed out by nobody and
  the next heartbeat carried end-1. Now the buffer keeps what the log still holds and the
  member fetches on from the end.
- Retention passing the read-ahead (reset "earliest"): ``move`` cleared the buffer, so the
  records read before they were deleted were handed out by nobody. Now ALO keeps the buffer
  and fetches on from the log start.

Writes in order, none failing."""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import Poll, Tick

from .stepper import HB, Group, describe


def _gaps(offsets):
    return [(a, b) for a, b in itertools.pairwise(offsets) if b != a + 1]


@pytest.mark.parametrize("cut", [1095, 1091])
def test_alo_latest_tail_cut_below_the_read_ahead_skips_nothing_in_the_log(cut):
    g = Group(batch=10, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", auto_offset_reset="latest")
    g.run([i1], until=HB // 2)  # claimed; no position: latest -> starts at 1000
    g.produced = 1100
    g.step(i1, Tick())
    g.serve(i1)  # 1000..1099 buffered, next_fetch 1100
    i1.budget = 91
    g.step(i1, Poll(91))  # hands out 1000..1090; 9 left < prefetch: fetch at 1100
    assert g.handed_by(i1) == list(range(1000, 1091)), describe(g)
    if not i1.fetches:
        g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [1100], i1.fetches
    # the tail is cut to ``cut`` (> 1090: the member's position 1091 is still in the log)
    # before the fetch at 1100 is answered: OutOfRange(0, cut)
    g.produced = cut
    g.serve(i1)
    assert g.out_of_range == 1
    g.produced = 1200  # the log grows again
    i1.budget = 500
    g.run([i1], until=g.now + 4 * HB)
    handed = g.handed_by(i1)
    # every offset that never left the log (1000..cut-1) is handed out; then on from there
    missing = sorted(set(range(1000, cut)) - set(handed))
    assert not missing, f"never handed out though in the log: {missing}\n" + describe(g)
    assert not _gaps(handed), _gaps(handed)


def test_alo_earliest_retention_past_the_read_ahead_keeps_what_was_read():
    g = Group(batch=10, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", auto_offset_reset="earliest")
    g.run([i1], until=HB // 2)  # claimed; no position: earliest -> starts at 0
    g.step(i1, Tick())
    g.serve(i1)  # 0..99 buffered, next_fetch 100
    i1.budget = 91
    g.step(i1, Poll(91))  # hands out 0..90; 9 left < prefetch: fetch at 100
    assert g.handed_by(i1) == list(range(91)), describe(g)
    if not i1.fetches:
        g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [100], i1.fetches
    read = list(range(91, 100))  # in the member's buffer: read while they were in the log
    g.data_start = 150  # retention passes the fetch at 100
    g.serve(i1)
    assert g.out_of_range == 1
    i1.budget = 2000
    g.run([i1], until=g.now + 4 * HB)
    handed = g.handed_by(i1)
    lost = [o for o in read if o not in handed]
    assert not lost, f"read before the truncation, never handed out: {lost}\n" + describe(g)
    assert handed[-1] == 999 and handed[91 : 91 + 9] == read, (handed[85:105], handed[-5:])
