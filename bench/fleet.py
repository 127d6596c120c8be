"""What a fleet costs: convergence and coordination load of large groups, in the simulator.

    python -m bench.fleet [--sizes 32x256,100x1024,1000x10000] [--hb-ms 100]
                          [--coordination-partitions 8] [--seed 0] [--stable-hb 5]
                          [--profile]

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

The simulator's invariants (:mod:`scenarios.sim_checks`) stay on. Large fleets run with the
simulator's opt-in ``shared_replay`` (members whose replays have reached the same offset
share one world: a replay is a pure fold, ARCHITECTURE "Bounded coordination log"); the
default simulation (``python -m scenarios.sim``) is untouched by it.
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

from logmarshal.core import Tick, Topics  # noqa: E402
from rationalizer import WorldState, coordination_partition, decode  # noqa: E402
from scenarios.sim import GROUP, TOPIC, _Instance  # noqa: E402
from scenarios.stages.sim_stage import _ScriptedSim  # noqa: E402

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
        self, seed: int, *, partitions: int, ncoord: int, hb_ms: int, shared: bool = True
    ) -> None:
        super().__init__(seed, mode="alo", partitions=partitions, faults="none")
        self.ncoord = ncoord
        self.log = [[] for _ in range(ncoord)]
        self.oracle = [self.world() for _ in range(ncoord)]
        self.hb = hb_ms
        self.max_delay = 10  # ms a write takes to land, and its answer to come back
        self.shared_replay = shared
        self.indexed_checks = True

    def start(self) -> _Instance:
        return self.join(
            rebalance="balanced", heartbeat_ms=self.hb, claim_every_ms=self.hb // 2, batch=20
        )

    def tick(self, inst: _Instance) -> None:
        def run() -> None:
            self.step(inst, Tick())
            if inst.core.has_ready():
                self.step(inst, __import__("logmarshal.core", fromlist=["Poll"]).Poll(100))
            if inst.state != "dead" and not inst.core.closed:
                nxt = self.now + self.rng.randint(self.hb // 10, self.hb // 4)
                self.at(nxt, lambda: self.tick(inst))

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

    def converge(self, stable_ms: int, limit_ms: int) -> tuple[int | None, int]:
        """Run until balanced and unchanged for ``stable_ms``; returns (when the stable window
        began, relative to now; partitions that changed holder) or (None, ...) past
        ``limit_ms``."""
        began = self.now
        before = self.holders()
        sample = max(1, self.hb // 10)
        since: int | None = None
        last = before
        moved: set[int] = set()
        while self.now - began <= limit_ms:
            self.run_until(self.now + sample)
            if self.checks.violations:
                raise SystemExit(f"simulator invariant broken: {self.checks.violations[:3]}")
            now = self.holders()
            if now != last:
                moved.update(p for p, (a, b) in enumerate(zip(last, now)) if a != b)
                moved.update(range(len(last), len(now)))
                since = None
            if since is None and self.balanced(now):
                since = self.now
            if since is not None and self.now - since >= stable_ms:
                return since - began, len([p for p in moved if p < len(before)])
            last = now
        return None, len(moved)


def replay_cost(sim: FleetSim, marks: list[int]) -> tuple[int, float]:
    """Time ``WorldState.apply_many`` over the records each coordination partition got since
    ``marks`` (its length then), its world first brought there untimed. Returns (records,
    seconds), best of 3."""
    best = float("inf")
    total = 0
    for _ in range(3):
        spent = 0.0
        total = 0
        for cp, records in enumerate(sim.log):
            world = WorldState()
            head = [(o, ts, k, v) for o, (ts, k, v) in enumerate(records[: marks[cp]])]
            world.apply_many(head)
            tail = [
                (o, ts, k, v)
                for o, (ts, k, v) in enumerate(records[marks[cp] :], start=marks[cp])
            ]
            t0 = time.perf_counter()
            world.apply_many(tail)
            spent += time.perf_counter() - t0
            total += len(tail)
        best = min(best, spent)
    return total, best


@attrs.define
class SizeResult:
    members: int
    partitions: int
    phases: list[Phase]
    window_ms: int
    records: int
    by_type: dict[str, int]
    replay_records: int
    replay_s: float
    wall_s: float
    steps: int

    @property
    def per_second(self) -> float:
        return self.records / (self.window_ms / 1000)

    @property
    def us_per_record(self) -> float:
        return self.replay_s / max(1, self.replay_records) * 1e6


def run_size(
    members: int,
    partitions: int,
    *,
    hb_ms: int,
    ncoord: int,
    seed: int,
    stable_hb: float = 5,
    limit_hb: float = 60,
) -> SizeResult:
    t_all = time.perf_counter()
    sim = FleetSim(seed, partitions=partitions, ncoord=ncoord, hb_ms=hb_ms)
    stable_ms = int(stable_hb * hb_ms)
    limit_ms = int(limit_hb * hb_ms)
    phases: list[Phase] = []

    def phase(name: str) -> None:
        t0 = time.perf_counter()
        at, moved = sim.converge(stable_ms, limit_ms)
        phases.append(
            Phase(name, len(sim.running()), sim.partitions, at, moved, time.perf_counter() - t0)
        )
        print(
            f"  {members}x{partitions} {name}: "
            + (f"{at / hb_ms:.2f} HB" if at is not None else f"not balanced in {limit_hb} HB")
            + f", {moved} moved, {time.perf_counter() - t0:.1f} s wall",
            file=sys.stderr,
            flush=True,
        )

    for _ in range(members):
        sim.start()
    phase("start")
    # steady state: a window of the same length after convergence, nothing happening
    marks = [len(r) for r in sim.log]
    w0 = sim.now
    sim.run_until(sim.now + stable_ms)
    window_ms = sim.now - w0
    by_type: Counter[str] = Counter()
    for cp, records in enumerate(sim.log):
        for ts, key, value in records[marks[cp] :]:
            by_type[type(decode(key, value)).__name__] += 1
    replay_records, replay_s = replay_cost(sim, marks)

    sim.start()
    phase("join")
    victim = max(sim.running(), key=lambda i: len(i.core.held()))
    sim.kill(victim)
    phase("crash")
    sim.grow(partitions + max(1, partitions // 4))
    phase("grow")
    return SizeResult(
        members,
        partitions,
        phases,
        window_ms,
        sum(by_type.values()),
        dict(by_type),
        replay_records,
        replay_s,
        time.perf_counter() - t_all,
        sim.steps,
    )


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        m, _, p = part.strip().partition("x")
        out.append((int(m), int(p)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="32x256,100x1024,1000x10000")
    parser.add_argument("--hb-ms", type=int, default=100)
    parser.add_argument("--coordination-partitions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stable-hb", type=float, default=5)
    parser.add_argument("--limit-hb", type=float, default=60)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for members, partitions in parse_sizes(args.sizes):
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
            )
        )
        if prof:
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
            print(s.getvalue(), file=sys.stderr)
    for r in results:
        print(r.members, r.partitions, [(p.name, p.converged_ms, p.moved) for p in r.phases],
              r.per_second, r.by_type, r.us_per_record, r.wall_s, r.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
