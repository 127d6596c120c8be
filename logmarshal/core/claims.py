"""Bidding for partitions: claim passes, restart recovery, orphaned claims, release_if_behind.

A member claims only what the replay says is claimable at its estimate of log time, starting
at a point given by its client_id so members do not all race for the same partition; the log
decides who won (docs/architecture.md, "Consumer algorithms": claim, restart recovery).

Restart recovery: the resume position must be read from the replay *after* the takeover
heartbeat's verdict, not before it is sent: until the takeover lands the old instance is the
fresh holder and may still reserve (AMO ClaimingMessages) and hand out a batch. Everything it
did before the takeover precedes the takeover in log order, so the replay at the takeover's
verdict includes it; everything after is rejected as fenced (docs/protocol-notes.md; the
simulator's ``--without-restart-fix`` shows offsets handed out twice when the position is
read before: docs/simulation.md).

A restart takeover the log refuses because the earlier instance, still alive, moved the
position after we read it (PROTOCOL.md, property a) is tried again with the position the
replay shows at the refusal (:func:`retake`): at once, the refusal being the moment right
after that instance's write, and then at most once per HB, while its claim is fresh and for
at most 2·HB from the first refusal (never past the claim's lapse as the refusal showed it).
Then the partition waits, as before, until that claim lapses or is released and is claimed
the ordinary way. Each try is an ordinary takeover: nothing is handed out before one is
accepted, and its resume position is read after its verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet

import mmh3

from rationalizer import (
    FRESH,
    Claim,
    ClaimingPartition,
    Heartbeat,
    HeartbeatingTask,
    MemberHeartbeat,
    Reason,
    Verdict,
    WorldState,
)
from rationalizer._rules import stale_from

from .actions import Action
from .held import Held
from .holding import adopt, give_up
from .records import heartbeat_record, ids, write
from .state import (
    Key,
    MemberState,
    Pending,
    Retake,
    busy,
    cooling,
    cp_of,
    group_position,
    held_here,
    me,
    not_to_claim,
    releasing,
    subscribed,
    tenure_of,
    wanted,
    world_of,
)

__all__ = [
    "adopt_orphans",
    "behind",
    "candidates",
    "claim",
    "claim_pass",
    "claim_topics",
    "group_paused",
    "next_retake",
    "recover",
    "released_nearby",
    "resume_after_takeover",
    "resume_task_after_takeover",
    "retake",
    "retake_refused",
    "stale_at",
    "takeover_candidates",
]

log = logging.getLogger(__name__)


# -- what the replay says is claimable -----------------------------------------------------------


def stale_at(world: WorldState, group: str, key: tuple[str, int]) -> int | None:
    """Log time from which our (version 5) claim of ``key`` can win: its holder is stale and
    any lease the log took away early is over (PROTOCOL.md, property e); None if nothing
    stands in the way, or it is unknown."""
    state = world.partition_state(group, key[0], key[1])
    if state is None:
        return None
    at = state.fenced_until
    if state.holder is not None and state.heartbeat_interval_ms:
        stale = stale_from(state.last_beat, state.heartbeat_interval_ms)
        at = stale if at is None else max(at, stale)
    return at


def candidates(st: MemberState, keys: list[Key], now: int, wall: int) -> list[Key]:
    """Those of ``keys`` claimable now, in an order that starts at a point given by our
    client_id (so members do not all race for the same one); schedules the next pass for
    when the soonest other one goes stale, so a dead member's partitions are taken as soon
    as the log allows."""
    group = st.options.group_id
    out = []
    soonest: int | None = None
    for key in keys:
        if cooling(st, key, now):
            continue
        world = world_of(st, *key)
        if world.claimable(group, key[0], key[1], wall):
            out.append(key)
            continue
        at = stale_at(world, group, key)
        if at is not None:
            soonest = at if soonest is None else min(soonest, at)
    if soonest is not None:
        st.next_claim = min(st.next_claim, now + max(0, soonest - wall))
    if out:
        start = mmh3.hash(st.options.client_id.encode(), 0, signed=False) % len(out)
        out = out[start:] + out[:start]
    return out


def group_paused(st: MemberState, now: int, wall: int) -> bool:
    """Inside a ReleaseGroup window (by our estimate of log time)? Try at its end."""
    ends = [w.paused_until(st.options.group_id) for w in st.worlds]
    until = max((e for e in ends if e is not None), default=None)
    if until is not None and wall < until:
        st.next_claim = min(st.next_claim, now + (until - wall) + 1)
        return True
    return False


# -- claim passes --------------------------------------------------------------------------------


def claim_version(protocol_version: int) -> int:
    """The ClaimingPartition layout a member capped at ``protocol_version`` writes: 6 names
    its tenure, 5 carries the lease rule (property e), 1 is what version 4 and before read."""
    if protocol_version >= 6:
        return 6
    return 5 if protocol_version == 5 else 1


def claim(st: MemberState, now: int, wall: int, key: Key, out: list[Action]) -> None:
    """Write a ClaimingPartition for ``key``."""
    topic, part = key
    world = world_of(st, topic, part)
    previous = world.holder(st.options.group_id, topic, part)
    how = "failover" if previous is not None and previous != me(st) else "claimed"
    msg = ClaimingPartition(
        **ids(st),
        topic=topic,
        partition=part,
        heartbeat_interval_ms=st.options.heartbeat_interval_ms,
        version=claim_version(st.options.protocol_version),
    )
    write(st, out, Pending("claim", topic, part, cp_of(st, topic, part), now, how=how), msg)


def claim_pass(st: MemberState, now: int, wall: int, take_all: bool, out: list[Action]) -> None:
    """Bid for claimable partitions: one at a time, or all we may (greedy, or ``take_all``
    after a release nearby)."""
    room = wanted(st)
    if room <= 0 or group_paused(st, now, wall):
        return
    in_flight = sum(p.kind == "claim" for p in st.pending.values())
    limit = room if st.options.greedy or take_all else max(0, 1 - in_flight)
    if limit <= 0:
        return
    skip = not_to_claim(st)
    keys = [(t, p) for t, n in st.topics for p in range(n) if (t, p) not in skip]
    for key in candidates(st, keys, now, wall)[:limit]:
        claim(st, now, wall, key, out)


def claim_topics(st: MemberState, now: int, wall: int, out: list[Action]) -> None:
    """entire_topic: win partition 0, then claim the rest of the topic; give up the rest of
    a topic whose partition 0 is no longer ours."""
    held_zero = {t for t, p in st.held if p == 0}
    for held in list(st.held.values()):
        if held.topic not in held_zero:
            give_up(st, now, held, "partition 0 of its topic is no longer ours", out)
    if group_paused(st, now, wall):
        return
    skip = not_to_claim(st)
    room = wanted(st)
    if room > 0 and not any(p.kind == "claim" and p.partition == 0 for p in st.pending.values()):
        zeros = [(t, 0) for t, n in st.topics if n > 0 and (t, 0) not in skip]
        for key in candidates(st, zeros, now, wall)[:room]:
            claim(st, now, wall, key, out)
    counts = dict(st.topics)
    for topic in sorted(held_zero):
        rest = [(topic, p) for p in range(1, counts.get(topic, 0)) if (topic, p) not in skip]
        for key in candidates(st, rest, now, wall):
            claim(st, now, wall, key, out)


def released_nearby(st: MemberState, now: int, wall: int) -> bool:
    """Has someone released a partition we could take? Then a pass runs at once and takes
    all of them: a clean handoff costs one replay round trip, not a pass."""
    if st.options.claim_entire_topic or wanted(st) == 0:
        return False
    epochs = tuple(w.ownership_epoch for w in st.worlds)
    if epochs == st.released_epochs:
        return False  # no holder changed since we last looked: nothing newly released
    st.released_epochs = epochs
    group = st.options.group_id
    skip = busy(st)
    topics = subscribed(st)
    for world in st.worlds:
        for state in world.partitions(group):
            key = (state.topic, state.partition)
            if (
                state.holder is None
                and state.topic in topics
                and key not in skip
                and not cooling(st, key, now)
                and world.claimable(group, state.topic, state.partition, wall)
            ):
                return True
    return False


# -- restart recovery and orphans ----------------------------------------------------------------


def takeover_candidates(
    world: WorldState, group: str, client_id: str, instance_id: str, now_ms: int
) -> list[Claim]:
    """Claims of our client_id held by another instance that are still fresh at ``now_ms``
    (a stale one is claimed the ordinary way)."""
    return [
        c
        for c in world.claims_of(group, client_id)
        if c.instance_id != instance_id
        and world.freshness(group, c.topic, c.partition, now_ms) == FRESH
    ]


def resume_after_takeover(
    world: WorldState, group: str, topic: str, partition: int, read_before: int, *, reread: bool
) -> int:
    """Where the new instance resumes once its takeover was accepted.

    ``read_before`` is the resume offset read when the takeover was sent. ``reread=False``
    reproduces the restart bug the module docstring describes (for the simulator's
    experiment only).
    """
    if not reread:
        return read_before
    now = world.resume_offset(group, topic, partition)
    return read_before if now is None else max(now, read_before)


def resume_task_after_takeover(
    world: WorldState,
    group: str,
    topic: str,
    partition: int,
    read_before: dict[str, int],
    *,
    reread: bool,
) -> dict[str, int]:
    """:func:`resume_after_takeover` of a task: per source, the later of the two readings."""
    if not reread:
        return dict(read_before)
    now = world.resume_positions(group, topic, partition) or {}
    return {t: max(read_before.get(t, o), o) for t, o in {**read_before, **now}.items()}


def recover(st: MemberState, wall: int, now: int, taken: set[Key], out: list[Action]) -> None:
    """Restart recovery: heartbeat our client_id's fresh claims with this instance."""
    o = st.options
    topics = subscribed(st)
    for world_index, world in enumerate(st.worlds):
        for c in takeover_candidates(world, o.group_id, o.client_id, o.instance_id, wall):
            key = (c.topic, c.partition)
            if c.topic not in topics or key in taken or wanted(st) <= 0:
                continue
            if key not in st.halted.get(world_index, (key,)):
                continue  # a halted coordination partition's world (core.rewind)
            position = group_position(st, world, key)
            if position is None:
                continue  # no position to carry: the claim lapses, then anyone claims it
            take_over(st, now, key, world_index, position, (c.client_id, c.instance_id), out)
            taken.add(key)


