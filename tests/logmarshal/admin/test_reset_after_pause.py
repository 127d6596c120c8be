"""When a reset resolves its targets, on a hand-written log with exact log times: relative
targets from the world after the pause landed (and the log end of then), absolute ones as
planned, and nothing at all when the pause did not land."""

from __future__ import annotations

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.admin import (
    AdminIdentity,
    Target,
    execute,
    plan_from_log,
    plan_reset,
    read_coordination,
)
from logmarshal.admin.errors import AdminError
from logmarshal.admin.reset import Plan, PlanRow
from logmarshal.clock import ManualClock
from rationalizer import Effect, Reason
from tests.logmarshal.audit.logs import Script

from .conftest import BASE, TOPIC

P0, P1 = (TOPIC, 0), (TOPIC, 1)
ADMIN = AdminIdentity("admin@test", "1")


def admin_clock(script_ms: int) -> ManualClock:
    """The admin's wall clock at ``script_ms`` into the script (it sets the pause's end)."""
    return ManualClock((BASE + script_ms) / 1000)


def holder_at_30(s: Script) -> None:
    """a:1 holds p0 (handed out 0..29) and p1 (0..9), HB 1 s."""
    s.claim("a:1", 0, 0)
    s.claim("a:1", 1, 0)
    s.claim_messages("a:1", 0, 29, 50)
    s.beat("a:1", 0, 29, 60)
    s.beat("a:1", 1, 9, 60)


def positions(cluster: EmbeddedCluster) -> dict:
    view = read_coordination(cluster).view
    assert view is not None
    return {k: view.resume_offset("g", *k) for k in (P0, P1)}


def reserve_through_59(cluster: EmbeddedCluster, s: Script) -> None:
    """The log grows by 20 records and a:1 reserves and confirms 30..59 of p0."""
    cluster.produce(TOPIC, 0, [NewRecord(value=b"late", timestamp=BASE)] * 20)
    s.claim_messages("a:1", 0, 59, 200)
    s.beat("a:1", 0, 59, 210)


def test_current_is_the_position_after_the_pause_within_the_log_end_of_then(scripted) -> None:
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0, P1], Target("current"))
    assert [(r.current, r.new) for r in plan.rows] == [(30, 30), (10, 10)]
    assert plan.relative and plan.target == Target("current")

    # after the read: the log end moves past the plan's bounds (50) and a:1 reserves more
    reserve_through_59(cluster, s)

    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert result.ok, [w.describe_verdict() for w in result.rejected]
    # not clamped to the log end of the plan (50): the bounds are read again, too
    assert result.rows == (PlanRow(TOPIC, 0, 60, 60), PlanRow(TOPIC, 1, 10, 10))
    assert result.planned == plan.rows and result.warnings == ()
    written = [(w.kind, w.partition, w.verdict.effect) for w in result.written if w.verdict]
    assert written[-2:] == [
        ("position", 0, Effect.POSITION_SET),
        ("position", 1, Effect.POSITION_SET),
    ]
    assert positions(cluster) == {P0: 60, P1: 10}


def test_shift_is_applied_to_the_position_after_the_pause(scripted) -> None:
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0, P1], Target("shift", -5))
    assert [r.new for r in plan.rows] == [25, 5]
    reserve_through_59(cluster, s)
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert result.ok, [w.describe_verdict() for w in result.rejected]
    assert [(r.current, r.new) for r in result.rows] == [(60, 55), (10, 5)]
    assert positions(cluster) == {P0: 55, P1: 5}


def test_a_plan_built_by_hand_with_a_relative_target_is_resolved_again(scripted) -> None:
    """Library users who pass their own ``current`` get the same: it is provisional."""
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_reset("g", [P0], {P0: 12}, {P0: (0, 50)}, Target("current"))
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert result.ok and result.rows == (PlanRow(TOPIC, 0, 30, 30),)


def test_absolute_targets_are_applied_as_planned(scripted) -> None:
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0], Target("offset", 40))
    assert not plan.relative
    reserve_through_59(cluster, s)
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    # the operator's choice (a rewind past a:1's reservation), the position of the pause
    assert result.ok and result.rows == (PlanRow(TOPIC, 0, 60, 40),)
    assert positions(cluster)[P0] == 40


