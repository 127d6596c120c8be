"""restart: a stable client_id restarts within HB; its partitions resume under the new
instance; the old instance is fenced.

Member "a" (4 of 8 partitions) and member "b" (the other 4, capped at 4 so it leaves a's
alone). "a" freezes (a zombie: its process hangs) and a new instance of client "a" starts at
once. Checks: the new instance holds all of a's partitions (restart recovery takes the
fresh ones, the rest once stale), resumed at the committed positions; when the zombie is
thawed it finds itself fenced and hands out nothing more; ALO: nothing lost; AMO: nothing
twice. (ALO: until its replay shows the takeover, the thawed zombie may still hand
out messages it had buffered; they are repeats, which ALO allows.)
"""

from __future__ import annotations

import sys
import time

from .common import Report, harness, main_for, wait_for

HB = 0.8
PARTITIONS = 8


def run(seed: int, *, mode: str = "alo", data_dir: str | None = None) -> Report:
    with harness("restart", seed, mode=mode, hb=HB, partitions=PARTITIONS, data_dir=data_dir) as h:
        report = h.report
        h.produce(20)
        a = h.member("a", max_claims=4, greedy=True)
        if not report.check("a holds 4", wait_for(lambda: len(a.consumer.claims()) == 4, 10)):
            return report
        b = h.member("b", max_claims=4, greedy=True)
        ok = wait_for(lambda: h.owned_by([a, b]), 10)
        if not report.check("a and b own all 8", ok):
            return report
        h.produce_in_background(per_partition=100, seconds=2.0)
        time.sleep(h.rng.uniform(0.05, 0.4))
        a_partitions = set(a.consumer.claims())
        restarted_at = time.monotonic()
        a.freeze()
        a2 = h.member("a", max_claims=4, greedy=True)
        # a2's own replay and the harness's observer each see the takeover a little apart:
        # wait for both rather than read the observer the instant a2 sees it
        took = wait_for(
            lambda: set(a2.consumer.claims()) == a_partitions and h.owned_by([a2, b]),
            2 * HB + 5,
        )
        report.figures["restart takeover seconds"] = time.monotonic() - restarted_at
        report.check(
            "the new instance holds all of a's partitions",
            took and h.owned_by([a2, b]),
            f"{sorted(a2.consumer.claims())} vs {sorted(a_partitions)}",
        )
        thawed_at = time.monotonic()
        a.thaw()
        fenced = wait_for(lambda: a.consumer.fenced and not a.consumer.claims(), 5, step=0.001)
        fenced_at = time.monotonic()
        report.check("the old instance is fenced and holds nothing", fenced)
        h.wait_produced()
        report.check("the group reaches the end", wait_for(lambda: h.drained([a2, b]), 15))
        # AMO: its reservations are refused, so nothing at all after the thaw. ALO: until its
        # replay shows the takeover it may hand out what it had buffered (repeats, which ALO
        # allows, as a Kafka zombie does); once it knows, nothing.
        late = a.handed_out_after(thawed_at if mode == "amo" else fenced_at)
        report.figures["handed out by the zombie after the thaw"] = len(
            a.handed_out_after(thawed_at)
        )
        report.check(
            "the fenced instance hands out nothing "
            + ("after the thaw" if mode == "amo" else "once it knows it is fenced"),
            not late,
            f"{len(late)} e.g. {late[:5]}",
        )
        h.delivery([a, a2, b])
        return report


def main(argv: list[str] | None = None) -> int:
    return main_for("restart", run, argv)


if __name__ == "__main__":
    sys.exit(main())
