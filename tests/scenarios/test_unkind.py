"""The unkind faults of the simulator (docs/simulation.md): thaw order, stale wake, late writes (FIFO or not), the
zombie schedule, the reset race, and the flags that remove each fix."""

from __future__ import annotations

import argparse
import heapq

import pytest

from logmarshal.core import MemberCore, Write
from rationalizer import Heartbeat, WorldState, encode
from rationalizer._rules import RULES
from scenarios import sim as sim_module
from scenarios.sim import FIXES, HB, Sim, parse_without, run_seed
from scenarios.sim_checks import Checks
from scenarios.sim_rules import RulesWithout


def _drain(sim: Sim, until: int) -> None:
    """Run the scheduled events up to ``until`` (no members' loops are started here)."""
    while sim._queue and sim._queue[0][0] <= until:
        t, _, fn = heapq.heappop(sim._queue)
        sim.now = t
        fn()


def _heartbeat(offset: int) -> tuple[bytes, bytes]:
    return encode(
        Heartbeat(
            client_id="c9",
            instance_id="i9",
            group_id="g",
            topic="t",
            partition=0,
            last_offset=offset,
            heartbeat_interval_ms=HB,
        )
    )


# -- thaw ------------------------------------------------------------------------------------


def test_thaw_runs_what_was_postponed_in_a_seeded_random_order():
    def order(seed: int) -> list[int]:
        sim = Sim(seed)
        inst = sim.join()
        sim.freeze(inst)
        ran: list[int] = []
        for k in range(8):
            sim.on(inst, lambda k=k: ran.append(k))
        assert ran == []  # frozen: postponed
        sim.thaw(inst)
        return ran

    orders = [order(seed) for seed in range(5)]
    assert all(sorted(o) == list(range(8)) for o in orders)
    assert any(o != list(range(8)) for o in orders), "thaw kept the original order"
    assert order(3) == orders[3]  # and a seed replays it exactly


def test_a_thawed_replay_sees_nothing_newer_than_the_freeze_until_it_catches_up():
    sim = Sim(0)
    sim.p_stale_thaw = 1.0
    inst = sim.join()
    inst.lag = 0
    _drain(sim, 0)
    sim.now = 10
    sim.freeze(inst)
    sim.now = 50
    sim.append(0, *_heartbeat(5))  # lands while it is frozen
    sim.now = 400
    sim.thaw(inst)
    assert inst.horizon == 10 and sim.now + HB // 2 <= inst.stale_until <= sim.now + 2 * HB
    seen = inst.applied[0]
    sim.replay(inst)
    assert inst.applied[0] == seen, "the stale replay applied a record from after the freeze"
    sim.now = inst.stale_until
    sim.replay(inst)
    assert inst.applied[0] == len(sim.log[0]) - 1


# -- late writes ------------------------------------------------------------------------------


@pytest.mark.parametrize("fifo", [True, False])
def test_a_write_reported_failed_lands_late_fifo_or_overtaken(fifo):
    without = frozenset() if fifo else frozenset({"idempotent-writes"})
    sim = Sim(1, without=without)
    sim.fault_ms = 1 << 40
    inst = sim.join()
    inst.state = "dead"  # its own loops stay quiet: only the two writes below move
    sim.p_drop, sim.p_late, sim.p_dup, sim.p_fail, sim.p_lost_answer = 1.0, 1.0, 0, 0, 0
    first = Write(101, 0, *_heartbeat(1), "heartbeat")
    sim.carry(inst, first)  # dropped: reported failed, lands late
    sim.p_drop = 0.0
    second = Write(102, 0, *_heartbeat(2), "heartbeat")
    sim.carry(inst, second)
    _drain(sim, 10 * HB)
    landed = [v for _, k, v in sim.log[0] if v in (first.value, second.value)]
    expected = [first.value, second.value] if fifo else [second.value, first.value]
    assert landed == expected


# -- the zombie schedule and the reset race --------------------------------------------------


