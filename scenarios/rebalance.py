"""rebalance: members 1 -> 3 -> 6 -> 3 -> 2 share 24 partitions under continuous load
(docs/rebalancing.md).

One member takes every partition; two join, then three more; three leave gracefully; one is
killed (SIGKILL on real processes). After each change (a join: once the newcomers' first
announcements are in the log), within 2·HB + 1 s, every running member owns floor(24/n) or
ceil(24/n) partitions per the log. Then 30·HB of steady state
in which no partition moves. Delivery: AMO hands no offset out twice; ALO loses nothing,
and repeats only on the partitions the killed member held (graceful moves repeat nothing).
"""

from __future__ import annotations

import sys
from collections import Counter

from .scenario import Scenario, main_for
from .stages.base import Member, Stage

__all__ = ["SCENARIO", "main", "run"]

PARTITIONS = 24
#: after the last change, this many HB of steady state in which no partition moves
STEADY_HB = 30


def shares(stage: Stage, members: list[Member]) -> dict[str, int] | None:
    """Each member's partition count per the log if every partition is held by one of
    ``members`` and each has its fair share, floor(P/n) or ceil(P/n); else None."""
    by_identity = {stage.identity(m): m.name for m in members}
    counts = Counter(by_identity.get(h) for h in stage.holders().values())
    n, p = len(members), stage.partitions
    fair = all(p // n <= counts[m.name] <= -(-p // n) for m in members)
    return dict(counts) if fair and None not in counts else None


def balanced_after(stage: Stage, members: list[Member], change: str, since: float) -> bool:
    """Check (and time) that ``members`` reach their shares within 2·HB + 1 s of ``since``."""
    bound = 2 * stage.hb + 1.0
    ok = stage.wait_until(lambda: shares(stage, members) is not None, bound - (stage.now() - since))
    took = stage.now() - since
    stage.report.figures[f"balanced after {change} (s)"] = took
    holders = Counter(stage.holders().values())
    detail = {m.name: holders.get(stage.identity(m), 0) for m in members}
    return stage.report.check(
        f"{len(members)} members own their shares within 2·HB + 1 s after {change}",
        ok,
        f"{took:.2f} s: {detail}",
    )


def joined(stage: Stage, clients: list[str]) -> float | None:
    """When ``clients`` are all live members per the log (None after a failed check)."""
    ok = stage.wait_until(lambda: set(clients) <= stage.announced(), 20)
    if not stage.report.check(f"{', '.join(clients)} announce themselves in the log", ok):
        return None
    return stage.now()


def body(stage: Stage) -> None:
    hb, report = stage.hb, stage.report
    stage.produce(10)
    a = stage.start("a")
    if not report.check(
        "one member owns all 24", stage.wait_until(lambda: stage.owned_by([a]), 15)
    ):
        return
    # continuous load through every change and the steady state
    stage.produce_in_background(per_partition=60, seconds=(STEADY_HB + 12) * hb + 4)

    # a join happens when the newcomers are members in the log (a process start takes its
    # imports and the start-up replay of __marshal first: not the protocol's latency)
    members = [a, *stage.start_group(["b", "c"])]
    since = joined(stage, ["b", "c"])
    if since is None:
        return
    if not balanced_after(stage, members, "two joins (1 -> 3)", since):
        return
    members += stage.start_group(["d", "e", "f"])
    since = joined(stage, ["d", "e", "f"])
    if since is None:
        return
    if not balanced_after(stage, members, "three joins (3 -> 6)", since):
        return
    leaving = stage.rng.sample(members, 3)
    since = stage.now()
    for m in leaving:
        report.check(f"{m.name} leaves gracefully", stage.leave(m))
    members = [m for m in members if m not in leaving]
    if not balanced_after(stage, members, "three graceful leaves (6 -> 3)", since):
        return
    victim = stage.rng.choice(members)
    killed_held = stage.held_by(victim)
    since = stage.now()
    stage.kill(victim)
    members = [m for m in members if m is not victim]
    if not balanced_after(stage, members, "a SIGKILL (3 -> 2)", since):
        return

    before = stage.holders()
    moved: dict[int, object] = {}

    def watch() -> bool:
        for p, h in stage.holders().items():
            if h != before[p]:
                moved.setdefault(p, h)
        return False

    stage.wait_until(watch, STEADY_HB * hb)
    report.check(f"no partition moves in {STEADY_HB}·HB of steady state", not moved, str(moved))

    stage.wait_produced()
    everyone = list(stage.members)
    report.check(
        "the two survivors reach the end",
        stage.wait_until(lambda: stage.drained(everyone), 30),
    )
    stage.delivery(everyone)
    if stage.mode == "alo":
        counts = Counter(stage.handed(everyone))
        repeated = sorted(o for o, c in counts.items() if c > 1 and o[0] not in killed_held)
        report.check(
            "ALO: graceful moves repeat nothing (repeats only where the killed member held)",
            not repeated,
            f"{len(repeated)} repeated, e.g. {repeated[:5]}",
        )


SCENARIO = Scenario("rebalance", body, partitions=PARTITIONS, hb=0.5, faults="delays")

run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
