"""The simulator's user-hand schedule (``--seeks``, off by default): user code seeks, and the
data log's start moves up under the group, while every other fault runs.

The seven attacks of 2026-12-02 (docs/protocol-notes.md, "A release given up, and a window
written again") found their holes in seeks, resets and OutOfRange answers, which no seed
took: the simulator's data log never lost its start and its members never sought. This
schedule makes them:

- **Who.** Partition seeds with faults, when asked (its own generator,
  ``random.Random(f"seeks/{seed}")``, so a run without ``--seeks`` keeps every schedule).
- **Seeks.** Every HB/2..2·HB of the fault window, a running instance seeks one partition it
  holds to an offset anywhere from the log's start to 10 past its end (a seek beyond the end
  is refused at the next fetch, as Kafka refuses it). The core refuses some (not assigned
  yet; AMO: at or below what it handed out), as a Consumer raises them to user code.
- **Retention.** Now and then the start of one data partition moves up to anywhere up to its
  end (``delete-records``, retention): a fetch below it is refused.
- **A tail cut.** Now and then a data partition loses its last 1..50 records (an unclean
  leader election) and the next records produced reuse their offsets: a fetch beyond the new
  end is refused. The checks count by offset (the records a cut lost are not told apart
  from those that replaced them).
- **The reset policy.** One seed in three runs its members with
  ``auto_offset_reset="latest"``, the others with "earliest" (a Consumer's default).
- **The edge's answers.** A refused fetch (below the start, beyond the end) is answered with
  the bounds read 0..max_delay after the refusal, as the network edges read them (so the log
  may have grown over the position meanwhile); a claim's look-up gets the current bounds.

What the checks allow (:mod:`scenarios.sim_checks`): ALO may skip what a seek forward
skipped (from what the seeking instance had handed out up to its target), what the log
deleted before anybody handed it out, and under "latest" what lies between a position
outside the log (the group's at a claim, the member's own at a refused fetch) and the end; its position may move back through a seek backward,
and through the reset policy ("earliest") that a position beyond the end meets (a seek
there, a tail cut below it).
AMO allows nothing more: its core refuses a seek at or below what it handed out.
"""

from __future__ import annotations

import random
from typing import Any

from logmarshal.core import Bounds, Fetch, LookUp, OutOfRange, Tick
from rationalizer import coordination_partition

Sim = Any  # scenarios.sim imports this module (the import graph allows no circle)
Key = tuple[str, int]