def test_latest_is_the_log_end_after_the_pause(scripted) -> None:
    """``--to-latest`` took the log end read before the pause (50): a:1 reserved and handed
    out 50..59 meanwhile, and the reset set the position back to 50, so an AMO group handed
    those offsets out twice (a helper's attack, 16 offsets twice per partition)."""
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0], Target("latest"))
    assert [r.new for r in plan.rows] == [50] and plan.relative
    reserve_through_59(cluster, s)  # the log end is 70 now
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert result.ok and result.rows == (PlanRow(TOPIC, 0, 60, 70),)
    assert positions(cluster)[P0] == 70


def test_a_target_clamped_to_the_log_end_is_clamped_after_the_pause(scripted) -> None:
    """``--to-offset 100000`` was clamped to the log end before the pause (50): the same
    rewind past what a:1 handed out meanwhile."""
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0], Target("offset", 100_000))
    assert [r.new for r in plan.rows] == [50] and plan.warnings
    reserve_through_59(cluster, s)
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert result.ok and result.rows == (PlanRow(TOPIC, 0, 60, 70),)
    assert result.warnings == (f"{TOPIC}/0: new offset 100000 is after the log end 70; using 70",)


def test_a_reset_whose_pause_another_admin_replaced_writes_no_position(scripted) -> None:
    """Two operators at once: B's ReleaseGroup lands after A's, before A writes its positions.
    A wrote them anyway where it was still the pause's admin, B where it was, and the group
    resumed at a mix of both targets (a helper's attack); A now writes none and says why."""
    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0, P1], Target("offset", 5))
    other = AdminIdentity("admin@other", "2")
    produce = cluster.produce
    calls = []

    def b_pauses_after_a(topic, partition, records, **kwargs):  # after A's last ReleaseGroup
        result = produce(topic, partition, records, **kwargs)
        calls.append(partition)
        if len(calls) == state.n:
            cluster.produce = produce  # type: ignore[method-assign]
            execute(cluster, read_coordination(cluster), plan_from_log(
                cluster, read_coordination(cluster), "g", [P0], Target("offset", 7),
            ), admin=other, pause_ms=5000, clock=admin_clock(320))  # fmt: skip
        return result

    cluster.produce = b_pauses_after_a  # type: ignore[method-assign]
    with pytest.raises(AdminError, match=r"another admin \(admin@other/2\) paused group 'g'"):
        execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    assert positions(cluster) == {P0: 7, P1: 10}  # B's reset alone: A wrote no position


def test_a_pause_that_did_not_land_sets_no_position(scripted) -> None:
    """The admin writes under an identity fenced in p0's coordination partition: its
    ReleaseGroup there is rejected, so a member could still move p0: nothing is written."""
    cluster, s = scripted
    holder_at_30(s)
    s.beat("a:2", 0, 29, 100)  # a's restart takes p0 over and fences instance a:1 there
    state = read_coordination(cluster)
    plan = plan_from_log(cluster, state, "g", [P0, P1], Target("offset", 0))
    result = execute(
        cluster,
        state,
        plan,
        admin=AdminIdentity("a", "1"),
        pause_ms=5000,
        clock=admin_clock(300),
    )
    assert not result.ok
    assert {w.kind for w in result.written} == {"release_group"}
    assert result.rows == () and result.planned == plan.rows
    [fenced] = result.rejected
    assert fenced.coord_partition == s.cp(0)
    assert fenced.verdict is not None and fenced.verdict.reason is Reason.FENCED
    assert positions(cluster) == {P0: 30, P1: 10}


