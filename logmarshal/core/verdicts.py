"""What the replay tells a member: the verdicts of its writes, who holds what, and a stall.

A client learns whether its write won by reading the verdict at the offset it landed at
(docs/architecture.md, "Transitions"); a write whose outcome it will never learn is retried where
that is safe. A member surprised by a verdict starts again from the replay's view, never from
its memory, and after a stall longer than its lease it acts on nothing until its replay has
reached the log end (docs/architecture.md, "At-most-once, enforced by the log").
"""

from __future__ import annotations

import logging

from rationalizer import Effect, Reason, Verdict

from .actions import Action
from .claims import resume_after_takeover, resume_task_after_takeover, retake_refused
from .held import NAMING_DONE, Held
from .holding import adopt, announce, become_fenced, lose
from .state import MemberState, Pending, gap_halted, held_here, me, tenure_of

__all__ = ["check_replay", "on_unknown", "resolve_landed", "restart", "stall_began"]

log = logging.getLogger(__name__)

#: What each kind of write asks the log for: any other accepted effect is a surprise.
_EXPECTED = {
    "heartbeat": frozenset({Effect.RENEWED, Effect.RENEWED_LATE}),
    "reserve": frozenset({Effect.MESSAGES_CLAIMED}),
}


def _why(verdict: Verdict) -> str:
    reason = verdict.reason
    return reason.value if reason is not None else "accepted"


def resolve_landed(st: MemberState, now: int, out: list[Action]) -> None:
    """Answer every write that landed where the replay has reached."""
    for token, p in list(st.pending.items()):
        if p.offset is None:
            continue
        world = st.worlds[p.cp]
        if world.applied_through < p.offset:
            continue
        del st.pending[token]
        verdict = world.verdict(p.offset)
        if verdict is None:
            on_unknown(st, now, p, out)
        else:
            on_verdict(st, now, p, verdict, out)


def on_verdict(st: MemberState, now: int, p: Pending, v: Verdict, out: list[Action]) -> None:
    """One of our writes was judged: act on what the log decided."""
    key = (p.topic, p.partition)
    held = st.held.get(key)
    if not v.accepted and v.reason is Reason.FENCED:
        become_fenced(st, out)
        return
    if p.kind == "announce":
        st.announcing = None
        return
    if p.kind == "leave":
        st.leaving = False
        return
    if p.kind == "release":
        st.releases.answered(key)
        if v.accepted:
            log.info("%s released %s/%d at %d", me(st), p.topic, p.partition, p.value)
        else:
            log.warning("%s: release of %s/%d rejected (%s)", me(st), *key, _why(v))
        return
    if p.kind == "claim":
        if v.accepted and held is None and not st.closing and not st.fenced:
            adopt(st, p.topic, p.partition, p.sent, None, p.how, out, p.offset)
        return
    if p.kind == "beats":
        _beats_judged(st, now, p, v, out)
        return
    if p.kind == "name":
        _naming_judged(st, p, v, held)
        return
    if p.kind == "takeover":
        if st.closing or st.fenced:
            return
        if len(v.entries) == 1:  # a MemberHeartbeat's one entry (version 7): its verdict
            v = v.entries[0]
        if v.accepted and held is None:
            _took_back(st, now, p, out)
        elif not v.accepted:
            retake_refused(st, now, p, v)  # the earlier instance moved on: try again soon
        return
    if held is None or p.token not in (held.heartbeat_token, held.reserve_token):
        return  # (written for an earlier tenure of ours of this partition)
    effect = v.effect  # an accepted verdict's is never None
    if (
        st.surprise
        and v.accepted
        and effect is not None
        and effect not in _EXPECTED.get(p.kind, (effect,))
    ):
        # e.g. our heartbeat took the partition over from a newer instance of our client:
        # what we remember of it is not what the log says
        restart(st, now, held, f"{p.kind} answered {effect.value}", out)
        return
    if p.kind == "heartbeat":
        _heartbeat_judged(st, now, p.sent, p.value, v, held, out)
    elif p.kind == "reserve":
        _reservation_judged(st, now, p, v, held, out)


def _took_back(st: MemberState, now: int, p: Pending, out: list[Action]) -> None:
    """Our restart takeover was accepted: resume where the replay says now (docs/architecture.md,
    "Consumer algorithms": restart recovery)."""
    resume: int | dict[str, int]
    if p.topic in st.tasks:
        resume = resume_task_after_takeover(
            st.worlds[p.cp],
            st.options.group_id,
            p.topic,
            p.partition,
            {t: o + 1 for t, o in p.positions},
            reread=st.reread,
        )
    else:
        resume = resume_after_takeover(
            st.worlds[p.cp],
            st.options.group_id,
            p.topic,
            p.partition,
            p.value + 1,
            reread=st.reread,
        )
    if p.until is not None:
        log.info("%s took %s/%d back from %s on a retry", me(st), p.topic, p.partition, p.previous)
    adopt(st, p.topic, p.partition, p.sent, resume, "took_back", out, p.offset)
    # the instance we took it from may not know yet: its lease runs at most fence_after from
    # a message it sent before our takeover landed
    st.held[(p.topic, p.partition)].release_after = now + st.options.fence_after_ms