def take_over(
    st: MemberState,
    now: int,
    key: Key,
    cp: int,
    position: int | tuple[tuple[str, int], ...],
    previous: tuple[str, str],
    out: list[Action],
    until: int | None = None,
) -> None:
    """Write the restart takeover of ``key`` from ``previous``: a heartbeat of ours carrying
    the position the replay shows (``until``: a try again, see :func:`retake`). Capped at 7
    or more, the takeover of a named tenure (no task) is a MemberHeartbeat of that one entry
    naming it (property h), so that if it lands late, in a later tenure (even one of ours),
    it is NOT_HOLDER instead of that tenure's heartbeat; a task's, capped at 8 or more, is a
    version 8 HeartbeatingTask naming it (property i); else a version 1 (3) heartbeat."""
    state = st.worlds[cp].partition_state(st.options.group_id, *key)
    tenure = None
    if state is not None and state.holder == previous:
        tenure = state.tenure  # the tenure it ends, as the replay shows it (None: unnamed)
    beat = heartbeat_record(st, key, position, tenure)  # (a task's names it at cap 8)
    msg: Heartbeat | HeartbeatingTask | MemberHeartbeat = beat
    if st.options.protocol_version >= 7 and isinstance(position, int) and tenure is not None:
        msg = MemberHeartbeat(
            **ids(st),
            heartbeat_interval_ms=st.options.heartbeat_interval_ms,
            entries=((key[0], key[1], tenure, position),),
        )
    vec = position if isinstance(position, tuple) else ()
    p = Pending(
        "takeover",
        key[0],
        key[1],
        cp,
        now,
        beat.last_offset,
        positions=vec,
        previous=previous,
        until=until,
    )
    write(st, out, p, msg)


