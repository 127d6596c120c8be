"""Tasks in the core (docs/streams.md, PROTOCOL.md "Tasks (version 3)"), step by step on a hand-moved clock: partition p of several
source topics is one claim, read under that claim, heartbeated and released with every
source's position, and resumed from that vector by the next holder."""

from __future__ import annotations

import pytest

from logmarshal.core import Close, Fetch, Fetched, HandOut, MemberCore, Poll, Replayed, Revoke, Tick
from rationalizer import (
    ClaimingPartition,
    HeartbeatingTask,
    ReleasingTask,
    WorldState,
    decode,
)

from .test_core import HB, Log, land_all, options

TASKS = (("T", ("a", "b")),)


def task_core(
    client: str = "c1", instance: str = "i1", **kwargs: object
) -> tuple[MemberCore, WorldState]:
    """A member claiming task T (sources a, b) with its own replay of the log."""
    world = WorldState()
    opts = options(
        mode="alo",
        client_id=client,
        instance_id=instance,
        topics=(("T", 1),),
        tasks=TASKS,
        **kwargs,
    )
    return MemberCore(opts, [world]), world


def start(core: MemberCore, world: WorldState, log: Log, now: int = 0) -> list:
    out = land_all(core, world, log, now, core.step(now, Replayed(0, log.replay(world), True)))
    return out + land_all(core, world, log, now + 1, core.step(now + 1, Tick()))


def written(log: Log, kind: type) -> list:
    return [m for m in (decode(k, v) for _, k, v in log.records) if isinstance(m, kind)]


def feed(core: MemberCore, actions: list, now: int, upto: int = 10) -> None:
    """Answer every Fetch with the records from its offset below ``upto``."""
    for a in actions:
        if isinstance(a, Fetch):
            records = tuple((o, b"") for o in range(a.offset, upto))
            core.step(now, Fetched(a.token, a.topic, a.partition, records))


def poll_all(core: MemberCore, now: int) -> dict[str, list[int]]:
    handed: dict[str, list[int]] = {}
    for _ in range(4):
        for a in core.step(now, Poll(100)):
            if isinstance(a, HandOut):
                handed.setdefault(a.topic, []).extend(o for o, _ in a.records)
    return handed


def test_options_refuse_what_a_task_cannot_be():
    with pytest.raises(ValueError, match="at least once"):
        options(mode="amo", topics=(("T", 1),), tasks=TASKS)
    with pytest.raises(ValueError, match="both subscribed and a task's source"):
        options(mode="alo", topics=(("T", 1), ("a", 1)), tasks=TASKS)
    with pytest.raises(ValueError, match="sorted, unique"):
        options(mode="alo", topics=(("T", 1),), tasks=(("T", ("b", "a")),))
    with pytest.raises(ValueError, match="named twice"):
        options(mode="alo", topics=(("T", 1), ("U", 1)), tasks=(("T", ("a",)), ("U", ("a",))))
    with pytest.raises(ValueError, match="entire_topic"):
        options(mode="alo", topics=(("T", 1),), tasks=TASKS, claim_entire_topic=True)


def test_a_task_is_one_claim_read_from_every_source_and_heartbeated_as_a_vector():
    log = Log()
    core, world = task_core()
    out = start(core, world, log)
    claims = written(log, ClaimingPartition)
    assert [(c.topic, c.partition) for c in claims] == [("T", 0)]  # one claim, one key
    assert core.held() == [("T", 0)] and core.assigned() == [("T", 0)]
    fetched = sorted((a.topic, a.partition, a.offset) for a in out if isinstance(a, Fetch))
    assert fetched == [("a", 0, 0), ("b", 0, 0)]
    first = written(log, HeartbeatingTask)
    assert first and first[0].positions == (("a", -1), ("b", -1))

    feed(core, out, 2, upto=5)
    handed = poll_all(core, 2)
    assert handed == {"a": [0, 1, 2, 3, 4], "b": [0, 1, 2, 3, 4]}
    assert core.may_hand_out("a", 0, 2) and core.may_hand_out("T", 0, 2)
    assert core.epoch("a", 0) == core.epoch("T", 0) is not None
    core.commit("a", 0, [0, 1, 2])
    core.commit("b", 0, [0])
    assert core.position("a", 0) == 2 and core.position("b", 0) == 0
    assert core.uncommitted() == {("a", 0): 2, ("b", 0): 4}
    land_all(core, world, log, HB, core.step(HB, Tick()))
    assert written(log, HeartbeatingTask)[-1].positions == (("a", 2), ("b", 0))
    assert world.resume_positions("g", "T", 0) == {"a": 3, "b": 1}
    # the world's scalar for the key counts the input consumed (PROTOCOL.md, "Tasks")
    assert world.resume_offset("g", "T", 0) == 3 + 1