def test_the_zombie_schedule_is_frequent_in_amo_seeds():
    sims = [Sim(seed) for seed in range(200)]
    amo = [s for s in sims if s.mode == "amo" and s.faults]
    assert len(amo) > 50
    assert sum(s.zombie_at is not None for s in amo) >= 0.6 * len(amo)


def test_a_zombie_seed_freezes_restarts_moves_and_thaws():
    seed = next(s for s in range(100) if Sim(s).zombie_at is not None and Sim(s).mode == "amo")
    trace = "\n".join(run_seed(seed, trace=True).trace)
    assert "ZOMBIE" in trace and "thaw" in trace


def test_the_reset_race_is_judged_as_the_admin_meant_it():
    seeds = [s for s in range(300) if Sim(s).reset_at is not None][:12]
    assert seeds
    results = [run_seed(s, trace=True) for s in seeds]
    assert any("accepted position_set" in line for r in results for line in r.trace)
    rewound = [v for r in results for v in r.violations if "without an admin reset" in v]
    assert rewound == []


def test_checks_forgive_exactly_what_an_admin_rewound():
    checks = Checks("amo", fence_after_ms=150)
    a, b, key = ("c1", "i1"), ("c2", "i2"), ("t", 0)
    checks.accepted_at[(a, "t", 0)].append(100)
    checks.handed_out(110, a, key, [5, 6, 7])
    checks.resets[key].append((120, 5))  # the admin set last_offset 5: 6.. come again
    checks.handed_out(130, a, key, [6])  # under the lease from before the reset: allowed
    checks.accepted_at[(b, "t", 0)].append(400)
    checks.handed_out(410, b, key, [6, 7])  # after the reset, again: allowed
    assert checks.violations == []
    checks.handed_out(420, b, key, [7])  # a repeat no reset explains
    assert "handed out twice" in checks.violations[-1]
    checks.handed_out(430, b, key, [5])  # at or below the admin's position: not rewound
    assert "offset 5 handed out twice" in checks.violations[-1]


def test_alo_excuses_what_an_admin_skipped():
    checks = Checks("alo", fence_after_ms=150)
    checks.resets[("t", 0)].append((10, 9))
    checks.complete(0, {("t", 0): 10})
    assert checks.violations == []
    checks.complete(0, {("t", 0): 11})
    assert "never handed out 1 offsets, first 10" in checks.violations[-1]


# -- removing fixes ---------------------------------------------------------------------------


def test_parse_without():
    assert parse_without(["all-amo"]) == FIXES
    assert parse_without(["surprise,stall", "release_floor"]) == {
        "surprise",
        "stall",
        "release_floor",
    }
    with pytest.raises(argparse.ArgumentTypeError):
        parse_without(["no-such-fix"])


def test_without_reaches_every_world_and_every_core(monkeypatch):
    worlds: list[dict] = []
    cores: list[dict] = []

    def world(**kw: object) -> WorldState:
        worlds.append(dict(kw))
        return WorldState(**kw)  # type: ignore[arg-type]

    def core(*args: object, **kw: object) -> MemberCore:
        cores.append(dict(kw))
        return MemberCore(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_module, "WorldState", world)
    monkeypatch.setattr(sim_module, "MemberCore", core)
    sim = Sim(5, without=parse_without(["all-amo"]))
    sim.join()
    sim.join()
    assert len(worlds) == 3 * sim.ncoord  # the oracle's and both members'
    rules = {"takeover_position", "release_floor", "reservation_start", "fenced_lease"}
    rules |= {"release_tenure", "late_heartbeat", "member_tenure", "task_tenure", "own_tenure"}
    # admin_keys: the bounded-log schedule's keyed group (None here: seed 5 has none); one
    # rule table without every property, the same for every world
    assert all(kw.keys() == {"admin_keys", "rules"} and kw["admin_keys"] is None for kw in worlds)
    assert all(kw["rules"] is sim.rules for kw in worlds)
    assert isinstance(sim.rules, RulesWithout) and sim.rules.without == rules
    switches = {"surprise", "stall", "fresh-ends", "reserved-confirm", "given-up", "live-gap"}
    switches |= {"cut-told", "give-back-guard"}
    assert [kw["_without"] for kw in cores] == [switches] * 2
    assert all(kw["_reread_after_takeover"] is False for kw in cores)
    assert not sim.fifo
    worlds.clear()
    cores.clear()
    plain = Sim(5)
    plain.join()
    assert all(kw == {"admin_keys": None, "rules": RULES} for kw in worlds)  # the protocol's
    assert cores[0]["_without"] == frozenset() and cores[0]["_reread_after_takeover"]
    assert plain.fifo and plain.fix
    restart_bug = Sim(5, fix=False)  # --without-restart-fix: the restart bug's whole experiment
    assert restart_bug.without == {
        "restart-fix",
        "takeover_position",
        "reservation_start",
        "surprise",
        "reserved-confirm",
    }


