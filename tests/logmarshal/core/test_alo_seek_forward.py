"""ALO: a seek forward passes no record that was handed out and not committed, wherever the
target lies: inside what the member read ahead or past it. A heartbeat's position promises
that everything up to it is handled, and Kafka's seek commits nothing either: a crash after a
seek repeats from the last commit. Before, a target inside the read-ahead restarted the
commit books at the target, so the next heartbeat carried target - 1 over records handed out
and never committed (a crash then lost them); a target past the read-ahead kept the books."""

from __future__ import annotations

import pytest

from logmarshal.core import Poll, Tick

from .stepper import HB, TOPIC, Group, describe


def _handed_out_uncommitted():
    """i1 (ALO, reading 500 ahead) handed out 1000..1049 and read through 1499; nothing of
    it is committed. Returns (g, i1)."""
    g = Group(batch=50, produced=1000)
    i1 = g.start("c1", "i1", mode="alo", prefetch=500, auto_offset_reset="latest")
    g.run([i1], until=HB // 2)
    assert g.position() == 1000, describe(g)  # (the resume offset)
    g.produced = 3000
    fetched_from = []
    for _ in range(6):  # the fetches of the read-ahead, 100 records each
        g.step(i1, Tick())
        fetched_from += [f.offset for f in i1.fetches]
        g.serve(i1)
    i1.budget = 50
    g.step(i1, Poll(50))
    assert g.handed_by(i1) == list(range(1000, 1050)), describe(g)
    assert max(fetched_from) >= 1400, fetched_from  # it read through 1499
    return g, i1


@pytest.mark.parametrize("to", [1050, 1200, 1400, 2500])  # inside the read-ahead .. past it
def test_an_alo_seek_forward_passes_nothing_handed_out_and_not_committed(to):
    g, i1 = _handed_out_uncommitted()
    i1.core.seek(g.now, TOPIC, 0, to)
    g.run([i1], until=g.now + 3 * HB)  # heartbeats; user code takes nothing more
    assert g.position() == 1000, describe(g)  # 1000..1049 were handed out, not committed
    i1.core.commit(TOPIC, 0, range(1000, 1050))
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == 1050, describe(g)
    i1.budget = 100
    g.run([i1], until=g.now + HB)
    assert g.handed_by(i1) == [*range(1000, 1050), *range(to, to + 100)], describe(g)
    i1.core.commit(TOPIC, 0, range(to, to + 100))
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == to + 100, describe(g)  # over what user code sought past


def test_an_alo_seek_back_hands_out_again_and_keeps_what_lies_below_the_target():
    """A seek back to what was handed out hands it out again from the target; what was
    handed out below the target and not committed (a worker still has it) holds the
    position back until it is committed. Before, the books started again at the target, so
    the first commit after the seek passed 1000..1019, never committed."""
    g, i1 = _handed_out_uncommitted()
    i1.core.seek(g.now, TOPIC, 0, 1020)
    i1.budget = 30
    g.run([i1], until=g.now + HB)
    assert [o for o, h in g.handed.items() if len(h) == 2] == list(range(1020, 1050))
    i1.core.commit(TOPIC, 0, range(1020, 1050))
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == 1000, describe(g)  # 1000..1019 still outstanding
    i1.core.commit(TOPIC, 0, range(1000, 1020))
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == 1050, describe(g)


def test_an_alo_seek_back_below_the_position():
    """(Unchanged) below the committed position: the heartbeats carry the target - 1, which
    the log does not take (a holder's heartbeat below its tenure's position sets none,
    PROTOCOL.md property g), and the records from the target are handed out again."""
    g, i1 = _handed_out_uncommitted()
    i1.core.commit(TOPIC, 0, range(1000, 1050))
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == 1050, describe(g)
    i1.core.seek(g.now, TOPIC, 0, 1010)
    assert i1.core.position(TOPIC, 0) == 1009
    i1.budget = 40
    g.run([i1], until=g.now + 2 * HB)
    assert g.position() == 1050, describe(g)
    assert [o for o, h in g.handed.items() if len(h) == 2] == list(range(1010, 1050))
    i1.core.commit(TOPIC, 0, range(1010, 1050))
    assert i1.core.position(TOPIC, 0) == 1049


@pytest.mark.parametrize("mode", ["alo", "amo"])
@pytest.mark.parametrize("offset", [1200.0, "1200", None, True])
def test_a_seek_to_something_not_an_int_is_refused_and_changes_nothing(mode, offset):
    """A float offset was taken as the position, and every later pass of the core failed on
    it (nothing handed out again, a close that raised): found by an attack on the API."""
    g = Group(batch=50, produced=3000)
    i1 = g.start("c1", "i1", mode=mode, auto_offset_reset="latest")
    g.run([i1], until=HB // 2)
    with pytest.raises(TypeError, match="offset must be an int"):
        i1.core.seek(g.now, TOPIC, 0, offset)
    g.produced = 3100
    i1.budget = 50
    g.run([i1], until=g.now + HB)
    assert g.handed_by(i1) == list(range(3000, 3050)), describe(g)


def test_a_seek_to_an_integer_of_another_type_is_its_int():
    """An integer type that is not int (numpy's, as a user's offsets often are) is taken as
    the int it is."""

    class Offset:
        def __index__(self) -> int:
            return 1020

    g, i1 = _handed_out_uncommitted()
    i1.core.seek(g.now, TOPIC, 0, Offset())
    i1.budget = 30
    g.run([i1], until=g.now + HB)
    assert [o for o, h in g.handed.items() if len(h) == 2] == list(range(1020, 1050))
