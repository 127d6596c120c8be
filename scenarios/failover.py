"""failover: 3 consumers share 12 partitions; one stops abruptly (no release).

Checks: the survivors own all 12 within 2·HB + margin of the stop; ALO: every produced
offset is handled at least once; AMO: no offset is handed out twice.
"""

from __future__ import annotations

import sys
import time

from .common import Report, harness, main_for, wait_for

HB = 0.4
MARGIN = max(HB, 0.3)  # claim passes, replay and a loaded 2-core machine
PARTITIONS = 12


def run(seed: int, *, mode: str = "alo", data_dir: str | None = None) -> Report:
    with harness("failover", seed, mode=mode, hb=HB, partitions=PARTITIONS, data_dir=data_dir) as h:
        report = h.report
        h.produce(20)
        members = [h.member(f"c{i}") for i in range(3)]
        h.produce_in_background(per_partition=100, seconds=2.0)
        ok = wait_for(lambda: h.owned_by(members) and all(m.consumer.claims() for m in members), 10)
        if not report.check("all 12 owned, each member holding some, before the stop", ok):
            return report
        time.sleep(h.rng.uniform(0.1, 0.6))
        victim = h.rng.choice(members)
        survivors = [m for m in members if m is not victim]
        lost_partitions = len(victim.consumer.claims())
        stopped = time.monotonic()
        victim.kill()
        owned = wait_for(lambda: h.owned_by(survivors), 2 * HB + MARGIN + 5)
        took = time.monotonic() - stopped
        report.figures["failover seconds"] = took
        report.figures["partitions taken over"] = lost_partitions
        report.check(
            f"survivors own all {PARTITIONS} within 2·HB + margin ({2 * HB + MARGIN:.2f} s)",
            owned and took <= 2 * HB + MARGIN,
            f"{took:.3f} s after {victim.client_id} stopped",
        )
        h.wait_produced()
        drained = wait_for(lambda: h.drained(survivors), 15)
        report.check("survivors reach the end of every partition", drained)
        h.delivery(members)
        return report


def main(argv: list[str] | None = None) -> int:
    return main_for("failover", run, argv)


if __name__ == "__main__":
    sys.exit(main())