def retake_refused(st: MemberState, now: int, p: Pending, v: Verdict) -> None:
    """Our restart takeover ``p`` was refused: if the instance it takes from still holds the
    partition, fresh (it moved the position after we read it: NOT_HOLDER, property a), try
    again (:func:`retake`): at once after a first refusal, else an HB after the last try;
    within 2·HB of the first refusal and never past the claim's lapse as the replay showed
    it then."""
    log.info(
        "%s: takeover of %s/%d from %s refused (%s)",
        me(st),
        p.topic,
        p.partition,
        p.previous,
        v.reason.value if v.reason is not None else "?",
    )
    if not st.retaking or p.previous is None or v.reason is not Reason.NOT_HOLDER:
        return
    key = (p.topic, p.partition)
    group = st.options.group_id
    world = st.worlds[p.cp]
    state = world.partition_state(group, *key)
    if (
        state is None
        or state.holder != p.previous
        or not state.heartbeat_interval_ms
        or world.freshness(group, *key, world.now) != FRESH
    ):
        return  # released, claimed by another, or no longer fresh: claimed as before
    hb = st.options.heartbeat_interval_ms
    if p.until is None:
        life = stale_from(state.last_beat, state.heartbeat_interval_ms) - world.now
        until, at = now + max(0, min(2 * hb, life)), now
    else:
        until, at = p.until, max(now, p.sent + hb)
    if at <= until:
        st.retakes[key] = Retake(p.previous, at, until)