def _naming_judged(st: MemberState, p: Pending, v: Verdict, held: Held | None) -> None:
    """Our NamingTenure (version 9) was judged: accepted, its offset names our tenure (our
    heartbeats join our MemberHeartbeats from the next pass on, our release names it);
    refused, the replay says what the tenure is (named meanwhile, or not ours: the
    heartbeat tells), and we do not ask again in this tenure."""
    if held is None or held.naming_token != p.token:
        return  # (written for an earlier tenure of ours of this partition)
    if v.accepted and p.offset is not None:
        held.tenure = p.offset
        held.naming_token = None
        log.debug("%s named its tenure of %s/%d: %d", me(st), *held.key, p.offset)
        return
    held.naming_token = NAMING_DONE
    named = tenure_of(st.worlds[held.cp], st, held.key)
    if named is not None and held.tenure is None:
        held.tenure = named


def _beats_judged(st: MemberState, now: int, p: Pending, v: Verdict, out: list[Action]) -> None:
    """A MemberHeartbeat (version 7) was judged: each entry's verdict is that partition's
    heartbeat verdict (PROTOCOL.md, "Version 7"). A verdict without entries (read from a
    window restored from a snapshot, which keeps only the sum) is an unknown outcome."""
    entries = v.entries
    if len(entries) != len(p.beats):
        # a verdict without entries (read from a window restored from a snapshot), or not
        # this record's (the log went back and the offset holds another record: core.rewind
        # stops acting on it): an outcome we do not know
        if entries:
            log.warning("%s: the verdict at %d is not our heartbeat's", me(st), p.offset)
        entries = ()
    for i, (key, pos) in enumerate(p.beats):
        held = st.held.get(key)
        if held is None or held.heartbeat_token != p.token:
            continue  # (written for an earlier tenure of ours of this partition)
        if not entries:
            one = Pending("heartbeat", key[0], key[1], p.cp, p.sent, pos, p.offset, token=p.token)
            on_unknown(st, now, one, out)
        else:
            _heartbeat_judged(st, now, p.sent, pos, entries[i], held, out)


def _heartbeat_judged(
    st: MemberState,
    now: int,
    sent: int,
    pos: int,
    v: Verdict,
    held: Held,
    out: list[Action],
) -> None:
    """A heartbeat (sent at ``sent``, carrying ``pos``; a Heartbeat or a MemberHeartbeat's
    entry) is our lease: rejected, the partition is not ours; accepted, it renews the lease
    and (AMO) confirms what it carries, once the log holds the reservation of it."""
    held.heartbeat_token = None
    if not v.accepted:
        lose(st, held, f"heartbeat rejected ({_why(v)})", out)
        return
    held.lease.renewed(sent)
    if pos > held.confirmed_through and st.options.mode == "amo":
        if st.reserved_confirm:
            # Only our reservation in the log keeps every later holder past ``pos``: no
            # claim or heartbeat lowers ``claimed_through``, while the position this
            # heartbeat set (``last_offset``) is set back by a heartbeat that names no
            # tenure landing late, a member capped below 7's: our own (no rule can tell it
            # is late), or in a group of mixed caps one of another member's earlier tenure,
            # below the floor of its next one (PROTOCOL.md, "Upgrading a running group").
            # So a heartbeat, named or not, whose reservation the log does not hold (it
            # overtook it) confirms nothing: start again after it (AMO: what lies between is
            # lost, never repeated). A reservation whose write failed is written again
            # before its heartbeat (``Held.unknown_reservation``), so no window is lost to
            # a write that failed outright
            state = st.worlds[held.cp].partition_state(st.options.group_id, *held.key)
            if state is None or state.claimed_through < pos:
                why = "heartbeat accepted without the reservation it confirms in the log"
                restart(st, now, held, why, out)
                return
        # every later holder resumes after pos: what we had buffered up to it is ours alone
        # to hand out
        held.confirmed_through = pos
        held.claimed_through = max(held.claimed_through, pos)
    announce(held, out)


def _reservation_judged(
    st: MemberState, now: int, p: Pending, v: Verdict, held: Held, out: list[Action]
) -> None:
    """AMO: a reservation (ClaimingMessages) was judged; a refused one that the log shows
    as ours already is the answer of an earlier write of it."""
    held.reserve_token = None
    held.unknown_reservation = None
    if not v.accepted:
        why = f"ClaimingMessages rejected ({_why(v)})"
        if not st.surprise or v.reason is not Reason.OFFSET_REGRESSION:
            lose(st, held, why, out)
            return
        if not reserved_already(st, held, p.value):
            restart(st, now, held, why, out)  # still ours: the log's position wins
            return
        # the same reservation again, after a write of it whose answer we never had landed:
        # that one was accepted (confirmed by the heartbeat behind it)
    else:
        held.lease.renewed(p.sent)
    held.claimed_through = max(held.claimed_through, p.value)
    if held.heartbeat_token is None and held.confirmed_through < held.claimed_through:
        held.next_heartbeat = now  # the heartbeat behind it got no answer: confirm


