"""failover: 3 consumers share 8 partitions; one stops abruptly (SIGKILL: no release).

Checks: the survivors own all 8 within 2·HB + margin of the stop; they reach the end of
every partition; each partition ends with one live holder whose own view agrees; ALO: every
produced offset is handled at least once; AMO: no offset is handed out twice.

    python -m scenarios.failover --seed 7 [--stage sim|threads|processes] [--mode amo]
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
    # the stream goes on well after the stop, so the survivors have an end to reach
    stage.produce_in_background(per_partition=100, seconds=4 * hb)
    stage.sleep(rng.uniform(0.2, 1.2) * hb)
    victim, survivors = stage.pick_holder(members)
    moved = len(stage.held_by(victim))
    report.figures["partitions taken over"] = moved
    bound, formula = stage.failover_bound(moved)
    stopped = stage.now()
    stage.kill(victim)
    owned = stage.wait_until(lambda: stage.owned_by(survivors), bound + 10)
    took = stage.now() - stopped
    report.figures["failover seconds"] = took
    report.check(
        f"survivors own all {stage.partitions} within {formula} ({bound:.2f} s)",
        owned and took <= bound,
        f"{took:.3f} s after {victim.name} stopped",
    )
    stage.wait_produced()
    report.check("survivors reach the end", stage.wait_until(lambda: stage.drained(survivors), 20))
    stage.one_holder_each(survivors)
    stage.delivery(members)


SCENARIO = Scenario("failover", body, partitions=8, hb=0.5)

run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