def test_cli_without_and_without_restart_fix(capsys):
    assert sim_module.main(["--seeds", "2", "--first", "63", "--without", "restart-fix"]) in (0, 1)
    one = capsys.readouterr().out
    assert sim_module.main(["--seeds", "2", "--first", "63", "--without-restart-fix"]) in (0, 1)
    two = capsys.readouterr().out
    assert "fixes removed: restart-fix " in one
    removed = "reservation_start,reserved-confirm,restart-fix,surprise,takeover_position"
    assert f"fixes removed: {removed} " in two
    with pytest.raises(SystemExit):
        sim_module.main(["--seeds", "1", "--without", "bogus"])


def test_the_rule_switches_are_a_variant_rule_table():
    """``--without`` names a property of the rules: the simulator's table drops it (what
    each one then admits: tests/rationalizer/test_version*.py), the production one
    (``rules.RULES``) keeps them all."""
    from rationalizer._state import PartitionEntry
    from scenarios.sim_rules import PROPERTIES, rules_without

    # held in tenure 3 from position 7 (floor), at 5 with 10 reserved, a lease kept until 100
    part = PartitionEntry("g", "t", 0, ("a", "1"), 0, 5, 10, 100, None, 7, 100, 3)
    unnamed = PartitionEntry("g", "t", 0, ("a", "1"), 0, 5, 10, 100, None, 7, 100, -1)
    asked = {  # property: (its arguments, the protocol's answer, the answer without it)
        "takeover_position": ((part, 3), False, True),  # a takeover behind the position
        "release_floor": ((part, 2), 7, 2),  # a release below the tenure's floor
        "reservation_start": ((part, 5), False, True),  # a reservation not at 11
        "fenced_lease": ((part, 50), True, False),  # a claim inside the kept lease
        "release_tenure": ((part, 4), False, True),  # a release naming another tenure
        "late_heartbeat": ((part, 8), True, False),  # a heartbeat below the position
        "member_tenure": ((part, 4), False, True),  # a MemberHeartbeat entry of another tenure
        "task_tenure": ((part, 4), False, True),  # a task's heartbeat of another tenure
        "own_tenure": ((unnamed, ("a", "1")), True, False),  # the holder names its tenure
    }
    assert rules_without(frozenset()) is RULES
    assert asked.keys() == PROPERTIES.keys()
    for name, method in PROPERTIES.items():
        table = rules_without(frozenset({name}))
        assert isinstance(table, RulesWithout) and table.without == {name}
        args, kept, dropped = asked[name]
        assert getattr(RULES, method)(*args) == kept
        assert getattr(table, method)(*args) == dropped
        other = rules_without(frozenset(PROPERTIES) - {name})  # every other one dropped
        assert getattr(other, method)(*args) == kept
    with pytest.raises(ValueError, match="unknown rule switches"):
        RulesWithout(frozenset({"stall"}))
