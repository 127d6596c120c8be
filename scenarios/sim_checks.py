"""The simulator's invariants (docs/architecture.md, "Deterministic simulation"), judged from the
simulated log and the hand-outs, not from what the cores believe about themselves.

Positions move backwards only through an admin reset (a pause admin's heartbeat accepted as
``POSITION_SET``), with two exceptions the protocol states and the summary counts: a restart
takeover (ALO's predecessor's later progress, D1), and a late heartbeat that names no tenure
(a version 1 Heartbeat or version 3 HeartbeatingTask, which only members capped below 7 write
for a named tenure) landing where no rule can tell it is late: in a tenure without a name, or
below the tenure's floor (PROTOCOL.md, "Upgrading a running group": writes that overtake
each other while members are capped below 7). So AMO's "never handed out twice" forgives
exactly what an admin rewound: offset ``o`` handed out again is allowed when, between the
two, an admin set a position below ``o`` *after the lease under which it was first handed
out began* (a holder may still hand out what it reserved before the reset landed, until its
lease runs out; the reset rewinds that
too). Any other repeat is a violation. ALO's "every produced offset was handed out" excuses
offsets an admin moved the group past.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from rationalizer import (
    Effect,
    Heartbeat,
    HeartbeatingTask,
    MemberHeartbeat,
    PartitionState,
    Verdict,
    WorldState,
)

__all__ = ["Checks"]

Key = tuple[str, int]
_RENEWS = frozenset(
    {
        Effect.CLAIMED,
        Effect.TOOK_OVER_STALE,
        Effect.RESTART_TAKEOVER,
        Effect.RENEWED,
        Effect.RENEWED_LATE,
        Effect.MESSAGES_CLAIMED,
    }
)


@attrs.define
class Checks:
    mode: str
    fence_after_ms: int
    #: tasks: source topic -> the task it is read under (its records' claim is the task's)
    task_of: dict[str, str] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)
    #: (topic, partition) -> offset -> hand-outs (instance, time, log time of the accepted
    #: record whose lease it was handed out under)
    handed: dict[Key, dict[int, list[tuple[tuple[str, str], int, int]]]] = attrs.field(
        factory=lambda: defaultdict(dict)
    )
    #: (topic, partition) -> admin resets: (log time, last_offset it set), in log order
    resets: dict[Key, list[tuple[int, int]]] = attrs.field(factory=lambda: defaultdict(list))
    #: (instance, topic, partition) -> log times of its accepted records, in order
    accepted_at: dict[tuple[tuple[str, str], str, int], list[int]] = attrs.field(
        factory=lambda: defaultdict(list)
    )
    #: (topic, partition) -> highest max(last_offset, claimed_through) seen in the log
    positions: dict[Key, int] = attrs.field(factory=dict)
    #: AMO releases that gave back offsets already handed out: violations (in
    #: ``violations`` too) that do not stop the run, so it shows the repeat they cause
    gave_back: list[str] = attrs.field(factory=list)
    #: positions a restart takeover moved back (not a violation, counted for the summary)
    takeover_rewinds: int = 0
    #: positions a late heartbeat naming no tenure moved back where no rule can tell it is
    #: late (module docstring; not a violation, counted for the summary)
    unnamed_rewinds: int = 0
    #: (instance, coordination partition) -> the highest send number of its writes landed
    #: there so far: a record that lands below it was overtaken by a later write of its
    #: writer's (what makes a heartbeat late)
    sent_landed: dict[tuple[tuple[str, str], int], int] = attrs.field(factory=dict)
    #: other violations that do not stop the run, so it shows what they cause (a truncation
    #: that deleted what a running configuration needs: the cold starts after it)
    going_on: list[str] = attrs.field(factory=list)
    #: the user-hand schedule (:mod:`scenarios.sim_seeks`): (topic, partition) -> each seek
    #: or reset, (time, what the instance had handed out through, target, instance, the
    #: writes sent before it). ALO may skip what lies between; only that instance's records
    #: sent after it move its position back to the target, whenever they land (its next
    #: heartbeats, however late a freeze or the transport makes them; instance None: any)
    seeks: dict[Key, list[tuple[int, int, int, object, int]]] = attrs.field(
        factory=lambda: defaultdict(list)
    )
    #: member writes sent so far (the simulator counts them): a write's number in send order
    sends: int = 0
    #: the data log's first offset where retention moved it
    log_start: dict[Key, int] = attrs.field(factory=dict)

    def fail(self, now: int, what: str) -> None:
        self.violations.append(f"t={now}: {what}")

    def fail_and_go_on(self, now: int, what: str) -> None:
        """A violation after which the run goes on (it shows what the violation causes)."""
        self.going_on.append(f"t={now}: {what}")
        self.fail(now, what)

    @property
    def stop(self) -> bool:
        """A violation that ends the run (every one but a release that gave back and those
        recorded with :meth:`fail_and_go_on`)."""
        return len(self.violations) > len(self.gave_back) + len(self.going_on)

    def landed(
        self,
        world: WorldState,
        msg: object,
        verdict: Verdict | None,
        ts: int,
        entry: bool = False,
        sent: tuple[int, int] | None = None,
        overtaken: bool = False,
        number: int | None = None,
    ) -> None:
        """Called after the oracle world applied one record ``msg`` at log time ``ts``
        (``entry``: ``msg`` is a MemberHeartbeat's entry, which names its tenure; ``sent``:
        a member's write, (coordination partition, its number in send order); ``overtaken``,
        for an entry: its record was; ``number``, for an entry: its record's send number)."""
        if sent is not None:
            number = sent[1]
        if sent is not None and hasattr(msg, "instance_id"):
            writer = ((msg.client_id, msg.instance_id), sent[0])  # type: ignore[attr-defined]
            top = self.sent_landed.get(writer, -1)
            overtaken = sent[1] < top
            self.sent_landed[writer] = max(top, sent[1])
        if isinstance(msg, MemberHeartbeat) and verdict is not None:
            # version 7: each entry is its partition's heartbeat, with its own verdict
            for (topic, part, _, last), v in zip(msg.entries, verdict.entries, strict=True):
                beat = Heartbeat(
                    client_id=msg.client_id,
                    instance_id=msg.instance_id,
                    group_id=msg.group_id,
                    topic=topic,
                    partition=part,
                    last_offset=last,
                    heartbeat_interval_ms=msg.heartbeat_interval_ms,
                )
                self.landed(world, beat, v, ts, entry=True, overtaken=overtaken, number=number)
            return
        if verdict is None or not verdict.accepted or not hasattr(msg, "partition"):
            return
        me = (msg.client_id, msg.instance_id)  # type: ignore[attr-defined]
        topic, part = msg.topic, msg.partition  # type: ignore[attr-defined]
        if verdict.effect in _RENEWS:
            self.accepted_at[(me, topic, part)].append(ts)
        state = world.partition_state(msg.group_id, topic, part)  # type: ignore[attr-defined]
        if state is None or not state.has_position:
            return
        if state.positions is not None:  # a task: each source's position
            positions = [((s, part), o) for s, o in state.positions]
        elif topic in self.task_of.values():
            return  # a task's record without a vector: none of ours write one
        else:
            positions = [((topic, part), max(state.last_offset, state.claimed_through))]
        for key, pos in positions:
            before = self.positions.get(key, -1)
            if verdict.effect is Effect.POSITION_SET:
                self.resets[key].append((ts, pos))  # the admin may move it anywhere
            elif verdict.effect is Effect.RELEASED and self.mode == "amo":
                # rule 6: a release gives back reservations never handed out; it must never
                # give back an offset that anyone handed out (since an admin rewound it)
                seen = self.handed.get(key, {})
                top = max(
                    (o for o, outs in seen.items() if not self._rewound(key, o, outs[-1], ts)),
                    default=-1,
                )
                if pos < top:
                    # a violation, but the run goes on: it shows the double delivery it causes
                    self.gave_back.append(f"t={ts}: {key} released at {pos} below offset {top}")
                    self.fail(ts, f"{key} released at {pos} below offset {top}, handed out")
            elif pos < before and verdict.effect is Effect.RESTART_TAKEOVER:
                # D1: the takeover heartbeat carries the position the new instance read; an
                # ALO predecessor's later progress is handed out again (allowed by ALO)
                self.takeover_rewinds += 1
            elif pos < before and overtaken and self._unnamed_late(msg, verdict, state, entry):
                self.unnamed_rewinds += 1
            elif pos < before and self.mode == "alo" and self._sought_back(key, pos, me, number):
                pass  # user code sought back there (ALO hands it out again)
            elif pos < before:
                self.fail(ts, f"position of {key} moved back to {pos} without an admin reset")
            self.positions[key] = pos

    @staticmethod
    def _unnamed_late(msg: object, verdict: Verdict, state: PartitionState, entry: bool) -> bool:
        """A holder's heartbeat that names no tenure (a version 1 Heartbeat, not an entry;
        a version 3 HeartbeatingTask), overtaken by a later write of its writer's (the
        caller knows), set this position where property g does not judge it: the tenure has
        no name, or the position is below the tenure's floor (a late one of an earlier
        tenure, or a reset policy's: the record cannot say which)."""
        if verdict.effect not in (Effect.RENEWED, Effect.RENEWED_LATE):
            return False
        if isinstance(msg, Heartbeat):
            unnamed = not entry
        else:
            unnamed = isinstance(msg, HeartbeatingTask) and msg.tenure is None
        floor = state.tenure_floor
        # (a task's floor is of its vector's scalar, which the record's last_offset is)
        below = floor is not None and msg.last_offset < floor  # type: ignore[attr-defined]
        return unnamed and (state.tenure is None or below)

    def handed_out(self, now: int, me: tuple[str, str], key: Key, offsets: list[int]) -> None:
        claim = self.task_of.get(key[0], key[0])  # a task's source is handed out under it
        times = self.accepted_at.get((me, claim, key[1]), [])
        last = max((t for t in times if t <= now), default=None)
        if last is None or now >= last + self.fence_after_ms:
            self.fail(
                now,
                f"{me} handed out {key} {offsets[0]}..{offsets[-1]} after its lease "
                f"(last accepted record at {last})",
            )
        seen = self.handed[key]
        base = -1 if last is None else last
        for off in offsets:
            earlier = seen.setdefault(off, [])
            if earlier and self.mode == "amo" and not self._rewound(key, off, earlier[-1], now):
                self.fail(
                    now,
                    f"AMO: {key} offset {off} handed out twice: by {earlier[-1][0]} at "
                    f"{earlier[-1][1]} and by {me}",
                )
            earlier.append((me, now, base))

    def _rewound(
        self, key: Key, off: int, before: tuple[tuple[str, str], int, int], now: int
    ) -> bool:
        """Did an admin set ``key``'s position below ``off`` after the lease under which
        ``before`` handed it out began (and by ``now``)?"""
        _, _, lease_from = before
        return any(lease_from < t <= now and pos < off for t, pos in self.resets.get(key, ()))

    def went_back(self, now: int, key: Key, pos: int) -> None:
        """The log lost records (the simulator's rewind): ``key``'s position is ``pos``
        again. Like an admin reset at ``now``: members that never saw the lost records
        resume there and may hand out again what a lost reservation covered, which no
        member can see. A lease a lost record granted stands until it ends (its holder
        learned it; it cannot learn the loss before its replay's next step). What stays
        forbidden: acting on a world the log no longer holds (a lease renewed after the
        loss by a record the log does not accept, two holders once both could know)."""
        self.resets[key].append((now, pos))
        self.positions[key] = pos

    def sought(self, now: int, key: Key, through: int, target: int, who: object = None) -> None:
        """User code sought ``key`` to ``target``; the instance had handed out through
        ``through``: ALO may skip what lies between (a seek forward). ``who``: the instance
        whose records sent from now on may move the position back to ``target - 1``
        (None: any record)."""
        self.seeks[key].append((now, through, target, who, self.sends))

    def truncated(self, key: Key, start: int) -> None:
        """Retention moved ``key``'s log start to ``start``: what nobody handed out below
        it is gone (ALO cannot hand it out)."""
        self.log_start[key] = max(start, self.log_start.get(key, 0))

    def _sought_back(self, key: Key, pos: int, writer: object, number: int | None) -> bool:
        """Was ``writer``'s record (send number ``number``) sent after it sought ``key`` to
        ``pos + 1`` or below (or a reset took it there)? Exact, whenever the record lands:
        a window of time after the seek excused a heartbeat that a freeze delayed only if the
        window counted the freeze (seed 3537), and would excuse a record sent before it."""
        return any(
            target <= pos + 1
            and (who is None or (who == writer and number is not None and number > sent))
            for _, _, target, who, sent in self.seeks.get(key, ())
        )

    def _skipped(self, key: Key, offset: int) -> bool:
        """ALO: did a seek forward skip ``offset``, or retention delete it?"""
        if offset < self.log_start.get(key, 0):
            return True
        return any(
            through < offset < target for _, through, target, _, _ in self.seeks.get(key, ())
        )

    def holders(self, now: int, key: Key, clients: set[str]) -> None:
        if len(clients) > 1:
            self.fail(now, f"{key} may be handed out by {sorted(clients)} at once")

    def complete(self, now: int, produced: dict[Key, int]) -> None:
        """ALO, after the group settled: every produced offset was handed out."""
        if self.mode != "alo":
            return
        for key, n in produced.items():
            skipped = max((pos for _, pos in self.resets.get(key, ())), default=-1)
            handed = self.handed[key]
            missing = [
                o for o in range(skipped + 1, n) if o not in handed and not self._skipped(key, o)
            ]
            if missing:
                self.fail(
                    now, f"ALO: {key} never handed out {len(missing)} offsets, first {missing[0]}"
                )