def on_unknown(st: MemberState, now: int, p: Pending, out: list[Action]) -> None:
    """A write whose outcome we will not learn: retry what needs retrying."""
    held = st.held.get((p.topic, p.partition))
    if p.kind == "announce":
        st.announcing = None
        st.next_announce = now  # say it again soon: it keeps us a member
        return
    if p.kind == "leave":
        st.leaving = False  # our membership lapses by itself
        return
    if p.kind == "release":
        # it may have landed: look at the replay before writing it again (bounded), so a
        # lost answer does not put a second, rejected release in the log
        st.releases.unknown((p.topic, p.partition), now + st.options.heartbeat_interval_ms // 2)
        return
    if p.kind == "beats":
        for key, pos in p.beats:
            one = Pending("heartbeat", key[0], key[1], p.cp, p.sent, pos, p.offset, token=p.token)
            on_unknown(st, now, one, out)
        return
    if held is None:
        return  # a claim or takeover that landed anyway is adopted by the next pass
    if p.kind == "name" and held.naming_token == p.token:
        held.naming_token = None  # asked again with the next heartbeat (if it landed
        # meanwhile, that one is refused and the replay names the tenure)
    elif p.kind == "heartbeat" and held.heartbeat_token == p.token:
        held.heartbeat_token = None
        held.next_heartbeat = now
    elif p.kind == "reserve" and held.reserve_token == p.token:
        held.reserve_token = None
        # written again, with its heartbeat, before anything confirms it (if it landed,
        # the second is refused and taken as its answer: reserved_already)
        held.unknown_reservation = p.value


def check_replay(st: MemberState, cp: int, out: list[Action]) -> None:
    """The replay of ``cp`` moved: are we fenced, do we still hold what we think we hold?"""
    world = st.worlds[cp]
    mine = me(st)
    if world.is_fenced(*mine):
        become_fenced(st, out)
        return
    checked = st.replay_checked.get(cp)
    epoch = world.ownership_epoch
    if (
        checked is not None
        and checked[0] is world
        and checked[1] == epoch
        and checked[2] == st.held_changes
    ):
        return  # no holder there and nothing we hold changed since the last look
    ours = held_here(st, cp)
    for key, held in [(key, held) for key, held in st.held.items() if held.cp == cp]:
        if key not in ours:
            holder = world.holder(st.options.group_id, held.topic, held.partition)
            lose(st, held, f"the replay shows holder {holder}", out)
    st.replay_checked[cp] = (world, epoch, st.held_changes)


def reserved_already(st: MemberState, held: Held, through: int) -> bool:
    """The replay shows our claim reserved exactly through ``through``. Only its holder
    reserves, and a tenure's reservations end above its floor and grow, so that is ours: a
    write of the same reservation whose answer we never had."""
    state = st.worlds[held.cp].partition_state(st.options.group_id, *held.key)
    return state is not None and state.holder == me(st) and state.claimed_through == through


def restart(st: MemberState, now: int, held: Held, why: str, out: list[Action]) -> None:
    """A verdict we did not ask for: forget what we remember of the partition and, if the
    replay says we hold it, start again from the replay's position, with a lapsed lease
    (nothing is handed out before a heartbeat sent from here on is accepted)."""
    log.warning("%s: %s/%d: %s; starting again from the replay", me(st), *held.key, why)
    lose(st, held, why, out)
    world = st.worlds[held.cp]
    if world.holder(st.options.group_id, *held.key) != me(st):
        return
    if not st.closing and not st.fenced:
        lapsed = now - st.options.fence_after_ms
        resume = world.resume_offset(st.options.group_id, *held.key)
        if resume is not None and not held.sources:
            # a heartbeat of ours may still land behind what the replay shows (the one
            # behind a refused reservation): start after it, so the position the log records
            # never moves back (AMO: what lies between is lost, never repeated; ALO
            # heartbeats carry only committed offsets)
            resume = max(resume, held.beaten_through + 1)
            if st.options.mode == "amo":
                # nor below a seek the log has not seen yet (``handed_through``: AMO hands
                # out only what the log reserved, so beyond the replay's position only a seek
                # puts it)
                resume = max(resume, held.handed_through + 1)
        adopt(st, held.topic, held.partition, lapsed, resume, "recovered", out)


def stall_began(st: MemberState, gap: int) -> None:
    """We did not run for ``gap`` ms, longer than our lease (SIGSTOP, a GC pause, a stalled
    VM): what we remember may be stale. Write and hand out nothing until every coordination
    partition's replay has reached the log end again (docs/architecture.md, "At-most-once, enforced
    by the log"); what it shows then is checked as after any replay."""
    log.warning("%s did not run for %d ms: waiting for the replay before acting", me(st), gap)
    # every replay that goes on: a partition halted by a gap too (its group may have regained
    # partitions there), not one that went back (its replay stopped for good: core.rewind)
    st.stalled = {cp for cp in range(len(st.worlds)) if cp not in st.halted or gap_halted(st, cp)}
    st.caught_up.clear()