def test_a_close_releases_the_vector_and_the_next_holder_resumes_every_source_from_it():
    log = Log()
    core, world = task_core()
    out = start(core, world, log)
    feed(core, out, 2, upto=6)
    poll_all(core, 2)
    core.commit("a", 0, range(6))
    core.commit("b", 0, range(4))
    actions = land_all(core, world, log, 3, core.step(3, Close()))
    revokes = [a for a in actions if isinstance(a, Revoke)]
    assert [(r.topic, r.partition, r.sources) for r in revokes] == [("T", 0, (("a", 0), ("b", 0)))]
    assert written(log, ReleasingTask)[-1].positions == (("a", 5), ("b", 3))
    assert world.holder("g", "T", 0) is None

    nxt, nxt_world = task_core("c2", "i2")
    out = start(nxt, nxt_world, log, now=10)
    assert nxt.held() == [("T", 0)]
    fetched = sorted((a.topic, a.offset) for a in out if isinstance(a, Fetch))
    assert fetched == [("a", 6), ("b", 4)]


def test_a_restarted_instance_takes_the_task_back_with_its_vector():
    log = Log()
    old, world = task_core("c1", "old")
    out = start(old, world, log)
    feed(old, out, 2, upto=3)
    poll_all(old, 2)
    old.commit("a", 0, range(3))
    land_all(old, world, log, HB, old.step(HB, Tick()))
    assert world.resume_positions("g", "T", 0) == {"a": 3, "b": 0}

    new, new_world = task_core("c1", "new")
    out = start(new, new_world, log, now=HB + 10)  # the old claim is still fresh
    assert new.held() == [("T", 0)]
    takeover = written(log, HeartbeatingTask)[-1]
    assert takeover.instance_id == "new" and takeover.positions == (("a", 2), ("b", -1))
    assert new_world.is_fenced("c1", "old")
    fetched = sorted((a.topic, a.offset) for a in out if isinstance(a, Fetch))
    assert fetched == [("a", 3), ("b", 0)]


@pytest.mark.parametrize("cap", [None, 8, 7])
def test_task_heartbeats_name_their_tenure_from_cap_8(cap):
    """PROTOCOL.md, "Version 8": capped at 8 (the default) a task's heartbeats and its
    restart takeover name the tenure (the offset of the claim or takeover that began it);
    capped at 7 they are version 3, which a version 7 replayer reads."""
    kwargs = {} if cap is None else {"protocol_version": cap}
    log = Log()
    old, world = task_core("c1", "old", **kwargs)
    out = start(old, world, log)
    feed(old, out, 2, upto=3)
    poll_all(old, 2)
    old.commit("a", 0, range(3))
    land_all(old, world, log, HB, old.step(HB, Tick()))
    decoded = [decode(k, v) for _, k, v in log.records]  # the index is the offset
    claim_at = next(o for o, m in enumerate(decoded) if isinstance(m, ClaimingPartition))
    new, new_world = task_core("c1", "new", **kwargs)
    start(new, new_world, log, now=HB + 10)
    assert new.held() == [("T", 0)] and new_world.is_fenced("c1", "old")
    decoded = [decode(k, v) for _, k, v in log.records]
    beats = [(o, m) for o, m in enumerate(decoded) if isinstance(m, HeartbeatingTask)]
    mine = [(o, m) for o, m in beats if m.instance_id == "new"]
    takeover_at, takeover = mine[0]
    if cap == 7:
        assert {m.version for _, m in beats} == {3} and {m.tenure for _, m in beats} == {None}
        return
    assert {m.version for _, m in beats} == {8}
    assert {m.tenure for _, m in beats if m.instance_id == "old"} == {claim_at}
    assert takeover.tenure == claim_at  # the tenure it takes over...
    land_all(new, new_world, log, 2 * HB, new.step(2 * HB, Tick()))
    later = [(o, decode(k, v)) for o, (_, k, v) in enumerate(log.records) if o > takeover_at]
    later = [(o, m) for o, m in later if isinstance(m, HeartbeatingTask)]
    assert later and {m.instance_id for _, m in later} == {"new"}
    assert {m.tenure for _, m in later} == {takeover_at}  # its own: the takeover's offset
    assert all(new_world.verdict(o).accepted for o, _ in later)
    assert new_world.verdict(len(log.records) - 1).accepted


def test_losing_the_task_stops_every_source_and_nothing_more_is_handed_out():
    log = Log()
    core, world = task_core()
    out = start(core, world, log)
    feed(core, out, 2, upto=3)
    # another member takes the task once the claim has gone stale (we stopped heartbeating)
    thief, thief_world = task_core("c2", "i2")
    later = 2 + 3 * HB
    start(thief, thief_world, log, now=later)
    assert thief.held() == [("T", 0)]
    actions = core.step(later + 1, Replayed(0, log.replay(world), True))
    lost = [a for a in actions if isinstance(a, Revoke)]
    assert lost and lost[0].lost and set(lost[0].sources) == {("a", 0), ("b", 0)}
    assert core.held() == [] and poll_all(core, later + 2) == {}
    assert core.position("a", 0) is None and not core.may_hand_out("a", 0, later + 2)