def retake(st: MemberState, wall: int, now: int, taken: set[Key], out: list[Action]) -> None:
    """Restart recovery, again: the refused takeovers (:func:`retake_refused`) whose time has
    come, each with the position the replay shows now, while the earlier instance still
    holds the partition and its claim is fresh; any other is dropped (the partition is then
    claimed the ordinary way once that claim lapses or is released)."""
    if not st.retakes:
        return
    group = st.options.group_id
    topics = subscribed(st)
    for key, r in list(st.retakes.items()):
        if now < r.at:
            continue
        del st.retakes[key]
        cp = cp_of(st, *key)
        world = st.worlds[cp]
        if (
            key in taken
            or key[0] not in topics
            or wanted(st) <= 0
            or key not in st.halted.get(cp, (key,))
            or world.holder(group, *key) != r.previous
            or world.freshness(group, *key, wall) != FRESH
        ):
            continue
        position = group_position(st, world, key)
        if position is None:
            continue
        log.info("%s: %s/%d: taking it over from %s again", me(st), *key, r.previous)
        take_over(st, now, key, cp, position, r.previous, out, r.until)
        taken.add(key)


def next_retake(st: MemberState) -> int | None:
    """When :func:`retake` next has a try to make (clock ms), if ever."""
    return min((r.at for r in st.retakes.values()), default=None)


def adopt_orphans(
    st: MemberState,
    now: int,
    taken: set[Key],
    out: list[Action],
    keep: AbstractSet[Key] | None = None,
) -> None:
    """Claims the replay says this instance holds but we do not track (an accepted claim
    whose answer was lost): take them up; beyond max_claims or outside our target (``keep``),
    give them back."""
    topics = subscribed(st)
    giving_back = releasing(st)
    given_up = st.releases.given_up
    if given_up:
        _forget_ended(st, given_up)
    for cp, world in enumerate(st.worlds):
        trusted = st.halted.get(cp)
        # (those taken in an earlier world of this pass are in ``taken`` already)
        for key in sorted(held_here(st, cp) - taken):
            if trusted is not None and key not in trusted:
                continue  # a halted coordination partition's world (core.rewind)
            if key[0] not in topics or key in giving_back or cooling(st, key, now):
                continue  # one we are giving back: the replay has not shown it yet
            if key in given_up and st.keep_given_up:
                # the tenure whose release we gave up: an attempt of it may land yet, and
                # it names this tenure, so it would end it under us (AMO: below what we
                # handed out since, and the next holder hands that out again). It lapses,
                # and is claimed anew (a new tenure, which the late release does not name)
                continue
            taken.add(key)
            if wanted(st) <= 0 or (keep is not None and key not in keep):
                # the pass went on claiming while this verdict was unknown: give it back at
                # the group's position (none: it lapses, and "no position" stays so)
                position = group_position(st, world, key)
                if position is not None and key not in st.releases.pending:
                    st.releases.add(
                        key, position, cp_of(st, *key), tenure=tenure_of(world, st, key)
                    )
                continue
            # we do not know when we sent what the log accepted: start with a lapsed lease,
            # so nothing is handed out before our next heartbeat is accepted
            adopt(st, *key, now - st.options.fence_after_ms, None, "recovered", out)


def _forget_ended(st: MemberState, given_up: dict[Key, int | None]) -> None:
    """Forget given-up releases whose tenure the replay shows ended (another holder, none,
    or a new tenure of ours): a late attempt of one can no longer end anything."""
    group, mine = st.options.group_id, me(st)
    for key, tenure in list(given_up.items()):
        state = world_of(st, *key).partition_state(group, *key)
        if state is None or state.holder != mine or state.tenure != tenure or key in st.held:
            del given_up[key]


# -- release_if_behind ---------------------------------------------------------------------------


def behind(st: MemberState, now: int, ends: dict[Key, int], out: list[Action]) -> None:
    """release_if_behind: give up the partition furthest behind, if it is not catching up
    and someone else is alive to take it (never release into the void: zorkian/marshal#41)."""
    limit = st.options.release_if_behind
    if limit is None or st.options.claim_entire_topic or st.closing or st.fenced:
        return
    lagging: list[tuple[int, Held]] = []
    for key, end in ends.items():
        held = st.held.get(key)
        if held is None or key in st.paused:
            continue
        lag = end - held.handed_through - 1
        previous, held.lag_sample = held.lag_sample, lag
        if lag > limit and previous is not None and lag >= previous:
            lagging.append((lag, held))
    if not lagging or not other_fresh_member(st, now):
        return
    lag, held = max(lagging, key=lambda item: item[0])
    give_up(st, now, held, f"{lag} messages behind and not catching up", out)


def other_fresh_member(st: MemberState, wall: int) -> bool:
    """Does another client hold a partition of the group, fresh at ``wall``?"""
    group, mine = st.options.group_id, st.options.client_id
    return any(
        state.holder is not None
        and state.holder[0] != mine
        and world.freshness(group, state.topic, state.partition, wall) == FRESH
        for world in st.worlds
        for state in world.partitions(group)
    )
