"""Deterministic simulation of a consumer group (ARCHITECTURE, "Deterministic simulation").

    python -m scenarios.sim --seeds 1000            # seeds 0..999, summary
    python -m scenarios.sim --seed 42 --trace       # replay one seed and print its trace

One process, one thread: a seeded scheduler (``random.Random(seed)``) interleaves members
running the real :class:`logmarshal.core.MemberCore` over real ``rationalizer.WorldState``
replays of a simulated ``__marshal`` whose append time is the simulated clock (records are
encoded and decoded with the real codec and placed with the real coordination-partition
choice). Faults: kill, freeze past 2·HB and thaw, restart under the same client_id (the old
instance sometimes lingers as a zombie), joins and graceful leaves, delayed / dropped /
duplicated writes, writes that land but report failure, lost answers. After the faults stop
the group settles and the invariants of :mod:`scenarios.sim_checks` are judged.

Half the ALO seeds claim *tasks* (issue 14) instead of partitions: partition p of the task
``t`` is one claim under which partition p of the source topics ``a`` and ``b`` is read, and
its heartbeats and releases carry both positions.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import random
import sys
import time
from collections.abc import Callable

import attrs

from logmarshal.core import (
    Bounds,
    CatchUp,
    Close,
    Closed,
    CoreOptions,
    Fetch,
    Fetched,
    HandOut,
    LookUp,
    MemberCore,
    Poll,
    Replayed,
    Revoke,
    Tick,
    Write,
    WriteFailed,
    Written,
)
from rationalizer import WorldState, coordination_partition, decode

from .sim_checks import Checks

__all__ = ["Result", "run_seed"]

log = logging.getLogger(__name__)

GROUP = "g"
#: the claim unit's name: the topic, or (tasks) the task whose sources are TASK_SOURCES
TOPIC = "t"
TASK_SOURCES = ("a", "b")
HB = 100  # ms
#: after the faults stop, the group must be balanced within this many HB (a member killed
#: late is rejoined up to 3·HB later, its lapsed partitions move 2·HB after that) ...
BALANCED_AFTER = 10
#: ... and then stay still (no partition moves) for this many HB
STEADY = 20

Key = tuple[str, int]


@attrs.define
class _Instance:
    client_id: str
    instance_id: str
    core: MemberCore
    worlds: list[WorldState]
    state: str = "alive"  # alive | frozen | dead
    postponed: list[Callable[[], None]] = attrs.field(factory=list)
    #: last offset of each coordination partition this instance's replay applied
    applied: list[int] = attrs.field(factory=list)
    #: how far (ms) this instance's replay trails the log (fetch latency of the replay)
    lag: int = 0

    @property
    def me(self) -> tuple[str, str]:
        return (self.client_id, self.instance_id)


@attrs.frozen
class Result:
    seed: int
    mode: str  # alo | amo, "+tasks" when the seed claims tasks
    violations: tuple[str, ...]
    sim_ms: int
    steps: int
    trace: tuple[str, ...]


class Sim:
    """One seeded run. Everything random comes from ``self.rng``; ties in time are broken by
    insertion order, so a seed replays exactly."""

    def __init__(
        self,
        seed: int,
        *,
        fix: bool = True,
        trace: bool = False,
        rebalance: str | None = None,
        units: str | None = None,
    ) -> None:
        rng = self.rng = random.Random(seed)
        self.seed = seed
        self.fix = fix
        self.tracing = trace
        self.trace: list[str] = []
        self.mode = rng.choice(("alo", "amo"))
        self.partitions = rng.randint(1, 4)
        self.ncoord = rng.randint(1, 3)
        self.fault_ms = rng.randint(10, 30) * HB
        #: the group must have settled by then (ALO: handed out everything produced)
        self.end_ms = self.fault_ms + 100 * HB
        self.now = 0
        self.steps = 0
        self._seq = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self.log: list[list[tuple[int, bytes, bytes]]] = [[] for _ in range(self.ncoord)]
        # issue 10's experiment (fix=False) needs property a off too: since protocol version 4
        # the log itself refuses a restart takeover that carries an old position
        # (and property c, and the core's restart after a surprising verdict: each of them
        # alone stops this bug now)
        self.rules_off = (
            frozenset() if fix else frozenset({"takeover_position", "reservation_start"})
        )
        self.core_off = frozenset() if fix else frozenset({"surprise"})
        self.oracle = [WorldState(_without=self.rules_off) for _ in range(self.ncoord)]
        #: what the members claim: partitions of TOPIC, or tasks (ALO only; drawn from a
        #: generator of its own, so the partition seeds replay as before tasks existed)
        if units is None:
            units = "partitions"
            if self.mode == "alo" and random.Random(f"tasks-{seed}").random() < 0.5:
                units = "tasks"
        if units == "tasks":
            self.mode = "alo"
        self.sources = TASK_SOURCES if units == "tasks" else (TOPIC,)
        self.produced = {(s, p): 0 for s in self.sources for p in range(self.partitions)}
        self.instances: list[_Instance] = []
        self._clients = 0
        self._instances = 0
        margin = HB // 4
        self.checks = Checks(
            self.mode, 2 * HB - margin, {s: TOPIC for s in self.sources if s != TOPIC}
        )
        self.faults = rng.random() < 0.9
        self.p_drop = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_dup = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_fail = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.p_lost_answer = rng.choice((0.0, 0.02, 0.1)) if self.faults else 0.0
        self.max_delay = rng.choice((2, 10, 40))
        #: the group's strategy (issue 13); "balanced" runs also check the target is reached
        #: after the faults and that nothing moves in the steady state after it
        self.rebalance = rebalance or rng.choice(("balanced", "balanced", "none"))
        self.balanced_ms = self.fault_ms + BALANCED_AFTER * HB
        self._steady: dict[Key, str | None] | None = None

    # -- scheduling --------------------------------------------------------------------------

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, fn))

    def note(self, text: str) -> None:
        if self.tracing:
            self.trace.append(f"{self.now:>7} {text}")

    def in_faults(self) -> bool:
        return self.now < self.fault_ms

    def run(self) -> Result:
        for _ in range(self.rng.randint(1, 4)):
            self.join()
        self.at(0, self.produce)
        if self.faults:
            self.at(self.rng.randint(1, 4) * HB, self.fault)
        self.at(self.fault_ms, self.settle)
        self.at(self.fault_ms + 2 * HB, self.settled)
        if self.rebalance != "none":
            self.at(self.balanced_ms, self.check_balanced)
            self.at(self.balanced_ms + STEADY * HB, self.check_steady)
        while self._queue and not self.checks.violations:
            t, _, fn = heapq.heappop(self._queue)
            if t > self.end_ms:
                break
            self.now = t
            self.steps += 1
            fn()
        if not self.checks.violations:
            self.now = self.end_ms
            self.checks.complete(self.now, self.produced)
        return Result(
            self.seed,
            self.mode + ("+tasks" if self.sources != (TOPIC,) else ""),
            tuple(self.checks.violations),
            self.now,
            self.steps,
            tuple(self.trace),
        )

    # -- members -----------------------------------------------------------------------------

    def join(self, client_id: str | None = None, **core_options: object) -> _Instance:
        """A new member instance (of a new client unless ``client_id`` is given); the
        scripted stage (:mod:`scenarios.stages.sim`) passes more ``CoreOptions``."""
        if client_id is None:
            self._clients += 1
            client_id = f"c{self._clients}"
        self._instances += 1
        worlds = [WorldState(_without=self.rules_off) for _ in range(self.ncoord)]
        options = CoreOptions(
            group_id=GROUP,
            client_id=client_id,
            instance_id=f"i{self._instances}",
            topics=((TOPIC, self.partitions),),
            coordination_partitions=self.ncoord,
            mode=self.mode,
            heartbeat_ms=HB,
            batch=core_options.pop("batch", self.rng.choice((1, 5, 20))),
            claim_every_ms=HB // 2,
            rebalance=core_options.pop("rebalance", self.rebalance),
            tasks=((TOPIC, self.sources),) if self.sources != (TOPIC,) else (),
            **core_options,  # type: ignore[arg-type]
        )
        core = MemberCore(options, worlds, _reread_after_takeover=self.fix, _without=self.core_off)
        inst = _Instance(client_id, options.instance_id, core, worlds)
        inst.applied = [-1] * self.ncoord
        inst.lag = self.rng.choice((0, 5, 20, 60))
        self.instances.append(inst)
        self.note(f"start {inst.me}")
        self.at(self.now, lambda: self.replay(inst))
        self.at(self.now + 1, lambda: self.tick(inst))
        return inst

    def live(self) -> list[_Instance]:
        return [i for i in self.instances if i.state != "dead" and not i.core.closed]

    def on(self, inst: _Instance, fn: Callable[[], None]) -> None:
        """Run ``fn`` in ``inst``'s process: dropped if it is dead, postponed if frozen."""
        if inst.state == "dead":
            return
        if inst.state == "frozen":
            inst.postponed.append(fn)
            return
        fn()

    def step(self, inst: _Instance, event: object) -> None:
        if inst.state != "alive" or inst.core.closed:
            return
        actions = inst.core.step(self.now, event)  # type: ignore[arg-type]
        for action in actions:
            self.carry(inst, action)
        self.check_holders(inst)

    def tick(self, inst: _Instance) -> None:
        def run() -> None:
            self.step(inst, Tick())
            for _ in inst.core.uncommitted():  # user code polls: one partition's batch each time
                self.step(inst, Poll(self.rng.choice((1, 10, 100))))
            if inst.state != "dead" and not inst.core.closed:
                self.at(self.now + self.rng.randint(HB // 10, HB // 4), lambda: self.tick(inst))

        self.on(inst, run)

    def replay(self, inst: _Instance) -> None:
        def run() -> None:
            for cp in range(self.ncoord):
                records = self.log[cp]
                start = inst.applied[cp] + 1
                end = len(records)
                while end > start and records[end - 1][0] > self.now - inst.lag:
                    end -= 1  # not visible to this instance's replay yet
                if start < end or start == 0:
                    for off in range(start, end):
                        ts, key, value = records[off]
                        inst.worlds[cp].apply(off, ts, key, value)
                    inst.applied[cp] = end - 1
                    self.step(inst, Replayed(cp, end - 1, at_end=True))
            if inst.state != "dead" and not inst.core.closed:
                self.at(self.now + self.rng.randint(3, 30), lambda: self.replay(inst))

        self.on(inst, run)

    def catch_up(self, inst: _Instance) -> None:
        """The edge's answer to CatchUp: replay to the log end this instance can see now,
        then say so for every coordination partition (also where nothing was new)."""

        def run() -> None:
            for cp in range(self.ncoord):
                records = self.log[cp]
                end = len(records)
                while end > inst.applied[cp] + 1 and records[end - 1][0] > self.now - inst.lag:
                    end -= 1
                for off in range(inst.applied[cp] + 1, end):
                    ts, key, value = records[off]
                    inst.worlds[cp].apply(off, ts, key, value)
                inst.applied[cp] = max(inst.applied[cp], end - 1)
                self.step(inst, Replayed(cp, inst.applied[cp], at_end=True))

        self.on(inst, run)

    # -- the edge: carrying actions out -------------------------------------------------------

    def carry(self, inst: _Instance, action: object) -> None:
        rng = self.rng
        if isinstance(action, Write):
            msg = decode(action.key, action.value)
            self.note(f"{inst.me} sends {action.kind} {_short(msg)} -> cp{action.cp}")
            timeout = 2 * self.max_delay + HB
            if self.in_faults() and rng.random() < self.p_drop:
                self.note(f"  write {action.token} of {inst.me} dropped")
                self.at(
                    self.now + timeout,
                    lambda: self.on(inst, lambda: self.step(inst, WriteFailed(action.token))),
                )
                return
            land = self.now + rng.randint(0, self.max_delay)

            def landed() -> None:
                offset = self.append(action.cp, action.key, action.value)
                if self.in_faults() and rng.random() < self.p_dup:
                    self.append(action.cp, action.key, action.value)
                if self.in_faults() and rng.random() < self.p_fail:
                    answer: object = WriteFailed(action.token)
                    when = self.now + rng.randint(0, self.max_delay)
                elif self.in_faults() and rng.random() < self.p_lost_answer:
                    answer = WriteFailed(action.token)
                    when = max(self.now, land) + timeout
                else:
                    answer = Written(action.token, offset)
                    when = self.now + rng.randint(0, self.max_delay)
                self.at(when, lambda: self.on(inst, lambda: self.step(inst, answer)))

            self.at(land, landed)
        elif isinstance(action, Fetch):
            self.at(
                self.now + rng.randint(0, self.max_delay), lambda: self.fetch(inst, action, False)
            )
        elif isinstance(action, LookUp):
            key = (action.topic, action.partition)
            bounds = Bounds(action.token, action.topic, action.partition, 0, self.produced[key])
            self.at(
                self.now + rng.randint(0, self.max_delay),
                lambda: self.on(inst, lambda: self.step(inst, bounds)),
            )
        elif isinstance(action, HandOut):
            offsets = [o for o, _ in action.records]
            key = (action.topic, action.partition)
            self.note(f"{inst.me} HANDS OUT {key} {offsets[0]}..{offsets[-1]}")
            self.checks.handed_out(self.now, inst.me, key, offsets)
            inst.core.commit(action.topic, action.partition, offsets)  # ALO: handled at once
        elif isinstance(action, Revoke):
            self.note(
                f"{inst.me} revokes {action.topic}/{action.partition} lost={action.lost}: {action.why}"
            )
        elif isinstance(action, CatchUp):
            self.note(f"{inst.me} asks to catch up")
            self.at(self.now + rng.randint(0, self.max_delay), lambda: self.catch_up(inst))
        elif isinstance(action, Closed):
            self.note(f"{inst.me} closed")

    def fetch(self, inst: _Instance, action: Fetch, waited: bool) -> None:
        key = (action.topic, action.partition)
        n = self.produced[key]
        if action.offset >= n and not waited:
            self.at(self.now + HB // 2, lambda: self.fetch(inst, action, True))
            return
        records = tuple((o, b"") for o in range(action.offset, min(n, action.offset + 100)))
        self.on(
            inst,
            lambda: self.step(inst, Fetched(action.token, action.topic, action.partition, records)),
        )

    def append(self, cp: int, key: bytes, value: bytes) -> int:
        offset = len(self.log[cp])
        self.log[cp].append((self.now, key, value))
        world = self.oracle[cp]
        verdict = world.apply(offset, self.now, key, value)
        msg = decode(key, value)
        self.note(f"  cp{cp}@{offset} {_short(msg)}: {_verdict(verdict)}")
        self.checks.landed(world, msg, verdict, self.now)
        return offset

    def check_holders(self, inst: _Instance) -> None:
        """Only a step can let a core hand out (time passing only takes that away), so after
        ``inst``'s step compare its partitions with every other live instance's."""
        for topic, p in inst.core.held():
            if not inst.core.may_hand_out(topic, p, self.now):
                continue
            clients = {
                i.client_id
                for i in self.instances
                if i.state == "alive" and i.core.may_hand_out(topic, p, self.now)
            }
            self.checks.holders(self.now, (topic, p), clients)

    # -- load and faults ---------------------------------------------------------------------

    def produce(self) -> None:
        if not self.in_faults():
            return
        p = self.rng.randrange(self.partitions)
        source = self.sources[0] if len(self.sources) == 1 else self.rng.choice(self.sources)
        self.produced[(source, p)] += self.rng.randint(1, 5)
        self.at(self.now + self.rng.randint(1, 20), self.produce)

    def fault(self) -> None:
        if not self.in_faults():
            return
        rng = self.rng
        live = [i for i in self.live() if i.state == "alive"]
        kind = rng.choice(("kill", "freeze", "restart", "restart", "join", "leave"))
        if not live:
            kind = "join"
        victim = rng.choice(live) if live else None
        self.note(f"FAULT {kind} {victim.me if victim else ''}")
        if kind == "kill" and victim is not None:
            victim.state = "dead"
            if rng.random() < 0.7:
                cid = victim.client_id
                self.at(self.now + rng.randint(0, 3 * HB), lambda: self.join(cid))
        elif kind == "freeze" and victim is not None:
            victim.state = "frozen"
            self.at(self.now + rng.randint(2 * HB + 1, 5 * HB), lambda: self.thaw(victim))
        elif kind == "restart" and victim is not None:
            self.join(victim.client_id)
            if rng.random() < 0.5:
                victim.state = "dead"
            else:  # the old process lingers a little before it dies
                self.at(self.now + rng.randint(0, 2 * HB), lambda: self.kill(victim))
        elif kind == "join":
            self.join()
        elif kind == "leave" and victim is not None:
            self.step(victim, Close())
        self.at(self.now + rng.randint(HB // 2, 4 * HB), self.fault)

    def kill(self, inst: _Instance) -> None:
        self.note(f"kill {inst.me}")
        inst.state = "dead"

    def thaw(self, inst: _Instance) -> None:
        if inst.state != "frozen":
            return
        self.note(f"thaw {inst.me} ({len(inst.postponed)} postponed)")
        inst.state = "alive"
        postponed, inst.postponed = inst.postponed, []
        for fn in postponed:
            self.on(inst, fn)

    def settled(self) -> None:
        """Stop early once the group has handed out everything (checked every HB)."""
        handed = self.checks.handed
        positions = self.checks.positions
        if self.mode == "amo":  # AMO may lose reserved batches: settled once positions are
            done = all(positions.get(k, -1) >= n - 1 for k, n in self.produced.items())
        else:
            done = all(len(handed[k]) >= n for k, n in self.produced.items())
        if done and self.rebalance != "none" and self.now < self.balanced_ms + STEADY * HB:
            self.at(self.now + HB, self.settled)  # the steady-state check is still to come
        elif done:
            self.end_ms = self.now
        else:
            self.keep_a_consumer()
            self.at(self.now + HB, self.settled)

    def oracle_holders(self) -> dict[Key, str | None]:
        """Partition -> client_id holding it, per the simulated log."""
        out: dict[Key, str | None] = {}
        for p in range(self.partitions):
            key = (TOPIC, p)
            world = self.oracle[coordination_partition(TOPIC, p, self.ncoord)]
            holder = world.holder(GROUP, TOPIC, p)
            out[key] = None if holder is None else holder[0]
        return out

    def check_balanced(self) -> None:
        """BALANCED_AFTER·HB after the faults: every partition held by a running member,
        each running member holding floor(P/n) or ceil(P/n)."""
        members = {
            i.client_id
            for i in self.live()
            if i.state == "alive" and not i.core.fenced and not i.core.closing
        }
        holders = self.oracle_holders()
        counts = {c: sum(1 for h in holders.values() if h == c) for c in members}
        low, high = self.partitions // len(members), -(-self.partitions // len(members))
        stray = {k: h for k, h in holders.items() if h not in members}
        uneven = {c: n for c, n in counts.items() if not low <= n <= high}
        self.note(f"BALANCE CHECK {counts} {stray or ''}")
        if stray or uneven:
            self.checks.fail(
                self.now,
                f"not balanced {BALANCED_AFTER}·HB after the faults: {counts} "
                f"(each {low}..{high}), not held by a running member: {stray}",
            )
        self._steady = holders

    def check_steady(self) -> None:
        """Nothing moved in the steady state after the balance check."""
        if self._steady is None:
            return
        now = self.oracle_holders()
        moved = {k: (self._steady[k], h) for k, h in now.items() if self._steady[k] != h}
        if moved:
            self.checks.fail(self.now, f"partitions moved in the steady state: {moved}")

    def settle(self) -> None:
        """Faults stop: thaw everyone, and make sure somebody is there to consume."""
        self.note("SETTLE")
        for inst in self.instances:
            if inst.state == "frozen":
                self.thaw(inst)
        self.keep_a_consumer()

    def keep_a_consumer(self) -> None:
        if not any(
            i.state == "alive" and not i.core.fenced and not i.core.closing for i in self.live()
        ):
            self.join()


def _short(msg: object) -> str:
    name = type(msg).__name__
    fields = [f"{msg.client_id}:{msg.instance_id}"]  # type: ignore[attr-defined]
    if hasattr(msg, "partition"):
        fields.append(f"{msg.topic}/{msg.partition}")  # type: ignore[attr-defined]
    for attr in ("last_offset", "proposed_last_offset", "positions"):
        if hasattr(msg, attr):
            fields.append(str(getattr(msg, attr)))
    return f"{name} {' '.join(fields)}"


def _verdict(v: object) -> str:
    if v is None:
        return "?"
    if v.accepted:  # type: ignore[attr-defined]
        return f"accepted {v.effect.value}"  # type: ignore[attr-defined]
    return f"rejected {v.reason.value}"  # type: ignore[attr-defined]


def run_seed(
    seed: int,
    *,
    fix: bool = True,
    trace: bool = False,
    rebalance: str | None = None,
    units: str | None = None,
) -> Result:
    return Sim(seed, fix=fix, trace=trace, rebalance=rebalance, units=units).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scenarios.sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1")
    parser.add_argument("--first", type=int, default=0, help="first seed of the range")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="print the seed's trace")
    parser.add_argument(
        "--without-restart-fix",
        action="store_true",
        help="experiment: resume a restart takeover where it was read before (issue 10's bug)",
    )
    parser.add_argument(
        "--rebalance",
        choices=("balanced", "none"),
        help="every seed with this strategy (default: the seed chooses, 2 in 3 balanced)",
    )
    parser.add_argument(
        "--units",
        choices=("partitions", "tasks"),
        help="every seed claims these (tasks: ALO); default: half the ALO seeds claim tasks",
    )
    args = parser.parse_args(argv)
    fix = not args.without_restart_fix
    opts = {"rebalance": args.rebalance, "units": args.units}
    if args.seed is not None:
        result = run_seed(args.seed, fix=fix, trace=args.trace, **opts)
        if args.trace:
            print("\n".join(result.trace))
        _report(result)
        return 1 if result.violations else 0
    seeds = range(args.first, args.first + args.seeds)
    failed: list[Result] = []
    sim_ms = tasks = 0
    t0 = time.perf_counter()
    for seed in seeds:
        result = run_seed(seed, fix=fix, **opts)
        sim_ms += result.sim_ms
        tasks += result.mode.endswith("+tasks")
        if result.violations:
            failed.append(result)
    real = time.perf_counter() - t0
    print(
        f"seeds run: {len(seeds)} ({tasks} claiming tasks)  violations: {len(failed)} seeds  "
        f"{len(seeds) / real:.1f} seeds/s  simulated/real time: {sim_ms / 1000 / real:.0f}x  "
        f"({real:.1f} s)"
    )
    for result in failed[:10]:
        _report(result)
    if failed:
        first = failed[0]
        again = run_seed(first.seed, fix=fix, trace=True, **opts)
        print(f"\ntrace of seed {first.seed} (replayed):")
        print("\n".join(again.trace[-80:]))
    return 1 if failed else 0


def _report(result: Result) -> None:
    status = "FAIL" if result.violations else "ok"
    print(
        f"seed {result.seed} ({result.mode}) {status}: {result.steps} steps, {result.sim_ms} ms simulated"
    )
    for v in result.violations[:3]:
        print(f"  {v}")
    if len(result.violations) > 3:
        print(f"  ... and {len(result.violations) - 3} more")


if __name__ == "__main__":
    sys.exit(main())
