"""What a fleet costs: convergence and coordination load of large groups, in the simulator.

    python -m bench.fleet [--sizes 32x256,100x1024,1000x10000] [--hb-ms 100]
                          [--coordination-partitions 8] [--seed 0] [--stable-hb 5]
                          [--limit-hb 60] [--max-wall-s 600] [--profile]
                          [--protocol-versions 6,7] [--simulate-up-to 2000000]

``--protocol-versions`` runs every size once per members' cap (``protocol_version``), one
row each, in the same run: cap 6 writes a Heartbeat per held partition, cap 7 one
MemberHeartbeat per member and coordination partition (PROTOCOL.md, "Version 7"); the
heartbeats column then counts heartbeat records per HB (and, for cap 7, the partitions they
carry).

For each size (members x partitions) the deterministic simulator (:mod:`scenarios.sim`: the
real :class:`logmarshal.core.MemberCore` of every member, real ``WorldState`` replays of a
simulated ``__marshal`` whose append time is the simulated clock) runs one ALO group with
``rebalance="balanced"``, faults off, no data produced (an idle fleet: heartbeats and
announcements are the whole coordination load), through four phases:

- start: every member starts at t=0 and the group converges from nothing;
- join: one more member starts;
- crash: one member holding partitions is killed (no release; its claims must lapse);
- grow: the topic gains 25% more partitions (every member is told, as the edge would).

Each phase reports the simulated time, in HB, until the assignment is balanced (every
partition held by a running member, each holding floor(P/n) or ceil(P/n): the share
``logmarshal.core.assignment.balanced`` gives equal weights) and stays unchanged for
``--stable-hb`` HB. In the stable window after the start the bench counts the records
written to ``__marshal`` per simulated second (by type), and then times
``WorldState.apply_many`` over exactly those records (each coordination partition's world
first brought to the window's start, untimed), so the replay cost per member is the
measured per-record cost times what a member replays: every record of every coordination
partition (the target needs the holder of every partition, docs/performance.md "What a
fleet costs").

The steady window also counts heartbeat passes (:class:`Passes`): a member's pass is the
heartbeat records it wrote in one step, and the table gives a pass of the whole fleet (the
sum over the members of their records per pass) beside members x coordination partitions,
the most records one member's pass wrote into one coordination partition (1 at cap 7), and
the passes per member per HB (1.5-3: freshness is age < HB, PROTOCOL.md "Time and
freshness").

A size that spends its wall-clock budget (``--max-wall-s``) stops where it is and says so;
if it had not reached its steady state, its steady-state figures come from a log of its
shape synthesized from the core's schedule (:func:`synthesized_cost`, cap 6 and cap 7
alike), and the table says so. ``--simulate-up-to N`` sends every size of more than N
members x partitions straight to that log (no phases): 1,000 x 10,000 takes about 20
minutes a cap in the simulator. The simulator's invariants (:mod:`scenarios.sim_checks`) stay on. The fleet runs with
the simulator's opt-in economies (``Sim.shared_replay``: members of equal replay lag share
one replay, since replay is a pure fold, docs/architecture.md, "The coordination log";
``Sim.indexed_checks``); the seeded runs (``python -m scenarios.sim``) leave them off.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

import attrs

if __package__ in (None, ""):  # run as a script: python3 bench/fleet.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logmarshal.core import Poll, Replayed, Tick, Topics, Write, assignment
from logmarshal.core.handout import HEARTBEAT_GAP
from rationalizer import (
    AnnouncingMember,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    WorldState,
    coordination_partition,
    decode,
    encode,
    membership_partition,
)
from rationalizer._membership import Member
from scenarios.sim import GROUP, TOPIC, _Instance
from scenarios.stages.sim_stage import _ScriptedSim

__all__ = ["FleetSim", "Phase", "main", "run_size"]

PHASES = ("start", "join", "crash", "grow")


@attrs.define
class Phase:
    name: str
    members: int
    partitions: int
    #: simulated ms from the phase's event to the start of the stable balanced window
    converged_ms: int | None
    #: partitions whose holder changed between the phase's event and convergence
    moved: int
    wall_s: float


class FleetSim(_ScriptedSim):
    """The scripted simulator (:class:`scenarios.stages.sim_stage._ScriptedSim`: no random
    members, load or faults) at a chosen heartbeat and number of coordination partitions,
    with an idle edge: a fetch at the end of a partition waits for data (a long poll; none
    is produced) and a tick polls only when the core has something to hand out."""

    def __init__(
        self,
        seed: int,
        *,
        partitions: int,
        ncoord: int,
        hb_ms: int,
        shared: bool = True,
        protocol_version: int | None = None,
    ) -> None:
        super().__init__(seed, mode="alo", partitions=partitions, faults="none")
        self.ncoord = ncoord
        self.log = [[] for _ in range(ncoord)]
        self.oracle = [self.world() for _ in range(ncoord)]
        self.hb = hb_ms
        self.max_delay = 10  # ms a write takes to land, and its answer to come back
        self.shared_replay = shared
        self.indexed_checks = True
        self.protocol_version = protocol_version
        #: while not None, every heartbeat write as (member, simulated ms, coordination
        #: partition): a member's heartbeat pass is the writes of one of its steps
        self.beat_writes: list[tuple[str, int, int]] | None = None

    def carry(self, inst: _Instance, action: object) -> None:
        if (
            self.beat_writes is not None
            and isinstance(action, Write)
            and action.kind == "heartbeat"
        ):
            self.beat_writes.append((inst.me, self.now, action.cp))
        super().carry(inst, action)

    def start(self) -> _Instance:
        capped = (
            {} if self.protocol_version is None else {"protocol_version": self.protocol_version}
        )
        return self.join(
            rebalance="balanced",
            heartbeat_interval_ms=self.hb,
            claim_interval_ms=self.hb // 2,
            batch_size=20,
            **capped,
        )

    def tick(self, inst: _Instance) -> None:
        def run() -> None:
            self.step(inst, Tick())
            if inst.core.has_ready():
                self.step(inst, Poll(100))
            if inst.state != "dead" and not inst.core.closed:
                nxt = self.now + self.rng.randint(self.hb // 10, self.hb // 4)
                self.at(nxt, lambda: self.tick(inst))

        self.on(inst, run)

    def replay(self, inst: _Instance) -> None:
        """The simulator's replay loop, with what one round brought stepped together
        (``MemberCore.step_many``: an edge that replays every coordination partition and
        then tells the core, which decides once, not once per coordination partition)."""

        def run() -> None:
            events = [
                Replayed(cp, inst.applied[cp], at_end=True)
                for cp in range(self.ncoord)
                if self._apply_visible(inst, cp)
            ]
            if events and inst.state == "alive" and not inst.core.closed:
                for action in inst.core.step_many(self.now, events):
                    self.carry(inst, action)
                self._index_held(inst)
                self.check_holders(inst)
                if inst.core.fenced and inst.me not in self.fenced:
                    self.fenced[inst.me] = self.now / 1000
            if inst.state != "dead" and not inst.core.closed:
                self.at(self.now + self.rng.randint(3, 30), lambda: self.replay(inst))

        self.on(inst, run)

    def fetch(self, inst: _Instance, action: object, waited: bool) -> None:
        key = (action.topic, action.partition)  # type: ignore[attr-defined]
        if action.offset >= self.produced[key]:  # type: ignore[attr-defined]
            return  # a long poll that nothing answers: no data is produced here
        super().fetch(inst, action, waited)  # type: ignore[arg-type]

    def running(self) -> list[_Instance]:
        return [
            i
            for i in self.live()
            if i.state == "alive" and not i.core.fenced and not i.core.closing
        ]

    def holders(self) -> list[str | None]:
        out: list[str | None] = []
        for p in range(self.partitions):
            h = self.oracle[coordination_partition(TOPIC, p, self.ncoord)].holder(GROUP, TOPIC, p)
            out.append(None if h is None else h[0])
        return out

    def balanced(self, holders: list[str | None]) -> bool:
        members = {i.client_id for i in self.running()}
        if not members:
            return False
        counts = Counter(holders)
        if any(h not in members for h in counts):
            return False
        low, high = self.partitions // len(members), -(-self.partitions // len(members))
        return all(low <= counts.get(c, 0) <= high for c in members)

    def grow(self, partitions: int) -> None:
        """The topic gains partitions; every running member's edge reports it."""
        for p in range(self.partitions, partitions):
            self.produced[(TOPIC, p)] = 0
        self.partitions = partitions
        for inst in self.running():
            self.on(inst, lambda inst=inst: self.step(inst, Topics(((TOPIC, partitions),))))

    def converge(self, stable_ms: int, limit_ms: int, deadline: float) -> tuple[int | None, int]:
        """Run until balanced and unchanged for ``stable_ms``. Returns (simulated ms from now
        to the start of that stable window, or None past ``limit_ms``; partitions held at
        the start that ended with another holder). Raises :class:`OutOfTime` past the wall
        clock's ``deadline``."""
        began = self.now
        before = self.holders()
        sample = max(1, self.hb // 10)
        since: int | None = None
        last = before
        while self.now - began <= limit_ms:
            # the budget is checked inside the scheduler too: one sample of a large fleet
            # may hold many members' target computations
            if self.run_until(self.now + sample, stop=lambda: time.perf_counter() > deadline):
                raise OutOfTime(self.now - began)
            if self.checks.violations:
                raise SystemExit(f"simulator invariant broken: {self.checks.violations[:3]}")
            now = self.holders()
            if now != last:
                since = None
            if since is None and self.balanced(now):
                since = self.now
            if since is not None and self.now - since >= stable_ms:
                break
            last = now
        else:
            since = None
        moved = sum(1 for a, b in zip(before, last, strict=True) if a is not None and a != b)
        return (None if since is None else since - began), moved


@attrs.define
class Passes:
    """Heartbeat passes in the steady window: a member's pass is the heartbeat records it
    wrote in one step (cap 6: a Heartbeat per partition due; cap 7: a MemberHeartbeat per
    coordination partition). Freshness is age < HB (PROTOCOL.md, "Time and freshness"), so a
    member makes a pass every 0.325-0.65 HB (``HEARTBEAT_SLACK``, ``HEARTBEAT_GAP``): the
    figure per pass is what "one record per member per coordination partition" bounds."""

    #: members writing in the window, their passes, the heartbeat records of those passes
    members: int
    member_passes: int
    records: int
    #: the most records one member's pass wrote into one coordination partition
    max_per_cp: int
    #: sum over the members of the coordination partitions they hold partitions in
    member_cps: int
    #: sum over the members of their records per pass: one pass of the whole fleet
    per_pass: float


def pass_stats(writes: list[tuple[str, int, int]], member_cps: dict[str, int]) -> Passes:
    """:class:`Passes` of ``writes`` ((member, ms, coordination partition) per heartbeat
    record); ``member_cps``: each member's coordination partitions it holds partitions in."""
    per: Counter[tuple[str, int, int]] = Counter(writes)
    passes = {(m, t) for m, t, _ in writes}
    records: Counter[str] = Counter(m for m, _, _ in writes)
    count: Counter[str] = Counter(m for m, _ in passes)
    return Passes(
        members=len(count),
        member_passes=len(passes),
        records=len(writes),
        max_per_cp=max(per.values(), default=0),
        member_cps=sum(member_cps.get(m, 0) for m in count),
        per_pass=sum(records[m] / count[m] for m in count),
    )


class OutOfTime(Exception):
    """The size's wall-clock budget ran out (after this many simulated ms of the phase)."""


Cost = tuple[int, float, int, float]


def timed_replay(logs: list[tuple[list, list]], home: int) -> Cost:
    """Time ``WorldState.apply_many`` over each coordination partition's ``tail``, its world
    first brought through ``head`` untimed; best of 3 per partition. Returns (records,
    seconds) of the group's membership partition ``home`` (its announcements cost more),
    then of all the others together."""
    out = [0, 0.0, 0, 0.0]
    for cp, (head, tail) in enumerate(logs):
        best = float("inf")
        for _ in range(3):
            world = WorldState()
            world.apply_many(head)
            t0 = time.perf_counter()
            world.apply_many(tail)
            best = min(best, time.perf_counter() - t0)
        i = 0 if cp == home else 2
        out[i] += len(tail)
        out[i + 1] += best
    return out[0], out[1], out[2], out[3]


def replay_cost(sim: FleetSim, marks: list[int]) -> Cost:
    """:func:`timed_replay` over what each coordination partition got since ``marks`` (its
    length then)."""
    logs = []
    for cp, records in enumerate(sim.log):
        recs = [(o, ts, k, v) for o, (ts, k, v) in enumerate(records)]
        logs.append((recs[: marks[cp]], recs[marks[cp] :]))
    return timed_replay(logs, membership_partition(GROUP, sim.ncoord))


def target_cost(members: int, partitions: int) -> tuple[float, float]:
    """Seconds one ``assignment.target("balanced", ...)`` call takes at this size: with
    every partition already balanced over the members (what a member recomputes in the
    steady state) and with none held (the worst case: a group starting)."""
    group = [
        Member(GROUP, f"c{i:05d}", "i", 0, 100, 100, 1, 0, False, ((TOPIC, partitions),))
        for i in range(members)
    ]
    held = {(TOPIC, p): f"c{p % members:05d}" for p in range(partitions)}
    out = []
    for holders in (held, {}):
        best = float("inf")
        for _ in range(3 if members * partitions <= 200_000 else 1):
            t0 = time.perf_counter()
            assignment.target("balanced", group, holders)
            best = min(best, time.perf_counter() - t0)
        out.append(best)
    return out[0], out[1]


def synthesized_cost(
    members: int,
    partitions: int,
    hb_ms: int,
    ncoord: int,
    window_hb: float,
    protocol_version: int | None = None,
) -> tuple[dict[str, int], Cost, Passes, int]:
    """For a size the simulator could not bring to its steady state: the steady log that
    the core writes, synthesized, and ``apply_many`` timed over its window as in
    :func:`replay_cost`. Every partition is held by member ``p % members`` (claimed at
    HB/2); each member announces every HB/3 and makes a heartbeat pass every
    ``HEARTBEAT_GAP`` of HB (members spread over the gap), in which, capped at 6, it writes a
    Heartbeat of every partition it holds and, capped at 7 (the default), one
    MemberHeartbeat per coordination partition it holds partitions in, its entries naming
    every partition held there with its tenure (the claim's offset). Every record is the
    real encoder's, and a replay of the whole log must accept every one (else this raises:
    the model would not be the core's). Returns (records by type in the window, the
    timing, the window's passes, partitions the MemberHeartbeats carried)."""

    cap = 7 if protocol_version is None else protocol_version
    home = membership_partition(GROUP, ncoord)
    start = 2 * hb_ms
    end = start + int(window_hb * hb_ms)
    events: list[list[tuple[int, int, bytes, bytes]]] = [[] for _ in range(ncoord)]
    seq = 0

    def add(cp: int, ts: int, msg: object) -> None:
        nonlocal seq
        seq += 1
        events[cp].append((ts, seq, *encode(msg)))  # type: ignore[arg-type]

    def ids(m: int) -> dict[str, str]:
        return {"client_id": f"c{m:05d}", "instance_id": f"i{m:05d}", "group_id": GROUP}

    every = max(1, hb_ms // 3)
    for m in range(members):
        for ts in range(m % every, end, every):
            add(
                home,
                ts,
                AnnouncingMember(
                    **ids(m),
                    topics=((TOPIC, partitions),),
                    heartbeat_interval_ms=hb_ms,
                    version=4,
                ),
            )
    claimed = hb_ms // 2
    for p in range(partitions):
        cp = coordination_partition(TOPIC, p, ncoord)
        add(
            cp,
            claimed,
            ClaimingPartition(
                **ids(p % members),
                topic=TOPIC,
                partition=p,
                heartbeat_interval_ms=hb_ms,
                version=6,  # (what the core writes at 6 and 7: its offset names its tenure)
            ),
        )
    # a claim's offset is its tenure: every beat comes after every claim and announcement
    # before the first beat, so sorting now gives the offsets the final log has
    tenure: dict[int, int] = {}
    for cp_events in events:
        cp_events.sort()
        for offset, (ts, _, k, v) in enumerate(cp_events):
            if ts == claimed and k and type(msg := decode(k, v)) is ClaimingPartition:
                tenure[msg.partition] = offset
    held: list[dict[int, list[int]]] = [{} for _ in range(members)]
    for p in range(partitions):
        held[p % members].setdefault(coordination_partition(TOPIC, p, ncoord), []).append(p)
    gap = int(hb_ms * HEARTBEAT_GAP)
    writes: list[tuple[str, int, int]] = []
    entries_in_window = 0
    for m in range(members):
        who = ids(m)
        for ts in range(claimed + 1 + m % gap, end, gap):
            for cp, parts in sorted(held[m].items()):
                if cap >= 7:
                    msgs: list[object] = [
                        MemberHeartbeat(
                            **who,
                            heartbeat_interval_ms=hb_ms,
                            entries=tuple((TOPIC, p, tenure[p], -1) for p in sorted(parts)),
                        )
                    ]
                else:
                    msgs = [
                        Heartbeat(
                            **who,
                            topic=TOPIC,
                            partition=p,
                            last_offset=-1,
                            heartbeat_interval_ms=hb_ms,
                        )
                        for p in parts
                    ]
                for msg in msgs:
                    add(cp, ts, msg)
                    if ts >= start:
                        writes.append((who["client_id"], ts, cp))
                        entries_in_window += len(getattr(msg, "entries", ()))
    by_type: Counter[str] = Counter()
    logs = []
    for cp_events in events:
        cp_events.sort()
        recs = [(o, ts, k, v) for o, (ts, _, k, v) in enumerate(cp_events)]
        rejected = [
            (r[0], v)
            for r, v in zip(recs, WorldState().apply_many(recs), strict=True)
            if v is None or not v.accepted
        ]
        if rejected:
            raise SystemExit(f"the synthesized log is not the core's: rejected {rejected[:3]}")
        cut = next((i for i, r in enumerate(recs) if r[1] >= start), len(recs))
        logs.append((recs[:cut], recs[cut:]))
        for _, _, k, v in recs[cut:]:
            by_type[type(decode(k, v)).__name__] += 1
    member_cps = {f"c{m:05d}": len(held[m]) for m in range(members)}
    return (
        dict(by_type),
        timed_replay(logs, home),
        pass_stats(writes, member_cps),
        entries_in_window,
    )


@attrs.define
class SizeResult:
    members: int
    partitions: int
    hb_ms: int
    phases: list[Phase]
    window_ms: int = 0
    by_type: dict[str, int] = attrs.field(factory=dict)
    #: apply_many over the window: (records, s) of the membership partition, of the others
    replay: Cost = (0, 0.0, 0, 0.0)
    target_s: tuple[float, float] = (0.0, 0.0)
    wall_s: float = 0.0
    steps: int = 0
    simulated_ms: int = 0
    #: why the size did not finish (the wall-clock budget), None if it did
    stopped: str | None = None
    #: the steady-state figures come from a synthesized log (the simulation stopped first)
    synthesized: bool = False
    #: ClaimingPartition records written until the start converged (about P when members
    #: that start together hold still until they settled; about M·P when they do not)
    start_claims: int = 0
    #: the members' cap (None: the default, the newest version)
    protocol_version: int | None = None
    #: partitions the window's MemberHeartbeats carried (version 7)
    beat_entries: int = 0
    #: the window's heartbeat passes
    passes: Passes | None = None

    @property
    def records(self) -> int:
        return sum(self.by_type.values())

    @property
    def per_second(self) -> float:
        return self.records / (self.window_ms / 1000) if self.window_ms else 0.0

    @property
    def replay_records(self) -> int:
        return self.replay[0] + self.replay[2]

    @property
    def us_per_record(self) -> float:
        return (self.replay[1] + self.replay[3]) / max(1, self.replay_records) * 1e6

    def us_split(self) -> tuple[float, float]:
        """µs per record in the membership partition, in the others."""
        n1, s1, n2, s2 = self.replay
        return s1 / max(1, n1) * 1e6, s2 / max(1, n2) * 1e6

    @property
    def replay_cpu(self) -> float:
        """Fraction of one core a member spends replaying ``__marshal`` (all of it)."""
        return self.per_second * self.us_per_record / 1e6


def run_size(
    members: int,
    partitions: int,
    *,
    hb_ms: int,
    ncoord: int,
    seed: int,
    stable_hb: float = 5,
    limit_hb: float = 60,
    max_wall_s: float = 600,
    log: bool = True,
    protocol_version: int | None = None,
    simulate: bool = True,
) -> SizeResult:
    """The four phases at one size (module docstring); ``simulate=False``: none of them,
    the steady state from the synthesized log alone (:func:`synthesized_cost`)."""
    t_all = time.perf_counter()
    deadline = t_all + max_wall_s
    sim = FleetSim(
        seed, partitions=partitions, ncoord=ncoord, hb_ms=hb_ms, protocol_version=protocol_version
    )
    stable_ms = int(stable_hb * hb_ms)
    limit_ms = int(limit_hb * hb_ms)
    result = SizeResult(members, partitions, hb_ms, [], protocol_version=protocol_version)
    result.target_s = target_cost(members, partitions)

    def phase(name: str) -> None:
        t0 = time.perf_counter()
        n = len(sim.running()) if name != "start" else members
        try:
            at, moved = sim.converge(stable_ms, limit_ms, deadline)
        except OutOfTime as e:
            result.stopped = (
                f"{name}: wall-clock budget of {max_wall_s:.0f} s spent, "
                f"{e.args[0] / hb_ms:.1f} HB into the phase"
            )
            raise
        result.phases.append(Phase(name, n, sim.partitions, at, moved, time.perf_counter() - t0))
        if log:
            print(
                f"  {members}x{partitions} {name}: "
                + (f"{at / hb_ms:.2f} HB" if at is not None else f"not balanced in {limit_hb} HB")
                + f", {moved} moved, {time.perf_counter() - t0:.1f} s wall",
                file=sys.stderr,
                flush=True,
            )

    try:
        if not simulate:
            result.stopped = "not simulated (--simulate-up-to): steady state synthesized"
            raise OutOfTime(0)
        for _ in range(members):
            sim.start()
        phase("start")
        result.start_claims = sum(
            1
            for records in sim.log
            for _ts, key, value in records
            if type(decode(key, value)) is ClaimingPartition
        )
        # the steady state: a window as long as the stable one, nothing happening
        marks = [len(r) for r in sim.log]
        w0 = sim.now
        sim.beat_writes = []
        sim.run_until(sim.now + stable_ms)
        result.window_ms = sim.now - w0
        result.passes = pass_stats(
            sim.beat_writes,
            {
                i.me: len({coordination_partition(t, p, ncoord) for t, p in i.core.held()})
                for i in sim.running()
            },
        )
        sim.beat_writes = None
        by_type: Counter[str] = Counter()
        for cp, records in enumerate(sim.log):
            for _ts, key, value in records[marks[cp] :]:
                msg = decode(key, value)
                by_type[type(msg).__name__] += 1
                result.beat_entries += len(getattr(msg, "entries", ()))
        result.by_type = dict(by_type)
        result.replay = replay_cost(sim, marks)
        sim.start()
        phase("join")
        victim = max(sim.running(), key=lambda i: len(i.core.held()))
        sim.kill(victim)
        phase("crash")
        sim.grow(partitions + max(1, partitions // 4))
        phase("grow")
    except OutOfTime:
        if not result.window_ms:
            window_hb = stable_ms / hb_ms
            result.by_type, result.replay, result.passes, result.beat_entries = synthesized_cost(
                members, partitions, hb_ms, ncoord, window_hb, protocol_version
            )
            result.window_ms = stable_ms
            result.synthesized = True
    result.wall_s = time.perf_counter() - t_all
    result.steps = sim.steps
    result.simulated_ms = sim.now
    return result


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        m, sep, p = part.strip().partition("x")
        if not sep:
            raise argparse.ArgumentTypeError(f"a size is MEMBERSxPARTITIONS, got {part!r}")
        out.append((int(m), int(p)))
    return out


def _phase_cell(r: SizeResult, name: str) -> str:
    for ph in r.phases:
        if ph.name == name:
            if ph.converged_ms is None:
                return "not balanced"
            moved = "" if name == "start" else f" ({ph.moved} moved)"
            return f"{ph.converged_ms / r.hb_ms:.1f} HB{moved}"
    return "-"


def _pass_cell(r: SizeResult, ncoord: int, hbs: float) -> str:
    ps = r.passes
    if ps is None or not ps.member_passes or not hbs:
        return "-"
    return (
        f"{ps.per_pass:,.0f} ({ps.max_per_cp}) / {ps.members * ncoord:,} ({ps.member_cps:,}); "
        f"{ps.member_passes / ps.members / hbs:.2f}"
    )


def table(results: list[SizeResult], hb_ms: int, ncoord: int) -> str:
    """The figures as a Markdown table (docs/performance.md, "What a fleet costs")."""
    head = (
        "| members x partitions (cap) | start → balanced (claims written) | join | crash | grow +25% "
        f"| `__marshal` records/s (HB {hb_ms} ms) | heartbeats / announcements per HB "
        "| heartbeat records per pass (most of one member in one CP) / members x CPs "
        "(x CPs held in); passes per member per HB "
        "| apply_many µs/record: all (membership partition / others) | replay CPU per member | target() s, steady / from nothing "
        "| simulated s | wall s |"
    )
    lines = [head, "|" + " --- |" * 13]
    for r in results:
        hbs = r.window_ms / r.hb_ms if r.window_ms else 0
        beats = (
            (r.by_type.get("Heartbeat", 0) + r.by_type.get("MemberHeartbeat", 0)) / hbs
            if hbs
            else 0
        )
        carried = f" ({r.beat_entries / hbs:,.0f} partitions)" if hbs and r.beat_entries else ""
        ann = r.by_type.get("AnnouncingMember", 0) / hbs if hbs else 0
        rate = f"{r.per_second:,.0f}" if r.window_ms else "-"
        if r.synthesized:
            rate += " (synthesized log)"
        cells = [
            f"{r.members} x {r.partitions}"
            + ("" if r.protocol_version is None else f" ({r.protocol_version})"),
            _phase_cell(r, PHASES[0]) + (f" ({r.start_claims:,})" if r.start_claims else ""),
            *(_phase_cell(r, n) for n in PHASES[1:]),
            rate,
            f"{beats:,.0f}{carried} / {ann:,.0f}" if hbs else "-",
            _pass_cell(r, ncoord, hbs),
            (
                f"{r.us_per_record:.2f} ({r.us_split()[0]:.1f} / {r.us_split()[1]:.2f})"
                if r.replay_records
                else "-"
            ),
            f"{r.replay_cpu:.1%} of a core" if r.replay_records else "-",
            f"{r.target_s[0]:.4f} / {r.target_s[1]:.3f}",
            f"{r.simulated_ms / 1000:.1f}",
            f"{r.wall_s:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [r for r in results if r.stopped]
    for r in notes:
        lines.append(
            f"\n{r.members} x {r.partitions} stopped: {r.stopped} "
            f"({r.steps:,} steps, {r.simulated_ms / 1000:.2f} s simulated)."
        )
    lines.append(
        f"\n{ncoord} coordination partitions; convergence in HB of simulated time until the "
        "assignment is balanced and then stays unchanged; moved = partitions that changed "
        "holder. Replay CPU per member = records/s x apply_many's µs/record (every member "
        "replays every coordination partition). A pass: the heartbeat records one member "
        "wrote in one step; per pass = the sum over the members of their heartbeat records per pass."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=parse_sizes("32x256,100x1024,1000x10000"),
        help="MEMBERSxPARTITIONS, comma separated",
    )
    parser.add_argument("--hb-ms", type=int, default=100, help="the members' heartbeat (ms)")
    parser.add_argument("--coordination-partitions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stable-hb",
        type=float,
        default=5,
        help="balanced and unchanged for this many HB counts as converged",
    )
    parser.add_argument(
        "--limit-hb",
        type=float,
        default=60,
        help="give a phase up after this many HB of simulated time",
    )
    parser.add_argument(
        "--max-wall-s",
        type=float,
        default=600,
        help="wall-clock budget per size; a size that runs out says where",
    )
    parser.add_argument(
        "--simulate-up-to",
        type=int,
        help="simulate only sizes of at most this many members x partitions; a larger size "
        "gets its steady-state figures from a synthesized log alone (no phases)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile each size")
    parser.add_argument(
        "--protocol-versions",
        help="comma-separated members' caps, each size run once per cap (default: the newest)",
    )
    args = parser.parse_args(argv)
    caps: list[int | None] = (
        [int(v) for v in args.protocol_versions.split(",")] if args.protocol_versions else [None]
    )
    if args.hb_ms < 10:
        parser.error("--hb-ms must be at least 10")
    results = []
    for (members, partitions), cap in ((size, cap) for size in args.sizes for cap in caps):
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        results.append(
            run_size(
                members,
                partitions,
                hb_ms=args.hb_ms,
                ncoord=args.coordination_partitions,
                seed=args.seed,
                stable_hb=args.stable_hb,
                limit_hb=args.limit_hb,
                max_wall_s=args.max_wall_s,
                protocol_version=cap,
                simulate=args.simulate_up_to is None or members * partitions <= args.simulate_up_to,
            )
        )
        if prof:
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
            print(s.getvalue(), file=sys.stderr)
    print(table(results, args.hb_ms, args.coordination_partitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
