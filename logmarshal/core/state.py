"""One member's mutable state, as one record, and the plain reads every concern shares.

The concern modules (``verdicts``, ``fetching``, ``holding``, ``claims``, ``membership``,
``closing``, ``handout``) are functions over this record, the way ``rationalizer._rules``
works over a partition's state; ``MemberCore`` only dispatches events to them
(docs/architecture.md, "Consumer core: decisions apart from threads"). Nothing here writes, reads a
clock or decides what to write: this module sits below every other one of the core.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rationalizer import WorldState, coordination_partition, membership_partition
from rationalizer._messages import BeatEntry, task_last_offset

from .assignment import Unit
from .delivery import Delivery, delivery_for
from .held import Held
from .options import CoreOptions
from .release import Position, Releases

__all__ = [
    "CORE_SWITCHES",
    "Key",
    "MemberState",
    "Pending",
    "Retake",
    "busy",
    "claim_of",
    "cooling",
    "cp_of",
    "gap_halted",
    "group_position",
    "held_here",
    "me",
    "new_state",
    "not_to_claim",
    "position",
    "read",
    "releasing",
    "subscribed",
    "tenure_of",
    "vector",
    "wanted",
    "withheld",
    "world_of",
]

Key = tuple[str, int]

#: What a simulator experiment may switch off (``MemberCore(_without=)``): restarting a
#: partition from the replay after a verdict we did not ask for ("surprise"), waiting for
#: the replay after a stall longer than our lease ("stall"), and trying a refused restart
#: takeover again while the earlier instance's claim is fresh ("retake": without it, the
#: partition waits until that claim lapses or is released, as before), and taking only ends
#: looked up after a stall as its catch-up ("fresh-ends": without it, an answer whose ends
#: were looked up before the stall ends it, as before; the core's tests switch it off, the
#: simulator builds and steps its answers at once, so its schedules never have one), and
#: confirming an AMO reservation by a heartbeat only once the reservation is in the log
#: ("reserved-confirm", ``verdicts._heartbeat_judged``: without it, the heartbeat's verdict
#: alone confirms, as before), and leaving a tenure whose release we gave up to lapse
#: ("given-up", ``claims.adopt_orphans``: without it, the replay still showing us its holder,
#: we take it up again, as before, and a late attempt of the release ends it under us), and
#: stopping an instance whose replay lost records after it began to act ("live-gap",
#: ``MemberCore._apply``: without it, it regains its partitions after the admin's reset as a
#: cold start does, as before, though the lost records may have fenced it), and going
#: back to where the data log was cut below what it read ("cut-told", ``fetching._diverged``:
#: without it, it fetches on from its offset, as before, skipping what was written since).
CORE_SWITCHES = frozenset(
    {
        "surprise",
        "stall",
        "retake",
        "fresh-ends",
        "reserved-confirm",
        "given-up",
        "live-gap",
        "cut-told",
        "give-back-guard",
    }
)


@attrs.define
class Pending:
    """A write whose verdict we wait for."""

    kind: str  # claim | takeover | heartbeat | beats | reserve | release | announce | leave | name
    topic: str
    partition: int
    cp: int
    sent: int
    value: int = -1  # the offset the record carries (position or reservation)
    offset: int | None = None  # where it landed, once known
    how: str = "claimed"  # claim: claimed or failover
    #: a task's takeover: the positions it carries (topic, last_offset)
    positions: tuple[tuple[str, int], ...] = ()
    #: the write's token (``records.write`` sets it): a heartbeat or reservation answers for
    #: the tenure that wrote it, not for a later one of the same partition
    token: int = 0
    #: a takeover: the earlier instance of our client it takes the partition from, and (a
    #: try again after a refusal: ``claims.retake``) the latest clock time of any further try
    previous: tuple[str, str] | None = None
    until: int | None = None
    #: a MemberHeartbeat ("beats", version 7): each entry's partition and the position it
    #: carries, in entry order (its verdict has one per entry)
    beats: tuple[tuple[Key, int], ...] = ()


@attrs.define
class Retake:
    """A restart takeover the log refused, to try again (``claims.retake``): the instance
    it takes from, the soonest clock time of the next try and the latest of any."""

    previous: tuple[str, str]
    at: int
    until: int


class SharedTargets:
    """The group targets computed last by members that replay through the same
    ``WorldState`` objects (several members of a process sharing one replay, as the
    simulator's fleet does): the balanced target is a pure function of the holders (those
    worlds at their ownership epochs) and of the counted members, so they compute it once.
    Handed to each such member (``MemberCore(shared_targets=)``); a member with worlds of
    its own has none."""

    __slots__ = ("_entries", "_max")

    def __init__(self, max_entries: int = 8) -> None:
        self._entries: dict[tuple, dict[str, frozenset[Unit]]] = {}
        self._max = max_entries

    def get(self, epochs: tuple[int, ...], counted: tuple) -> dict[str, frozenset[Unit]] | None:
        return self._entries.get((epochs, counted))

    def put(
        self, epochs: tuple[int, ...], counted: tuple, full: dict[str, frozenset[Unit]]
    ) -> None:
        entries = self._entries
        if len(entries) >= self._max:
            del entries[next(iter(entries))]  # the oldest
        entries[(epochs, counted)] = full


@attrs.define(eq=False)
class MemberState:
    """Everything one member core remembers between events (and what it was built with)."""

    options: CoreOptions
    #: one replay per coordination partition, owned and fed by the edge (read here)
    worlds: Sequence[WorldState]
    #: reads a fetched record's offset (records are otherwise opaque here)
    offset_of: Callable[[Any], int]
    delivery: Delivery
    #: the simulator's experiments (what each safety rule of the core prevents): re-read the
    #: position after a takeover's verdict, restart on a surprising verdict, the stall rule
    reread: bool
    surprise: bool
    stall: bool
    #: the coordination partition our membership is announced in
    home: int
    releases: Releases
    #: AMO start-up: whether restart recovery still has to run
    recovered: bool
    #: whether a refused restart takeover is tried again ("retake", ``claims.retake``)
    retaking: bool
    #: whether an answer whose ends were looked up before the last stall was found is not
    #: taken as its catch-up ("fresh-ends", ``MemberCore._answers_stall``)
    fresh_ends: bool
    #: whether a heartbeat confirms a reservation only once the log holds it
    #: ("reserved-confirm", ``verdicts._heartbeat_judged``)
    reserved_confirm: bool
    #: whether a tenure whose release was given up is left to lapse, never taken up again
    #: ("given-up", ``claims.adopt_orphans``)
    keep_given_up: bool
    #: a gap found after the start-up replay stops this instance ("live-gap")
    live_gap: bool
    #: go back to where the data log was cut below what was read (``fetching._diverged``)
    cut_told: bool
    #: AMO: only the end of the last batch handed out may be given back
    #: ("give-back-guard", ``MemberCore.give_back``)
    give_back_guard: bool
    topics: tuple[tuple[str, int], ...]
    #: task topic -> its source topics (PROTOCOL.md "Tasks (version 3)")
    tasks: dict[str, tuple[str, ...]]
    held: dict[Key, Held] = attrs.field(factory=dict)
    #: counts the changes to ``held`` (``holding.adopt`` and ``drop``): what a cached
    #: comparison with it is keyed by (``membership.rebalance``)
    held_changes: int = 0
    #: ``membership.rebalance``'s last comparison of ``held`` with the target: (the target,
    #: held_changes, nothing to move away, nothing to bid for)
    fit: tuple[Any, int, bool, bool] | None = None
    #: per coordination partition, what its replay says this instance holds, as last read:
    #: (the world, its ``ownership_epoch`` then, the keys); read again only once a holder
    #: there changed (:func:`held_here`)
    held_there: dict[int, tuple[WorldState, int, frozenset[Key]]] = attrs.field(factory=dict)
    #: per coordination partition, the replay's last check of what we hold there found
    #: nothing to lose at (the world, its ``ownership_epoch``, held_changes): nothing
    #: moved since, nothing to look at again (``verdicts.check_replay``)
    replay_checked: dict[int, tuple[WorldState, int, int]] = attrs.field(factory=dict)
    #: a held task's source partitions by key (what fetches, hand-outs and commits name)
    sources: dict[Key, Held] = attrs.field(factory=dict)
    #: writes in flight, by token
    pending: dict[int, Pending] = attrs.field(factory=dict)
    #: coordination partitions whose replay has reached the log end once
    caught_up: set[int] = attrs.field(factory=set)
    next_claim: int = 0
    replay_moved: bool = False
    #: the last token given to a write, fetch or look-up
    token: int = 0
    #: round robin of hand-outs over the partitions with something to give
    cursor: int = 0
    #: hand-outs so far (``HandOut.handout``, ``Held.handout``)
    handouts: int = 0
    closing: bool = False
    closed: bool = False
    fenced: bool = False
    #: the coordination partitions it wrote to: a gap found there may hide what fenced it
    #: (a newer instance of its client_id taking over its claims: ``live_gap``)
    wrote: set[int] = attrs.field(factory=set)
    paused: set[Key] = attrs.field(factory=set)
    #: given up while running: left to others until then
    cooldown: dict[Key, int] = attrs.field(factory=dict)
    #: restart takeovers the log refused, to be tried again while the old claim is fresh
    retakes: dict[Key, Retake] = attrs.field(factory=dict)
    # membership and the target (rebalance != "none")
    next_announce: int = 0
    announcing: int | None = None  # token of the announcement in flight
    announced: tuple | None = None  # what we announced last
    leaving: bool = False  # LeavingGroup written (on close)
    target: frozenset[Unit] | None = None
    #: what the target was computed from: every world's ownership epoch, and our topics
    target_key: tuple[tuple[int, ...], tuple[tuple[str, int], ...]] | None = None
    target_until: int = 0  # wall time at which a member's status changes
    #: the members the target was computed for (id, weight, cap, entire_topic, topics)
    target_members: tuple | None = None
    #: clock time the target was last computed by a step, and whether a holder or member
    #: changed since (it is recomputed once a claim interval has passed: membership.target)
    target_at: int = 0
    target_deferred: bool = False
    #: targets shared with the members that replay through the same worlds (None: our own)
    shared_targets: SharedTargets | None = None
    draining: dict[Key, int] = attrs.field(factory=dict)  # ALO: moving away, since when
    released_epochs: tuple[int, ...] = ()  # "none": the worlds last looked at
    # the stall rule: when the last step ran, and the coordination partitions whose replay
    # must reach the log end before we write or hand out again after a stall
    last_step: int | None = None
    stalled: set[int] = attrs.field(factory=set)
    #: when the last stall was found: an ``at_end`` answer whose ends were looked up earlier
    #: ends none (``MemberCore._answers_stall``)
    stall_found_at: int | None = None
    #: coordination partitions whose replay is not a fold of the log any more (a log that
    #: went back, or lost records before we applied them: ``core.rewind``), each with the
    #: partitions the log determines again since (acted on; the others are left alone)
    halted: dict[int, set[Key]] = attrs.field(factory=dict)
    #: what each halt was (why, before, after): a second loss there halts it afresh
    halt_marks: dict[int, tuple[str, int, int]] = attrs.field(factory=dict)
    #: version 7: heartbeats due in this step, per coordination partition (partition, the
    #: position to carry), written as one MemberHeartbeat each when the step ends
    #: (``handout.write_beats``)
    beat_queue: dict[int, dict[Key, int]] = attrs.field(factory=dict)
    #: version 7: the last MemberHeartbeat written per (coordination partition, chunk): its
    #: entries and encoded key and value. An idle member's next pass carries the same
    #: entries, so its record is the same bytes: not built, validated and encoded again
    #: (``handout._write_beats``; docs/performance.md, "Idle member")
    beat_records: dict[tuple[int, int], tuple[tuple[BeatEntry, ...], bytes, bytes]] = attrs.field(
        factory=dict
    )


def new_state(
    options: CoreOptions,
    worlds: Sequence[WorldState],
    *,
    offset_of: Callable[[Any], int] = operator.itemgetter(0),
    reread: bool = True,
    without: frozenset[str] = frozenset(),
    shared_targets: SharedTargets | None = None,
) -> MemberState:
    """A member that holds nothing yet; ``without`` names :data:`CORE_SWITCHES` to drop."""
    if len(worlds) != options.coordination_partitions:
        raise ValueError("one WorldState per coordination partition is needed")
    if not CORE_SWITCHES.issuperset(without):
        raise ValueError(f"unknown core switches {sorted(set(without) - CORE_SWITCHES)}")
    return MemberState(
        options=options,
        worlds=worlds,
        offset_of=offset_of,
        delivery=delivery_for(options.mode),
        reread=reread,
        surprise="surprise" not in without,
        stall="stall" not in without,
        home=membership_partition(options.group_id, options.coordination_partitions),
        releases=Releases(options.release_attempts),
        recovered=not options.fast_reclaim,
        retaking="retake" not in without,
        fresh_ends="fresh-ends" not in without,
        reserved_confirm="reserved-confirm" not in without,
        keep_given_up="given-up" not in without,
        live_gap="live-gap" not in without,
        cut_told="cut-told" not in without,
        give_back_guard="give-back-guard" not in without,
        topics=options.topics,
        tasks=dict(options.tasks),
        shared_targets=shared_targets,
    )


# -- plain reads --------------------------------------------------------------------------------


def me(st: MemberState) -> tuple[str, str]:
    return (st.options.client_id, st.options.instance_id)


def held_here(st: MemberState, cp: int) -> frozenset[Key]:
    """(topic, partition) of every partition of our group that the replay of ``cp`` says
    this instance holds. Read from the world (a look at each partition of the group there)
    only when a holder there changed since (its ``ownership_epoch`` moved) or the world was
    replaced: an idle member asks every claim pass and every replay step."""
    world = st.worlds[cp]
    epoch = world.ownership_epoch
    last = st.held_there.get(cp)
    if last is not None and last[0] is world and last[1] == epoch:
        return last[2]
    keys = frozenset(world.held_by(st.options.group_id, me(st)))
    st.held_there[cp] = (world, epoch, keys)
    return keys


def subscribed(st: MemberState) -> set[str]:
    return {t for t, _ in st.topics}


#: a partition's coordination partition, remembered (a murmur3 hash per look-up otherwise:
#: a target looks up every partition's holder); shared by the members of a process
_coordination_partition = functools.lru_cache(maxsize=1 << 16)(coordination_partition)


def cp_of(st: MemberState, topic: str, partition: int) -> int:
    return _coordination_partition(topic, partition, len(st.worlds))


def world_of(st: MemberState, topic: str, partition: int) -> WorldState:
    return st.worlds[cp_of(st, topic, partition)]


def read(st: MemberState, topic: str, partition: int) -> Held | None:
    """What reads (topic, partition): a held partition, a held task's source partition
    (or, named by its own key, a held task)."""
    key = (topic, partition)
    held = st.sources.get(key)
    return held if held is not None else st.held.get(key)


def claim_of(st: MemberState, topic: str, partition: int) -> Held | None:
    """The claim (topic, partition) is read under: its own, or its task's."""
    held = read(st, topic, partition)
    return None if held is None else held.task or held


