"""Unit tests of the consumer core's pure pieces, with real WorldStates and a hand-moved clock."""

from __future__ import annotations

import itertools
import operator
from collections import deque

import pytest

from logmarshal.core import (
    Bounds,
    CatchUp,
    Close,
    Closed,
    CoreOptions,
    Fetch,
    Fetched,
    HandOut,
    Lease,
    LookUp,
    MemberCore,
    Poll,
    Replayed,
    Revoke,
    Tick,
    Write,
    WriteFailed,
    Written,
)
from logmarshal.core.claims import resume_after_takeover
from logmarshal.core.delivery import AtMostOnce
from logmarshal.core.held import Held
from rationalizer import ClaimingMessages, ClaimingPartition, Heartbeat, Reason, WorldState, encode
from scenarios.sim_rules import rules_without

HB = 100
FIRST = operator.itemgetter(0)


def options(**kw):
    base = dict(
        group_id="g",
        client_id="c1",
        instance_id="i1",
        topics=(("t", 1),),
        coordination_partitions=1,
        mode="amo",
        heartbeat_interval_ms=HB,
        batch_size=5,
        claim_interval_ms=0,  # these tests' claim passes run on every tick
    )
    base.update(kw)
    base.setdefault("prefetch", base["batch_size"])  # a batch buffered is a batch fetched
    return CoreOptions(**base)


