"""One member's decision core: events in, actions out, no I/O and no clock.

The edge owns the replay (one ``WorldState`` per coordination partition, fed in log order)
and hands the core read access to it; every event carries ``now`` (the edge's monotonic
clock, in ms, for ages and schedules) and ``wall`` (its estimate of log time, for predicting
what the log will decide: is a partition claimable yet?). Neither decides ownership: that
comes from verdicts in the replay.

The same core runs in production threads (``logmarshal.consumer``) and in the deterministic
simulator (``scenarios.sim``).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import mmh3

from rationalizer import (
    PROTOCOL_VERSION,
    AnnouncingMember,
    ClaimingMessages,
    ClaimingPartition,
    Effect,
    Heartbeat,
    HeartbeatingTask,
    LeavingGroup,
    Reason,
    ReleasingPartition,
    ReleasingTask,
    Verdict,
    WorldState,
    coordination_partition,
    encode,
    membership_partition,
)
from rationalizer.membership import Member
from rationalizer.messages import task_last_offset
from rationalizer.world import FRESH, NO_TIME

from . import assignment
from .actions import (
    Action,
    Assigned,
    CatchUp,
    Closed,
    Fetch,
    HandOut,
    LookUp,
    NoStart,
    Revoke,
    Write,
)
from .claiming import stale_at
from .delivery import delivery_for
from .events import (
    Bounds,
    Close,
    Event,
    Fetched,
    LogEnds,
    OutOfRange,
    Poll,
    Replayed,
    Tick,
    Topics,
    WriteFailed,
    Written,
)
from .held import Held, Lease
from .options import CoreOptions
from .recovery import resume_after_takeover, resume_task_after_takeover, takeover_candidates
from .release import Position, Releases

__all__ = ["MemberCore"]

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: What a simulator experiment may switch off (``MemberCore(_without=)``): restarting a
#: partition from the replay after a verdict we did not ask for ("surprise"), and waiting for
#: the replay after a stall longer than our lease ("stall").
CORE_SWITCHES = frozenset({"surprise", "stall"})
#: What each kind of write asks the log for: any other accepted effect is a surprise.
_EXPECTED = {
    "heartbeat": frozenset({Effect.RENEWED, Effect.RENEWED_LATE}),
    "reserve": frozenset({Effect.MESSAGES_CLAIMED}),
}

#: Heartbeats are sent after this fraction of HB (spread per partition, no randomness), so
#: the holder always looks fresh (< HB) to others and heartbeats do not march in step.
HEARTBEAT_SPREAD = (0.5, 0.8)


@attrs.define
class _Pending:
    kind: str  # claim | takeover | heartbeat | reserve | release | announce | leave
    topic: str
    partition: int
    cp: int
    sent: int
    value: int = -1  # the offset the record carries (position or reservation)
    offset: int | None = None  # where it landed, once known
    how: str = "claimed"  # claim: claimed or failover
    #: a task's takeover: the positions it carries (topic, last_offset)
    positions: tuple[tuple[str, int], ...] = ()
    #: the write's token (``_write`` sets it): a heartbeat or reservation answers for the
    #: tenure that wrote it, not for a later one of the same partition
    token: int = 0


class MemberCore:
    """Decisions of one consumer instance. Call :meth:`step` with every event.

    ``offset_of`` reads a fetched record's offset (records are otherwise opaque here).
    """

    def __init__(
        self,
        options: CoreOptions,
        worlds: Sequence[WorldState],
        *,
        offset_of: Callable[[Any], int] = operator.itemgetter(0),
        _reread_after_takeover: bool = True,
        _without: frozenset[str] = frozenset(),
    ) -> None:
        if len(worlds) != options.coordination_partitions:
            raise ValueError("one WorldState per coordination partition is needed")
        if not CORE_SWITCHES.issuperset(_without):
            raise ValueError(f"unknown core switches {sorted(set(_without) - CORE_SWITCHES)}")
        # private: the simulator's experiments (what each safety rule of the core prevents)
        self._surprise = "surprise" not in _without
        self._stall = "stall" not in _without
        self.options = options
        self._worlds = worlds
        self._offset_of = offset_of
        self._delivery = delivery_for(options.mode)
        # private: False reproduces issue 10's AMO restart bug (the simulator's experiment)
        self._reread = _reread_after_takeover
        self._topics: tuple[tuple[str, int], ...] = options.topics
        self._held: dict[Key, Held] = {}
        #: tasks (issue 14): task topic -> its source topics; a held task's source
        #: partitions by key (what fetches, hand-outs and commits name)
        self._tasks: dict[str, tuple[str, ...]] = dict(options.tasks)
        self._sources: dict[Key, Held] = {}
        self._pending: dict[int, _Pending] = {}
        self._caught_up: set[int] = set()
        self._recovered = not options.fast_reclaim
        self._next_claim = 0
        self._replay_moved = False
        self._token = 0
        self._cursor = 0
        self._closing = False
        self._closed = False
        self._fenced = False
        self._paused: set[Key] = set()
        self._cooldown: dict[Key, int] = {}
        self._releases = Releases(options.release_attempts)
        # membership and the target (rebalance != "none")
        self._home = membership_partition(options.group_id, options.coordination_partitions)
        self._next_announce = 0
        self._announcing: int | None = None  # token of the announcement in flight
        self._announced: tuple | None = None  # what we announced last
        self._leaving = False  # LeavingGroup written (on close)
        self._target: frozenset[assignment.Unit] | None = None
        self._target_key: tuple | None = None
        self._target_until = 0  # wall time at which a member's status changes
        self._draining: dict[Key, int] = {}  # ALO: moving away, since when
        self._released_epochs: tuple[int, ...] = ()  # "none": the worlds last looked at
        # the stall rule: when the last step ran, and the coordination partitions whose
        # replay must reach the log end before we write or hand out again after a stall
        self._last_step: int | None = None
        self._stalled: set[int] = set()

    # -- queries -----------------------------------------------------------------------------

    @property
    def me(self) -> tuple[str, str]:
        return (self.options.client_id, self.options.instance_id)

    @property
    def fenced(self) -> bool:
        return self._fenced

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self._topics)

    def held(self) -> list[Key]:
        return sorted(self._held)

    def assigned(self) -> list[Key]:
        """What we hold and have announced (``Assigned``): the log has its position."""
        return sorted(key for key, h in self._held.items() if h.announced)

    def paused(self) -> list[Key]:
        return sorted(self._paused)

    def position(self, topic: str, partition: int) -> int | None:
        """The ``last_offset`` our next heartbeat would carry (a task's source: its own part
        of it; a task: the sum its vector stands for); None if not held."""
        held = self._read(topic, partition)
        return None if held is None else self._position(held)

    def handed_through(self, topic: str, partition: int) -> int | None:
        held = self._read(topic, partition)
        return None if held is None else held.handed_through

    def uncommitted(self) -> dict[Key, int]:
        return {
            s.key: (s.tracker.outstanding if s.tracker is not None else 0)
            for _, h in sorted(self._held.items())
            for s in h.reads
        }

    def has_ready(self) -> bool:
        """Could a Poll hand something out (or report a missing start) right now?"""
        return any(
            (s.buffer or s.no_start is not None) and s.key not in self._paused
            for h in self._held.values()
            for s in h.reads
        )

    def reserved_waiting(self) -> bool:
        """AMO: a held partition has reserved records not handed out yet (a poll that gives
        up now could leave them to a close, which gives them back)."""
        return self.options.mode == "amo" and any(
            h.claimed_through > h.handed_through and h.buffer and key not in self._paused
            for key, h in self._held.items()
        )

    def may_hand_out(self, topic: str, partition: int, now: int) -> bool:
        """Self-fencing: the replay says we hold it (a task's source: its task) and our
        lease cannot have lapsed."""
        held = self._claim_of(topic, partition)
        if held is None or self._fenced or self._closing or self._stalled:
            return False
        if not held.lease.may_hand_out(now):
            return False
        group = self.options.group_id
        return self._worlds[held.cp].holder(group, held.topic, held.partition) == self.me

    def epoch(self, topic: str, partition: int) -> int | None:
        """Our claim's fencing epoch: an offset of its coordination partition between where
        the claim (or restart takeover) landed and where the replay showed us holding it.
        Every later holder's epoch is higher, so state written under it can be fenced (the
        streams layer tags its changelog commits with it). A task's source answers for its
        task. None if not held."""
        held = self._claim_of(topic, partition)
        return None if held is None else held.epoch

    def lease_expiry(self, topic: str, partition: int) -> int | None:
        held = self._claim_of(topic, partition)
        return None if held is None else held.lease.expires_at()

    # -- synchronous commands from user code -------------------------------------------------

    def commit(self, topic: str, partition: int, offsets: Iterable[int]) -> int:
        """ALO: these offsets are handled; returns how many were outstanding."""
        held = self._read(topic, partition)
        if held is None or held.tracker is None:
            return 0
        return held.tracker.commit_many(offsets)

    def commit_one(self, topic: str, partition: int, offset: int) -> bool:
        """:meth:`commit` of one offset (the per-message hot path)."""
        held = self._read(topic, partition)
        return held is not None and held.tracker is not None and held.tracker.commit(offset)

    def pause(self, keys: Iterable[Key]) -> None:
        self._paused.update(keys)

    def resume(self, keys: Iterable[Key]) -> None:
        self._paused.difference_update(keys)

    def seek(self, now: int, topic: str, partition: int, offset: int) -> None:
        """Move a held partition (or a held task's source) to ``offset`` (and clear a
        missing start)."""
        held = self._read(topic, partition)
        if held is None:
            raise ValueError(f"{topic}/{partition} is not held by this consumer")
        if held.sources:
            raise ValueError(f"{topic}/{partition} is a task: seek one of its source partitions")
        claim = held.task or held
        if offset < 0:
            raise ValueError(f"cannot seek to a negative offset, got {offset}")
        if self.options.mode == "amo" and offset <= held.claimed_through:
            raise ValueError(
                f"AMO cannot seek {topic}/{partition} to {offset}: offsets up to "
                f"{held.claimed_through} are already reserved"
            )
        had_position = not claim.unpositioned
        held.no_start = None
        self._move(held, offset)
        if not had_position:  # the log learns the position with the next heartbeat
            claim.next_heartbeat = now

    def give_up(self, now: int, topic: str, partition: int, why: str) -> list[Action]:
        """Release a held partition while running (left to others for the cooldown)."""
        out: list[Action] = []
        held = self._claim_of(topic, partition)
        if held is not None and not self._closing and not self._fenced:
            self._give_up(now, held, why, out)
            self._write_releases(now, out)
        return out

    def buffered(self, topic: str, partition: int) -> int:
        """Records fetched and not handed out yet."""
        held = self._read(topic, partition)
        return 0 if held is None else sum(len(s.buffer) for s in held.reads)

    def _read(self, topic: str, partition: int) -> Held | None:
        """What reads (topic, partition): a held partition, a held task's source partition
        (or, named by its own key, a held task)."""
        key = (topic, partition)
        held = self._sources.get(key)
        return held if held is not None else self._held.get(key)

    def _claim_of(self, topic: str, partition: int) -> Held | None:
        """The claim (topic, partition) is read under: its own, or its task's."""
        held = self._read(topic, partition)
        return None if held is None else held.task or held

    def _position(self, held: Held) -> int:
        """Our heartbeat's ``last_offset``; a task's: the sum its vector stands for (the
        input records consumed, minus one; PROTOCOL.md "Tasks")."""
        if held.sources:
            return task_last_offset(self._vector(held))
        return self._delivery.position(held)

    def _vector(self, held: Held, release: bool = False) -> tuple[tuple[str, int], ...]:
        """A task's positions, per source topic (sorted: the options keep sources so)."""
        at = self._delivery.release_position if release else self._delivery.position
        return tuple((s.topic, at(s)) for s in held.sources)

    # -- the step ----------------------------------------------------------------------------

    def step(self, now: int, event: Event, *, wall: int | None = None) -> list[Action]:
        """Apply ``event`` at ``now`` (``wall``: the estimate of log time, default ``now``)."""
        out: list[Action] = []
        if self._closed:
            return out
        last, self._last_step = self._last_step, now
        if self._stall and last is not None and now - last > self.options.fence_after_ms:
            self._stall_began(now - last)
            out.append(CatchUp())
        if type(event) is Poll:
            # the hot path: hand out, then only what that partition needs next (a fetch, the
            # next reservation); heartbeats and claims are left to the other events' passes
            held = self._hand_out(now, event.max_records, out)
            if held is not None:
                self._act_held(now, held, out)
            return out
        wall = now if wall is None else wall
        if isinstance(event, Written):
            p = self._pending.get(event.token)
            if p is not None:
                p.offset = event.offset
                self._resolve_landed(now, out)
        elif isinstance(event, WriteFailed):
            p = self._pending.pop(event.token, None)
            if p is not None:
                self._on_unknown(now, p, out)
        elif isinstance(event, Replayed):
            if event.at_end:
                self._caught_up.add(event.cp)
                self._stalled.discard(event.cp)
            self._replay_moved = True
            self._resolve_landed(now, out)
            self._check_replay(event.cp, out)
        elif isinstance(event, Fetched):
            self._on_fetched(event)
        elif isinstance(event, OutOfRange):
            self._on_out_of_range(now, event, out)
        elif isinstance(event, Bounds):
            self._on_bounds(now, event, out)
        elif isinstance(event, Topics):
            self._topics = event.topics
        elif isinstance(event, LogEnds):
            self._behind(now, dict(event.ends), out)
        elif isinstance(event, Close):
            self._start_close(event.release, out)
        elif not isinstance(event, Tick):
            raise TypeError(f"not an event: {event!r}")
        self._act(now, wall, out)
        return out

    def _stall_began(self, gap: int) -> None:
        """We did not run for ``gap`` ms, longer than our lease (SIGSTOP, a GC pause, a
        stalled VM): what we remember may be stale. Write and hand out nothing until every
        coordination partition's replay has reached the log end again (ARCHITECTURE, "At-most-
        once, enforced by the log"); what it shows then is checked as after any replay."""
        log.warning("%s did not run for %d ms: waiting for the replay before acting", self.me, gap)
        self._stalled = set(range(len(self._worlds)))
        self._caught_up.clear()

    # -- verdicts ----------------------------------------------------------------------------

    def _world(self, topic: str, partition: int) -> WorldState:
        return self._worlds[self._cp(topic, partition)]

    def _cp(self, topic: str, partition: int) -> int:
        return coordination_partition(topic, partition, len(self._worlds))

    def _resolve_landed(self, now: int, out: list[Action]) -> None:
        for token, p in list(self._pending.items()):
            if p.offset is None:
                continue
            world = self._worlds[p.cp]
            if world.applied_through < p.offset:
                continue
            del self._pending[token]
            verdict = world.verdict(p.offset)
            if verdict is None:
                self._on_unknown(now, p, out)
            else:
                self._on_verdict(now, p, verdict, out)

    def _on_verdict(self, now: int, p: _Pending, v: Verdict, out: list[Action]) -> None:
        key = (p.topic, p.partition)
        held = self._held.get(key)
        if not v.accepted and v.reason is Reason.FENCED:
            self._become_fenced(out)
            return
        if p.kind == "announce":
            self._announcing = None
            return
        if p.kind == "leave":
            self._leaving = False
            return
        if p.kind == "release":
            self._releases.answered(key)
            if v.accepted:
                log.info("%s released %s/%d at %d", self.me, p.topic, p.partition, p.value)
            else:
                log.warning("%s: release of %s/%d rejected (%s)", self.me, *key, _why(v))
            return
        if p.kind == "claim":
            if v.accepted and held is None and not self._closing and not self._fenced:
                self._adopt(p.topic, p.partition, p.sent, None, p.how, out, p.offset)
            return
        if p.kind == "takeover":
            if v.accepted and held is None and not self._closing and not self._fenced:
                resume: int | dict[str, int]
                if p.topic in self._tasks:
                    resume = resume_task_after_takeover(
                        self._worlds[p.cp],
                        self.options.group_id,
                        p.topic,
                        p.partition,
                        {t: o + 1 for t, o in p.positions},
                        reread=self._reread,
                    )
                else:
                    resume = resume_after_takeover(
                        self._worlds[p.cp],
                        self.options.group_id,
                        p.topic,
                        p.partition,
                        p.value + 1,
                        reread=self._reread,
                    )
                self._adopt(p.topic, p.partition, p.sent, resume, "took_back", out, p.offset)
                # the instance we took it from may not know yet: its lease runs at most
                # fence_after from a message it sent before our takeover landed
                self._held[key].release_after = now + self.options.fence_after_ms
            return
        if held is None or p.token not in (held.heartbeat_token, held.reserve_token):
            return  # (written for an earlier tenure of ours of this partition)
        if self._surprise and v.accepted and v.effect not in _EXPECTED.get(p.kind, (v.effect,)):
            # e.g. our heartbeat took the partition over from a newer instance of our client:
            # what we remember of it is not what the log says
            self._restart(now, held, f"{p.kind} answered {v.effect.value}", out)
            return
        if p.kind == "heartbeat":
            held.heartbeat_token = None
            if not v.accepted:
                self._lose(held, f"heartbeat rejected ({_why(v)})", out)
                return
            held.lease.renewed(p.sent)
            if p.value > held.confirmed_through and self.options.mode == "amo":
                # the log's position is now at least p.value, so whatever we had buffered up
                # to it is ours alone to hand out (every later holder resumes after it), even
                # when the reservation in front of this heartbeat never landed
                held.confirmed_through = p.value
                held.claimed_through = max(held.claimed_through, p.value)
            self._announce(held, out)
        elif p.kind == "reserve":
            held.reserve_token = None
            if not v.accepted:
                why = f"ClaimingMessages rejected ({_why(v)})"
                if not self._surprise or v.reason is not Reason.OFFSET_REGRESSION:
                    self._lose(held, why, out)
                    return
                if not self._reserved_already(held, p.value):
                    self._restart(now, held, why, out)  # still ours: the log's position wins
                    return
                # the same reservation again, after a write of it whose answer we never had
                # landed: that one was accepted (confirmed by the heartbeat behind it)
            else:
                held.lease.renewed(p.sent)
            held.claimed_through = max(held.claimed_through, p.value)
            if held.heartbeat_token is None and held.confirmed_through < held.claimed_through:
                held.next_heartbeat = now  # the heartbeat behind it got no answer: confirm

    def _on_unknown(self, now: int, p: _Pending, out: list[Action]) -> None:
        """A write whose outcome we will not learn: retry what needs retrying."""
        held = self._held.get((p.topic, p.partition))
        if p.kind == "announce":
            self._announcing = None
            self._next_announce = now  # say it again soon: it keeps us a member
            return
        if p.kind == "leave":
            self._leaving = False  # our membership lapses by itself
            return
        if p.kind == "release":
            # it may have landed: look at the replay before writing it again (bounded), so a
            # lost answer does not put a second, rejected release in the log
            self._releases.unknown((p.topic, p.partition), now + self.options.heartbeat_ms // 2)
            return
        if held is None:
            return  # a claim or takeover that landed anyway is adopted by the next pass
        if p.kind == "heartbeat" and held.heartbeat_token == p.token:
            held.heartbeat_token = None
            held.next_heartbeat = now
        elif p.kind == "reserve" and held.reserve_token == p.token:
            held.reserve_token = None  # (if it landed, the next reservation is refused)

    def _check_replay(self, cp: int, out: list[Action]) -> None:
        world = self._worlds[cp]
        if world.is_fenced(*self.me):
            self._become_fenced(out)
            return
        for held in list(self._held.values()):
            if held.cp == cp:
                holder = world.holder(self.options.group_id, held.topic, held.partition)
                if holder != self.me:
                    self._lose(held, f"the replay shows holder {holder}", out)

    # -- fetch answers -----------------------------------------------------------------------

    def _on_fetched(self, event: Fetched) -> None:
        held = self._read(event.topic, event.partition)
        if held is None or held.fetch_token != event.token:
            return  # dropped or moved while it was fetched
        held.fetch_token = None
        records = event.records
        if not records or held.next_fetch is None:
            return
        offset_of = self._offset_of
        start = held.next_fetch
        if offset_of(records[0]) < start:  # the log may answer from before the offset asked
            records = [r for r in records if offset_of(r) >= start]
            if not records:
                return
        held.buffer.extend(records)
        held.next_fetch = offset_of(records[-1]) + 1

    def _on_out_of_range(self, now: int, event: OutOfRange, out: list[Action]) -> None:
        """Apply the reset policy to a position outside the log (never abandon the claim)."""
        held = self._read(event.topic, event.partition)
        if held is None or held.fetch_token != event.token or held.next_fetch is None:
            return
        held.fetch_token = None
        offset = held.next_fetch
        reset = self.options.reset
        if reset == "error":
            held.no_start = (offset, event.start, event.end)  # a poll raises until seek()
            return
        target = event.start if reset == "earliest" else event.end
        if self.options.mode == "amo" and target <= held.claimed_through:
            # the log refuses reservations below claimed_through: wait for the log to grow
            log.error(
                "%s: %s/%d position %d is beyond the log end %d; AMO waits for the log to reach "
                "it (set the position with the admin to move back)",
                self.me,
                held.topic,
                held.partition,
                offset,
                event.end,
            )
            return
        log.warning(
            "%s: %s/%d position %d is outside the log (%d..%d); resetting to the %s offset %d",
            self.me,
            held.topic,
            held.partition,
            offset,
            event.start,
            event.end,
            reset,
            target,
        )
        self._move(held, target)

    def _on_bounds(self, now: int, event: Bounds, out: list[Action]) -> None:
        """The log's span for a new claim: start at the group's position if it is inside the
        log, else where the reset policy says (as Kafka applies ``auto.offset.reset`` to a
        group without a committed offset and to one whose offset is out of range)."""
        held = self._read(event.topic, event.partition)
        if held is None or held.lookup_token != event.token:
            return
        held.lookup_token = None
        position, reset = held.group_start, self.options.reset
        start: int
        if position is not None and (
            event.start <= position <= event.end
            or (position > event.end and self.options.mode == "amo")
        ):
            # inside the log; AMO cannot move below what the log reserved: past the end it
            # waits for the log to reach the position
            start = position
        elif reset == "error":
            offset = -1 if position is None else position
            start = 0 if position is None else position
            held.no_start = (offset, event.start, event.end)
        else:
            start = event.start if reset == "earliest" else event.end
        held.claimed_through = held.confirmed_through = start - 1
        self._delivery.start(held, start - 1)
        held.next_fetch = start
        claim = held.task or held
        claim.next_heartbeat = now  # the log learns where this claim really starts
        if claim.unpositioned and all(s.lookup_token is None for s in claim.reads):
            # no position under "error": nothing to heartbeat until seek()
            self._announce(claim, out)

    def _move(self, held: Held, offset: int) -> None:
        """Jump a held partition to ``offset``; nothing before it will be handed out."""
        if held.next_fetch is None or offset < held.next_fetch or self.options.mode == "amo":
            self._delivery.start(held, offset - 1)
        held.buffer.clear()
        held.next_fetch = offset
        held.fetch_token = None  # an answer to a fetch from the old offset is ignored

    # -- state changes -----------------------------------------------------------------------

    def _adopt(
        self,
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
        coordination partition (default: how far the replay is, which lies between that
        and any later holder's claim). A task starts each source at its position in the
        task's vector (``resume``: a takeover's)."""
        sources = self._tasks.get(topic)
        if sources is not None:
            vector = resume if isinstance(resume, dict) else self._world(
                topic, partition
            ).resume_positions(self.options.group_id, topic, partition)
            resume = None
        elif resume is None:
            resume = self._world(topic, partition).resume_offset(
                self.options.group_id, topic, partition
            )
        assert not isinstance(resume, dict)
        held = Held(
            topic=topic,
            partition=partition,
            cp=self._cp(topic, partition),
            lease=Lease(self.options.fence_after_ms, sent),
            next_fetch=None,
            handed_through=-1,
            claimed_through=-1,
            confirmed_through=-1,
            next_heartbeat=0,
            group_start=resume,
            epoch=self._worlds[self._cp(topic, partition)].applied_through
            if epoch is None
            else epoch,
        )
        held.how = how
        self._held[held.key] = held
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
                    group_start=(vector or {}).get(source),
                    task=held,
                )
                for source in sources
            )
        for read in held.reads:
            # where to start depends on the log's span (no position, or one outside the
            # log): the first heartbeat waits for it, so it carries where it really starts
            self._token += 1
            read.lookup_token = self._token
            out.append(LookUp(self._token, read.topic, read.partition))
            if read is not held:
                self._sources[read.key] = read
        log.debug("%s adopted %s/%d at %s (%s)", self.me, topic, partition,
                  resume if sources is None else vector, how)

    def _announce(self, held: Held, out: list[Action]) -> None:
        if not held.announced:
            held.announced = True
            out.append(Assigned(held.topic, held.partition, held.how, held.next_fetch))

    def _drop(self, held: Held, lost: bool, why: str, out: list[Action]) -> None:
        """No longer ours: forget it (and a task's sources), tell the edge to stop."""
        del self._held[held.key]
        for source in held.sources:
            self._sources.pop(source.key, None)
        keys = tuple(s.key for s in held.sources)
        out.append(Revoke(held.topic, held.partition, lost=lost, why=why, sources=keys))

    def _lose(self, held: Held, why: str, out: list[Action]) -> None:
        self._drop(held, True, why, out)
        self._draining.pop(held.key, None)

    def _reserved_already(self, held: Held, through: int) -> bool:
        """The replay shows our claim reserved exactly through ``through``. Only its holder
        reserves, and a tenure's reservations end above its floor and grow, so that is ours:
        a write of the same reservation whose answer we never had."""
        state = self._worlds[held.cp].partition_state(self.options.group_id, *held.key)
        return state is not None and state.holder == self.me and state.claimed_through == through

    def _restart(self, now: int, held: Held, why: str, out: list[Action]) -> None:
        """A verdict we did not ask for: forget what we remember of the partition and, if the
        replay says we hold it, start again from the replay's position, with a lapsed lease
        (nothing is handed out before a heartbeat sent from here on is accepted)."""
        log.warning("%s: %s/%d: %s; starting again from the replay", self.me, *held.key, why)
        self._lose(held, why, out)
        world = self._worlds[held.cp]
        if world.holder(self.options.group_id, *held.key) != self.me:
            return
        if not self._closing and not self._fenced:
            lapsed = now - self.options.fence_after_ms
            resume = world.resume_offset(self.options.group_id, *held.key)
            if resume is not None and not held.sources:
                # a heartbeat of ours may still land behind what the replay shows (the one
                # behind a refused reservation): start after it, so the position the log
                # records never moves back (AMO: what lies between is lost, never repeated;
                # ALO heartbeats carry only committed offsets)
                resume = max(resume, held.beaten_through + 1)
            self._adopt(held.topic, held.partition, lapsed, resume, "recovered", out)

    def _give_up(
        self, now: int, held: Held, why: str, out: list[Action], *, cooldown: bool = True
    ) -> None:
        """Release one partition while running; leave it to others for the cooldown."""
        self._drop(held, False, why, out)
        if cooldown:
            self._cooldown[held.key] = now + self.options.reclaim_cooldown_ms
        log.info("%s releases %s/%d: %s", self.me, held.topic, held.partition, why)
        self._queue_release(held)

    def _queue_release(self, held: Held) -> None:
        if held.unpositioned:
            # a release would record a position the group does not have: let it lapse
            log.info("%s: %s/%d has no position; not releasing it", self.me, *held.key)
            return
        position: Position = (
            self._vector(held, release=True)
            if held.sources
            else self._delivery.release_position(held)
        )
        self._releases.add(held.key, position, held.cp, held.release_after)

    def _become_fenced(self, out: list[Action]) -> None:
        if self._fenced:
            return
        self._fenced = True
        log.error("%s was fenced by a newer instance of its client_id; it stops", self.me)
        for held in list(self._held.values()):
            self._lose(held, "this instance is fenced", out)
        self._releases.pending.clear()

    def _start_close(self, release: bool, out: list[Action]) -> None:
        if self._closing:
            return
        self._closing = True
        for held in list(self._held.values()):
            self._drop(held, False, "closing", out)
            if release and not self._fenced:
                self._queue_release(held)
        if release and not self._fenced:
            self._release_orphans()
            if self._announced is not None:
                msg = LeavingGroup(**self._ids())
                self._write(out, _Pending("leave", "", -1, self._home, 0), msg)
                self._leaving = True
        else:
            self._releases.pending.clear()

    def _release_orphans(self) -> None:
        """On close: claims the log gives this instance that we never took up (a verdict we
        missed): give them back at the group's position (none: they lapse)."""
        world_claims = (
            (cp, c)
            for cp, world in enumerate(self._worlds)
            for c in world.claims_of(self.options.group_id, self.options.client_id)
        )
        subscribed = set(self.topics)
        for cp, c in world_claims:
            key = (c.topic, c.partition)
            if c.instance_id != self.options.instance_id or key in self._releases.pending:
                continue
            if c.topic not in subscribed:
                continue
            position = self._group_position(self._worlds[cp], key)
            if position is not None:
                self._releases.add(key, position, cp)

    def _group_position(self, world: WorldState, key: Key) -> Position | None:
        """What a record carrying the group's position for ``key`` carries: ``last_offset``,
        or a task's vector; None without a position."""
        if key[0] in self._tasks:
            vector = world.resume_positions(self.options.group_id, *key)
            return None if vector is None else tuple((t, o - 1) for t, o in sorted(vector.items()))
        r = world.resume_offset(self.options.group_id, *key)
        return None if r is None else r - 1

    # -- what to do now ----------------------------------------------------------------------

    def _write(self, out: list[Action], p: _Pending, msg: object) -> int:
        self._token += 1
        key, value = encode(msg)  # type: ignore[arg-type]
        p.token = self._token
        self._pending[self._token] = p
        out.append(Write(self._token, p.cp, key, value, p.kind))
        return self._token

    def _ids(self) -> dict[str, str]:
        o = self.options
        return {"client_id": o.client_id, "instance_id": o.instance_id, "group_id": o.group_id}

    def _act(self, now: int, wall: int, out: list[Action]) -> None:
        if self._stalled:
            return  # nothing carrying what we remember until the replay caught up again
        self._write_releases(now, out)
        if self._closing:
            if self._releases.done and not any(
                p.kind in ("release", "leave") for p in self._pending.values()
            ):
                self._closed = True
                out.append(Closed())
            return
        if self._fenced:
            return
        for held in list(self._held.values()):
            self._act_held(now, held, out)
        if len(self._caught_up) < len(self._worlds):
            return  # never claim before the start-up replay is complete
        busy = self._busy()
        if not self._recovered:
            self._recovered = True
            self._recover(wall, now, busy, out)
        self._announce_member(now, out)
        if self.options.rebalance != "none":
            self._rebalance(now, wall, busy, out)
            return
        released = self._replay_moved and self._released_nearby(now, wall)
        self._replay_moved = False
        if now < self._next_claim and not released:
            return
        self._next_claim = now + self.options.claim_every_ms
        self._adopt_orphans(now, busy, out)
        if self.options.entire_topic:
            self._claim_topics(now, wall, out)
        else:
            self._claim_pass(now, wall, released, out)

    # -- membership and the target (issue 13) ------------------------------------------------

    def _announcement(self) -> AnnouncingMember:
        o = self.options
        return AnnouncingMember(
            **self._ids(),
            topics=tuple(sorted(self._topics)),
            heartbeat_interval_ms=o.heartbeat_ms,
            weight=o.weight,
            max_claims=0 if o.max_claims >= 1 << 30 else o.max_claims,
            entire_topic=o.entire_topic,
            version=PROTOCOL_VERSION,
        )

    def _announce_member(self, now: int, out: list[Action]) -> None:
        """Keep our membership fresh (every third of HB) and say at once what changed. The
        schedule does not wait for the last announcement's verdict: a replay that lags under
        load must not let our membership lapse (only a fence in its answer matters)."""
        msg = self._announcement()
        changed = self._announced != (msg.topics, msg.weight, msg.max_claims)
        if now < self._next_announce and (not changed or self._announcing is not None):
            return
        self._announced = (msg.topics, msg.weight, msg.max_claims)
        self._next_announce = now + self.options.announce_every_ms
        self._announcing = self._write(out, _Pending("announce", "", -1, self._home, now), msg)

    def _myself(self, wall: int) -> Member:
        """Our own membership as the others will see it: we count ourselves at once."""
        msg = self._announcement()
        return Member(
            self.options.group_id,
            self.options.client_id,
            self.options.instance_id,
            wall,
            wall,
            msg.heartbeat_interval_ms,
            msg.weight,
            msg.max_claims,
            msg.entire_topic,
            msg.topics,
        )

    def target(self, wall: int) -> frozenset[assignment.Unit]:
        """Our share of the group's target at log time ``wall`` (a unit is a partition, or
        ``(topic, WHOLE_TOPIC)`` with entire_topic). Recomputed only when a holder or a
        member changed in the log (the worlds' ownership epochs), our subscription changed,
        or a member's announcement went stale."""
        home = self._worlds[self._home]
        # members are judged at the log time our replay of their partition reached, not by
        # our clock: a replay that lags under load must not make live members look stale
        # (every member announces there every HB/3, so that time keeps up with the log)
        at = min(wall, home.now) if home.now > NO_TIME else wall
        key = (tuple(w.ownership_epoch for w in self._worlds), self._topics)
        if self._target is not None and key == self._target_key and at < self._target_until:
            return self._target
        group = self.options.group_id
        live = home.members(group, at)
        others = [m for m in live if m.client_id != self.options.client_id]
        members = [m for m in others if m.counted(at)]
        members.append(self._myself(at))
        holders: dict[assignment.Unit, str] = {}
        for topic, partition in assignment.units_of(members):
            p = 0 if partition == assignment.WHOLE_TOPIC else partition
            h = self._world(topic, p).holder(group, topic, p)
            if h is not None:
                holders[(topic, partition)] = h[0]
        full = assignment.target(self.options.rebalance, members, holders)
        self._target = full.get(self.options.client_id, frozenset())
        self._target_key = key
        self._target_until = min((m.expires_at() for m in others), default=1 << 62)
        return self._target

    def _rebalance(self, now: int, wall: int, busy: set[Key], out: list[Action]) -> None:
        """Give up what the target moves away (exactly that), claim what it gives us."""
        mine = self.target(wall)
        if self.options.entire_topic:
            # a topic is ours through its partition 0; the rest follows once we hold that
            topics = {t for t, _ in mine}
            zeros = {t for t, p in self._held if p == 0 and t in topics}
            keep = {(t, p) for t, n in self._topics if t in topics for p in range(n)}
            keep = {k for k in keep if k[1] == 0 or k[0] in zeros}
        else:
            keep = set(mine)
        for held in list(self._held.values()):
            if held.key in keep:
                self._draining.pop(held.key, None)
            else:
                self._move_away(now, held, out)
        moved, self._replay_moved = self._replay_moved, False
        if now < self._next_claim and not moved:
            return  # nothing new in the log, and no pass due
        self._next_claim = now + self.options.claim_every_ms
        self._adopt_orphans(now, busy, out, keep)
        if self._group_paused(now, wall):
            return
        busy = self._not_to_claim()
        wanted = sorted(k for k in keep if k not in busy)
        if self.options.entire_topic:
            # max_claims counts topics: it limits the partitions 0, not the rest of a topic
            rest = [k for k in wanted if k[1] > 0]
            wanted = [k for k in wanted if k[1] == 0]
            for key in self._candidates(rest, now, wall):
                self._claim(now, wall, key, out)
        if wanted:
            for key in self._candidates(wanted, now, wall)[: self._wanted()]:
                self._claim(now, wall, key, out)

    def _move_away(self, now: int, held: Held, out: list[Action]) -> None:
        """The target gives ``held`` to another member: release it at its exact position.
        ALO first stops handing it out and waits (up to ``drain_ms``) for the commits of
        what it handed out, so the next holder repeats nothing."""
        reads = held.reads
        if any(s.unpositioned and s.no_start is None for s in reads):
            return  # its start is being looked up: release it once the log has a position
        if self.options.mode == "alo" and any(
            s.tracker is not None and s.tracker.outstanding for s in reads
        ):
            since = self._draining.setdefault(held.key, now)
            if now - since < self.options.drain_ms:
                return
        self._draining.pop(held.key, None)
        self._give_up(now, held, "rebalance: the target moves it", out, cooldown=False)

    def _releasing(self) -> set[Key]:
        """Partitions whose release is queued or in flight: never claimed again until it is
        answered or given up, or a late release could land on top of the new claim (it is
        ours too) and move its position back."""
        return set(self._releases.pending) | {
            (p.topic, p.partition) for p in self._pending.values() if p.kind == "release"
        }

    def _not_to_claim(self) -> set[Key]:
        """What a claim pass leaves alone: held, being claimed, or being released."""
        return self._busy() | self._releasing()

    def _busy(self) -> set[Key]:
        return set(self._held) | {
            (p.topic, p.partition)
            for p in self._pending.values()
            if p.kind not in ("release", "announce", "leave")
        }

    def _write_releases(self, now: int, out: list[Action]) -> None:
        in_flight = {(p.topic, p.partition) for p in self._pending.values() if p.kind == "release"}
        group = self.options.group_id
        for key, entry in list(self._releases.pending.items()):
            if entry[2] and self._worlds[entry[1]].holder(group, *key) != self.me:
                self._releases.answered(key)  # an earlier attempt landed (or it is not ours)
        for key, position, cp in self._releases.due(in_flight, now):
            msg = self._release_record(key, position)
            self._write(out, _Pending("release", key[0], key[1], cp, now, msg.last_offset), msg)

    def _heartbeat_record(self, key: Key, position: Position) -> Heartbeat | HeartbeatingTask:
        """The heartbeat of ``key`` carrying ``position``: a task's carries its vector."""
        where = {**self._ids(), "topic": key[0], "partition": key[1],
                 "heartbeat_interval_ms": self.options.heartbeat_ms}
        if isinstance(position, tuple):
            return HeartbeatingTask(**where, positions=position)
        return Heartbeat(**where, last_offset=position)

    def _release_record(self, key: Key, position: Position) -> ReleasingPartition | ReleasingTask:
        """The release of ``key`` at ``position``: a task's carries its vector."""
        where = {**self._ids(), "topic": key[0], "partition": key[1]}
        if isinstance(position, tuple):
            return ReleasingTask(**where, positions=position)
        return ReleasingPartition(**where, last_offset=position)

    def _wanted(self) -> int:
        """How many more partitions (topics, with entire_topic) we may bid for."""
        if self.options.entire_topic:
            held = len({t for t, p in self._busy() if p == 0})
        else:
            held = len(self._busy())
        return max(0, self.options.max_claims - held)

    def _cooling(self, key: Key, now: int) -> bool:
        until = self._cooldown.get(key)
        if until is None:
            return False
        if now >= until:
            del self._cooldown[key]
            return False
        return True

    def _candidates(self, keys: list[Key], now: int, wall: int) -> list[Key]:
        """Those of ``keys`` claimable now, in an order that starts at a point given by our
        client_id (so members do not all race for the same one); schedules the next pass for
        when the soonest other one goes stale, so a dead member's partitions are taken as
        soon as the log allows."""
        group = self.options.group_id
        out = []
        soonest: int | None = None
        for key in keys:
            if self._cooling(key, now):
                continue
            world = self._world(*key)
            if world.claimable(group, key[0], key[1], wall):
                out.append(key)
                continue
            at = stale_at(world, group, key)
            if at is not None:
                soonest = at if soonest is None else min(soonest, at)
        if soonest is not None:
            self._next_claim = min(self._next_claim, now + max(0, soonest - wall))
        if out:
            start = mmh3.hash(self.options.client_id.encode(), 0, signed=False) % len(out)
            out = out[start:] + out[:start]
        return out

    def _group_paused(self, now: int, wall: int) -> bool:
        """Inside a ReleaseGroup window (by our estimate of log time)? Try at its end."""
        ends = [w.paused_until(self.options.group_id) for w in self._worlds]
        until = max((e for e in ends if e is not None), default=None)
        if until is not None and wall < until:
            self._next_claim = min(self._next_claim, now + (until - wall) + 1)
            return True
        return False

    def _claim_pass(self, now: int, wall: int, take_all: bool, out: list[Action]) -> None:
        wanted = self._wanted()
        if wanted <= 0 or self._group_paused(now, wall):
            return
        in_flight = sum(p.kind == "claim" for p in self._pending.values())
        limit = wanted if self.options.greedy or take_all else max(0, 1 - in_flight)
        if limit <= 0:
            return
        busy = self._not_to_claim()
        keys = [(t, p) for t, n in self._topics for p in range(n) if (t, p) not in busy]
        for key in self._candidates(keys, now, wall)[:limit]:
            self._claim(now, wall, key, out)

    def _claim_topics(self, now: int, wall: int, out: list[Action]) -> None:
        """entire_topic: win partition 0, then claim the rest of the topic; give up the rest
        of a topic whose partition 0 is no longer ours."""
        held_zero = {t for t, p in self._held if p == 0}
        for held in list(self._held.values()):
            if held.topic not in held_zero:
                self._give_up(now, held, "partition 0 of its topic is no longer ours", out)
        if self._group_paused(now, wall):
            return
        busy = self._not_to_claim()
        wanted = self._wanted()
        if wanted > 0 and not any(
            p.kind == "claim" and p.partition == 0 for p in self._pending.values()
        ):
            zeros = [(t, 0) for t, n in self._topics if n > 0 and (t, 0) not in busy]
            for key in self._candidates(zeros, now, wall)[:wanted]:
                self._claim(now, wall, key, out)
        counts = dict(self._topics)
        for topic in sorted(held_zero):
            rest = [(topic, p) for p in range(1, counts.get(topic, 0)) if (topic, p) not in busy]
            for key in self._candidates(rest, now, wall):
                self._claim(now, wall, key, out)

    def _claim(self, now: int, wall: int, key: Key, out: list[Action]) -> None:
        topic, part = key
        world = self._world(topic, part)
        previous = world.holder(self.options.group_id, topic, part)
        how = "failover" if previous is not None and previous != self.me else "claimed"
        msg = ClaimingPartition(
            **self._ids(),
            topic=topic,
            partition=part,
            heartbeat_interval_ms=self.options.heartbeat_ms,
        )
        self._write(out, _Pending("claim", topic, part, self._cp(topic, part), now, how=how), msg)

    def _released_nearby(self, now: int, wall: int) -> bool:
        """Has someone released a partition we could take? Then a pass runs at once and
        takes all of them: a clean handoff costs one replay round trip, not a pass."""
        if self.options.entire_topic or self._wanted() == 0:
            return False
        epochs = tuple(w.ownership_epoch for w in self._worlds)
        if epochs == self._released_epochs:
            return False  # no holder changed since we last looked: nothing newly released
        self._released_epochs = epochs
        group = self.options.group_id
        busy = self._busy()
        subscribed = set(self.topics)
        for world in self._worlds:
            for state in world.partitions(group):
                key = (state.topic, state.partition)
                if (
                    state.holder is None
                    and state.topic in subscribed
                    and key not in busy
                    and not self._cooling(key, now)
                    and world.claimable(group, state.topic, state.partition, wall)
                ):
                    return True
        return False

    def _recover(self, wall: int, now: int, busy: set[Key], out: list[Action]) -> None:
        """Restart recovery: heartbeat our client_id's fresh claims with this instance."""
        o = self.options
        subscribed = set(self.topics)
        for world_index, world in enumerate(self._worlds):
            for c in takeover_candidates(world, o.group_id, o.client_id, o.instance_id, wall):
                key = (c.topic, c.partition)
                if c.topic not in subscribed or key in busy or self._wanted() <= 0:
                    continue
                position = self._group_position(world, key)
                if position is None:
                    continue  # no position to carry: the claim lapses, then anyone claims it
                msg = self._heartbeat_record(key, position)
                vector = position if isinstance(position, tuple) else ()
                p = _Pending("takeover", c.topic, c.partition, world_index, now,
                             msg.last_offset, positions=vector)
                self._write(out, p, msg)
                busy.add(key)

    def _adopt_orphans(
        self, now: int, busy: set[Key], out: list[Action], keep: set[Key] | None = None
    ) -> None:
        """Claims the replay says this instance holds but we do not track (an accepted claim
        whose answer was lost): take them up; beyond max_claims or outside our target
        (``keep``), give them back."""
        subscribed = set(self.topics)
        releasing = self._releasing()
        for world in self._worlds:
            for c in world.claims_of(self.options.group_id, self.options.client_id):
                key = (c.topic, c.partition)
                if c.instance_id != self.options.instance_id or key in busy:
                    continue
                if c.topic not in subscribed or key in releasing or self._cooling(key, now):
                    continue  # one we are giving back: the replay has not shown it yet
                busy.add(key)
                if self._wanted() <= 0 or (keep is not None and key not in keep):
                    # the pass went on claiming while this verdict was unknown: give it back
                    # at the group's position (none: it lapses, and "no position" stays so)
                    position = self._group_position(world, key)
                    if position is not None and key not in self._releases.pending:
                        self._releases.add(key, position, self._cp(*key))
                    continue
                # we do not know when we sent what the log accepted: start with a lapsed
                # lease, so nothing is handed out before our next heartbeat is accepted
                self._adopt(
                    c.topic, c.partition, now - self.options.fence_after_ms, None, "recovered", out
                )

    def _behind(self, now: int, ends: dict[Key, int], out: list[Action]) -> None:
        """release_if_behind: give up the partition furthest behind, if it is not catching up
        and someone else is alive to take it (never release into the void:
        zorkian/marshal#41)."""
        limit = self.options.release_if_behind
        if limit is None or self.options.entire_topic or self._closing or self._fenced:
            return
        behind: list[tuple[int, Held]] = []
        for key, end in ends.items():
            held = self._held.get(key)
            if held is None or key in self._paused:
                continue
            lag = end - held.handed_through - 1
            previous, held.lag_sample = held.lag_sample, lag
            if lag > limit and previous is not None and lag >= previous:
                behind.append((lag, held))
        if not behind or not self._other_fresh_member(now):
            return
        lag, held = max(behind, key=lambda item: item[0])
        self._give_up(now, held, f"{lag} messages behind and not catching up", out)

    def _other_fresh_member(self, wall: int) -> bool:
        group, me = self.options.group_id, self.options.client_id
        return any(
            state.holder is not None
            and state.holder[0] != me
            and world.freshness(group, state.topic, state.partition, wall) == FRESH
            for world in self._worlds
            for state in world.partitions(group)
        )

    def _heartbeat_gap(self, held: Held) -> int:
        low, high = HEARTBEAT_SPREAD
        spread = mmh3.hash(f"{held.topic}/{held.partition}".encode(), 1, signed=False) % 1000
        return int(self.options.heartbeat_ms * (low + (high - low) * spread / 1000))

    def _act_held(self, now: int, held: Held, out: list[Action]) -> None:
        o = self.options
        for read in held.reads:
            if (
                read.fetch_token is None
                and read.next_fetch is not None
                and read.no_start is None
                and len(read.buffer) < o.prefetch_records
            ):
                self._token += 1
                read.fetch_token = self._token
                out.append(Fetch(self._token, read.topic, read.partition, read.next_fetch))
        if held.unpositioned:
            return  # nothing carrying a position may be written yet
        if held.sources:  # a task (ALO): no reservations
            if held.heartbeat_token is None and now >= held.next_heartbeat:
                self._heartbeat(now, held, self._position(held), out)
            return
        first = None
        if o.mode == "amo" and self._speaks_4():
            # version 4 names where the reservation starts: where we believe the log's resume
            # point is (a stale belief is refused, not believed)
            first = self._delivery.position(held) + 1
        last = self._delivery.to_reserve(held, o.batch, self._offset_of)
        if last is not None and self.may_hand_out(held.topic, held.partition, now):
            msg = ClaimingMessages(
                **self._ids(),
                topic=held.topic,
                partition=held.partition,
                proposed_last_offset=last,
                first_offset=first,
            )
            held.reserve_token = self._write(
                out, _Pending("reserve", held.topic, held.partition, held.cp, now, last), msg
            )
            held.demand = False
            if held.heartbeat_token is None:
                # the confirming heartbeat goes right behind the reservation (same partition,
                # in order): it counts only once the reservation before it was accepted, so
                # waiting for that verdict first would only cost a round trip
                self._heartbeat(now, held, last, out)
        if held.heartbeat_token is None and now >= held.next_heartbeat:
            self._heartbeat(now, held, self._delivery.position(held), out)

    def _speaks_4(self) -> bool:
        """Records of version 4 go only into a group whose live members all announce version
        4 or later (an older replayer would skip them: PROTOCOL.md, "Upgrading a group")."""
        home = self._worlds[self._home]
        return all(m.version >= 4 for m in home.members(self.options.group_id))

    def _heartbeat(self, now: int, held: Held, position: int, out: list[Action]) -> None:
        msg = self._heartbeat_record(held.key, self._vector(held) if held.sources else position)
        held.heartbeat_token = self._write(
            out, _Pending("heartbeat", held.topic, held.partition, held.cp, now, position), msg
        )
        held.next_heartbeat = now + self._heartbeat_gap(held)
        # it may land whatever we hear back: later heartbeats never carry less
        held.beaten_through = max(held.beaten_through, position)

    def _hand_out(self, now: int, limit: int, out: list[Action]) -> Held | None:
        """A poll: one partition's records, round robin over those with something to give;
        returns the partition handed out."""
        if self._closing or self._fenced:
            return None
        paused = self._paused
        draining = self._draining
        ready = [
            read
            for h in self._held.values()  # in the order we took them: deterministic
            if h.announced  # the log has our position: nothing before our first heartbeat
            and (not draining or h.key not in draining)
            for read in h.reads
            if (read.buffer or read.no_start is not None)
            and (not paused or read.key not in paused)
        ]
        if not ready:
            return None
        start = self._cursor % len(ready)
        self._cursor += 1
        for held in ready[start:] + ready[:start]:
            if held.no_start is not None:
                out.append(NoStart(held.topic, held.partition, *held.no_start))
                return None
            claim = held.task or held
            if not self.may_hand_out(claim.topic, claim.partition, now):
                continue
            records = self._delivery.take(held, limit, self._offset_of)
            if records:
                out.append(HandOut(held.topic, held.partition, records))
                return claim
            if (
                self.options.mode == "amo"
                and held.buffer
                and held.reserve_token is None
                and held.confirmed_through >= held.claimed_through
            ):
                held.demand = True  # nothing reserved for this poll yet: reserve a batch now
                self._act_held(now, held, out)
        return None


def _why(verdict: Verdict) -> str:
    reason = verdict.reason
    return reason.value if reason is not None else "accepted"
