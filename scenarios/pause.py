"""pause: a member frozen beyond 2·HB, then thawed, hands out nothing of what it lost.

Three members share 8 partitions. One is frozen (SIGSTOP; on the threads stage, by seed,
either as SIGSTOP or with only its I/O hanging while its worker keeps polling, as behind a
network partition, which tests self-fencing) until the others own all its partitions and
for more than 2·HB, then thawed. Checks: no poll it starts once its lease can have run out
(2·HB after the freeze) hands out a partition it lost; the group reaches the end; one live
holder each; AMO: no offset is handed out twice; ALO: nothing is lost.
"""

from __future__ import annotations

import sys

from .scenario import Scenario, main_for
from .stages.base import Stage

__all__ = ["SCENARIO", "main", "run"]


def body(stage: Stage) -> None:
    hb, rng, report = stage.hb, stage.rng, stage.report
    members = stage.group_owning_all(["c0", "c1", "c2"], first=20)
    if members is None:
        return
    # the stream goes on well after the thaw, so everyone has an end to reach
    stage.produce_in_background(per_partition=120, seconds=6 * hb)
    stage.sleep(rng.uniform(0.1, 0.8) * hb)
    frozen, others = stage.pick_holder(members)
    worker_too = rng.random() < 0.5 if stage.partial_freeze else True
    report.figures["worker frozen too (SIGSTOP-like)"] = float(worker_too)
    taken = stage.held_by(frozen)
    frozen_at = stage.now()
    stage.freeze(frozen, worker_too=worker_too)
    moved = stage.wait_until(lambda: stage.owned_by(others), 2 * hb + 10)
    report.check("the others own everything while it is frozen", moved)
    # beyond 2·HB whatever happened: the others may take over sooner (the lease runs from
    # its last heartbeat, before the freeze)
    stage.sleep(frozen_at + 2 * hb + rng.uniform(0.1, 1.0) * hb - stage.now())
    thawed_at = stage.now()
    report.figures["frozen seconds"] = thawed_at - frozen_at
    report.check(
        "it was frozen beyond 2·HB",
        thawed_at - frozen_at > 2 * hb,
        f"{thawed_at - frozen_at:.3f} s",
    )
    stage.thaw(frozen)
    stage.wait_produced()
    report.check("the group reaches the end", stage.wait_until(lambda: stage.drained(members), 20))
    # A poll under way when the freeze hit may finish after the thaw (a process cannot fence
    # itself between a check and a return); every poll started after its lease ran out must
    # respect self-fencing.
    holders = stage.holders()
    lost = {p for p in taken if holders[p] != stage.identity(frozen)}
    late = [
        (x.partition, x.offset)
        for x in stage.delivered(frozen)
        if x.poll_started > frozen_at + 2 * hb and x.partition in lost
    ]
    report.check(
        "the thawed member hands out nothing of the partitions it lost",
        not late,
        f"{len(late)} handed out late, e.g. {late[:5]}",
    )
    stage.one_holder_each(members)
    stage.delivery(members)


SCENARIO = Scenario("pause", body, partitions=8, hb=0.5)

run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
