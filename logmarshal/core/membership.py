"""Membership and the target: announcing ourselves, our share of the group, rebalancing moves.

Members announce themselves in the log even while they hold nothing; every member derives
the same target from the same replay and converges incrementally: an over-share holder
releases exactly what moves, an under-share member claims it (docs/architecture.md, "Membership and
rebalancing"; PROTOCOL.md "Membership (version 2)"; docs/rebalancing.md). The target is only
advice: claims and fencing still decide ownership.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from rationalizer import ANNOUNCED_VERSION, AnnouncingMember
from rationalizer._membership import Member, settle_ms
from rationalizer._world import NO_TIME

from . import assignment
from .actions import Action
from .claims import adopt_orphans, candidates, claim, group_paused
from .held import Held
from .holding import give_up
from .options import UNLIMITED_CLAIMS
from .records import ids, write
from .state import Key, MemberState, Pending, busy, not_to_claim, wanted, world_of

__all__ = ["announce_member", "move_away", "rebalance", "target"]


def announcement(st: MemberState) -> AnnouncingMember:
    """What we announce: our subscription, weight, cap and version."""
    o = st.options
    return AnnouncingMember(
        **ids(st),
        topics=tuple(sorted(st.topics)),
        heartbeat_interval_ms=o.heartbeat_interval_ms,
        weight=o.weight,
        max_claims=0 if o.max_claims >= UNLIMITED_CLAIMS else o.max_claims,
        entire_topic=o.claim_entire_topic,
        version=ANNOUNCED_VERSION,
    )


def announce_member(st: MemberState, now: int, out: list[Action]) -> None:
    """Keep our membership fresh (every third of HB) and say at once what changed. The
    schedule does not wait for the last announcement's verdict: a replay that lags under load
    must not let our membership lapse (only a fence in its answer matters)."""
    mark = st.halt_marks.get(st.home) if st.home in st.halted else None
    if mark is not None and mark[0] != "gap":
        return  # our membership partition went back: its replay is frozen (core.rewind)
    o = st.options
    # what :func:`announcement` would carry, without building (and validating) the record
    # at every step: only when it is written
    said = (
        tuple(sorted(st.topics)),
        o.weight,
        0 if o.max_claims >= UNLIMITED_CLAIMS else o.max_claims,
    )
    if now < st.next_announce and (st.announced == said or st.announcing is not None):
        return
    msg = announcement(st)
    st.announced = (msg.topics, msg.weight, msg.max_claims)
    st.next_announce = now + st.options.announce_every_ms
    st.announcing = write(st, out, Pending("announce", "", -1, st.home, now), msg)


def myself(st: MemberState, wall: int) -> Member:
    """Our own membership as the others will see it: we count ourselves at once."""
    msg = announcement(st)
    return Member(
        st.options.group_id,
        st.options.client_id,
        st.options.instance_id,
        wall,
        wall,
        msg.heartbeat_interval_ms,
        msg.weight,
        msg.max_claims,
        msg.entire_topic,
        msg.topics,
    )


def target(st: MemberState, wall: int, now: int | None = None) -> frozenset[assignment.Unit]:
    """Our share of the group's target at log time ``wall`` (``MemberCore.target``).

    With ``now`` (the clock of a step that acts on it), a change of holder or member is
    taken up at most once per claim interval (``claim_interval_ms``): the target computed
    last stays in use until then, and ``st.target_deferred`` says that a newer one is due
    (``MemberCore.due`` wakes for it). A group that starts or rebalances changes holders
    thousands of times in a claim interval, and every member recomputing its target after
    each of them was what a large fleet spent its time on (docs/performance.md, "What a
    fleet costs"). A deferred target is only claimed from (:func:`rebalance` releases
    nothing on it: releases on views a claim interval old made a starting group churn);
    a partition released to us is in our target already, so it is still claimed at once.
    A change of our subscription, and a member's status changing (``target_until``), are
    taken up at once; a member's status that changed without changing who counts, or
    how, keeps the target (only the holders and the counted members decide it).

    Who is counted (docs/rebalancing.md, "Starting together"). A member whose own
    announcement is not replayed yet, or that has been a member for less than
    ``settle_ms`` of log time while others are live, holds still: it keeps what it holds
    and bids for nothing, so a group started all at once does not bid for every partition
    from every member (about M·P claims) before its members see each other (Kafka's
    ``group.initial.rebalance.delay.ms``, at HB/4). Alone, it counts itself at once. It
    counts the live members that joined before it or with it (within ``settle_ms``) at
    once, and a later one once that one settled (two announcements), so a process that
    announces once and dies never pulls partitions away from anyone that was there first.
    """
    home = st.worlds[st.home]
    # members are judged at the log time our replay of their partition reached, not by our
    # clock: a replay that lags under load must not make live members look stale (every
    # member announces there every HB/3, so that time keeps up with the log)
    at = min(wall, home.now) if home.now > NO_TIME else wall
    key = (tuple(w.ownership_epoch for w in st.worlds), st.topics)
    cached, previous = st.target, st.target_key
    if cached is not None and at < st.target_until:
        if key == previous:
            st.target_deferred = False
            return cached
        if (
            now is not None
            and st.target_members is not None  # not holding still
            and previous is not None  # (always so once a target is cached)
            and key[1] == previous[1]
            and now < st.target_at + st.options.claim_interval_ms
        ):
            st.target_deferred = True  # a holder or member changed: taken up at the next pass
            return cached
    if now is not None:
        st.target_at = now
    st.target_deferred = False
    group = st.options.group_id
    me = st.options.client_id
    live = home.members(group, at)
    mine = next((m for m in live if m.client_id == me), None)
    others = [m for m in live if m.client_id != me]
    st.target_key = key
    settle = settle_ms(st.options.heartbeat_interval_ms)
    # settled: a member for ``settle`` of log time (the others also want a second
    # announcement before they count us: proof that we did not die at once)
    settled_at = at + settle if mine is None else mine.since + settle
    if mine is None or (others and at < settled_at):
        # our own announcement's replay changes ownership_epoch; settling is a time. Until
        # our announcement is replayed we cannot tell whether we are alone: members that
        # start together see the ones whose announcements landed before theirs
        st.target = _holding_still(st)
        st.target_until = settled_at
        st.target_members = None
        return st.target
    # alone, we count ourselves at once (nobody to wait for)
    # those that joined before us or with us (within a settle period) count for us at once:
    # members started together about to count; a later one counts once it settled
    with_us = mine.since + settle
    members = [m for m in others if m.since <= with_us or m.counted(at)]
    members.append(myself(st, at))
    until = min((m.expires_at() for m in others), default=1 << 62)
    # what the target depends on besides the holders: a member's status that changed
    # (``target_until``) without changing who counts, or how, leaves it as it was
    counted = tuple(
        sorted((m.client_id, m.weight, m.max_claims, m.entire_topic, m.topics) for m in members)
    )
    if cached is not None and key == previous and counted == st.target_members:
        st.target_until = until
        return cached
    # (a strategy of the user's own is called every time)
    shared = st.shared_targets if st.options.rebalance == "balanced" else None
    full = None if shared is None else shared.get(key[0], counted)
    if full is None:
        holders: dict[assignment.Unit, str] = {}
        for topic, partition in assignment.units_of(members):
            p = 0 if partition == assignment.WHOLE_TOPIC else partition
            h = world_of(st, topic, p).holder(group, topic, p)
            if h is not None:
                holders[(topic, partition)] = h[0]
        full = assignment.target(st.options.rebalance, members, holders)
        if shared is not None:
            shared.put(key[0], counted, full)
    st.target = full.get(me, frozenset())
    st.target_until = until
    st.target_members = counted
    return st.target


def _holding_still(st: MemberState) -> frozenset[assignment.Unit]:
    """The target of a member that has not settled: what it holds (or claims), nothing more."""
    spoken = busy(st)
    if st.options.claim_entire_topic:
        return frozenset((t, assignment.WHOLE_TOPIC) for t, p in spoken if p == 0)
    return frozenset(spoken)


def rebalance(
    st: MemberState,
    now: int,
    wall: int,
    taken: set[Key],
    out: list[Action],
    mine: frozenset[assignment.Unit],
) -> None:
    """Give up what the target (``mine``: our share) moves away, exactly that; claim what it
    gives us. A deferred target (``st.target_deferred``: the log moved since it was
    computed) moves nothing away: only a current one does."""
    o = st.options
    keep: AbstractSet[Key]
    if o.claim_entire_topic:
        # a topic is ours through its partition 0; the rest follows once we hold that
        topics = {t for t, _ in mine}
        zeros = {t for t, p in st.held if p == 0 and t in topics}
        keep = {(t, p) for t, n in st.topics if t in topics for p in range(n)}
        keep = {k for k in keep if k[1] == 0 or k[0] in zeros}
    else:
        keep = mine
    # every step of the core comes here: by the keys (no Held.key call per held partition),
    # and a move away only where the target moved one (each touches its own key alone, so
    # this is the order and the outcome of one pass over what we hold)
    held_map, draining = st.held, st.draining
    if draining:
        for key in [k for k in draining if k in keep and k in held_map]:
            del draining[key]
    if not st.target_deferred and not _fit(st, keep)[0]:
        for held in [h for k, h in held_map.items() if k not in keep]:
            move_away(st, now, held, out)
    moved, st.replay_moved = st.replay_moved, False
    due = now >= st.next_claim
    if not due and not moved:
        return  # nothing new in the log, and no pass due
    if due:
        # the claim pass proper (once per claim interval): looking for claims of ours we do
        # not track costs a look at every partition of the group, too much for every step
        # of the replay in a large group; between passes, what the replay moved is only
        # looked up in our target (a partition released to us is claimed at once)
        st.next_claim = now + o.claim_interval_ms
        adopt_orphans(st, now, taken, out, keep)
    if group_paused(st, now, wall):
        return
    if not o.claim_entire_topic and _fit(st, keep)[1]:
        return  # we hold all of our share: nothing to bid for (what a pass would find)
    skip = not_to_claim(st)
    bids = sorted(keep.difference(skip))
    if o.claim_entire_topic:
        # max_claims counts topics: it limits the partitions 0, not the rest of a topic
        rest = [k for k in bids if k[1] > 0]
        bids = [k for k in bids if k[1] == 0]
        for key in candidates(st, rest, now, wall):
            claim(st, now, wall, key, out)
    if bids:
        for key in candidates(st, bids, now, wall)[: wanted(st)]:
            claim(st, now, wall, key, out)


def _fit(st: MemberState, keep: AbstractSet[Key]) -> tuple[bool, bool]:
    """(Is every held partition in ``keep``, is every one of ``keep`` held?), remembered
    while neither changes: every step of the core asks, and the answer costs a hash of every
    held key."""
    fit = st.fit
    if fit is None or fit[0] is not keep or fit[1] != st.held_changes:
        keys = st.held.keys()
        fit = st.fit = (keep, st.held_changes, keys <= keep, keys >= keep)
    return fit[2], fit[3]


def move_away(st: MemberState, now: int, held: Held, out: list[Action]) -> None:
    """The target gives ``held`` to another member: release it at its exact position. ALO
    first stops handing it out and waits (up to ``drain_ms``) for the commits of what it
    handed out, so the next holder repeats nothing."""
    reads = held.reads
    if any(s.unpositioned and s.no_start is None for s in reads):
        return  # its start is being looked up: release it once the log has a position
    if st.options.mode == "alo" and any(
        s.tracker is not None and s.tracker.outstanding for s in reads
    ):
        since = st.draining.setdefault(held.key, now)
        if now - since < st.options.drain_ms:
            return
    st.draining.pop(held.key, None)
    give_up(st, now, held, "rebalance: the target moves it", out, cooldown=False)
