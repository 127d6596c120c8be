"""Releases and the graceful close.

On a clean shutdown a member writes ReleasingPartition (a task: ReleasingTask) with each
partition's exact position and LeavingGroup, so another member takes over within one
replay round trip (docs/architecture.md, "Consumer algorithms": release). Releases are bounded
(``release.Releases``); a fenced instance writes nothing.
"""

from __future__ import annotations

from rationalizer import LeavingGroup

from .actions import Action
from .holding import drop, queue_release
from .records import ids, release_record, write, write_naming
from .state import MemberState, Pending, group_position, me, subscribed, tenure_of

__all__ = ["release_orphans", "start_close", "write_releases"]


def write_releases(st: MemberState, now: int, out: list[Action]) -> None:
    """Write the releases due now (forgetting those the replay shows landed).

    Capped at 9 or more, a release never names no tenure: one whose tenure had no name when
    it was queued takes the name the replay shows now, and while the replay shows none,
    the tenure is named first (a NamingTenure, counted as one of the release's attempts;
    the release is looked at again once the replay can show the name). A version 1 release,
    given up and landing late, would end the next tenure we claim (PROTOCOL.md, "Upgrading
    a running group": what caps 4 and 5 leave open)."""
    in_flight = {
        (p.topic, p.partition) for p in st.pending.values() if p.kind in ("release", "name")
    }
    group = st.options.group_id
    mine = me(st)
    for key, entry in list(st.releases.pending.items()):
        if entry[2] and st.worlds[entry[1]].holder(group, *key) != mine:
            st.releases.answered(key)  # an earlier attempt landed (or it is not ours)
    for key, position, cp, tenure in st.releases.due(in_flight, now):
        if tenure is None and st.options.protocol_version >= 9:
            state = st.worlds[cp].partition_state(group, *key)
            if state is None or state.holder != mine:
                st.releases.answered(key)  # not ours (any more): nothing to release
                continue
            if state.tenure is None:  # name it first; released once the replay names it
                write_naming(st, out, key, cp, now)
                st.releases.unknown(key, now + st.options.heartbeat_interval_ms // 4)
                continue
            tenure = st.releases.pending[key][4] = state.tenure  # (no new tenure of ours
            # begins while its release is pending: the name the replay shows is its own)
        msg = release_record(st, key, position, tenure)
        write(st, out, Pending("release", key[0], key[1], cp, now, msg.last_offset), msg)


def start_close(st: MemberState, release: bool, out: list[Action]) -> None:
    """Stop handing out; with ``release`` (and not fenced) give back everything we hold and
    leave the group."""
    if st.closing:
        return
    st.closing = True
    for held in list(st.held.values()):
        drop(st, held, False, "closing", out)
        if release and not st.fenced:
            queue_release(st, held)
    if release and not st.fenced:
        release_orphans(st)
        if st.announced is not None:
            msg = LeavingGroup(**ids(st))
            write(st, out, Pending("leave", "", -1, st.home, 0), msg)
            st.leaving = True
    else:
        st.releases.pending.clear()


def release_orphans(st: MemberState) -> None:
    """On close: claims the log gives this instance that we never took up (a verdict we
    missed): give them back at the group's position (none: they lapse)."""
    world_claims = (
        (cp, c)
        for cp, world in enumerate(st.worlds)
        for c in world.claims_of(st.options.group_id, st.options.client_id)
    )
    topics = subscribed(st)
    for cp, c in world_claims:
        key = (c.topic, c.partition)
        if c.instance_id != st.options.instance_id or key in st.releases.pending:
            continue
        if key not in st.halted.get(cp, (key,)):
            continue  # a halted coordination partition's world (core.rewind)
        if c.topic not in topics:
            continue
        position = group_position(st, st.worlds[cp], key)
        if position is not None:
            st.releases.add(key, position, cp, tenure=tenure_of(st.worlds[cp], st, key))
