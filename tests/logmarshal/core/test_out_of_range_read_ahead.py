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
- A tail cut while that kept buffer drains (an attack on 2757f24): the tail-cut rule looked
  for the first buffered record inside the log, and it was below the start (read before
  retention deleted it), so the reset policy ran again: "latest" jumped to the new end and
  passed records that never left the log, "earliest" dropped what was read. The rule now
  asks only that the buffer reach into the log.

Writes in order, none failing."""

from __future__ import annotations

import itertools

import pytest

from logmarshal.core import Poll, Tick

from .stepper import HB, TOPIC, Group, describe


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


@pytest.mark.parametrize("reset", ["latest", "earliest"])
def test_alo_tail_cut_while_a_kept_buffer_drains(reset):
    g = Group(batch=10, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", auto_offset_reset=reset, prefetch=1000)
    g.data_start = 0
    g.run([i1], until=HB // 2)  # claimed, no position
    # (earliest starts at 0, latest at 1000): put the member at 1000 either way
    i1.core.seek(g.now, TOPIC, 0, 1000)
    g.produced = 1100
    g.step(i1, Tick())
    g.serve(i1)
    g.step(i1, Tick())
    g.serve(i1)  # 1000..1099 read; the fetch at 1100 answered empty
    i1.budget = 91
    g.step(i1, Poll(91))
    assert g.handed_by(i1) == list(range(1000, 1091)), describe(g)
    read = list(range(1091, 1100))  # read while in the log, not handed out yet
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [1100], i1.fetches
    # retention passes the read-ahead, the log has grown: OutOfRange(1150, 1300), the
    # member keeps 1091..1099 and fetches on from 1150 (earliest) or 1300 (latest)
    g.data_start, g.produced = 1150, 1300
    g.serve(i1)
    assert g.out_of_range == 1
    g.step(i1, Tick())
    (f,) = i1.fetches
    target = f.offset
    assert target == (1150 if reset == "earliest" else 1300), target
    g.produced = target + 100
    g.serve(i1)  # target..target+99 read ahead
    g.step(i1, Tick())
    assert [f.offset for f in i1.fetches] == [target + 100], i1.fetches
    # the log's tail is cut below that read-ahead (an unclean election): the member's
    # records target..cut-1 never leave the log
    cut = target + 50
    g.produced = cut
    g.serve(i1)
    assert g.out_of_range == 2
    position_now = i1.core.position(TOPIC, 0)
    in_log_never_handed = [o for o in range(target, cut) if o not in g.handed]
    assert position_now < min(in_log_never_handed), (
        f"the heartbeat position {position_now} passes {in_log_never_handed[:3]}..., in the "
        "log and never handed out"
    )
    g.produced = cut + 200
    i1.budget = 1000
    g.run([i1], until=g.now + 5 * HB)
    handed = set(g.handed)
    lost_read = [o for o in read if o not in handed]
    skipped = [o for o in range(target, cut) if o not in handed]
    assert not lost_read and not skipped, (
        f"read before retention, never handed out: {lost_read}; never left the log, never "
        f"handed out: {skipped[:5]}..{skipped[-1:]}\n" + describe(g)
    )