class Log:
    """A one-partition coordination log the test appends to by hand."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes]] = []

    def append(self, ts: int, key: bytes, value: bytes) -> int:
        self.records.append((ts, key, value))
        return len(self.records) - 1

    def replay(self, world: WorldState) -> int:
        for off in range(world.applied_through + 1, len(self.records)):
            world.apply(off, *self.records[off])
        return len(self.records) - 1


def land_all(core, world, log, now, actions):
    """Append every Write, answer it and every LookUp (the data log spans 0..100), replay,
    and again for what that caused; return the other actions."""
    out = []
    while True:
        more = []
        for a in actions:
            if isinstance(a, Write):
                off = log.append(now, a.key, a.value)
                more += core.step(now, Written(a.token, off))
            elif isinstance(a, LookUp):
                more += core.step(now, Bounds(a.token, a.topic, a.partition, 0, 100))
            else:
                out.append(a)
        end = log.replay(world)
        more += core.step(now, Replayed(0, end, at_end=True))
        if not any(isinstance(a, Write | LookUp) for a in more):
            return out + more
        actions = more


# -- options and lease ------------------------------------------------------------------------


def test_options_validate():
    assert options().fence_after_ms == 2 * HB - HB // 4
    with pytest.raises(ValueError):
        options(mode="exactly-once")
    with pytest.raises(ValueError):
        options(heartbeat_interval_ms=0)
    with pytest.raises(ValueError):
        options(fence_margin_ms=2 * HB)
    with pytest.raises(ValueError):
        options(topics=(("bad/topic", 1),))
    with pytest.raises(ValueError):
        options(client_id="")


_REQUIRED = dict(
    group_id="g",
    client_id="c1",
    instance_id="i1",
    topics=(("t", 1),),
    coordination_partitions=1,
    heartbeat_interval_ms=HB,
)


def test_max_reserved_defaults_to_a_few_batches_and_is_validated():
    assert options().max_reserved == 4 * 5
    # the window waits in the buffer: AMO's default prefetch has room for it and a batch
    amo = CoreOptions(**{**_REQUIRED, "mode": "amo", "batch_size": 500})
    assert (amo.max_reserved, amo.prefetch) == (2000, 2500)
    alo = CoreOptions(**{**_REQUIRED, "batch_size": 500})
    assert alo.prefetch == 1000  # ALO reserves nothing
    assert CoreOptions(**_REQUIRED, mode="amo").prefetch == 500  # batch 100: as before
    assert options(max_reserved=7).max_reserved == 7
    with pytest.raises(ValueError, match="max_reserved must be at least 1"):
        options(max_reserved=0)
    with pytest.raises(TypeError, match="max_reserved must be an int"):
        options(max_reserved=2.5)


def test_lease_counts_from_send_time_and_never_shrinks():
    lease = Lease(fence_after_ms=150, confirmed_sent=1000)
    assert lease.may_hand_out(1149)
    assert not lease.may_hand_out(1150)
    lease.renewed(900)  # a late answer to an older message
    assert lease.expires_at() == 1150
    lease.renewed(1100)
    assert lease.may_hand_out(1249) and not lease.may_hand_out(1250)


# -- AMO reservation decisions -----------------------------------------------------------------


def held(**kw):
    base = dict(
        topic="t",
        partition=0,
        cp=0,
        lease=Lease(150, 0),
        next_fetch=0,
        handed_through=-1,
        claimed_through=-1,
        confirmed_through=-1,
    )
    base.update(kw)
    return Held(**base)


def test_amo_reserves_ahead_within_the_window():
    """The next window is reserved while the confirmed one is handed out: at most ``window``
    records reserved and not handed out, one reservation in flight at a time."""
    h = held(buffer=deque((o, b"") for o in range(12)))
    amo = AtMostOnce()
    assert amo.to_reserve(h, 5, FIRST) is None  # nobody asked: nothing to lose
    h.demand = True  # a poll asked
    assert amo.to_reserve(h, 5, FIRST) == 4
    h.claimed_through = 4  # reserved, not yet confirmed: nothing new, nothing handed out
    assert amo.to_reserve(h, 5, FIRST) is None
    assert amo.take(h, 100, FIRST) == []
    h.confirmed_through = 4
    assert amo.to_reserve(h, 5, FIRST) is None  # the window is full: hand some out first
    assert [o for o, _ in amo.take(h, 2, FIRST)] == [0, 1]
    assert amo.to_reserve(h, 5, FIRST) == 6  # 2..6: two more while 2..4 are handed out
    h.reserve_token = 7
    assert amo.to_reserve(h, 5, FIRST) is None  # one reservation in flight at a time
    h.reserve_token, h.claimed_through = None, 6  # accepted; its heartbeat not answered yet
    assert amo.to_reserve(h, 5, FIRST) is None  # the next starts where the log confirmed
    assert [o for o, _ in amo.take(h, 100, FIRST)] == [2, 3, 4]  # only what is confirmed
    h.confirmed_through = 6
    assert amo.to_reserve(h, 5, FIRST) == 9  # 5..9
    assert [o for o, _ in amo.take(h, 100, FIRST)] == [5, 6]
    assert amo.to_reserve(h, 5, FIRST) == 11  # 7..11: what is buffered


def test_amo_heartbeat_carries_the_reservation():
    assert AtMostOnce().position(held(claimed_through=9, confirmed_through=4)) == 9


# -- restart recovery ---------------------------------------------------------------------------


def _apply(world, ts, msg):
    key, value = encode(msg)
    return world.apply(world.applied_through + 1, ts, key, value)


@pytest.mark.parametrize("rule_a", [True, False])
def test_resume_after_takeover_includes_the_old_instances_reservation(rule_a):
    """The old instance reserved 100..199 after the new one read 100. Since protocol version
    4 the log refuses that takeover (its position 99 is behind the reservation: property a);
    without property a it is accepted, and the new instance must read its resume point after
    the verdict (the core's own defence, kept for older logs)."""
    world = WorldState(
        rules=rules_without(frozenset() if rule_a else frozenset({"takeover_position"}))
    )
    ids = dict(client_id="a", group_id="g", topic="t", partition=0)
    assert _apply(
        world, 0, ClaimingPartition(instance_id="1", heartbeat_interval_ms=HB, **ids)
    ).accepted
    _apply(world, 0, Heartbeat(instance_id="1", last_offset=99, heartbeat_interval_ms=HB, **ids))
    read_before = world.resume_offset("g", "t", 0)
    assert read_before == 100
    assert _apply(
        world, 5, ClaimingMessages(instance_id="1", proposed_last_offset=199, **ids)
    ).accepted
    takeover = _apply(
        world, 9, Heartbeat(instance_id="2", last_offset=99, heartbeat_interval_ms=HB, **ids)
    )
    if rule_a:
        assert takeover.reason is Reason.NOT_HOLDER
        assert world.holder("g", "t", 0) == ("a", "1")
        return
    assert takeover.accepted
    assert resume_after_takeover(world, "g", "t", 0, read_before, reread=True) == 200
    # the buggy decision, kept only for the simulator's experiment
    assert resume_after_takeover(world, "g", "t", 0, read_before, reread=False) == 100


# -- whole flows ------------------------------------------------------------------------------


def start(core, world, log, now=0):
    out = land_all(
        core, world, log, now, core.step(now, Replayed(0, log.replay(world), at_end=True))
    )
    return out


def test_amo_claim_reserve_confirm_then_hand_out():
    world, log = WorldState(), Log()
    core = MemberCore(options(), [world])
    out = start(core, world, log)  # claim lands and is accepted
    out = land_all(core, world, log, 1, out + core.step(1, Tick()))
    fetch = next(a for a in out if isinstance(a, Fetch))
    assert fetch.offset == 0
    records = tuple((o, b"x") for o in range(8))
    out = core.step(2, Fetched(fetch.token, "t", 0, records))
    assert not any(isinstance(a, Write) and a.kind == "reserve" for a in out)  # not asked yet
    out += core.step(2, Poll(100))
    assert not any(isinstance(a, HandOut) for a in out)  # nothing before the reservation
    writes = [a for a in out if isinstance(a, Write)]
    assert [w.kind for w in writes if w.kind == "reserve"] == ["reserve"]
    out = land_all(core, world, log, 3, out)  # the reservation and its confirming heartbeat
    out = land_all(core, world, log, 4, out + core.step(4, Tick()))
    handed = [a for a in out + core.step(5, Poll(100)) if isinstance(a, HandOut)]
    # one reservation covers the window (4 batches by default): everything buffered
    assert [o for h in handed for o, _ in h.records] == list(range(8))
    assert world.partition_state("g", "t", 0).claimed_through == 7


def test_lapsed_lease_stops_hand_out_until_a_heartbeat_is_accepted():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo"), [world])
    land_all(core, world, log, 0, start(core, world, log))
    assert core.may_hand_out("t", 0, 10)
    lapse = options().fence_after_ms
    assert not core.may_hand_out("t", 0, lapse)  # nothing accepted since the claim at 0
    out = core.step(lapse, Poll(100))
    assert not any(isinstance(a, HandOut) for a in out)
    land_all(core, world, log, lapse, out)  # the heartbeat sent at `lapse` is accepted
    assert core.may_hand_out("t", 0, lapse + 1)


def test_fenced_instance_close_writes_no_release():
    world, log = WorldState(), Log()
    old = MemberCore(options(), [world])
    land_all(old, world, log, 0, start(old, world, log))
    assert old.held() == [("t", 0)]
    new = MemberCore(options(instance_id="i2"), [world])
    out = start(new, world, log, now=10)  # restart recovery: takeover heartbeat
    assert new.held() == [("t", 0)]
    out = old.step(11, Replayed(0, world.applied_through, at_end=True))
    assert old.fenced
    assert any(isinstance(a, Revoke) and a.lost for a in out)
    out = old.step(12, Close())
    assert not any(isinstance(a, Write) for a in out)
    assert any(isinstance(a, Closed) for a in out)


def test_release_with_unknown_outcome_is_retried_a_bounded_number_of_times():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", release_attempts=3), [world])
    land_all(core, world, log, 0, start(core, world, log))
    writes = 0
    out = core.step(5, Close())
    for i in range(10):
        releases = [a for a in out if isinstance(a, Write) and a.kind == "release"]
        leaves = [a for a in out if isinstance(a, Write) and a.kind == "leave"]
        writes += len(releases)
        out = []
        now = 6 + i * HB  # a release whose outcome is unknown is looked at again HB/2 later
        for r in releases + leaves:
            out += core.step(now, WriteFailed(r.token))
        out += core.step(now + HB // 2, Tick())
    assert writes == 3
    assert core.closed


def test_thawed_alo_member_hands_out_nothing_before_its_replay_catches_up():
    """A thawed ALO zombie once handed out already-fetched messages; the lease, judged
    with the time the events arrive at, stops it before any replay says anything."""
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo"), [world])
    out = land_all(core, world, log, 0, start(core, world, log))
    fetch = next(a for a in out + core.step(1, Tick()) if isinstance(a, Fetch))
    thawed_at = 3 * HB  # frozen past 2·HB with the fetch answer pending
    out = core.step(thawed_at, Fetched(fetch.token, "t", 0, ((0, b"a"), (1, b"b"))))
    out += core.step(thawed_at, Poll(100))
    assert not any(isinstance(a, HandOut) for a in out)
    # it writes nothing it remembers either: it asks to catch up first (the stall rule)
    assert [type(a) for a in out] == [CatchUp]
    assert not core.step(thawed_at + 1, Tick())
    assert not core.step(thawed_at + 1, Replayed(0, log.replay(world)))  # not the end yet
    out = core.step(thawed_at + 2, Replayed(0, log.replay(world), at_end=True))
    assert any(isinstance(a, Write) and a.kind == "heartbeat" for a in out)
    assert not any(isinstance(a, HandOut) for a in out + core.step(thawed_at + 2, Poll(100)))


def test_a_catch_up_answer_made_before_a_stall_does_not_end_it():
    """An edge builds ``Replayed(at_end=True)`` before stepping it: a process stopped in
    between (its replay had reached the ends it looked up) wakes with an answer from before
    its stall, stepped in the very step that finds the stall, or after another of its
    threads' steps found it. Ends looked up before the stall end no catch-up."""
    looked_at, thawed_at = HB, 4 * HB  # looked up, then stopped for 3·HB
    # ends looked up once the stall was found answer it (None: as of the step)
    for finder, ends_at in itertools.product((None, Tick(), Poll(100)), (thawed_at, None)):
        world, log = WorldState(), Log()
        core = MemberCore(options(mode="alo"), [world])
        land_all(core, world, log, 0, start(core, world, log))
        stale = Replayed(0, log.replay(world), at_end=True, ends_at=looked_at)
        if finder is None:
            out = core.step(thawed_at, stale)
            assert [type(a) for a in out] == [CatchUp]  # nothing written from memory
        else:
            assert [type(a) for a in core.step(thawed_at, finder)] == [CatchUp]
            assert core.step(thawed_at + 1, stale) == []
        assert core.step_many(thawed_at + 2, [stale]) == []  # (a batch likewise)
        fresh = Replayed(0, log.replay(world), at_end=True, ends_at=ends_at)
        out = core.step(thawed_at + 3, fresh)
        assert any(isinstance(a, Write) and a.kind == "heartbeat" for a in out), finder


def test_without_fresh_ends_an_answer_from_before_a_stall_ends_it():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo"), [world], _without=frozenset({"fresh-ends"}))
    land_all(core, world, log, 0, start(core, world, log))
    stale = Replayed(0, log.replay(world), at_end=True, ends_at=HB)
    out = core.step(4 * HB, stale)
    assert CatchUp() in out
    assert any(isinstance(a, Write) and a.kind == "heartbeat" for a in out)  # from memory


def test_without_the_stall_rule_a_thawed_member_heartbeats_what_it_remembers():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo"), [world], _without=frozenset({"stall"}))
    out = land_all(core, world, log, 0, start(core, world, log))
    fetch = next(a for a in out + core.step(1, Tick()) if isinstance(a, Fetch))
    out = core.step(3 * HB, Fetched(fetch.token, "t", 0, ((0, b"a"), (1, b"b"))))
    out += core.step(3 * HB, Poll(100))
    assert any(isinstance(a, Write) and a.kind == "heartbeat" for a in out)


def test_a_claim_whose_answer_was_lost_is_adopted_with_a_lapsed_lease():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", claim_interval_ms=50), [world])
    out = core.step(0, Replayed(0, -1, at_end=True))
    # its announcement lands (until then it cannot tell that it is alone), then it claims
    out = _land_announcements(core, world, log, 0, out)
    claim = next(a for a in out if isinstance(a, Write) and a.kind == "claim")
    log.append(0, claim.key, claim.value)  # it landed ...
    assert not core.step(1, WriteFailed(claim.token))  # ... but reported failure
    out = core.step(60, Replayed(0, log.replay(world), at_end=True))
    assert core.held() == [("t", 0)]
    assert not core.may_hand_out("t", 0, 60)  # we do not know when the log renewed it
    land_all(core, world, log, 61, out + core.step(61, Tick()))  # its heartbeat is accepted
    assert core.may_hand_out("t", 0, 62)


def test_the_core_imports_no_clock_threads_randomness_or_io():
    import ast
    import pathlib

    import logmarshal.core

    banned = {"time", "threading", "random", "socket", "os", "asyncio", "storage", "datetime"}
    for path in pathlib.Path(logmarshal.core.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"


def test_amo_graceful_close_gives_back_a_reservation_never_handed_out():
    """An AMO member closing with a reserved batch whose confirming heartbeat got no verdict
    once released at its reservation, so the batch was lost to a clean close. The
    release now carries what was handed out, and the log gives the rest back (rule 6)."""
    world, log = WorldState(), Log()
    core = MemberCore(options(), [world])
    out = start(core, world, log)
    out = land_all(core, world, log, 1, out + core.step(1, Tick()))
    fetch = next(a for a in out if isinstance(a, Fetch))
    out = core.step(2, Fetched(fetch.token, "t", 0, tuple((o, b"x") for o in range(8))))
    out += core.step(2, Poll(5))  # a poll asks: the window (all 8 buffered) is reserved
    [reserve] = [a for a in out if isinstance(a, Write) and a.kind == "reserve"]
    [confirm] = [a for a in out if isinstance(a, Write) and a.kind == "heartbeat"]
    off = log.append(3, reserve.key, reserve.value)
    out = core.step(3, Written(reserve.token, off))
    out += core.step(3, Replayed(0, log.replay(world), at_end=True))  # reserved 0..7
    assert world.partition_state("g", "t", 0).claimed_through == 7
    out = core.step(4, WriteFailed(confirm.token))  # it never landed: no verdict
    assert not any(isinstance(a, HandOut) for a in out + core.step(4, Poll(100)))
    out = land_all(core, world, log, 5, core.step(5, Close()))
    assert core.closed
    state = world.partition_state("g", "t", 0)
    assert state.holder is None and state.claimed_through == -1
    assert world.resume_offset("g", "t", 0) == 0  # the successor hands out 0..7: not lost


# -- claim passes: decided on the core, no sleeps -------------------------------------------------


def _claims(actions):
    return [a for a in actions if isinstance(a, Write) and a.kind == "claim"]


def test_a_partition_given_up_is_left_alone_for_the_cooldown():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", claim_interval_ms=10, reclaim_cooldown_ms=500), [world])
    land_all(core, world, log, 0, start(core, world, log))
    assert core.assigned() == [("t", 0)]
    land_all(core, world, log, 100, core.give_up(100, "t", 0, "test"))  # released in the log
    assert world.holder("g", "t", 0) is None and core.held() == []
    for now in range(110, 600, 10):  # claimable all along, but cooling down
        assert _claims(core.step(now, Tick())) == [], now
    assert len(_claims(core.step(600, Tick()))) == 1


def test_no_claim_is_tried_while_the_group_is_paused():
    from rationalizer import ReleaseGroup

    world, log = WorldState(), Log()
    log.append(
        0,
        *encode(ReleaseGroup(client_id="adm", instance_id="x", group_id="g", msg_expire_time=1000)),
    )
    core = MemberCore(options(mode="alo", claim_interval_ms=10), [world])
    out = core.step(0, Replayed(0, log.replay(world), at_end=True))
    for now in range(0, 1000, 10):
        assert _claims(out) == [], now
        out = _land_announcements(core, world, log, now, core.step(now, Tick()))
    assert len(_claims(core.step(1001, Tick()))) == 1  # from the end of the pause


def _land_announcements(core, world, log, now, actions):
    """Land the member's announcements only (so the log's clock moves as it does in a
    running group); return every other action."""
    out = []
    for a in actions:
        if isinstance(a, Write) and a.kind == "announce":
            out += core.step(now, Written(a.token, log.append(now, a.key, a.value)))
        else:
            out.append(a)
    return out + core.step(now, Replayed(0, log.replay(world), at_end=True))


def test_a_fresh_holders_partition_is_claimed_only_once_stale():
    world, log = WorldState(), Log()
    other = MemberCore(options(mode="alo", client_id="c2", instance_id="j1"), [world])
    land_all(other, world, log, 0, start(other, world, log))  # c2 holds it, beat at 0
    core = MemberCore(options(mode="alo", claim_interval_ms=10), [world])
    out = core.step(0, Replayed(0, log.replay(world), at_end=True))
    for now in range(0, 2 * HB + 1, 10):
        assert _claims(out) == [], now  # fresh, then unknown: not claimable
        out = _land_announcements(core, world, log, now, core.step(now, Tick()))
    # stale by the log's clock: claimed once our replay passed 2·HB (c2 joined before us, so
    # we count it while its membership is live, which lapses with its claim)
    claims = []
    for now in range(2 * HB + 1, 2 * HB + HB // 2, 5):
        claims += _claims(out)
        out = _land_announcements(core, world, log, now, core.step(now, Tick()))
    assert len(claims + _claims(out)) == 1


def test_an_idle_members_repeated_heartbeat_is_not_built_again_and_a_moved_one_is(monkeypatch):
    """An idle member's heartbeat passes carry the same entries: the MemberHeartbeat of a
    coordination partition is built, validated and encoded once and its bytes written
    again (docs/performance.md, "Idle member"). A partition whose position moved makes the
    next pass's record anew, carrying the new position."""
    import logmarshal.core.handout as handout_module
    from rationalizer import MemberHeartbeat, decode

    built: list[MemberHeartbeat] = []

    def counted(**fields):
        msg = MemberHeartbeat(**fields)
        built.append(msg)
        return msg

    monkeypatch.setattr(handout_module, "MemberHeartbeat", counted)
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", topics=(("t", 4),), rebalance="none"), [world])
    out = start(core, world, log)
    for now in range(1, HB + 1, 5):  # claims land, each partition's first heartbeat
        out = land_all(core, world, log, now, out + core.step(now, Tick()))
    assert sorted(core.held()) == [("t", p) for p in range(4)]

    def passes(since: int, until: int) -> list[MemberHeartbeat]:
        nonlocal out
        first = len(log.records)
        for now in range(since, until, 5):
            out = land_all(core, world, log, now, out + core.step(now, Tick()))
        records = [decode(key, value) for _, key, value in log.records[first:]]
        return [m for m in records if isinstance(m, MemberHeartbeat)]

    passes(HB + 1, 2 * HB)  # (settled: every partition's position is its last one)
    built.clear()
    idle = passes(2 * HB, 6 * HB)
    assert len(idle) >= 5 and len({m.entries for m in idle}) == 1  # the same record, again
    assert built == []  # ... and never built again
    fetch = next(a for a in out if isinstance(a, Fetch) and a.partition == 2)
    core.step(6 * HB, Fetched(fetch.token, "t", 2, tuple((o, b"x") for o in range(3))))
    handed = [a for a in core.step(6 * HB, Poll(100)) if isinstance(a, HandOut)]
    assert [o for h in handed for o, _ in h.records] == [0, 1, 2]
    core.commit("t", 2, [0, 1, 2])
    moved = passes(6 * HB, 8 * HB)
    positions = {(e[0], e[1]): e[3] for m in moved for e in m.entries}
    assert positions[("t", 2)] == 2  # the new position is written ...
    assert len(built) == 1 and built[0].entries == moved[-1].entries  # ... in a record built once
    assert {(e[0], e[1]): e[3] for e in built[0].entries} == positions


def test_an_alo_heartbeats_answer_puts_its_partitions_back_without_serving_them(monkeypatch):
    """An ALO member's MemberHeartbeat answered: its partitions go back on the heap of due
    heartbeats as they are, without act_held (which would only put them back): one
    act_held per held partition and heartbeat, not two (an idle member's largest cost per
    partition; docs/performance.md, "Idle member"). Every partition goes on heartbeating."""
    import logmarshal.core.member as member_module
    from rationalizer import MemberHeartbeat, decode

    served: list[tuple[str, int]] = []
    real = member_module.act_held

    def counted(st, now, held, out):
        served.append(held.key)
        return real(st, now, held, out)

    monkeypatch.setattr(member_module, "act_held", counted)
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", topics=(("t", 8),), rebalance="none"), [world])
    out = start(core, world, log)
    for now in range(1, HB + 1, 5):  # claims land, each partition's first heartbeat
        out = land_all(core, world, log, now, out + core.step(now, Tick()))
    assert sorted(core.held()) == [("t", p) for p in range(8)]
    served.clear()
    first = len(log.records)
    for now in range(HB + 1, 6 * HB, 5):
        out = land_all(core, world, log, now, out + core.step(now, Tick()))
    beats = [decode(key, value) for _, key, value in log.records[first:]]
    entries = [(e[0], e[1]) for m in beats if isinstance(m, MemberHeartbeat) for e in m.entries]
    assert sorted(set(entries)) == [("t", p) for p in range(8)]  # all beat throughout
    assert len(entries) >= 8 * 6  # (a pass every 0.325..0.65 HB, over 5 HB)
    assert sorted(core.held()) == [("t", p) for p in range(8)]
    # each heartbeat served once (as it is sent), not again at its answer
    assert len(served) <= len(entries) + 8, (len(served), len(entries))
