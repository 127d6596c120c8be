"""handoff: a graceful close; the successor resumes exactly at the committed position.

One member holds every partition and handles part of the stream, committing as it goes; it
is closed cleanly (commits flushed, ReleasingPartition written) at a seed-chosen moment while
a successor waits. Checks: the successor takes every partition over and, between them,
every produced offset is handled exactly once: 0 lost, 0 repeated. The faults here only
delay (a lost release is covered by the failover scenario: then the claim goes stale).
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from logmarshal.faults import FaultPlan

from .common import Report, harness, main_for, wait_for

HB = 0.4
PARTITIONS = 4


def run(seed: int, *, mode: str = "alo", data_dir: str | None = None) -> Report:
    with harness("handoff", seed, mode=mode, hb=HB, partitions=PARTITIONS, data_dir=data_dir) as h:
        report = h.report
        plan = FaultPlan(produce_delay=0.1, produce_delay_range=(0.0, 0.01), fetch_delay=0.1)
        h.produce(50)
        first = h.member("first", plan=plan, greedy=True)
        if not report.check(
            "the first member owns every partition", wait_for(lambda: h.owned_by([first]), 10)
        ):
            return report
        successor = h.member("successor", plan=plan)
        h.produce_in_background(per_partition=150, seconds=1.0)
        time.sleep(h.rng.uniform(0.05, 0.6))
        closed_at = time.monotonic()
        first.close()  # the worker stops, then commits are flushed and claims released
        handed = wait_for(lambda: h.owned_by([successor]), 5)
        took = time.monotonic() - closed_at
        report.figures["handoff seconds (close to successor owning all)"] = took
        report.check("the successor owns every partition after the close", handed, f"{took:.3f} s")
        h.wait_produced()
        report.check("the successor reaches the end", wait_for(lambda: h.drained([successor]), 15))
        counts = Counter(o for m in (first, successor) for o in m.handled_set())
        lost = h.all_offsets() - set(counts)
        repeated = sorted(o for o, c in counts.items() if c > 1)
        report.check("0 lost", not lost, f"{len(lost)} lost, e.g. {sorted(lost)[:5]}")
        report.check("0 repeated", not repeated, f"{len(repeated)} repeated, e.g. {repeated[:5]}")
        return report


def main(argv: list[str] | None = None) -> int:
    return main_for("handoff", run, argv)


if __name__ == "__main__":
    sys.exit(main())