class UserHand:
    """The seeks and the moving log start of one seed."""

    def __init__(self, sim: Sim, seed: int, hb: int) -> None:
        self.sim = sim
        self.hb = hb
        self.rng = random.Random(f"seeks/{seed}")
        #: (topic, partition) -> the data log's first offset
        self.start: dict[Key, int] = dict.fromkeys(sim.produced, 0)
        self.seeks = self.refused_seeks = self.truncations = self.cuts = self.out_of_range = 0
        #: every member's ``auto_offset_reset`` (a Consumer's default is "earliest")
        self.reset = self.rng.choice(("earliest", "earliest", "latest"))

    @classmethod
    def drawn(cls, sim: Sim, seed: int, hb: int) -> UserHand | None:
        """This seed's hand, if it gets one (partition seeds with faults)."""
        if not sim.faults or sim.sources != (sim.topic,):
            return None
        return cls(sim, seed, hb)

    def begin(self) -> None:
        self.sim.at(self.rng.randint(self.hb, 3 * self.hb), self.act)

    def act(self) -> None:
        sim, rng = self.sim, self.rng
        if not sim.in_faults():
            return
        draw = rng.random()
        if draw < 0.2:
            self.retention()
        elif draw < 0.3:
            self.cut()
        else:
            self.seek()
        sim.at(sim.now + rng.randint(self.hb // 2, 2 * self.hb), self.act)

    def retention(self) -> None:
        sim, rng = self.sim, self.rng
        key = rng.choice(sorted(self.start))
        start, end = self.start[key], sim.produced[key]
        if end <= start:
            return
        new = rng.randint(start + 1, end)
        self.start[key] = new
        self.truncations += 1
        sim.note(f"RETENTION {key} starts at {new} (end {end})")
        sim.checks.truncated(key, new)

    def cut(self) -> None:
        """An unclean leader election on a data partition: its last 1..50 records are
        lost, and the next records produced reuse their offsets."""
        sim, rng = self.sim, self.rng
        key = rng.choice(sorted(self.start))
        start, end = self.start[key], sim.produced[key]
        if end <= start:
            return
        new = rng.randint(max(start, end - 50), end - 1)
        sim.produced[key] = new
        self.cuts += 1
        sim.note(f"TAIL CUT {key} ends at {new} (was {end})")
        # a position now beyond the end (the group's, a member's) is out of range: ALO's
        # "earliest" takes it back to the start, and hands out again what it had handed out
        sim.checks.sought(sim.now, key, end, start)

    def seek(self) -> None:
        sim, rng = self.sim, self.rng
        running = [i for i in sim.live() if i.state == "alive" and i.core.held()]
        if not running:
            return
        inst = rng.choice(running)
        topic, partition = rng.choice(sorted(inst.core.held()))
        key = (topic, partition)
        target = rng.randint(self.start[key], sim.produced[key] + 10)
        through = inst.core.handed_through(topic, partition)
        try:
            inst.core.seek(sim.now, topic, partition, target)
        except ValueError as exc:
            self.refused_seeks += 1
            sim.note(f"{inst.me} SEEK {key} to {target} refused: {exc}")
            return
        self.seeks += 1
        sim.note(f"{inst.me} SEEKS {key} to {target} (handed through {through})")
        sim.checks.sought(sim.now, key, -1 if through is None else through, target)
        sim.step(inst, Tick())  # (a Consumer's next pass acts on it)

    def bounds(self, action: LookUp) -> Bounds:
        """A claim's look-up: the bounds now. Under "latest" a group's position outside
        them (or none) starts at the end: ALO may skip from the position to it."""
        sim = self.sim
        key = (action.topic, action.partition)
        start, end = self.start[key], sim.produced[key]
        if self.reset == "latest":
            cp = coordination_partition(action.topic, action.partition, sim.ncoord)
            resume = sim.oracle[cp].resume_offset(sim.group, action.topic, action.partition)
            if resume is None or not start <= resume <= end:
                sim.checks.sought(sim.now, key, -1 if resume is None else resume - 1, end)
        return Bounds(action.token, action.topic, action.partition, start, end)

    def refuses(self, inst: Any, action: Fetch) -> bool:
        """Is ``inst``'s fetch ``action`` outside the log (then it is answered OutOfRange,
        with the bounds read later)?"""
        key = (action.topic, action.partition)
        sim = self.sim
        if self.start[key] <= action.offset <= sim.produced[key]:
            return False
        self.out_of_range += 1

        def answer() -> None:  # the bounds, read after the refusal
            bounds = (self.start[key], sim.produced[key])
            sim.note(f"{inst.me} OUT OF RANGE {key} at {action.offset}, bounds {bounds}")
            if action.offset > bounds[1]:
                # beyond the end (a seek there): "earliest" takes ALO back to the start, as
                # Kafka's consumer does, and hands out again what it had handed out
                sim.checks.sought(sim.now, key, action.offset, bounds[0])
            # the member's own position (not its read-ahead's) out of range: "latest" may
            # skip from it to the end; a position inside the log may skip nothing
            through = inst.core.handed_through(action.topic, action.partition)
            if (
                self.reset == "latest"
                and through is not None
                and not bounds[0] <= through + 1 <= bounds[1]
            ):
                sim.checks.sought(sim.now, key, through, bounds[1])
            sim.step(inst, OutOfRange(action.token, action.topic, action.partition, *bounds))

        sim.at(sim.now + self.rng.randint(0, sim.max_delay), lambda: sim.on(inst, answer))
        return True

    def summary(self) -> tuple[int, int, int, int, int]:
        return (self.seeks, self.refused_seeks, self.truncations, self.cuts, self.out_of_range)
