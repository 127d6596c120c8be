"""handoff: a graceful close; the successor resumes exactly at the committed position.

One member holds every partition and handles part of the stream, committing as it goes; it
is closed cleanly (SIGTERM on real processes: commits flushed, ReleasingPartition written) at
a seed-chosen moment while a successor waits. Checks: the successor takes every partition
over and, between them, every produced offset is handled exactly once: 0 lost, 0 repeated.
The faults here only delay (a lost release is the failover scenario: the claim goes stale).
"""

from __future__ import annotations

import sys
from collections import Counter

from .scenario import Scenario, main_for
from .stages.base import Stage

__all__ = ["SCENARIO", "main", "run"]


def body(stage: Stage) -> None:
    hb, rng, report = stage.hb, stage.rng, stage.report
    stage.produce(50)
    first = stage.start("first", greedy=True)
    ok = stage.wait_until(lambda: stage.owned_by([first]), 15)
    if not report.check("the first member owns every partition", ok):
        return
    successor = stage.start("successor")
    stage.produce_in_background(per_partition=150, seconds=3 * hb)
    stage.sleep(rng.uniform(0.1, 1.6) * hb)
    closed_at = stage.now()
    report.check("the first member closes cleanly", stage.leave(first))
    handed = stage.wait_until(lambda: stage.owned_by([successor]), 10)
    took = stage.now() - closed_at
    report.figures["handoff seconds"] = took
    report.check("the successor owns every partition after the close", handed, f"{took:.3f} s")
    stage.wait_produced()
    report.check(
        "the successor reaches the end",
        stage.wait_until(lambda: stage.drained([successor], lost_ok=False), 20),
    )
    counts = Counter(stage.handed([first, successor]))
    lost = stage.all_offsets() - set(counts)
    repeated = sorted(o for o, c in counts.items() if c > 1)
    report.check("0 lost", not lost, f"{len(lost)} lost, e.g. {sorted(lost)[:5]}")
    report.check("0 repeated", not repeated, f"{len(repeated)} repeated, e.g. {repeated[:5]}")


SCENARIO = Scenario("handoff", body, partitions=4, hb=0.5, faults="delays")

run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
