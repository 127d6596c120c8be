"""restart: a stable client_id restarts while its old instance hangs; its partitions resume
under the new instance; the old instance is fenced.

Member "a" (4 of 8 partitions) and member "b" (the other 4, capped at 4 so it leaves a's
alone). "a" freezes (a zombie: its process hangs) and a new instance of client "a" starts at
once. Checks: the new instance holds all of a's partitions (restart recovery takes the
fresh ones, the rest once stale), resumed at the committed positions; when the zombie is
thawed it finds itself fenced and hands out nothing more; ALO: nothing lost; AMO: nothing
twice. (ALO: until its replay shows the takeover, the thawed zombie may still hand out
messages it had buffered; they are repeats, which ALO allows.)
"""

from __future__ import annotations

import sys

from .scenario import Scenario, main_for
from .stages.base import Stage

__all__ = ["SCENARIO", "main", "run"]


def body(stage: Stage) -> None:
    hb, rng, report = stage.hb, stage.rng, stage.report
    stage.produce(20)
    a = stage.start("a", max_claims=4, greedy=True)
    if not report.check("a holds 4", stage.wait_until(lambda: len(stage.held_by(a)) == 4, 15)):
        return
    b = stage.start("b", max_claims=4, greedy=True)
    if not report.check("a and b own all", stage.wait_until(lambda: stage.owned_by([a, b]), 15)):
        return
    stage.produce_in_background(per_partition=100, seconds=2.5 * hb)
    stage.sleep(rng.uniform(0.05, 0.4) * hb)
    a_partitions = stage.held_by(a)
    restarted_at = stage.now()
    a2 = stage.restart(a, old="freeze")  # a hung process; its successor starts at once
    # the new instance's own view and the log's replay each see the takeover a little apart
    took = stage.wait_until(
        lambda: stage.held_by(a2) == a_partitions == stage.believed(a2), 2 * hb + 10
    )
    report.figures["restart takeover seconds"] = stage.now() - restarted_at
    report.check(
        "the new instance holds all of a's partitions",
        took and stage.owned_by([a2, b]),
        f"{sorted(stage.held_by(a2))} vs {sorted(a_partitions)}",
    )
    thawed_at = stage.now()
    stage.thaw(a)
    fenced = stage.wait_until(lambda: stage.fenced_at(a) is not None and not stage.believed(a), 10)
    report.check("the old instance is fenced and holds nothing", fenced)
    stage.wait_produced()
    report.check("the group reaches the end", stage.wait_until(lambda: stage.drained([a2, b]), 20))
    # AMO: its reservations are refused, so nothing at all after the thaw. ALO: until its
    # replay shows the takeover it may hand out what it had buffered (repeats, which ALO
    # allows, as a Kafka zombie does); once it knows, nothing.
    zombie = stage.delivered(a)
    since = thawed_at if stage.mode == "amo" else (stage.fenced_at(a) or thawed_at)
    late = [(x.partition, x.offset) for x in zombie if x.poll_started > since]
    report.figures["handed out by the zombie after the thaw"] = sum(
        1 for x in zombie if x.handed_at > thawed_at
    )
    report.check(
        "the fenced instance hands out nothing "
        + ("after the thaw" if stage.mode == "amo" else "once it knows it is fenced"),
        not late,
        f"{len(late)} e.g. {late[:5]}",
    )
    stage.one_holder_each([a2, b])
    stage.delivery([a, a2, b])


SCENARIO = Scenario("restart", body, partitions=8, hb=1.0)
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