def position(st: MemberState, held: Held) -> int:
    """Our heartbeat's ``last_offset``; a task's: the sum its vector stands for (the input
    records consumed, minus one; PROTOCOL.md "Tasks (version 3)")."""
    if held.sources:
        return task_last_offset(vector(st, held))
    return st.delivery.position(held)


def vector(st: MemberState, held: Held, release: bool = False) -> tuple[tuple[str, int], ...]:
    """A task's positions, per source topic (sorted: the options keep sources so)."""
    at = st.delivery.release_position if release else st.delivery.position
    return tuple((s.topic, at(s)) for s in held.sources)


def group_position(st: MemberState, world: WorldState, key: Key) -> Position | None:
    """What a record carrying the group's position for ``key`` carries: ``last_offset``, or a
    task's vector; None without a position."""
    if key[0] in st.tasks:
        vec = world.resume_positions(st.options.group_id, *key)
        return None if vec is None else tuple((t, o - 1) for t, o in sorted(vec.items()))
    r = world.resume_offset(st.options.group_id, *key)
    return None if r is None else r - 1


def tenure_of(world: WorldState, st: MemberState, key: Key) -> int | None:
    """The tenure in which this instance holds ``key`` as the replay shows it (the offset of
    the claim or restart takeover that began it, PROTOCOL.md "Version 6"); None if we do not
    hold it there or the world does not name it (restored from an older snapshot)."""
    state = world.partition_state(st.options.group_id, *key)
    if state is None or state.holder != me(st):
        return None
    return state.tenure


