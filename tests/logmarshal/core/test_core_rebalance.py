"""The core's rebalancing decisions, step by step on a hand-moved clock (docs/rebalancing.md): what an
over-share holder gives up and when, what a newcomer claims, and what does not count yet."""

from __future__ import annotations

from logmarshal.core import (
    Fetch,
    Fetched,
    HandOut,
    MemberCore,
    Poll,
    Replayed,
    Revoke,
    Tick,
    Write,
    WriteFailed,
)
from rationalizer import AnnouncingMember, LeavingGroup, WorldState, decode, encode
from rationalizer._membership import settle_ms

from .test_core import HB, Log, land_all, options


def other(client: str, t: int, log: Log, *, parts: int = 4) -> None:
    """Another member's announcement, written straight into the log at ``t``."""
    msg = AnnouncingMember(
        client_id=client,
        instance_id="x",
        group_id="g",
        topics=(("t", parts),),
        heartbeat_interval_ms=HB,
    )
    log.append(t, *encode(msg))


def settled_member(client: str, t: int, log: Log, parts: int = 4) -> int:
    """``client`` announces twice, ``settle_ms`` apart: it counts from the second; returns
    that time."""
    other(client, t, log, parts=parts)
    other(client, t + settle_ms(HB), log, parts=parts)
    return t + settle_ms(HB)


def alo_core(world, **kw) -> MemberCore:
    return MemberCore(options(mode="alo", topics=(("t", 4),), **kw), [world])


def running(core, world, log, now=0, fetches=None):
    """Start ``core`` (it claims everything it can) and return what it holds; the fetches it
    asked for go to ``fetches`` (partition -> token)."""
    out = land_all(
        core, world, log, now, core.step(now, Replayed(0, log.replay(world), at_end=True))
    )
    out += land_all(core, world, log, now + 1, core.step(now + 1, Tick()))
    if fetches is not None:
        fetches.update({a.partition: a.token for a in out if isinstance(a, Fetch)})
    return core.held()


def hand_out(core, world, log, now, per_partition=3) -> dict[int, list[int]]:
    """Start ``core``; each partition's fetch is answered with ``per_partition`` records and
    polls hand them out (nothing committed)."""
    fetches: dict[int, int] = {}
    running(core, world, log, fetches=fetches)
    for p, token in fetches.items():
        core.step(now, Fetched(token, "t", p, tuple((o, b"") for o in range(per_partition))))
    handed: dict[int, list[int]] = {}
    for _ in fetches:
        for a in core.step(now, Poll(10)):
            if isinstance(a, HandOut):
                handed[a.partition] = [o for o, _ in a.records]
    return handed


def revoked(actions) -> list[tuple[str, int]]:
    return sorted((a.topic, a.partition) for a in actions if isinstance(a, Revoke) and not a.lost)


def releases(actions) -> list:
    return [decode(a.key, a.value) for a in actions if isinstance(a, Write) and a.kind == "release"]


def test_an_over_share_holder_releases_exactly_what_moves_once_the_newcomer_counts():
    world, log = WorldState(), Log()
    core = alo_core(world)
    assert running(core, world, log) == [("t", p) for p in range(4)]
    other("b", 10, log)  # seen once: does not count yet
    out = core.step(11, Replayed(0, log.replay(world), at_end=True))
    assert revoked(out) == [] and core.held() == [("t", p) for p in range(4)]
    t = settled_member("b", 10, log)
    out = core.step(t + 1, Replayed(0, log.replay(world), at_end=True))
    moved = revoked(out)
    out += core.step(t + 1, Tick())  # the releases are written on the next pass
    assert len(moved) == 2 and set(moved) | set(core.held()) == {("t", p) for p in range(4)}
    assert sorted((m.topic, m.partition) for m in releases(out)) == moved
    assert all(m.last_offset == -1 for m in releases(out))  # nothing handed out: exact
    # the target is advice, never a cooldown: when b leaves they are claimed back at once
    land_all(core, world, log, t + 2, out)
    log.append(t + 3, *encode(LeavingGroup(client_id="b", instance_id="x", group_id="g")))
    out = core.step(t + 4, Replayed(0, log.replay(world), at_end=True))
    claims = [decode(a.key, a.value) for a in out if isinstance(a, Write) and a.kind == "claim"]
    assert sorted((c.topic, c.partition) for c in claims) == moved


