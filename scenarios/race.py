"""race: 10 consumers start together on 64 partitions.

Checks: every partition ends with exactly one holder, all are owned, and each member's own
view (the claims it hands out) agrees with the log, so no partition is believed held twice.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter

from .common import TOPIC, Report, harness, main_for, wait_for

HB = 0.5
PARTITIONS = 64
MEMBERS = 10


def run(seed: int, *, mode: str = "alo", data_dir: str | None = None) -> Report:
    with harness("race", seed, mode=mode, hb=HB, partitions=PARTITIONS, data_dir=data_dir) as h:
        report = h.report
        h.produce(2)
        greedy = h.rng.random() < 0.5
        report.figures["greedy"] = float(greedy)
        start = threading.Barrier(MEMBERS)
        members = []

        def make(i: int) -> None:
            start.wait(10)
            members.append(h.member(f"m{i}", greedy=greedy))

        threads = [threading.Thread(target=make, args=(i,)) for i in range(MEMBERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

        def settled() -> bool:
            believed = Counter(key for m in members for key in m.consumer.claims())
            return (
                len(members) == MEMBERS
                and h.owned_by(members)
                and len(believed) == PARTITIONS
                and max(believed.values()) == 1
            )

        ok = wait_for(settled, 20)
        holders = h.holders()
        report.check(
            f"all {PARTITIONS} partitions owned by the members",
            all(holders.values()),
            f"{sum(1 for v in holders.values() if v is None)} unowned",
        )
        believed = Counter(key for m in members for key in m.consumer.claims())
        report.check(
            "no partition believed held by two members",
            max(believed.values(), default=0) <= 1,
            str({k: v for k, v in believed.items() if v > 1}),
        )
        mismatch = [
            (m.client_id, key)
            for m in members
            for key in m.consumer.claims()
            if holders[key[1]] != m.marshaler.identity
        ]
        report.check("every member's view matches the log", ok and not mismatch, str(mismatch[:5]))
        report.figures["claims per member (max)"] = max(
            (len(m.consumer.claims()) for m in members), default=0
        )
        assert all(k[0] == TOPIC for k in believed)
        return report


def main(argv: list[str] | None = None) -> int:
    return main_for("race", run, argv)


if __name__ == "__main__":
    sys.exit(main())
