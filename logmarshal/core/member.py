"""One member's decision core: events in, actions out, no I/O and no clock.

The edge owns the replay (one ``WorldState`` per coordination partition, fed in log order)
and hands the core read access to it; every event carries ``now`` (the edge's monotonic
clock, in ms, for ages and schedules) and ``wall`` (its estimate of log time, for predicting
what the log will decide: is a partition claimable yet?). Neither decides ownership: that
comes from verdicts in the replay.

:class:`MemberCore` only dispatches: its state is one record (``state.MemberState``) and
each concern is a module of functions over it (``verdicts``, ``fetching``, ``holding``,
``claims``, ``membership``, ``closing``, ``handout``; docs/architecture.md, "Consumer core:
decisions apart from threads"). The same core runs in production threads
(``logmarshal.consumer``) and in the deterministic simulator (``scenarios.sim``).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rationalizer import WorldState
from rationalizer._messages import MAX_OFFSET

from . import assignment
from .actions import Action, CatchUp, Closed
from .claims import (
    adopt_orphans,
    behind,
    claim_pass,
    claim_topics,
    next_retake,
    recover,
    released_nearby,
    retake,
)
from .closing import start_close, write_releases
from .delivery import AtMostOnce
from .events import (
    Bounds,
    Close,
    Event,
    Fetched,
    Halted,
    LogEnds,
    OutOfRange,
    Poll,
    Replayed,
    Resumed,
    Tick,
    Topics,
    WriteFailed,
    Written,
)
from .fetching import move, on_bounds, on_fetched, on_out_of_range, start_books
from .handout import HEARTBEAT_SLACK, act_held, hand_out, may_hand_out, write_beats
from .held import Held
from .holding import become_fenced, give_up
from .membership import announce_member, rebalance, target
from .options import CoreOptions
from .rewind import halt, resume
from .state import CORE_SWITCHES, Key, SharedTargets, busy, claim_of, new_state, position, read
from .verdicts import check_replay, on_unknown, resolve_landed, stall_began

__all__ = ["CORE_SWITCHES", "MemberCore"]


class MemberCore:
    """Decisions of one consumer instance. Call :meth:`step` with every event.

    ``offset_of`` reads a fetched record's offset (records are otherwise opaque here).
    ``shared_targets``: one :class:`~logmarshal.core.state.SharedTargets` for all the
    members that replay through the same ``worlds`` (they compute the group's target once).
    ``_reread_after_takeover=False`` and ``_without`` (names of :data:`CORE_SWITCHES`) are
    the simulator's experiments: what each safety rule of the core prevents
    (docs/simulation.md).
    """

    def __init__(
        self,
        options: CoreOptions,
        worlds: Sequence[WorldState],
        *,
        offset_of: Callable[[Any], int] = operator.itemgetter(0),
        shared_targets: SharedTargets | None = None,
        _reread_after_takeover: bool = True,
        _without: frozenset[str] = frozenset(),
    ) -> None:
        self._st = new_state(
            options,
            worlds,
            offset_of=offset_of,
            reread=_reread_after_takeover,
            without=_without,
            shared_targets=shared_targets,
        )
        self.options = options
        # the tick path's schedule (``_serve``): held partitions an event concerned since
        # the last pass, due heartbeats as a heap of (due, key) (an entry counts while
        # ``_beat_at[key]`` names its time), and whether to look at every held partition
        self._touched: set[Key] = set()
        #: partitions of answered MemberHeartbeats (ALO), back on the heap in the next pass
        self._requeue: list[Key] = []
        self._beats: list[tuple[int, Key]] = []
        self._beat_at: dict[Key, int] = {}
        self._sweep = False
        self._slack = int(options.heartbeat_interval_ms * HEARTBEAT_SLACK)

    # -- queries -----------------------------------------------------------------------------

    @property
    def me(self) -> tuple[str, str]:
        return (self.options.client_id, self.options.instance_id)

    @property
    def fenced(self) -> bool:
        return self._st.fenced

    @property
    def closing(self) -> bool:
        return self._st.closing

    @property
    def closed(self) -> bool:
        return self._st.closed

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self._st.topics)

    def held(self) -> list[Key]:
        return sorted(self._st.held)

    def assigned(self) -> list[Key]:
        """What we hold and have announced (``Assigned``): the log has its position."""
        return sorted(key for key, h in self._st.held.items() if h.announced)

    def paused(self) -> list[Key]:
        return sorted(self._st.paused)

    def position(self, topic: str, partition: int) -> int | None:
        """The ``last_offset`` our next heartbeat would carry (a task's source: its own part
        of it; a task: the sum its vector stands for); None if not held."""
        held = read(self._st, topic, partition)
        return None if held is None else position(self._st, held)

    def unpositioned(self, topic: str, partition: int) -> bool:
        """Held (a task's source: read) with no position known to write: its start is
        being looked up, or there is none (``auto_offset_reset="error"``, not seeked)."""
        held = read(self._st, topic, partition)
        return held is not None and held.unpositioned

    def handed_through(self, topic: str, partition: int) -> int | None:
        held = read(self._st, topic, partition)
        return None if held is None else held.handed_through

    def uncommitted(self) -> dict[Key, int]:
        return {
            s.key: (s.tracker.outstanding if s.tracker is not None else 0)
            for _, h in sorted(self._st.held.items())
            for s in h.reads
        }

    def read_ahead(
        self, topic: str, partition: int
    ) -> tuple[list[int], int | None, int | None] | None:
        """What we read ahead of hand-outs: the offsets buffered, where we fetch next and
        the token of the fetch in flight (a simulator's world model checks its answers
        against them); None if not held."""
        held = read(self._st, topic, partition)
        if held is None:
            return None
        return [r[0] for r in held.buffer], held.next_fetch, held.fetch_token

    def has_ready(self) -> bool:
        """Could a Poll hand something out (or report a missing start) right now?"""
        paused = self._st.paused
        return any(
            (s.buffer or s.no_start is not None) and s.key not in paused
            for h in self._st.held.values()
            for s in h.reads
        )

    def reserved_waiting(self) -> bool:
        """AMO: a held partition has records buffered whose reservation the log holds and
        no heartbeat of ours has confirmed yet: a verdict away from being handed out (a poll
        that gives up now could leave them to a close, which gives them back). Reserved
        records already confirmed wait for no reservation's verdict: a poll that cannot hand
        them out (our lease lapsed, say) returns at its time, not a verdict's time later
        (reserved records are buffered nearly always since reservations run ahead of the
        fetches, and such a poll then waited ``verdict_timeout`` more)."""
        paused = self._st.paused
        return self.options.mode == "amo" and any(
            h.handed_through < h.claimed_through
            and h.confirmed_through < h.claimed_through
            and h.buffer
            and key not in paused
            for key, h in self._st.held.items()
        )

    def may_hand_out(self, topic: str, partition: int, now: int) -> bool:
        """Self-fencing: the replay says we hold it (a task's source: its task) and our
        lease cannot have lapsed."""
        return may_hand_out(self._st, topic, partition, now)

    def epoch(self, topic: str, partition: int) -> int | None:
        """Our claim's fencing epoch: an offset of its coordination partition between where
        the claim (or restart takeover) landed and where the replay showed us holding it.
        Every later holder's epoch is higher, so state written under it can be fenced (the
        streams layer tags its changelog commits with it). A task's source answers for its
        task. None if not held."""
        held = claim_of(self._st, topic, partition)
        return None if held is None else held.epoch

    def lease_expiry(self, topic: str, partition: int) -> int | None:
        held = claim_of(self._st, topic, partition)
        return None if held is None else held.lease.expires_at()

    def target(self, wall: int, now: int | None = None) -> frozenset[assignment.Unit]:
        """Our share of the group's target at log time ``wall`` (a unit is a partition, or
        ``(topic, WHOLE_TOPIC)`` with entire_topic). Recomputed only when a holder or a
        member changed in the log (the worlds' ownership epochs), our subscription changed,
        or a member's announcement went stale; with ``now`` (what a step acts on), a holder
        or member that changed is taken up at most once per claim interval
        (``membership.target``)."""
        return target(self._st, wall, now)

    def buffered(self, topic: str, partition: int) -> int:
        """Records fetched and not handed out yet."""
        held = read(self._st, topic, partition)
        return 0 if held is None else sum(len(s.buffer) for s in held.reads)

    # -- synchronous commands from user code -------------------------------------------------

    def commit(self, topic: str, partition: int, offsets: Iterable[int]) -> int:
        """ALO: these offsets are handled; returns how many were outstanding."""
        held = read(self._st, topic, partition)
        if held is None or held.tracker is None:
            return 0
        return held.tracker.commit_many(offsets)

    def commit_one(self, topic: str, partition: int, offset: int) -> bool:
        """:meth:`commit` of one offset (the per-message hot path)."""
        held = read(self._st, topic, partition)
        return held is not None and held.tracker is not None and held.tracker.commit(offset)

    def pause(self, keys: Iterable[Key]) -> None:
        self._st.paused.update(keys)

    def resume(self, keys: Iterable[Key]) -> None:
        self._st.paused.difference_update(keys)

    def seek(self, now: int, topic: str, partition: int, offset: int) -> None:
        """Move a held partition (or a held task's source) to ``offset`` (and clear a
        missing start)."""
        if type(offset) is not int:
            # a float or a numpy integer stored as the position broke every later pass
            # (found by an attack on the CLI and API): an exact integer type, or an error
            if isinstance(offset, bool) or not hasattr(offset, "__index__"):
                raise TypeError(f"offset must be an int, got {offset!r}")
            offset = operator.index(offset)
        held = read(self._st, topic, partition)
        if held is None:
            raise ValueError(f"{topic}/{partition} is not held by this consumer")
        if held.sources:
            raise ValueError(f"{topic}/{partition} is a task: seek one of its source partitions")
        claim = held.task or held
        if offset < 0:
            raise ValueError(f"cannot seek to a negative offset, got {offset}")
        if offset > MAX_OFFSET:  # (past int64 it failed the core at the next heartbeat)
            raise ValueError(f"cannot seek past Kafka's largest offset {MAX_OFFSET}, got {offset}")
        if held.lookup_token is not None:
            # its start (the group's position, or the reset policy's) is not known yet:
            # what a seek could not check (AMO: below the group's position was handed out
            # already) and what the answer would overwrite. It is assigned once it is known
            raise ValueError(
                f"{topic}/{partition} is not assigned yet (its start is being looked up): "
                "seek it once it is assigned"
            )
        if self.options.mode == "amo" and offset <= held.handed_through:
            # what we reserved and have not handed out yet is ours alone to hand out (or to
            # skip); below it, only what was handed out already
            raise ValueError(
                f"AMO cannot seek {topic}/{partition} to {offset}: offsets up to "
                f"{held.handed_through} were already handed out"
            )
        had_position = not claim.unpositioned
        no_position = held.no_start is not None and held.no_start[0] < 0
        held.no_start = None
        move(self._st, held, offset)
        if no_position:
            # the log has no position (auto_offset_reset="error"): the seek's is its first,
            # as the start's answer sets it (AMO: any first reservation is taken then)
            start_books(self._st, held, offset - 1)
        if not had_position:  # the log learns the position with the next heartbeat
            claim.next_heartbeat = now
        self._touched.add(claim.key)

    def give_back(self, topic: str, partition: int, records: Sequence[Any], handout: int) -> bool:
        """AMO: ``records``, the end of hand-out ``handout`` (``HandOut.handout``) of
        ``topic``/``partition``, its last, never reached user code (``Consumer.run``'s
        handler failed for good before them, or was stopped): they are handed out again, by
        a later poll or, once released, by the next holder, instead of being lost as a
        crash loses them. False: the partition is no longer held (they are lost then, as
        the window is at a crash). ValueError: ALO (what is not committed is delivered again anyway), or not the end of
        the last batch handed out since the books last started (a claim, a seek, a reset):
        anything else may have reached user code, or been sought past."""
        if self.options.mode != "amo":
            raise ValueError("give_back is for AMO: under ALO what is not committed comes again")
        held = read(self._st, topic, partition)
        if held is None or held.sources:
            return False
        if records:
            delivery = self._st.delivery
            assert isinstance(delivery, AtMostOnce)  # (the mode's)
            delivery.give_back(held, records, handout, self._st.offset_of, self._st.give_back_guard)
            self._touched.add(held.key)
        return True

    def give_up(self, now: int, topic: str, partition: int, why: str) -> list[Action]:
        """Release a held partition while running (left to others for the cooldown)."""
        out: list[Action] = []
        st = self._st
        held = claim_of(st, topic, partition)
        if held is not None and not st.closing and not st.fenced:
            give_up(st, now, held, why, out)
            write_releases(st, now, out)
        return out

    # -- the step ----------------------------------------------------------------------------

    def step(self, now: int, event: Event, *, wall: int | None = None) -> list[Action]:
        """Apply ``event`` at ``now`` (``wall``: the estimate of log time, default ``now``)."""
        out: list[Action] = []
        st = self._st
        if st.closed:
            return out
        self._check_stall(now, out)
        if type(event) is Poll:
            # the hot path: hand out, then only what that partition needs next (a fetch, the
            # next reservation); heartbeats and claims are left to the other events' passes
            held = hand_out(st, now, event.max_records, out)
            if held is not None:
                act_held(st, now, held, out)
            if st.beat_queue:
                write_beats(st, now, out)
            return out
        wall = now if wall is None else wall
        if type(event) is Tick and self._quiet(now, wall):
            return out  # nothing is due: this Tick would change nothing
        self._apply(now, event, out)
        self._act(now, wall, out)
        if st.beat_queue:
            write_beats(st, now, out)
        return out

    def step_many(
        self, now: int, events: Iterable[Event], *, wall: int | None = None
    ) -> list[Action]:
        """Apply events that arrived together (an edge's batch: the answers of one write,
        a fetch loop's records), then decide once what to do now: what stepping them one
        by one at ``now`` does, without the passes in between. Not for ``Poll``."""
        out: list[Action] = []
        st = self._st
        if st.closed:
            return out
        self._check_stall(now, out)
        landed = False  # Written answers noted, their verdicts not looked up yet
        for event in events:
            if type(event) is Written:
                # a write's answers come together: look their verdicts up once, before the
                # next other event (in token order, as one by one)
                p = st.pending.get(event.token)
                if p is not None:
                    p.offset = event.offset
                    landed = True
                continue
            if type(event) is Poll:
                raise TypeError("a Poll is stepped on its own")
            if landed:
                self._resolve(now, out)
                landed = False
            self._apply(now, event, out)
        if landed:
            self._resolve(now, out)
        self._act(now, now if wall is None else wall, out)
        if st.beat_queue:
            write_beats(st, now, out)
        return out

    def _check_stall(self, now: int, out: list[Action]) -> None:
        st = self._st
        last, st.last_step = st.last_step, now
        if st.stall and last is not None and now - last > self.options.fence_after_ms:
            stall_began(st, now - last)
            st.stall_found_at = now
            out.append(CatchUp())

    def _answers_stall(self, event: Replayed) -> bool:
        """Whether an ``at_end`` answer counts: not one whose ends were looked up before the
        step that found our last stall. The edge builds it before stepping it; a process
        stopped in between wakes with an answer from before its stall, stepped once another
        of its threads or the very step that takes it found the stall."""
        st = self._st
        found = st.stall_found_at
        return not st.fresh_ends or found is None or event.ends_at is None or event.ends_at >= found

    def _apply(self, now: int, event: Event, out: list[Action]) -> None:
        """What ``event`` changes; notes the held partitions it concerns (``_serve``)."""
        st = self._st
        if isinstance(event, Written):
            p = st.pending.get(event.token)
            if p is not None:
                p.offset = event.offset
                self._resolve(now, out)
        elif isinstance(event, WriteFailed):
            p = st.pending.pop(event.token, None)
            if p is not None:
                self._touched.add((p.topic, p.partition))
                for key, _ in p.beats:
                    self._touched.add(key)
                on_unknown(st, now, p, out)
        elif isinstance(event, Replayed):
            if event.at_end and self._answers_stall(event):
                st.caught_up.add(event.cp)
                st.stalled.discard(event.cp)
            st.replay_moved = True
            self._resolve(now, out)
            check_replay(st, event.cp, out)
        elif isinstance(event, Fetched):
            on_fetched(st, event)
            self._touch(event.topic, event.partition)
        elif isinstance(event, OutOfRange):
            on_out_of_range(st, now, event, out)
            self._touch(event.topic, event.partition)
        elif isinstance(event, Bounds):
            on_bounds(st, now, event, out)
            self._touch(event.topic, event.partition)
        elif isinstance(event, Topics):
            st.topics = event.topics
        elif isinstance(event, LogEnds):
            behind(st, now, dict(event.ends), out)
        elif isinstance(event, Close):
            start_close(st, event.release, out)
        elif isinstance(event, Halted):
            why = (
                f"went back: the log no longer holds from offset {event.after} on what the "
                f"replay applied or this member wrote (the replay was at {event.before})"
                if event.why == "rewound"
                else f"lost records {event.before}..{event.after - 1} before the replay saw them"
            )
            halt(st, event.cp, (event.why, event.before, event.after), why, out)
            if event.why == "gap" and st.live_gap and (event.live or event.cp in st.wrote):
                # records lost after this instance wrote there may have fenced it (a newer
                # instance of its client_id taking its claims over): no world it can build
                # says, and the admin's reset voids holders and positions, not fences. A
                # fenced instance that regained after the reset would claim as if it were not
                # (PROTOCOL.md, "A coordination log that loses records"; simulator seed 659
                # with --seeks). ``live``: another core of this instance (its Marshaler's)
                # wrote there. A cold start, which never wrote, is an instance nothing fenced
                become_fenced(
                    st,
                    out,
                    f"lost records of coordination partition {event.cp} after this instance "
                    "wrote there (a newer instance of its client_id may have taken its claims "
                    "over in them); restart it",
                )
            self._sweep = True
        elif isinstance(event, Resumed):
            mark = st.halt_marks.get(event.cp)
            if event.after < 0 or mark is None or (mark[0] == "gap" and mark[2] == event.after):
                resume(st, event.cp, event.keys)
            st.replay_moved = True
        elif not isinstance(event, Tick):
            raise TypeError(f"not an event: {event!r}")

    def _caught_up(self) -> bool:
        """Has every coordination partition's replay reached the log end once (a halted one
        counts: it is acted on no more, and a rewound one's replay never ends)?"""
        st = self._st
        if len(st.caught_up) >= len(st.worlds):
            return True
        return len(st.caught_up | st.halted.keys()) >= len(st.worlds)

    def halted(self) -> dict[int, frozenset[tuple[str, int]]]:
        """Halted coordination partitions, each with the partitions resumed there."""
        return {cp: frozenset(keys) for cp, keys in self._st.halted.items()}

    def _touch(self, topic: str, partition: int) -> None:
        held = claim_of(self._st, topic, partition)
        if held is not None:
            self._touched.add(held.key)

    def _resolve(self, now: int, out: list[Action]) -> None:
        """Answer the writes the replay has reached; note the partitions they concern."""
        st = self._st
        before = st.pending.copy()
        resolve_landed(st, now, out)
        pending = st.pending
        if len(before) == len(pending) and before.keys() == pending.keys():
            return
        amo = self.options.mode == "amo"
        for token in before.keys() - pending.keys():
            p = before[token]
            if p.kind == "beats" and not amo:
                # a MemberHeartbeat's answer (ALO): each partition it carried goes back on
                # the heap of due heartbeats in the next pass (``_serve``), without act_held,
                # which would do nothing else for it: an ALO heartbeat's verdict changes no
                # fetch and reserves nothing. One whose heartbeat is due by then (its outcome
                # unknown) is touched there. Two act_held per held partition and heartbeat
                # become one (docs/performance.md, "Idle member").
                self._requeue.extend(key for key, _ in p.beats)
                continue
            self._touched.add((p.topic, p.partition))
            for key, _ in p.beats:  # (a MemberHeartbeat: every partition it carried)
                self._touched.add(key)

    # -- what is due: a Tick costs nothing per held partition -----------------------------

    def _quiet(self, now: int, wall: int) -> bool:
        """Would a Tick now change nothing? (:meth:`due` is later than ``now``.)"""
        return self.due(now, wall) > now

    def due(self, now: int, wall: int) -> int:
        """When a Tick next has work to do (clock ms): ``now`` while anything is in flux (a
        release, a drain, a stall, start-up, an event's follow-up), else the earliest of the
        next claim pass, announcement, heartbeat and target expiry (``wall``: log time, for
        the target). The same decisions as a full pass, at no cost per partition
        (docs/architecture.md, "Consumer core": a member's cost never grows with idle partitions);
        an edge on the real clock sleeps until then instead of ticking idly."""
        st = self._st
        if (
            self._touched
            or self._requeue
            or self._sweep
            or st.stalled
            or st.closing
            or st.fenced
            or st.replay_moved
            or st.releases.pending
            or st.draining
            or not st.recovered
            or not self._caught_up()
        ):
            return now
        due = min(st.next_claim, st.next_announce)
        retry = next_retake(st)
        if retry is not None:
            due = min(due, retry)
        if self._beats:
            due = min(due, self._beats[0][0])
        if self.options.rebalance != "none":
            # a target is recomputed when a member's status changes (or the log moved: events)
            if st.target is None:
                return now
            due = min(due, now + st.target_until - wall)
            if st.target_deferred:  # a holder or member changed since: the next target
                due = min(due, st.target_at + self.options.claim_interval_ms)
        return max(due, now)

    def _serve(self, now: int, out: list[Action]) -> None:
        """What held partitions need now: those an event concerned, and those whose
        heartbeat is due (kept in a heap by due time). A due heartbeat starts a pass: every
        heartbeat due within ``HEARTBEAT_SLACK`` of HB goes out with it, so a member's
        heartbeats gather into one write per coordination partition."""
        st = self._st
        touched, self._touched = self._touched, set()
        sweep, self._sweep = self._sweep, False
        requeue, self._requeue = self._requeue, []
        beats, at = self._beats, self._beat_at
        held_map = st.held
        beat_pass = False
        while beats and beats[0][0] <= now:
            t, key = heapq.heappop(beats)
            if at.get(key) != t:
                continue  # superseded
            del at[key]
            held = held_map.get(key)
            if held is not None:
                touched.add(key)
                beat_pass = beat_pass or (
                    held.heartbeat_token is None and held.next_heartbeat <= now
                )
        if beat_pass and self._slack:
            horizon = now + self._slack
            while beats and beats[0][0] <= horizon:
                t, key = heapq.heappop(beats)
                if at.get(key) != t:
                    continue
                del at[key]
                held = held_map.get(key)
                if held is not None and held.heartbeat_token is None:
                    held.next_heartbeat = now
                    touched.add(key)
        for key in requeue:
            held = held_map.get(key)
            if held is not None and held.next_heartbeat <= now:
                touched.add(key)  # due already: act_held sends it
        if touched or sweep:
            # in the order of st.held, as a pass over all of them would (tokens, writes)
            todo = (
                list(held_map.items())
                if sweep
                else [(k, held_map[k]) for k in held_map if k in touched]
            )
            for key, held in todo:
                act_held(st, now, held, out)
                self._schedule(key, held)
        if not sweep:  # (a sweep served every held partition)
            for key in requeue:
                held = held_map.get(key)
                if held is not None and key not in touched:  # (else act_held served it)
                    self._schedule(key, held)

    def _schedule(self, key: Key, held: Held) -> None:
        """Put ``held`` on the heap of due heartbeats at its next heartbeat, unless one is in
        flight (its answer puts it back) or it carries no position yet."""
        if held.heartbeat_token is not None or held.unpositioned:
            return
        t = held.next_heartbeat
        current = self._beat_at.get(key)
        if current is None or t < current:
            self._beat_at[key] = t
            heapq.heappush(self._beats, (t, key))

    def _act(self, now: int, wall: int, out: list[Action]) -> None:
        """What to do now, after any event but a poll: releases, what held partitions
        need, and (once the start-up replay is complete) recovery, our announcement and a
        claim or rebalancing pass."""
        st = self._st
        if st.stalled:
            self._sweep = True  # once the replay caught up, every held partition is looked at
            return  # nothing carrying what we remember until the replay caught up again
        write_releases(st, now, out)
        if st.closing:
            if st.releases.done and not any(
                p.kind in ("release", "leave") for p in st.pending.values()
            ):
                st.closed = True
                out.append(Closed())
            return
        if st.fenced:
            return
        self._serve(now, out)
        if not self._caught_up():
            return  # never claim before the start-up replay is complete
        if (
            self.options.rebalance != "none"
            and st.recovered
            and not st.retakes
            and now < st.next_claim
        ):
            taken: set[Key] = set()  # no claim pass is due: nothing below looks at it
        else:
            taken = busy(st)  # held or being claimed: a claim pass leaves those alone
        if not st.recovered:
            st.recovered = True
            recover(st, wall, now, taken, out)
        retake(st, wall, now, taken, out)
        announce_member(st, now, out)
        if self.options.rebalance != "none":
            # through the method, so what measures it (bench/rebalance.py) sees every call
            rebalance(st, now, wall, taken, out, self.target(wall, now))
            return
        released = st.replay_moved and released_nearby(st, now, wall)
        st.replay_moved = False
        if now < st.next_claim and not released:
            return
        st.next_claim = now + self.options.claim_interval_ms
        adopt_orphans(st, now, taken, out)
        if self.options.claim_entire_topic:
            claim_topics(st, now, wall, out)
        else:
            claim_pass(st, now, wall, released, out)
