"""Taking up and letting go of held partitions (and tasks): the member's state changes.

A claim the log accepted is adopted (its start looked up, then heartbeated and fetched); a
partition stops being ours when the replay or a verdict says so (lost), when we give it up
while running, or when we close (docs/architecture.md, "Consumer algorithms").
"""

from __future__ import annotations

import logging

from .actions import Action, Assigned, LookUp, Revoke
from .held import Held, Lease
from .release import Position
from .state import MemberState, cp_of, me, tenure_of, vector, world_of

__all__ = ["adopt", "announce", "become_fenced", "drop", "give_up", "lose", "queue_release"]

log = logging.getLogger(__name__)


def adopt(
    st: MemberState,
    topic: str,
    partition: int,
    sent: int,
    resume: int | dict[str, int] | None,
    how: str,
    out: list[Action],
    epoch: int | None = None,
) -> None:
    """We hold it in the log: start at the group's position (read now, after our claim's
    verdict), heartbeat it at once and fetch. ``epoch``: where our claim landed in its
    coordination partition (default: how far the replay is, which lies between that and any
    later holder's claim). A task starts each source at its position in the task's vector
    (``resume``: a takeover's)."""
    sources = st.tasks.get(topic)
    if sources is not None:
        vec = (
            resume
            if isinstance(resume, dict)
            else world_of(st, topic, partition).resume_positions(
                st.options.group_id, topic, partition
            )
        )
        resume = None
    elif resume is None:
        resume = world_of(st, topic, partition).resume_offset(st.options.group_id, topic, partition)
    assert not isinstance(resume, dict)
    held = Held(
        topic=topic,
        partition=partition,
        cp=cp_of(st, topic, partition),
        lease=Lease(st.options.fence_after_ms, sent),
        next_fetch=None,
        handed_through=-1,
        claimed_through=-1,
        confirmed_through=-1,
        next_heartbeat=0,
        group_start=resume,
        epoch=st.worlds[cp_of(st, topic, partition)].applied_through if epoch is None else epoch,
    )
    held.how = how
    # our (version 6) claim's verdict was read at ``epoch``: that offset names the tenure;
    # a restart takeover names one only where the tenure it ended had one, and a claim we
    # recovered has the one the replay shows
    held.tenure = (
        epoch
        if epoch is not None and how != "took_back"
        else tenure_of(st.worlds[held.cp], st, held.key)
    )
    st.held[held.key] = held
    st.held_changes += 1
    if sources is not None:
        held.sources = tuple(
            Held(
                topic=source,
                partition=partition,
                cp=held.cp,
                lease=held.lease,
                next_fetch=None,
                handed_through=-1,
                claimed_through=-1,
                confirmed_through=-1,
                group_start=(vec or {}).get(source),
                task=held,
            )
            for source in sources
        )
    for r in held.reads:
        # where to start depends on the log's span (no position, or one outside the log):
        # the first heartbeat waits for it, so it carries where it really starts
        st.token += 1
        r.lookup_token = st.token
        out.append(LookUp(st.token, r.topic, r.partition, r.group_start is None))
        if r is not held:
            st.sources[r.key] = r
    log.debug(
        "%s adopted %s/%d at %s (%s)",
        me(st),
        topic,
        partition,
        resume if sources is None else vec,
        how,
    )


def announce(held: Held, out: list[Action]) -> None:
    """Tell the edge we hold it, once the log has our first heartbeat with its position."""
    if not held.announced:
        held.announced = True
        out.append(Assigned(held.topic, held.partition, held.how, held.next_fetch))


def drop(st: MemberState, held: Held, lost: bool, why: str, out: list[Action]) -> None:
    """No longer ours: forget it (and a task's sources), tell the edge to stop."""
    del st.held[held.key]
    st.held_changes += 1
    for source in held.sources:
        st.sources.pop(source.key, None)
    keys = tuple(s.key for s in held.sources)
    out.append(Revoke(held.topic, held.partition, lost=lost, why=why, sources=keys))


def lose(st: MemberState, held: Held, why: str, out: list[Action]) -> None:
    """The log says it is not ours (any more): drop it without a release."""
    drop(st, held, True, why, out)
    st.draining.pop(held.key, None)


def give_up(
    st: MemberState, now: int, held: Held, why: str, out: list[Action], *, cooldown: bool = True
) -> None:
    """Release one partition while running; leave it to others for the cooldown."""
    drop(st, held, False, why, out)
    if cooldown:
        st.cooldown[held.key] = now + st.options.reclaim_cooldown_ms
    log.info("%s releases %s/%d: %s", me(st), held.topic, held.partition, why)
    queue_release(st, held)


def queue_release(st: MemberState, held: Held) -> None:
    """Queue the release of a partition we dropped, at its exact position (``closing``
    writes it)."""
    if held.unpositioned:
        # a release would record a position the group does not have: let it lapse
        log.info("%s: %s/%d has no position; not releasing it", me(st), *held.key)
        return
    position: Position = (
        vector(st, held, release=True) if held.sources else st.delivery.release_position(held)
    )
    st.releases.add(held.key, position, held.cp, held.release_after, held.tenure)


def become_fenced(
    st: MemberState,
    out: list[Action],
    why: str = "was fenced by a newer instance of its client_id",
) -> None:
    """A newer instance of our client_id took over (or may have: ``why``): stop everything,
    write nothing more."""
    if st.fenced:
        return
    st.fenced = True
    log.error("%s %s; it stops", me(st), why)
    for held in list(st.held.values()):
        lose(st, held, "this instance is fenced", out)
    st.releases.pending.clear()