def test_alo_waits_for_the_commits_of_what_it_handed_out_before_it_moves_a_partition():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", topics=(("t", 2),)), [world])
    handed = hand_out(core, world, log, 4)
    assert sorted(handed) == [0, 1]  # nothing committed yet
    t = settled_member("b", 6, log, parts=2)
    out = core.step(t + 1, Replayed(0, log.replay(world), at_end=True))
    assert revoked(out) == []  # one of them moves, but its hand-outs are not committed
    moving = next(iter({0, 1} - {p for _, p in core.target(t + 1)}))
    assert not any(
        isinstance(a, HandOut) and a.partition == moving for a in core.step(t + 2, Poll(10))
    )  # and nothing more of it is handed out meanwhile
    core.commit("t", moving, handed[moving])
    out = core.step(t + 3, Tick())
    assert revoked(out) == [("t", moving)]
    out += core.step(t + 3, Tick())
    (release,) = releases(out)
    assert release.last_offset == handed[moving][-1]  # the next holder repeats nothing


def test_alo_moves_anyway_after_drain_ms():
    world, log = WorldState(), Log()
    core = MemberCore(options(mode="alo", topics=(("t", 2),)), [world])
    hand_out(core, world, log, 4, per_partition=2)
    t = settled_member("b", 6, log, parts=2)
    out = core.step(t + 1, Replayed(0, log.replay(world), at_end=True))
    assert revoked(out) == []
    out = core.step(t + 1 + core.options.drain_ms, Tick())
    assert len(revoked(out)) == 1
    out += core.step(t + 1 + core.options.drain_ms, Tick())
    (release,) = releases(out)
    assert release.last_offset == -1  # what was not committed is handed out again (ALO)


def test_none_never_moves_anything():
    world, log = WorldState(), Log()
    core = alo_core(world, rebalance="none", greedy=True)
    assert len(running(core, world, log)) == 4
    t = settled_member("b", 10, log)
    out = core.step(t + 1, Replayed(0, log.replay(world), at_end=True))
    assert revoked(out) == [] and len(core.held()) == 4
    out = land_all(core, world, log, t + 2, out)
    out += core.step(t + 2 + core.options.announce_every_ms, Tick())
    assert revoked(out) == [] and len(core.held()) == 4
    assert any(isinstance(a, Write) and a.kind == "announce" for a in out)  # for the tools


def test_a_partition_is_not_claimed_back_while_its_release_is_unanswered():
    """Seed 852: a release whose answer was lost was retried after the member had claimed
    the partition back; the late release (ours too) moved the new claim's position back."""
    world, log = WorldState(), Log()
    core = alo_core(world)
    running(core, world, log)
    t = settled_member("b", 10, log)
    out = core.step(t + 1, Replayed(0, log.replay(world), at_end=True))
    moved = revoked(out)
    out = core.step(t + 1, Tick())
    lost = [a for a in out if isinstance(a, Write) and a.kind == "release"]
    assert len(lost) == 2
    for w in lost:  # the answers are lost; the releases did not land
        core.step(t + 2, WriteFailed(w.token))
    # b leaves when our own claims on them have gone stale (nothing renews them now):
    # the target gives them back and the log would accept our claims
    late = t + 3 * HB
    log.append(late, *encode(LeavingGroup(client_id="b", instance_id="x", group_id="g")))
    out = core.step(late, Replayed(0, log.replay(world), at_end=True))
    assert all(world.claimable("g", *key, late) for key in moved)
    retried = [a for a in out if isinstance(a, Write) and a.kind == "release"]
    claims = [a for a in out if isinstance(a, Write) and a.kind == "claim"]
    assert len(retried) == 2  # the releases are written again first ...
    assert claims == []  # ... and nothing is claimed back before they are answered
    out = land_all(core, world, log, late + 1, out)
    out += land_all(core, world, log, late + 2, core.step(late + 2, Tick()))
    assert core.held() == [("t", p) for p in range(4)]
