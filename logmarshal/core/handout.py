"""Serving what we hold: fetches, heartbeats, AMO reservations, and the hand-out of a poll.

The hot path of every consumer (poll, then what that partition needs next). Self-fencing
decides what may be handed out: the replay says we hold it and our lease cannot have lapsed
(docs/architecture.md, "Consumer algorithms"); AMO hands out only what an accepted reservation and
the heartbeat behind it confirmed (PROTOCOL.md "Version 4: at-most-once enforced by the log").
AMO reservations run ahead of the polls, up to ``max_reserved`` records of a partition, one
in flight at a time (``delivery.AtMostOnce``).
"""

from __future__ import annotations

from rationalizer import ClaimingMessages, MemberHeartbeat, encode
from rationalizer._messages import MAX_BEAT_ENTRIES

from .actions import Action, Fetch, HandOut, NoStart
from .held import Held
from .records import heartbeat_record, ids, write, write_encoded, write_naming
from .state import MemberState, Pending, claim_of, me, position, vector, withheld

__all__ = [
    "HEARTBEAT_GAP",
    "HEARTBEAT_SLACK",
    "act_held",
    "hand_out",
    "heartbeat",
    "may_hand_out",
    "write_beats",
]

#: ``Held.heartbeat_token`` of a heartbeat queued for this step's MemberHeartbeat
QUEUED = -1

#: A held partition's heartbeat goes out this fraction of HB after its last one, so the
#: holder always looks fresh (< HB) to others, with room for the write and the replay.
HEARTBEAT_GAP = 0.65
#: A due heartbeat starts a pass that sends, with it, every heartbeat due within this
#: fraction of HB (``MemberCore._serve``): a member's heartbeats gather into one write per
#: coordination partition, in at most two passes per gap (instead of one write per
#: partition, spread over the gap: docs/architecture.md, "Consumer core"). A heartbeat is only
#: ever sent early, never late: each goes out 0.325 to 0.65 HB after the last.
HEARTBEAT_SLACK = HEARTBEAT_GAP / 2


def may_hand_out(st: MemberState, topic: str, partition: int, now: int) -> bool:
    """Self-fencing: the replay says we hold it (a task's source: its task) and our lease
    cannot have lapsed."""
    held = claim_of(st, topic, partition)
    if held is None or not held.lease.may_hand_out(now):
        return False
    return _ours(st, held)


def _ours(st: MemberState, held: Held) -> bool:
    """We may write for ``held``: the replay says we hold it, and nothing stops us (fenced,
    closing, stalled, its coordination partition halted); our lease may have lapsed."""
    if st.fenced or st.closing or st.stalled:
        return False
    if st.halted and held.cp in st.halted and held.key not in st.halted[held.cp]:
        return False  # its coordination partition's replay is not the log's (core.rewind)
    return st.worlds[held.cp].holder(st.options.group_id, held.topic, held.partition) == me(st)


def heartbeat_gap(st: MemberState, held: Held) -> int:
    """When ``held``'s next heartbeat is due after this one (:data:`HEARTBEAT_GAP`): the
    same for every partition, so heartbeats sent in one pass stay together."""
    return int(st.options.heartbeat_interval_ms * HEARTBEAT_GAP)


