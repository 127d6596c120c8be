"""A coordination log that loses records (issue 32 item 4, issue 36 item 2): the core's
halt (events in, actions out), what an admin reset after a gap determines again
(``Regained``), and the simulator's rewind schedule with and without the detection."""

from __future__ import annotations

import pytest

from logmarshal.core import (
    CatchUp,
    Close,
    Halted,
    HandOut,
    MemberCore,
    Poll,
    Regained,
    Replayed,
    Resumed,
    Revoke,
    Tick,
    Write,
)
from rationalizer import Heartbeat, ReleaseGroup, WorldState, encode
from scenarios.sim import Sim, run_seed

from .test_core import HB, Log, land_all, options, start

#: found by ``python -m scenarios.sim --seeds 300 --without rewind-check``: its coordination
#: partition loses records 28..39 at 252 ms; without the detection c4, whose replay took the
#: reused offsets as re-deliveries, hands out t/2 4..7 that c1 handed out at 535 ms
REWIND_SEED = 257


def _holding(mode: str = "amo") -> tuple[MemberCore, WorldState, Log]:
    world, log = WorldState(), Log()
    core = MemberCore(options(mode=mode), [world])
    land_all(core, world, log, 0, start(core, world, log))
    assert core.held() == [("t", 0)] and core.may_hand_out("t", 0, 1)
    return core, world, log


def test_a_halt_drops_what_is_held_there_and_writes_nothing_more() -> None:
    core, _, _ = _holding()
    out = core.step(5, Halted(0, 4, 2, "rewound"))
    assert [(a.topic, a.partition, a.lost) for a in out if isinstance(a, Revoke)] == [
        ("t", 0, True)
    ]
    assert not any(isinstance(a, Write) for a in out)  # no release on a world gone
    assert core.held() == [] and not core.may_hand_out("t", 0, 6)
    assert core.halted() == {0: frozenset()}
    # claim passes, heartbeats and a graceful close write nothing to it
    for now in range(6, 6 + 10 * 100, 50):
        assert not any(isinstance(a, Write) for a in core.step(now, Tick()))
        assert not any(isinstance(a, HandOut) for a in core.step(now, Poll(100)))
    assert not any(isinstance(a, Write) for a in core.step(2000, Close()))


def test_the_same_halt_again_changes_nothing_and_a_resumed_partition_is_claimed() -> None:
    core, _, _ = _holding()
    core.step(5, Halted(0, 0, 3, "gap"))
    assert core.step(6, Halted(0, 0, 3, "gap")) == []
    # a member that holds nothing: no claim while halted, a claim once resumed
    w2, log2 = WorldState(), Log()
    idle = MemberCore(options(mode="amo"), [w2])
    for now, event in ((0, Halted(0, 0, 3, "gap")), (1, Tick()), (2, Tick())):
        land_all(idle, w2, log2, now, idle.step(now, event))  # (its announcements land)
    assert idle.held() == [] and all(key == b"g" for _, key, _ in log2.records)
    before = len(log2.records)
    land_all(idle, w2, log2, 3, idle.step(3, Resumed(0, (("t", 0),))) + idle.step(4, Tick()))
    assert idle.halted() == {0: frozenset({("t", 0)})}
    assert len(log2.records) > before and idle.held() == [("t", 0)]


def test_an_older_gap_told_late_changes_nothing_and_a_rewind_is_for_good() -> None:
    """The halts of a coordination partition go forward only: a gap older than the core's
    (told late, as a new Consumer's edge tells the halts it found before it listened) leaves
    the newer one, whose Resumed is still taken; a rewound partition stays halted whatever
    comes after (nothing comes back within the process), a gap or a Resumed."""
    core, _, _ = _holding()
    core.step(5, Halted(0, 3, 9, "gap"))
    assert core.step(6, Halted(0, 0, 3, "gap")) == []  # the older gap, told late
    core.step(7, Resumed(0, (("t", 0),), after=9))  # the newer gap's answer
    assert core.halted() == {0: frozenset({("t", 0)})}
    core.step(8, Halted(0, 12, 10, "rewound"))  # a newer rewind halts it again
    assert core.halted() == {0: frozenset()}
    for now, event in ((9, Halted(0, 12, 20, "gap")), (10, Resumed(0, (("t", 0),), after=20))):
        core.step(now, event)
        assert core.halted() == {0: frozenset()}, event  # a rewound partition stays so


