"""zombie: a woken stale AMO instance must not make the group hand an offset out twice (the
first schedule of docs/protocol-notes.md, in real processes).

Real processes over a real broker, AMO, HB 0.5 s, one partition with a backlog large enough
that consumption goes on throughout (nobody reaches its end during the run):

1. Member A (client c1) consumes; c3 has joined and waits (the partition is A's fair share).
2. A is SIGSTOPped. Past 2·HB c3 takes the stale claim over (A is not fenced: the taker is
   another client) and consumes.
3. In an order the seed picks, c3 leaves gracefully and c1 restarts as a new process (A2);
   A2 claims the partition and consumes.
4. A is SIGCONTed. Its ``__marshal`` fetches lag 0.3-1 s after waking (seeded; the member's
   ``--wake-lag``), as after a VM pause, so it may act on its pre-freeze view before its
   replay shows what happened.
5. A is SIGTERMed (a graceful close releases what it believes it holds), a fourth client c4
   joins, A2 leaves gracefully, and c4 takes the partition and consumes.

Checks: every step above happened as scripted; c4 ends as the one holder; AMO: no offset
handed out twice across the four processes (the framework's "lost" figure counts the
backlog never reached). On the code before protocol version 4, A's heartbeat after
waking is accepted as a restart takeover of A2, and its release rewinds the resume point,
so c4 hands out again what c3 and A2 handed out. Not checked: that the group reaches the
end (the backlog is there so that it does not). Real processes only: the lag is a hook of
the member process (:mod:`scenarios.member`).
"""

from __future__ import annotations

import sys
from collections import Counter

from rationalizer import Effect

from .scenario import Scenario, main_for
from .stages.base import Stage, StageError
from .stages.process_stage import ProcessStage

__all__ = ["SCENARIO", "main", "run"]

#: records in the one partition before anyone starts (the issue's run used 300,000); AMO
#: over the network hands out a few thousand a second, far fewer than this during a run
BACKLOG = 300_000
#: each produce call of the orchestrator
CHUNK = 20_000


def body(stage: Stage) -> None:
    hb, rng, report = stage.hb, stage.rng, stage.report
    if not isinstance(stage, ProcessStage):
        raise StageError("zombie runs on real processes only (--stage processes)")
    lag = round(rng.uniform(0.3, 1.0), 3)
    report.figures["wake lag (s)"] = lag
    for _ in range(BACKLOG // CHUNK):
        stage.produce(CHUNK)

    a = stage.start("c1", wake_lag=lag)
    ok = stage.wait_until(lambda: stage.held_by(a) == {0} and stage.delivered(a), 20)
    if not report.check("A (c1) holds the partition and hands out", ok):
        return
    c3 = stage.start("c3")
    stage.sleep(rng.uniform(0.5, 1.5) * hb)
    report.check("c3 joins without taking A's fair share", not stage.held_by(c3))

    frozen_at = stage.now()
    stage.freeze(a)
    ok = stage.wait_until(lambda: stage.held_by(c3) == {0}, 2 * hb + 10)
    if not report.check("c3 takes the stale claim over", ok):
        return
    report.figures["c3's takeover after the freeze (s)"] = stage.now() - frozen_at
    stage.wait_until(lambda: stage.delivered(c3), 10)
    stage.sleep(rng.uniform(0.2, 1.0) * hb)

    restart_first = rng.random() < 0.5
    report.figures["c1 restarted before c3 left"] = float(restart_first)
    if restart_first:
        a2 = stage.restart(a, old="keep")  # A stays frozen: a zombie
        report.check("c3 leaves gracefully", stage.leave(c3))
    else:
        report.check("c3 leaves gracefully", stage.leave(c3))
        a2 = stage.restart(a, old="keep")
    ok = stage.wait_until(lambda: stage.held_by(a2) == {0} and stage.delivered(a2), 20)
    if not report.check("the new instance of c1 (A2) takes the partition and hands out", ok):
        return
    stage.sleep(rng.uniform(0.5, 2.0) * hb)

    thawed_at = stage.now()
    report.figures["frozen seconds"] = thawed_at - frozen_at
    report.check(
        "A was frozen beyond 2·HB", thawed_at - frozen_at > 2 * hb, f"{thawed_at - frozen_at:.3f}"
    )
    stage.thaw(a)
    # until its lagging replay had time to catch up, or it took the partition back
    took_back = stage.wait_until(lambda: stage.held_by(a) == {0}, lag + 2 * hb)
    report.figures["the log gave the partition back to A"] = float(took_back)
    woke = a.impl.log().woke  # the member's report: it saw its stall and lagged
    report.check("A saw its stall on waking (its fetches lag)", bool(woke), str(woke))
    stage.sleep(rng.uniform(0.0, 0.5) * hb)
    report.check("A exits on SIGTERM", stage.leave(a))

    c4 = stage.start("c4")
    stage.sleep(rng.uniform(0.0, 2.0) * hb)
    report.check("A2 exits on SIGTERM", stage.leave(a2))
    ok = stage.wait_until(lambda: stage.held_by(c4) == {0} and stage.delivered(c4), 20)
    report.check("c4 takes the partition and hands out", ok)
    # c4 hands out for a while: on the code before protocol version 4 what it repeats starts at the
    # rewound resume point and runs through what c3 and A2 handed out
    stage.sleep(3 * hb)

    handed = {m.name: len(stage.delivered(m)) for m in stage.members}
    for name, n in handed.items():
        report.figures[f"handed out by {name}"] = n
    counts = Counter(stage.handed(stage.members))
    report.figures["offsets handed out twice"] = sum(1 for c in counts.values() if c > 1)
    zombie = stage.identity(a)
    after = [j for j in stage.judged(0) if j.sender == zombie and j.log_time > thawed_at]
    report.figures["A's records accepted as restart takeover"] = sum(
        1 for j in after if j.outcome == Effect.RESTART_TAKEOVER.value
    )
    report.figures["A's records after the thaw"] = len(after)
    report.figures["A's records accepted after the thaw"] = sum(1 for j in after if j.accepted)
    report.figures["handed out by A after the thaw"] = sum(
        1 for x in stage.delivered(a) if x.handed_at > thawed_at
    )
    stage.one_holder_each([c4])
    stage.delivery(stage.members)


SCENARIO = Scenario("zombie", body, partitions=1, hb=0.5, mode="amo")
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.zombie --seed N [-v]``: on real processes, the only stage."""
    return main_for(SCENARIO, ["--processes", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