def act_held(st: MemberState, now: int, held: Held, out: list[Action]) -> None:
    """What one held partition needs now: a fetch, a reservation (AMO, on demand), a
    heartbeat when due."""
    o = st.options
    for r in held.reads:
        if (
            r.fetch_token is None
            and r.next_fetch is not None
            and r.no_start is None
            and len(r.buffer) < o.prefetch
            and now >= r.fetch_after
        ):
            st.token += 1
            r.fetch_token = st.token
            out.append(Fetch(st.token, r.topic, r.partition, r.next_fetch))
    if held.unpositioned:
        return  # nothing carrying a position may be written yet
    if held.sources:  # a task (ALO): no reservations
        if held.heartbeat_token is None and now >= held.next_heartbeat:
            heartbeat(st, now, held, position(st, held), out)
        return
    if o.mode == "amo":  # (ALO reserves nothing)
        _reserve(st, now, held, out)
        if held.unknown_reservation is not None or (
            held.reserve_token is not None and held.beaten_through > held.claimed_through
        ):
            # no heartbeat alone: it would carry the end of a reservation the log may not
            # hold (``beaten_through``, what the heartbeat behind it carried) and, accepted,
            # move the resume point past a window nobody handed out. It waits for the
            # reservation's answer, or goes behind the reservation written again (_reserve)
            if held.heartbeat_token is None and now >= held.next_heartbeat:
                # looked at again on the answer (an event), not at every tick meanwhile
                held.next_heartbeat = now + max(1, heartbeat_gap(st, held) // 8)
            return
    if held.heartbeat_token is None and now >= held.next_heartbeat:
        heartbeat(st, now, held, st.delivery.position(held), out)


def _reserve(st: MemberState, now: int, held: Held, out: list[Action]) -> None:
    """AMO: the next reservation of ``held``, when a poll wants one and none is in flight,
    with its confirming heartbeat right behind it."""
    again = held.unknown_reservation
    if again is not None and again <= held.claimed_through:
        again = held.unknown_reservation = None  # confirmed meanwhile: nothing to write again
    if again is not None:
        if held.reserve_token is not None or held.heartbeat_token is not None:
            return  # written again once what is in flight is answered
        # our reservation whose write failed, written again with its heartbeat behind it
        # (a heartbeat confirms only a reservation in the log: verdicts._heartbeat_judged);
        # if the first landed after all, this one is refused and taken as its answer. Also
        # once our lease lapsed meanwhile (writes failing for 2·HB): the log refuses it
        # unless we still hold the partition, and nothing is handed out before the heartbeat
        # behind it is accepted, which renews the lease
        last: int | None = again
        start = held.claimed_through + 1
        allowed = _ours(st, held)
    else:
        last = st.delivery.to_reserve(held, st.options.max_reserved, st.offset_of)
        start = st.delivery.position(held) + 1
        allowed = last is not None and may_hand_out(st, held.topic, held.partition, now)
    if last is not None and allowed:
        held.unknown_reservation = None
        first = None
        if speaks_4(st):
            # version 4 names where the reservation starts: where we believe the log's
            # resume point is (a stale belief is refused, not believed)
            first = start
        msg = ClaimingMessages(
            **ids(st),
            topic=held.topic,
            partition=held.partition,
            proposed_last_offset=last,
            first_offset=first,
        )
        held.reserve_token = write(
            st, out, Pending("reserve", held.topic, held.partition, held.cp, now, last), msg
        )
        held.demand = False
        if held.heartbeat_token is None:
            # the confirming heartbeat goes right behind the reservation (same partition, in
            # order): it counts only once the reservation before it was accepted, so waiting
            # for that verdict first would only cost a round trip (a Heartbeat of its own)
            heartbeat(st, now, held, last, out, alone=True)


def speaks_4(st: MemberState) -> bool:
    """Records of version 4 go only into a group whose live members all announce version 4
    or later (an older replayer would skip them: PROTOCOL.md, "Upgrading a group")."""
    home = st.worlds[st.home]
    return all(m.version >= 4 for m in home.members(st.options.group_id))


def heartbeat(
    st: MemberState, now: int, held: Held, pos: int, out: list[Action], alone: bool = False
) -> None:
    """Write a heartbeat of ``held`` carrying ``pos`` (a task's: its vector, and capped at
    8 or more the tenure it beats in: a version 8 HeartbeatingTask). Capped at 7 or more, a
    partition of a named tenure (no task, not ``alone``) is queued instead: the step's
    heartbeats of a coordination partition go out as one MemberHeartbeat
    (:func:`write_beats`)."""
    if st.options.protocol_version >= 7 and held.tenure is not None and not held.sources:
        held.next_heartbeat = now + heartbeat_gap(st, held)
        held.beaten_through = max(held.beaten_through, pos)
        if alone:  # right behind its reservation, in order: a MemberHeartbeat of its own
            _write_beats(st, now, held.cp, -1, [(held, pos)], out)
        else:
            st.beat_queue.setdefault(held.cp, {})[held.key] = pos
            held.heartbeat_token = QUEUED
        return
    if held.sources:  # a task's: its vector, naming its tenure (capped at 8 or more)
        msg = heartbeat_record(st, held.key, vector(st, held), held.tenure)
    else:
        msg = heartbeat_record(st, held.key, pos)
    held.heartbeat_token = write(
        st, out, Pending("heartbeat", held.topic, held.partition, held.cp, now, pos), msg
    )
    held.next_heartbeat = now + heartbeat_gap(st, held)
    # it may land whatever we hear back: later heartbeats never carry less
    held.beaten_through = max(held.beaten_through, pos)
    if st.options.protocol_version >= 9 and held.naming_due:
        name_tenure(st, now, held, out)


def name_tenure(st: MemberState, now: int, held: Held, out: list[Action]) -> None:
    """Capped at 9 or more: name our tenure without a name (version 9, property j; begun by
    a claim of version 1 or 5, a restart takeover of such a tenure, or shown so by a world
    from an older snapshot), so that from its verdict on it heartbeats in our
    MemberHeartbeats (a task's: version 8) and its late writes are judged by their tenure.
    Written behind the heartbeat (it renews nothing): the verdict at its offset is the
    tenure's name (``verdicts.on_verdict``)."""
    token = write_naming(st, out, held.key, held.cp, now)
    held.naming_token = token or None  # (0: withheld, a halted coordination partition)


def write_beats(st: MemberState, now: int, out: list[Action]) -> None:
    """Write the heartbeats queued in this step (:func:`heartbeat`): per coordination
    partition one MemberHeartbeat (version 7) of every partition still held whose heartbeat
    is queued, each entry naming its tenure, in (topic, partition) order; a partition whose
    coordination partition is halted is not written (``records.write``'s guard)."""
    queue, st.beat_queue = st.beat_queue, {}
    for cp in sorted(queue):
        beats = []
        for key, pos in sorted(queue[cp].items()):
            held = st.held.get(key)
            if held is None or held.heartbeat_token != QUEUED:
                continue  # lost or released since it was queued
            if st.halted and withheld(st, Pending("heartbeat", *key, cp, now)):
                held.heartbeat_token = 0  # (as records.write answers a withheld write)
                continue
            beats.append((held, pos))
        for i in range(0, len(beats), MAX_BEAT_ENTRIES):
            _write_beats(st, now, cp, i // MAX_BEAT_ENTRIES, beats[i : i + MAX_BEAT_ENTRIES], out)


def _write_beats(
    st: MemberState,
    now: int,
    cp: int,
    chunk: int,
    beats: list[tuple[Held, int]],
    out: list[Action],
) -> None:
    """One MemberHeartbeat of ``beats`` (held partitions of named tenures in ``cp``, in
    (topic, partition) order, with the positions they carry): chunk ``chunk`` of ``cp``'s.
    The same entries as this chunk's last record are the same bytes (``st.beat_records``)."""
    entries = []
    for h, pos in beats:
        assert h.tenure is not None  # (only a named tenure's heartbeat is queued)
        entries.append((h.topic, h.partition, h.tenure, pos))
    said = tuple(entries)
    first = beats[0][0]
    p = Pending(
        "beats",
        first.topic,
        first.partition,
        cp,
        now,
        beats=tuple((h.key, pos) for h, pos in beats),
    )
    last = st.beat_records.get((cp, chunk))
    if last is not None and last[0] == said:
        token = write_encoded(st, out, p, last[1], last[2])
    else:
        msg = MemberHeartbeat(
            **ids(st), heartbeat_interval_ms=st.options.heartbeat_interval_ms, entries=said
        )
        key, value = encode(msg)
        st.beat_records[(cp, chunk)] = (said, key, value)
        token = write_encoded(st, out, p, key, value)
    for h, _ in beats:
        h.heartbeat_token = token


def hand_out(st: MemberState, now: int, limit: int, out: list[Action]) -> Held | None:
    """A poll: one partition's records, round robin over those with something to give;
    returns the partition handed out."""
    if st.closing or st.fenced:
        return None
    paused = st.paused
    draining = st.draining
    ready = [
        r
        for h in st.held.values()  # in the order we took them: deterministic
        if h.announced  # the log has our position: nothing before our first heartbeat
        and (not draining or h.key not in draining)
        for r in h.reads
        if (r.buffer or r.no_start is not None) and (not paused or r.key not in paused)
    ]
    if not ready:
        return None
    start = st.cursor % len(ready)
    st.cursor += 1
    for held in ready[start:] + ready[:start]:
        if held.no_start is not None:
            out.append(NoStart(held.topic, held.partition, *held.no_start))
            return None
        claim = held.task or held
        if not may_hand_out(st, claim.topic, claim.partition, now):
            continue
        records = st.delivery.take(held, limit, st.offset_of)
        amo = st.options.mode == "amo"
        if amo and (records or held.buffer):
            # a poll asks for this partition: keep its window reserved ahead of the polls
            # (the next reservation goes out now, or once the one in flight is answered)
            held.demand = True
        if records:
            st.handouts += 1
            held.handout = st.handouts
            out.append(HandOut(held.topic, held.partition, records, st.handouts))
            return claim  # (the caller acts on it: the next window's reservation)
        if (
            amo
            and held.buffer
            and held.reserve_token is None
            and held.confirmed_through >= held.claimed_through
        ):
            act_held(st, now, held, out)  # nothing reserved for this poll yet: reserve now
    return None
