"""A hand-driven group for schedule tests: real ``MemberCore``s and real ``WorldState``s over
one coordination partition, no randomness, a manual clock.

The test decides when each write lands (``land``), when each member's replay moves
(``replay``) and when a member runs at all (a member left out of ``run`` is frozen). Every
hand-out is recorded per offset, so a test can assert that none was handed out twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs

from logmarshal.core import (
    Bounds,
    Close,
    CoreOptions,
    Fetch,
    Fetched,
    HandOut,
    LookUp,
    MemberCore,
    OutOfRange,
    Poll,
    Replayed,
    Tick,
    Write,
    WriteFailed,
    Written,
)
from rationalizer import WorldState, decode
from scenarios.sim_rules import rules_without

HB = 100
GROUP = "g"
TOPIC = "t"


@attrs.define(eq=False)
class Member:
    core: MemberCore
    world: WorldState
    #: writes sent and not landed yet, in the order sent
    outbox: list[Write] = attrs.field(factory=list)
    fetches: list[Fetch] = attrs.field(factory=list)
    lookups: list[LookUp] = attrs.field(factory=list)
    #: how many more records user code will take (a poll asks for at most this many)
    budget: int = 0
    #: the transport is stuck (FIFO): writes are reported failed but kept, in order, in
    #: ``transit``, to land late (``land_transit``)
    stuck: bool = False
    transit: list[Write] = attrs.field(factory=list)

    @property
    def me(self) -> tuple[str, str]:
        return self.core.me


@attrs.define
class Group:
    """The log, the members and the hand-outs; ``now`` moves only when the test says so."""

    produced: int = 1000
    batch: int = 30
    #: AMO: records reserved and not handed out, per partition (None: the default window)
    max_reserved: int | None = None
    now: int = 0
    log: list[tuple[int, bytes, bytes]] = attrs.field(factory=list)
    #: the verdict of every record, from a replay of the whole log (the oracle)
    oracle: WorldState = attrs.field(factory=WorldState)
    verdicts: list[str] = attrs.field(factory=list)
    handed: dict[int, list[tuple[tuple[str, str], int]]] = attrs.field(
        factory=lambda: defaultdict(list)
    )
    members: list[Member] = attrs.field(factory=list)
    #: rules every replay (the oracle's and each member's) is built without (an experiment:
    #: ``WorldState(rules=rules_without(...))``)
    rules_off: frozenset[str] = frozenset()
    #: what every member's core is built without (``MemberCore(_without=...)``)
    core_off: frozenset[str] = frozenset()
    #: every member's cap (``CoreOptions.protocol_version``; None: the newest)
    protocol_version: int | None = None
    #: the data log is ``data_start..produced-1``: a fetch outside it is answered OutOfRange
    #: (as Kafka answers one below the log start or past the log end), counted here
    data_start: int = 0
    out_of_range: int = 0
    #: fetch answers tell the log's end (``Fetched.log_end``), as the network and embedded
    #: readers do; off, they tell nothing (-1: AMO reserves only what was fetched)
    tell_log_end: bool = False

    def __attrs_post_init__(self) -> None:
        if self.rules_off:
            self.oracle = WorldState(rules=rules_without(self.rules_off))

    def start(self, client_id: str, instance_id: str, budget: int = 0, **options: Any) -> Member:
        """A member of the group (``options``: CoreOptions beside the group's)."""
        settings = dict(
            group_id=GROUP,
            client_id=client_id,
            instance_id=instance_id,
            topics=((TOPIC, 1),),
            coordination_partitions=1,
            mode="amo",
            heartbeat_interval_ms=HB,
            batch_size=self.batch,
            prefetch=self.batch,
            max_reserved=self.max_reserved,
            claim_interval_ms=HB // 2,
            rebalance="none",
            **(
                {} if self.protocol_version is None else {"protocol_version": self.protocol_version}
            ),
        )
        settings.update(options)
        world = WorldState(
            rules=rules_without(self.rules_off)
        )  # the member's own replay (its core reads it)
        core = MemberCore(CoreOptions(**settings), [world], _without=self.core_off)
        m = Member(core, world, budget=budget)
        self.members.append(m)
        self.replay(m)
        return m

    # -- one member's process -----------------------------------------------------------------

    def step(self, m: Member, event: object) -> None:
        self.carry(m, m.core.step(self.now, event))  # type: ignore[arg-type]

    def carry(self, m: Member, actions: list[object]) -> None:
        for action in actions:
            if isinstance(action, Write):
                m.outbox.append(action)
            elif isinstance(action, Fetch):
                m.fetches.append(action)
            elif isinstance(action, LookUp):
                m.lookups.append(action)
            elif isinstance(action, HandOut):
                offsets = [o for o, _ in action.records]
                m.budget -= len(offsets)
                for o in offsets:
                    self.handed[o].append((m.me, self.now))

    def land(self, m: Member, count: int | None = None) -> None:
        """Append the first ``count`` (all) of ``m``'s writes to the log and answer them
        (stuck: report them failed and keep them in ``transit``)."""
        n = len(m.outbox) if count is None else count
        if m.stuck:  # what failing them makes the core write (a retry) waits for next time
            for _ in range(len(m.outbox)):
                self.fail(m)
            return
        for action in m.outbox[:n]:
            offset = len(self.log)
            self.log.append((self.now, action.key, action.value))
            verdict = self.oracle.apply(offset, self.now, action.key, action.value)
            msg = decode(action.key, action.value)
            self.verdicts.append(f"{self.now} {type(msg).__name__} {m.me}: {_verdict(verdict)}")
            self.step(m, Written(action.token, offset))
        del m.outbox[:n]

    def fail(self, m: Member, index: int = 0) -> Write:
        """Report ``m``'s write ``index`` failed; the test keeps it (it may land later)."""
        action = m.outbox.pop(index)
        m.transit.append(action)
        self.step(m, WriteFailed(action.token))
        return action

    def land_transit(self, m: Member) -> None:
        """Everything reported failed and kept lands now, in the order it was sent."""
        transit, m.transit = m.transit, []
        for action in transit:
            self.land_late(m, action)

    def land_late(self, m: Member, action: Write, answered: bool = False) -> None:
        """A write lands now, out of the order it was sent in: one reported failed (no
        answer: the member gave up on it), or one still waiting (``answered``: the member
        hears where it landed)."""
        if action in m.transit:
            m.transit.remove(action)
        if action in m.outbox:
            m.outbox.remove(action)
        offset = len(self.log)
        self.log.append((self.now, action.key, action.value))
        verdict = self.oracle.apply(offset, self.now, action.key, action.value)
        msg = decode(action.key, action.value)
        self.verdicts.append(f"{self.now} LATE {type(msg).__name__} {m.me}: {_verdict(verdict)}")
        if answered:
            self.step(m, Written(action.token, offset))

    def replay(self, m: Member, through: int | None = None) -> None:
        end = len(self.log) - 1 if through is None else through
        for off in range(m.world.applied_through + 1, end + 1):
            m.world.apply(off, *self.log[off])
        self.step(m, Replayed(0, end, at_end=True))

    def serve(self, m: Member) -> None:
        """Answer the member's look-ups and fetches (the data log is ``data_start`` to
        ``produced - 1``)."""
        lookups, m.lookups = m.lookups, []
        for a in lookups:
            self.step(m, Bounds(a.token, a.topic, a.partition, self.data_start, self.produced))
        fetches, m.fetches = m.fetches, []
        for a in fetches:
            if a.offset < self.data_start or a.offset > self.produced:
                self.out_of_range += 1
                bounds = (a.token, a.topic, a.partition, self.data_start, self.produced)
                self.step(m, OutOfRange(*bounds))
                continue
            records = tuple((o, b"") for o in range(a.offset, min(self.produced, a.offset + 100)))
            end = self.produced if self.tell_log_end else -1
            self.step(m, Fetched(a.token, a.topic, a.partition, records, end))

    def position(self) -> int | None:
        """The log's resume offset of p0 (None: the group has no position)."""
        return self.oracle.resume_offset(GROUP, TOPIC, 0)

    def hand_out_ahead(self, m: Member, base: int = 0) -> None:
        """``m`` (holding p0 at ``base``) hands out base..base+34 and reserves ahead through
        base+64 (a window of 30, as test_amo_window's ``_running_ahead``)."""
        self.run([m], until=self.now + HB // 2)
        for budget in (10, 10, 25):
            m.budget = budget
            self.poll(m)
            self.land(m)
            self.replay(m)
        assert self.handed_by(m) == list(range(base, base + 35)), describe(self)
        assert self.oracle.partition_state(GROUP, TOPIC, 0).claimed_through == base + 64

    def poll(self, m: Member) -> None:
        if m.budget > 0:
            self.step(m, Poll(m.budget))

    def close(self, m: Member) -> None:
        self.step(m, Close())

    # -- everyone who runs --------------------------------------------------------------------

    def run(
        self,
        running: list[Member],
        until: int,
        every: int = 10,
        dropped: Callable[[Write], bool] | None = None,
    ) -> None:
        """The running members (the others are frozen) tick, write, replay and poll every
        ``every`` ms until ``until``; their writes land at once, but those ``dropped`` says
        of, which are reported failed and kept (never landed unless the test lands them)."""
        while self.now < until:
            self.now = min(until, self.now + every)
            for m in running:
                if m.core.closed:
                    continue
                self.step(m, Tick())
                self._land_but(m, dropped)
                self.replay(m)
                self.serve(m)
                self.poll(m)
                self._land_but(m, dropped)
                self.replay(m)

    def _land_but(self, m: Member, dropped: Callable[[Write], bool] | None) -> None:
        if dropped is not None:
            for w in [w for w in m.outbox if dropped(w)]:
                self.fail(m, m.outbox.index(w))
        self.land(m)

    def repeats(self) -> dict[int, list[tuple[tuple[str, str], int]]]:
        """Offsets handed out more than once: offset -> (instance, time) of each hand-out."""
        return {o: h for o, h in sorted(self.handed.items()) if len(h) > 1}

    def handed_by(self, m: Member) -> list[int]:
        return sorted(o for o, h in self.handed.items() if any(me == m.me for me, _ in h))


def _verdict(v: object) -> str:
    if v is None:
        return "?"
    if len(getattr(v, "entries", ())) == 1:  # a one-entry MemberHeartbeat: its entry's
        v = v.entries[0]  # type: ignore[attr-defined]
    if v.accepted:  # type: ignore[attr-defined]
        return f"accepted {v.effect.value}"  # type: ignore[attr-defined]
    return f"rejected {v.reason.value}"  # type: ignore[attr-defined]


def describe(group: Group) -> str:
    """For an assertion message: the repeats, and the verdicts of the log."""
    reps = group.repeats()
    head = f"{len(reps)} offsets handed out twice"
    if reps:
        first, last = min(reps), max(reps)
        head += f" ({first}..{last}, e.g. {first}: {reps[first]})"
    return head + "\n" + "\n".join(group.verdicts)


__all__ = ["GROUP", "HB", "TOPIC", "Group", "Member", "describe"]
