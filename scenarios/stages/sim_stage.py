"""Members in the deterministic simulator (:mod:`scenarios.sim`), driven by a scenario.

The same :class:`scenarios.sim.Sim` the random seeds use (real ``MemberCore``s, real
``WorldState`` replays, the simulated ``__marshal`` whose append time is the simulated clock,
its checks after every step), but the scenario, not the seed's fault schedule, decides who
starts, dies, hangs, restarts or leaves, and when records are produced. Time is simulated:
``sleep`` and ``wait_until`` run the seeded scheduler that far instead of waiting, so a
scenario that takes seconds on the real stages takes milliseconds here, and a seed replays
exactly. The simulator's heartbeat is its own (``scenarios.sim.HB``, 100 ms).
"""

from __future__ import annotations

import heapq
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from logmarshal.core import Close, HandOut
from rationalizer import coordination_partition, membership_partition

from ..sim import GROUP, HB, TOPIC, Sim, _Instance
from ..sim_checks import Checks
from .base import Handed, Member, Setup, Stage

__all__ = ["SimStage"]


class _ScriptedSim(Sim):
    """A :class:`Sim` without its random members, load and faults: the stage's script
    supplies them. Only the write faults remain (``light``), for the whole run."""

    #: False puts the AMO restart bug back (``scenarios.sim --without-restart-fix``)
    fix = True
    upgrades = False

    def __init__(self, seed: int, *, mode: str, partitions: int, faults: str) -> None:
        # (the restart-bug experiment needs writes that overtake each other too: FIFO writes, as
        # an idempotent producer makes them, close that window as well)
        without = frozenset() if self.fix else frozenset({"idempotent-writes"})
        super().__init__(seed, fix=self.fix, units="partitions", without=without)
        self.mode = mode
        self.partitions = partitions
        self.produced = {(TOPIC, p): 0 for p in range(partitions)}
        self.checks = Checks(mode, 2 * HB - HB // 4)
        rng = random.Random(f"sim-faults/{seed}")
        light = faults == "light"
        self.p_drop = rng.choice((0.0, 0.02)) if light else 0.0
        self.p_dup = rng.choice((0.0, 0.02)) if light else 0.0
        self.p_fail = rng.choice((0.0, 0.02)) if light else 0.0
        self.p_lost_answer = rng.choice((0.0, 0.02)) if light else 0.0
        self.fault_ms = 1 << 62  # in_faults(): the write faults above apply throughout
        self.handouts: dict[tuple[str, str], list[Handed]] = defaultdict(list)
        self.fenced: dict[tuple[str, str], float] = {}

    def carry(self, inst: _Instance, action: object) -> None:
        if isinstance(action, HandOut):
            at = self.now / 1000
            self.handouts[inst.me].extend(
                Handed(action.partition, o, at, at) for o, _ in action.records
            )
        super().carry(inst, action)

    def step(self, inst: _Instance, event: object) -> None:
        super().step(inst, event)
        if inst.core.fenced and inst.me not in self.fenced:
            self.fenced[inst.me] = self.now / 1000

    def run_until(self, t_ms: int, stop: Callable[[], object] | None = None) -> bool:
        """Run the scheduled events up to simulated time ``t_ms``, or until ``stop()`` is
        true (checked whenever the clock moves); then the clock reads ``t_ms``."""
        checked = -1
        while self._queue and self._queue[0][0] <= t_ms:
            t = self._queue[0][0]
            if stop is not None and t != checked:
                checked = t
                if stop():
                    return True
            _, _, fn = heapq.heappop(self._queue)
            self.now = t
            self.steps += 1
            fn()
        self.now = max(self.now, t_ms)
        return bool(stop is not None and stop())


class SimStage(Stage):
    kind = "sim"

    def __init__(self, setup: Setup) -> None:
        if setup.data_dir is not None:
            raise SystemExit("--data-dir: the simulator keeps its log in memory")
        Stage.__init__(self, setup, hb=HB / 1000)  # the simulator keeps its own HB
        self.sim = _ScriptedSim(
            setup.seed, mode=setup.mode, partitions=setup.partitions, faults=setup.faults
        )
        self._background_until = 0

    @property
    def produced(self) -> dict[int, int]:  # type: ignore[override]
        return {p: self.sim.produced[(TOPIC, p)] for p in range(self.partitions)}

    def failover_bound(self, moved: int) -> tuple[float, str]:
        """The core claims one partition per pass (every HB/2) and every member tries the
        same partition first, so each moved partition costs about one contested pass, and
        the simulated writes and replays lag by up to 100 ms."""
        return (3 + 1.5 * moved) * self.hb, "2·HB + margin + 1.5·HB per partition"

    def _ms(self, seconds: float) -> int:
        return self.sim.now + max(0, round(seconds * 1000))

    # -- members ---------------------------------------------------------------------------

    def start(self, client_id: str, **options: Any) -> Member:
        return self._start_again(Member(client_id, client_id, options), lambda: None)

    def _start_again(self, member: Member, before: Callable[[], None]) -> Member:
        before()
        # the real stages' Consumers hand out batches of up to 20 too; "greedy" has no
        # core option (the core claims one partition per pass)
        core_options: dict[str, Any] = {"batch_size": member.options.get("batch_size", 20)}
        for name in ("max_claims", "rebalance", "protocol_version"):
            if name in member.options:
                core_options[name] = member.options[name]
        inst = self.sim.join(member.client_id, **core_options)
        new = Member(self._name(member.client_id), member.client_id, member.options, inst)
        self.members.append(new)
        return new

    def kill(self, member: Member) -> None:
        self.sim.kill(member.impl)

    def freeze(self, member: Member, worker_too: bool = True) -> None:
        if member.impl.state == "alive":
            self.sim.note(f"freeze {member.impl.me}")
            member.impl.state = "frozen"

    def thaw(self, member: Member) -> None:
        self.sim.thaw(member.impl)

    def leave(self, member: Member) -> bool:
        self.sim.step(member.impl, Close())
        return self.wait_until(lambda: member.impl.core.closed, 20 * self.hb)

    def alive(self, member: Member) -> bool:
        return bool(member.impl.state != "dead" and not member.impl.core.closed)

    # -- data --------------------------------------------------------------------------------

    def produce(self, per_partition: int) -> None:
        for p in range(self.partitions):
            self.sim.produced[(TOPIC, p)] += per_partition

    def produce_in_background(self, per_partition: int, seconds: float) -> None:
        rounds = 20
        each = max(1, per_partition // rounds)
        for i in range(rounds):
            self.sim.at(self._ms(i * seconds / rounds), lambda: self.produce(each))
        self._background_until = max(self._background_until, self._ms(seconds))

    def wait_produced(self) -> None:
        self.sim.run_until(max(self.sim.now, self._background_until))

    # -- views -------------------------------------------------------------------------------

    def holders(self) -> dict[int, tuple[str, str] | None]:
        return {p: self._world(p).holder(GROUP, TOPIC, p) for p in range(self.partitions)}

    def _world(self, p: int) -> Any:
        return self.sim.oracle[coordination_partition(TOPIC, p, self.sim.ncoord)]

    def announced(self) -> set[str]:
        world = self.sim.oracle[membership_partition(GROUP, self.sim.ncoord)]
        return {m.client_id for m in world.members(GROUP, self.sim.now)}

    def positions(self) -> dict[int, int | None]:
        return {p: self._world(p).resume_offset(GROUP, TOPIC, p) for p in range(self.partitions)}

    def identity(self, member: Member) -> tuple[str, str]:
        return member.impl.me

    def believed(self, member: Member) -> frozenset[int]:
        """The partitions its core would hand out now (held, lease not lapsed)."""
        core, now = member.impl.core, self.sim.now
        return frozenset(p for t, p in core.held() if core.may_hand_out(t, p, now))

    def fenced_at(self, member: Member) -> float | None:
        return self.sim.fenced.get(member.impl.me)

    def delivered(self, member: Member) -> list[Handed]:
        return list(self.sim.handouts.get(member.impl.me, ()))

    # -- time --------------------------------------------------------------------------------

    def now(self) -> float:
        return self.sim.now / 1000

    def sleep(self, seconds: float) -> None:
        self.sim.run_until(self._ms(seconds))

    def wait_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        return self.sim.run_until(self._ms(timeout), stop=predicate)

    def close(self) -> None:
        violations = self.sim.checks.violations
        self.report.figures["simulated steps"] = self.sim.steps
        self.report.check(
            "the simulator's invariants held at every step",
            not violations,
            "; ".join(violations[:3]),
        )
