"""pause: a member frozen longer than 2·HB, then thawed, stops handing out what it lost.

Three members share 8 partitions. One is frozen (its I/O blocks; by seed, either its worker
freezes too, as under SIGSTOP, or keeps polling, as behind a network partition, which tests
self-fencing) for 2·HB plus a bit, until the others own all its partitions; then thawed.
Checks: after the freeze began, once self-fencing applies, the frozen member hands out
nothing of the partitions taken from it; AMO: no offset is handed out twice; ALO: nothing
is lost.
"""

from __future__ import annotations

import sys
import time

from .common import TOPIC, Report, harness, main_for, wait_for

HB = 0.4
PARTITIONS = 8


def run(seed: int, *, mode: str = "alo", data_dir: str | None = None) -> Report:
    with harness("pause", seed, mode=mode, hb=HB, partitions=PARTITIONS, data_dir=data_dir) as h:
        report = h.report
        h.produce(20)
        members = [h.member(f"c{i}") for i in range(3)]
        h.produce_in_background(per_partition=120, seconds=2.5)
        ok = wait_for(lambda: h.owned_by(members) and all(m.consumer.claims() for m in members), 10)
        if not report.check("all partitions owned, each member holding some", ok):
            return report
        time.sleep(h.rng.uniform(0.05, 0.4))
        frozen = h.rng.choice(members)
        others = [m for m in members if m is not frozen]
        sigstop = h.rng.random() < 0.5
        report.figures["worker frozen too (SIGSTOP-like)"] = float(sigstop)
        taken = {p for _, p in frozen.consumer.claims()}
        frozen_at = time.monotonic()
        frozen.freeze(worker_too=sigstop)
        moved = wait_for(lambda: h.owned_by(others), 2 * HB + 5)
        report.check("the others own everything while it is frozen", moved)
        time.sleep(h.rng.uniform(0.0, 0.3))
        thawed_at = time.monotonic()
        frozen.thaw()
        report.figures["frozen seconds"] = thawed_at - frozen_at
        h.wait_produced()
        everyone = [m for m in members]
        report.check("the group reaches the end", wait_for(lambda: h.drained(everyone), 15))
        # self-fencing: no hand-out of a lost partition later than 2·HB after the freeze
        late = [
            (p, o)
            for p, o in frozen.handed_out_after(frozen_at + 2 * HB)
            if p in taken and h.observer.holder(TOPIC, p) != frozen.marshaler.identity
        ]
        report.check(
            "the thawed member hands out nothing of the partitions it lost",
            not late,
            f"{len(late)} handed out late, e.g. {late[:5]}",
        )
        h.delivery(members)
        return report


def main(argv: list[str] | None = None) -> int:
    return main_for("pause", run, argv)


if __name__ == "__main__":
    sys.exit(main())
