"""race: 10 consumers start together on 64 partitions.

Checks: every partition ends with exactly one holder, all are owned, and each member's own
view (the claims it hands out) agrees with the log, so no partition is believed held twice.
"""

from __future__ import annotations

import sys
from collections import Counter

from .scenario import Scenario, main_for
from .stages.base import Stage

__all__ = ["SCENARIO", "main", "run"]

MEMBERS = 10


def body(stage: Stage) -> None:
    report = stage.report
    stage.produce(2)
    greedy = stage.rng.random() < 0.5
    report.figures["greedy"] = float(greedy)
    members = stage.start_group([f"m{i}" for i in range(MEMBERS)], greedy=greedy)

    def believed() -> Counter[int]:
        return Counter(p for m in members for p in stage.believed(m))

    def settled() -> bool:
        views = believed()
        return (
            stage.owned_by(members) and len(views) == stage.partitions and max(views.values()) == 1
        )

    ok = stage.wait_until(settled, 20)
    holders = stage.holders()
    report.check(
        f"all {stage.partitions} partitions owned by the members",
        all(holders.values()),
        f"{sum(1 for v in holders.values() if v is None)} unowned",
    )
    views = believed()
    report.check(
        "no partition believed held by two members",
        max(views.values(), default=0) <= 1,
        str({k: v for k, v in views.items() if v > 1}),
    )
    mismatch = [
        (m.name, p) for m in members for p in stage.believed(m) if holders[p] != stage.identity(m)
    ]
    report.check("every member's view matches the log", ok and not mismatch, str(mismatch[:5]))
    report.figures["claims per member (max)"] = max(
        (len(stage.believed(m)) for m in members), default=0
    )


SCENARIO = Scenario("race", body, partitions=64, hb=0.5)
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
