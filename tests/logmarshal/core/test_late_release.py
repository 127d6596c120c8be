"""A release whose write reported failure lands later (docs/protocol-notes.md: a write that reports failure and lands later).

c1/i1 (AMO) handed out 0..29 of p0 and gives p0 up; its ReleasingPartition(29) is reported
failed but is still in the transport. i1 goes on: it retries, and once p0 is free again it
claims p0 again (the same instance) and hands out 30..59. Then the stray release lands. If
it is judged as the new tenure's release, the partition resumes at 30 again and the next
holder hands 30..59 out a second time.

- FIFO transport (an idempotent producer, the simulator's default): everything i1 sends after
  the stuck release lands behind it, so its new claim cannot land before the stray release.
- Overtaking transport (``--without idempotent-writes``): i1's later writes land first.
  Version 6 releases name the tenure they end (the offset of the claim that began it), so
  the log refuses the stray one (PROTOCOL.md, "Version 6", property f); without that rule
  it gives back what i1's new tenure handed out and c2 hands it out again.
"""

from __future__ import annotations

import pytest

from .stepper import HB, TOPIC, Group, Member, describe


def _hands_out_then_gives_up(
    rules_off: frozenset[str] = frozenset(), protocol_version: int | None = None
) -> tuple[Group, Member]:
    g = Group(batch=30, rules_off=rules_off, protocol_version=protocol_version)
    i1 = g.start("c1", "i1", budget=30)
    g.run([i1], until=3 * HB)
    assert g.handed_by(i1) == list(range(30)), describe(g)
    return g, i1


def test_stray_late_release_fifo_hands_nothing_out_twice():
    g, i1 = _hands_out_then_gives_up()
    i1.stuck = True  # from the release on, all of i1's writes are reported failed and kept
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    g.run([i1], until=10 * HB)  # i1 retries its release and goes on; nothing of it lands
    assert len(i1.transit) > 1, "the transport held nothing behind the stray release"
    g.land_transit(i1)  # the stuck writes land late, in the order they were sent
    assert any("LATE ReleasingPartition ('c1', 'i1'): accepted" in v for v in g.verdicts)
    i1.stuck = False
    i1.budget = 30
    g.run([i1], until=14 * HB)
    assert g.handed_by(i1) == list(range(60)), "i1 did not hand out again\n" + describe(g)
    c2 = g.start("c2", "i2", budget=30)
    g.close(i1)
    g.run([i1, c2], until=20 * HB)
    assert g.handed_by(c2), "c2 never took p0 over\n" + describe(g)
    assert g.repeats() == {}, describe(g)


def _stray_release_overtaken(
    rules_off: frozenset[str] = frozenset(), protocol_version: int | None = None
) -> Group:
    g, i1 = _hands_out_then_gives_up(rules_off, protocol_version)
    g.carry(i1, i1.core.give_up(g.now, TOPIC, 0, "the test gives it up"))
    kinds = [w.kind for w in i1.outbox]
    stray = g.fail(i1, kinds.index("release"))  # reported failed, still in the transport
    i1.budget = 30
    g.run([i1], until=10 * HB)  # its retry lands; later it claims p0 again and hands out
    assert g.handed_by(i1) == list(range(60)), "i1 did not claim again\n" + describe(g)
    g.land_late(i1, stray)  # the stray release overtakes nothing: it lands last
    c2 = g.start("c2", "i2", budget=30)
    g.run([i1, c2], until=14 * HB)
    g.close(i1)
    g.run([i1, c2], until=18 * HB)
    assert g.handed_by(c2), "c2 never took p0 over\n" + describe(g)
    return g


def test_stray_late_release_overtaken_hands_nothing_out_twice():
    """Version 6 (PROTOCOL.md, property f): the stray release names the tenure it ended (the
    offset of i1's first claim), not the one i1's new claim began, so the log refuses it."""
    g = _stray_release_overtaken()
    late = [v.split(" ", 1)[1] for v in g.verdicts if "LATE ReleasingPartition" in v]
    assert late == ["LATE ReleasingPartition ('c1', 'i1'): rejected not_holder"], describe(g)
    assert g.repeats() == {}, describe(g)


def test_without_the_tenure_rule_the_stray_release_gives_back_what_was_handed_out():
    """The same schedule judged without property f (rule 4 of version 4 alone): the stray
    release ends i1's new tenure and gives back 30..59, which c2 hands out again."""
    g = _stray_release_overtaken(frozenset({"release_tenure"}))
    assert any("LATE ReleasingPartition ('c1', 'i1'): accepted" in v for v in g.verdicts)
    assert g.repeats(), describe(g)


@pytest.mark.parametrize("cap", [4, 5, 6, 7])
def test_members_capped_below_6_keep_the_hole_version_6_closed(cap):
    """A member capped at 4 or 5 writes version 1 releases, which name no tenure: the log
    judges the stray one as the new tenure's release, as those versions did, and c2 hands
    30..59 out again (PROTOCOL.md, "Upgrading a running group": what caps 4 and 5 leave
    open). Capped at 6 or more its releases name their tenure and the stray one is refused."""
    g = _stray_release_overtaken(protocol_version=cap)
    late = [v.split(" ", 1)[1] for v in g.verdicts if "LATE ReleasingPartition" in v]
    if cap < 6:
        assert late == ["LATE ReleasingPartition ('c1', 'i1'): accepted released"], describe(g)
        assert set(g.repeats()) == set(range(30, 60)), describe(g)
    else:
        assert late == ["LATE ReleasingPartition ('c1', 'i1'): rejected not_holder"], describe(g)
        assert g.repeats() == {}, describe(g)
