"""restart: a stable client_id restarts while its old instance hangs; its partitions resume
under the new instance; the old instance is fenced.

Member "a" (4 of 8 partitions) and member "b" (the other 4, capped at 4 so it leaves a's
alone). "a" freezes (a zombie: its process hangs) and a new instance of client "a" starts at
once. Checks: the new instance holds all of a's partitions (restart recovery takes the
fresh ones, the rest once stale), resumed at the committed positions; when the zombie is
thawed it finds itself fenced and hands out nothing more; ALO: nothing lost; AMO: nothing
twice. Until its replay shows the takeover, the thawed zombie may still hand out: ALO, what
it had buffered (repeats, which ALO allows); AMO, only what the log reserved for it before
the takeover (a freeze shorter than its lease leaves it free to), never past where the new
instance resumed.
"""

from __future__ import annotations

import sys

from .scenario import Scenario, main_for
from .stages.base import Handed, Stage

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
    # Once it knows it is fenced: nothing, in both modes. Before that, from the thaw:
    # - AMO: only what the log reserved for it before the takeover. Its reservations after
    #   the takeover are refused, and the new instance resumes past the accepted ones; but a
    #   freeze shorter than its lease (2·HB) leaves it free to hand out what was reserved and
    #   confirmed before, until its replay shows the takeover (none of it twice: a2 starts
    #   after it; on Kafka, seed 5, 2026-11-30, the zombie handed out 5 such offsets).
    # - ALO: what it had buffered (repeats, which ALO allows, as a Kafka zombie does).
    zombie = stage.delivered(a)
    fenced_at = stage.fenced_at(a)
    resumed = _first_offsets(stage.delivered(a2))
    late = [
        (x.partition, x.offset)
        for x in zombie
        if (fenced_at is not None and x.poll_started > fenced_at)
        or (
            stage.mode == "amo"
            and x.poll_started > thawed_at
            and x.offset >= resumed.get(x.partition, -1)
        )
    ]
    report.figures["handed out by the zombie after the thaw"] = sum(
        1 for x in zombie if x.handed_at > thawed_at
    )
    report.check(
        "the fenced instance hands out nothing once it knows it is fenced"
        + (", nor past where the new instance resumed" if stage.mode == "amo" else ""),
        not late,
        f"{len(late)} e.g. {late[:5]}",
    )
    stage.one_holder_each([a2, b])
    stage.delivery([a, a2, b])


def _first_offsets(handed: list[Handed]) -> dict[int, int]:
    """The first offset handed out in each partition."""
    first: dict[int, int] = {}
    for x in handed:
        first[x.partition] = min(first.get(x.partition, x.offset), x.offset)
    return first


SCENARIO = Scenario("restart", body, partitions=8, hb=1.0)
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