def test_a_reset_cut_short_by_its_pause_says_what_moved(scripted, capsys) -> None:
    """The admin stalls past its pause between two coordination partitions' positions: one
    partition moved, the other did not. The CLI listed the rejected record alone ("rejected
    (not_holder)"); it now says the record came after the pause, which partitions moved, and
    how to finish without moving them twice (a helper's attack: a --shift-by run again)."""
    from types import SimpleNamespace

    from logmarshal.cli.group import _report_execution
    from rationalizer import coordination_partition

    cluster, s = scripted
    holder_at_30(s)
    state = read_coordination(cluster)
    assert coordination_partition(*P0, state.n) != coordination_partition(*P1, state.n)
    plan = plan_from_log(cluster, state, "g", [P0, P1], Target("offset", 5))
    produce = cluster.produce
    calls = []

    def stalls_after_the_first_positions(topic, partition, records, **kwargs):
        result = produce(topic, partition, records, **kwargs)
        calls.append(partition)
        if len(calls) == state.n + 1:  # the releases, then one partition's positions
            s.clock.now_ms += 10_000  # the admin's process stops for 10 s: the pause ends
        return result

    cluster.produce = stalls_after_the_first_positions  # type: ignore[method-assign]
    result = execute(cluster, state, plan, admin=ADMIN, pause_ms=5000, clock=admin_clock(300))
    cluster.produce = produce  # type: ignore[method-assign]
    positions_written = [w for w in result.written if w.kind == "position"]
    assert [w.ok for w in positions_written] == [True, False]
    assert _report_execution(SimpleNamespace(as_json=False), result) == 1
    err = capsys.readouterr().err
    assert "it landed after the pause had ended" in err
    moved = f"{positions_written[0].topic}/{positions_written[0].partition}"
    assert f"the reset is partly applied: {moved} moved" in err and "--shift-by" in err


class _Ticking(ManualClock):
    """The admin's clock, on by ``step_ms`` at every read: time passes while it writes."""

    def __init__(self, start_ms: int, step_ms: int) -> None:
        super().__init__(start_ms / 1000)
        self._step = step_ms / 1000

    def time(self) -> float:
        now = super().time()
        self.advance(self._step)
        return now


def _holder_beating_every_3s(s: Script) -> None:
    s.claim("a:1", 0, 0, hb=3000)
    s.beat("a:1", 0, 9, 60, hb=3000)  # (log time now 60 ms into the script)


def _pause(cluster, clock, caplog, pause_ms=None):
    """Pause group g (no positions) with the admin's ``clock``: the result, how many
    ReleaseGroup rounds were written, and what was said at WARNING."""
    import logging

    state = read_coordination(cluster)
    ends = [cluster.latest_offset("__marshal", cp) for cp in range(state.n)]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="logmarshal.admin"):
        result = execute(cluster, state, Plan("g", ()), admin=ADMIN, pause_ms=pause_ms, clock=clock)
    written = sum(cluster.latest_offset("__marshal", cp) - e for cp, e in enumerate(ends))
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "pause" in r.getMessage()]
    return result, written // state.n, said


def test_a_default_pause_lands_in_one_round_with_no_word_of_the_clock(scripted, caplog) -> None:
    """A group heartbeating every 3 s: its default pause was exactly 2·HB from the admin's
    clock, so the write's own delay always left less than 2·HB of it after it landed. Every
    default reset wrote its ReleaseGroups twice, warning "the log's clock is N ms ahead of
    ours" of a log on the admin's own clock (an attack on the CLI, 2026-12-06). The
    default has a second more now."""
    cluster, s = scripted
    _holder_beating_every_3s(s)
    result, rounds, said = _pause(cluster, _Ticking(BASE + 58, 1), caplog)
    assert rounds == 1 and said == []
    assert result.pause_until_ms == BASE + 58 + 7000  # 2·HB + 1 s


def test_a_pause_landing_late_is_moved_out_and_only_a_clock_ahead_is_a_warning(
    scripted, caplog
) -> None:
    """A pause of exactly 2·HB, landed later than planned, is written again to end 2·HB
    after it landed (the leases it voided end by then), said at INFO; the log's clock ahead
    of the admin's (its stamp past the admin's clock once written) is a warning."""
    cluster, s = scripted
    _holder_beating_every_3s(s)
    result, rounds, said = _pause(cluster, _Ticking(BASE + 58, 5), caplog, pause_ms=6000)
    assert rounds == 2 and result.pause_until_ms == BASE + 60 + 6000
    assert [level for level, _ in said] == ["INFO"] and "landed 2 ms after" in said[0][1]
    result, rounds, said = _pause(cluster, ManualClock((BASE + 10) / 1000), caplog, 6000)
    assert rounds == 2 and result.pause_until_ms == BASE + 60 + 6000
    assert said == [
        ("WARNING", f"the log's clock is 50 ms ahead of ours; extending the pause to end at "
         f"{BASE + 6060}")
    ]  # fmt: skip