# -- what is spoken for -------------------------------------------------------------------------


def releasing(st: MemberState) -> set[Key]:
    """Partitions whose release is queued or in flight: never claimed again until it is
    answered or given up, or a late release could land on top of the new claim (it is ours
    too) and move its position back (a release of caps 4 and 5 names no tenure). Once given
    up, a new claim is a tenure its release does not name; the same tenure is never taken up
    again (``Releases.given_up``, ``claims.adopt_orphans``)."""
    return set(st.releases.pending) | {
        (p.topic, p.partition) for p in st.pending.values() if p.kind == "release"
    }


def busy(st: MemberState) -> set[Key]:
    """Held, or being claimed or taken over."""
    return set(st.held) | {
        (p.topic, p.partition)
        for p in st.pending.values()
        if p.kind not in ("release", "announce", "leave")
    }


def gap_halted(st: MemberState, cp: int) -> bool:
    """Is ``cp`` halted by a gap (its replay goes on, and its group may regain partitions
    there), rather than by a log that went back (its replay stopped for good)?"""
    return cp in st.halted and st.halt_marks[cp][0] == "gap"


def withheld(st: MemberState, p: Pending) -> bool:
    """Must ``p`` not be written: its coordination partition is halted (``core.rewind``)
    and it is not about a partition the log determines again there? Our membership is
    announced even where a gap halted the replay: it claims, positions and hands out
    nothing, and the records it adds are what moves that replay's log time past an admin's
    pause. Where the log went back, the replay is frozen: nothing is written."""
    trusted = st.halted.get(p.cp)
    if trusted is None or (p.topic, p.partition) in trusted:
        return False
    return not (p.kind in ("announce", "leave") and gap_halted(st, p.cp))


def not_to_claim(st: MemberState) -> set[Key]:
    """What a claim pass leaves alone: held, being claimed, being released, or coordinated
    in a halted coordination partition (``core.rewind``)."""
    skip = busy(st) | releasing(st)
    if st.halted:
        for t, n in st.topics:
            for p in range(n):
                trusted = st.halted.get(cp_of(st, t, p))
                if trusted is not None and (t, p) not in trusted:
                    skip.add((t, p))
    return skip


def wanted(st: MemberState) -> int:
    """How many more partitions (topics, with entire_topic) we may bid for."""
    spoken = busy(st)
    held = len({t for t, p in spoken if p == 0}) if st.options.claim_entire_topic else len(spoken)
    return max(0, st.options.max_claims - held)


def cooling(st: MemberState, key: Key, now: int) -> bool:
    """Given up by us a moment ago (left to others until its cooldown ends)? Forgets a
    cooldown that has ended."""
    until = st.cooldown.get(key)
    if until is None:
        return False
    if now >= until:
        del st.cooldown[key]
        return False
    return True