def test_a_gap_halt_still_announces_membership_a_rewound_one_does_not() -> None:
    for why, announces in (("gap", True), ("rewound", False)):
        core = MemberCore(options(rebalance="balanced"), [WorldState()])
        out = core.step(0, Halted(0, 0, 5, why)) + core.step(1, Tick())
        kinds = [a.kind for a in out if isinstance(a, Write)]
        assert kinds == (["announce"] if announces else []), (why, kinds)


def test_after_a_stall_the_replay_of_a_partition_a_gap_halted_is_waited_for() -> None:
    """A gap halts cp 0, an admin's reset regains t/0 there, the member claims it. The replay
    of a partition a gap halted goes on, so after a stall the member waits for it as for any
    other (until 2026-12-01 the stall rule left every halted partition out, and a member that
    did not run for 3·HB heartbeated t/0 at once from memory: found by the simulator's
    stale-answer check, seeds 746 and 1082 of ``--stale-answers``)."""
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="amo"), [world])
    for now, event in ((0, Halted(0, 0, 3, "gap")), (1, Tick()), (2, Tick())):
        land_all(core, world, log, now, core.step(now, event))
    land_all(core, world, log, 3, core.step(3, Resumed(0, (("t", 0),))) + core.step(4, Tick()))
    assert core.held() == [("t", 0)]
    thawed = 4 + 3 * HB
    out = core.step(thawed, Tick())
    assert CatchUp() in out and not any(isinstance(a, Write) for a in out)
    assert not any(isinstance(a, Write) for a in core.step(thawed + 1, Tick()))
    out = core.step(thawed + 2, Replayed(0, log.replay(world), at_end=True))
    assert any(isinstance(a, Write) and a.kind == "heartbeat" for a in out)


def _apply(world: WorldState, regained: Regained, records: list[tuple[int, int, object]]) -> None:
    offsets, keys, verdicts = [], [], []
    for offset, ts, msg in records:
        key, value = encode(msg)  # type: ignore[arg-type]
        verdicts.append(world.apply(offset, ts, key, value))
        offsets.append(offset)
        keys.append(key)
    regained.note(world, offsets, keys, verdicts)


def test_regained_needs_a_reset_after_the_halt_a_position_and_the_pause_over() -> None:
    admin = {"client_id": "adm", "instance_id": "1", "group_id": "g"}
    beat = {**admin, "topic": "t", "heartbeat_interval_ms": 100}
    world = WorldState()
    regained = Regained(trusted_from=10)
    # a reset before the halt point counts for nothing
    _apply(
        world,
        regained,
        [
            (5, 1000, ReleaseGroup(**admin, msg_expire_time=1500)),
            (6, 1001, Heartbeat(**beat, partition=0, last_offset=7)),
        ],
    )
    assert regained.trusted("g", 2000) == frozenset()
    # after it: a pause until 3000, a position for t/0 only
    _apply(
        world,
        regained,
        [
            (10, 2000, ReleaseGroup(**admin, msg_expire_time=3000)),
            (11, 2001, Heartbeat(**beat, partition=0, last_offset=41)),
        ],
    )
    assert regained.trusted("g", 2500) == frozenset()  # paused
    assert regained.trusted("g", 3000) == frozenset()  # not past the pause's end yet
    assert regained.trusted("g", 3001) == {("t", 0)}
    assert regained.trusted("other", 3001) == frozenset()


@pytest.mark.parametrize("seed", [REWIND_SEED])
def test_a_named_seed_finds_the_rewind_without_the_detection(seed: int) -> None:
    assert Sim(seed).rewind_at is not None
    fixed = run_seed(seed)
    assert fixed.violations == (), fixed.violations
    broken = run_seed(seed, without=frozenset({"rewind-check"}))
    assert any("handed out twice" in v for v in broken.violations), broken.violations


def test_rewind_seeds_pass_with_the_detection() -> None:
    seeds = [s for s in range(120) if Sim(s).rewind_at is not None]
    assert len(seeds) >= 10
    failed = {s: r.violations for s in seeds if (r := run_seed(s)).violations}
    assert failed == {}
