"""The mirror schedule: Kafka's committed offsets of the group, as the members' offsets
mirrors write them and as a member reads them for a partition the log has no position for
(docs/admin.md, "mirrored offsets"; ``core/fetching.on_bounds``).

Harsher than production: each member's mirror writes what its core holds
(:func:`logmarshal.consumer.mirror.positions_held`, the code the Consumer runs) at most once
per HB, and each write lands after a delay of up to 3·HB, so a late write of an older
position overwrites a newer one, as a stalled member's commit lands after its successor's.
A read (OffsetFetch) answers with what Kafka holds when it lands, and a share of reads are
late by up to 2·HB (the edge reads a failed one again until it answers). A share of the
seeds runs it, from a generator of its own: the other seeds keep their schedules.

In half of those seeds the group moves from Kafka's consumer groups: Kafka already holds
committed offsets, which the checks take as consumed (ALO need not hand out what lies below
them, as below a log start).

What must hold: the checks every seed runs (AMO hands nothing out twice; ALO hands out every
offset), with the committed offsets that the mirror schedule feeds the starts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from logmarshal.consumer.mirror import positions_held

Sim = Any  # scenarios.sim imports this module (the import graph allows no circle)
Key = tuple[str, int]


class Mirror:
    def __init__(self, rng: random.Random, hb: int, tasks: Mapping[str, tuple[str, ...]]) -> None:
        self.rng = rng
        self.hb = hb
        self.tasks = tasks
        #: Kafka's committed offsets of the group (next offsets)
        self.offsets: dict[Key, int] = {}
        self._last: dict[int, int] = {}  # id(instance) -> when its mirror last wrote
        self.writes = 0
        #: look-ups of partitions with no position answered with a committed offset
        self.answered = 0

    @classmethod
    def drawn(
        cls, seed: int, hb: int, tasks: Mapping[str, tuple[str, ...]], keys: list[Key]
    ) -> Mirror | None:
        """The schedule for ``seed``, or None (``tasks``: claim unit -> its sources). In half
        of them the group moves from Kafka's consumer groups: Kafka holds a committed offset
        (0..20, in the log or past its end when first read) for most of ``keys``."""
        rng = random.Random(f"mirror/{seed}")
        if rng.random() >= 0.4:
            return None
        mirror = cls(rng, hb, tasks)
        if rng.random() < 0.5:
            mirror.offsets = {k: rng.randint(0, 20) for k in keys if rng.random() < 0.7}
        return mirror

    def after_step(self, sim: Sim, inst: Any) -> None:
        """``inst``'s mirror thread, at most once per HB: what its core holds, landing late."""
        n = id(inst)
        if sim.now - self._last.get(n, -self.hb) < self.hb:
            return
        self._last[n] = sim.now
        held = positions_held(inst.core, self.tasks, False)
        if not held:
            return
        self.writes += 1
        sim.at(sim.now + self.rng.randint(0, 3 * self.hb), lambda: self.offsets.update(held))

    def answer_at(self, now: int) -> int:
        """When a read asked at ``now`` answers (a late one: failed reads read again)."""
        late = self.rng.randint(1, 2 * self.hb) if self.rng.random() < 0.2 else 0
        return now + late

    def committed(self, key: Key) -> int | None:
        found = self.offsets.get(key)
        self.answered += found is not None
        return found
