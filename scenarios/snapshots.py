"""Real processes on a bounded coordination log: snapshots, truncation, late joiners, reset.

    python -m scenarios.snapshots --seed 3 [--mode amo]

Three member processes consume while publishing snapshots every few dozen coordination
records and truncating ``__marshal`` behind them (small segments, so truncation really
deletes). Checks: the log is truncated while they run; an observer started after the
truncation (restoring a snapshot, replaying the tail) and a member process started after it
agree with the others (each partition one holder, everyone's view matching the log); an
admin reset (``logmarshal group reset --execute`` in a subprocess) across the snapshots is
confirmed and every partition resumes exactly at its target; and once everyone stopped, the
late observer's worlds are byte for byte those of the observer that replayed from offset 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time

from logmarshal import Marshaler, coordlog
from logmarshal.coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC

from .common import Report, mode_for, wait_until
from .procs import GROUP, ROOT, TOPIC, procs

__all__ = ["main", "run"]

SNAPSHOT_RECORDS = 40
SMALL = {"segment.bytes": "4096", "retention.ms": "-1", "flush.messages": "1"}
N_COORD = 4


def _worlds(m: Marshaler) -> list[bytes]:
    out = []
    for tail in m._tails:
        with tail.cond:
            out.append(tail.world.to_bytes())
    return out


def run(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    partitions = 6
    new = 10 + seed % 5
    with procs("snapshots", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir) as h:
        report = h.report
        # the coordination topics with small segments, before anyone creates them
        from logmarshal.network import NetworkCluster

        with NetworkCluster(h.bootstrap, timeout=15.0, config={"log_level": 2}) as setup:
            setup.create_topic(
                COORDINATION_TOPIC,
                N_COORD,
                {**SMALL, "message.timestamp.type": "LogAppendTime"},
            )
            setup.create_topic(SNAPSHOT_TOPIC, N_COORD, SMALL)
        h.connect(coordination_partitions=N_COORD)
        assert h.cluster is not None and h.observer is not None
        cluster = h.cluster
        h.produce(100)
        members = h.members_together(
            ["c0", "c1", "c2"],
            coordination_partitions=N_COORD,
            snapshot_records=SNAPSHOT_RECORDS,
        )
        if not report.check("the members start", h.joined(members)):
            return report
        h.produce_in_background(per_partition=300, seconds=8.0)

        def truncated() -> bool:
            busy = [
                cp
                for cp in range(N_COORD)
                if cluster.latest_offset(COORDINATION_TOPIC, cp) > 5 * SNAPSHOT_RECORDS
            ]
            return bool(busy) and all(
                cluster.earliest_offset(COORDINATION_TOPIC, cp) > 0 for cp in busy
            )

        ok = wait_until(truncated, 40)
        ends = [
            (
                cluster.earliest_offset(COORDINATION_TOPIC, cp),
                cluster.latest_offset(COORDINATION_TOPIC, cp),
            )
            for cp in range(N_COORD)
        ]
        if not report.check("__marshal is truncated behind snapshots", ok, str(ends)):
            return report
        report.figures["snapshots kept (all partitions)"] = float(
            sum(len(coordlog.read_snapshots(cluster, cp)) for cp in range(N_COORD))
        )
        late_observer = Marshaler(
            cluster, "late-observer", GROUP, hb, fetch_wait=0.1, coordination_partitions=N_COORD
        )
        try:
            report.check(
                "an observer started after truncation catches up", late_observer.wait_caught_up(20)
            )
            late = h.member(
                "late", coordination_partitions=N_COORD, snapshot_records=SNAPSHOT_RECORDS
            )
            members.append(late)
            report.check("a member started after truncation joins", h.joined([late]))
            time.sleep(2 * hb)
            h.one_holder_each(members)

            # an admin reset across the snapshots
            pause_for = 2 * hb + h.rng.uniform(0.2, 0.8)
            command = [
                sys.executable, "-m", "logmarshal", "--bootstrap", h.bootstrap, "--json",
                "group", "reset", GROUP, "--topic", TOPIC, "--to-offset", str(new),
                "--execute", "--pause-for", f"{pause_for:.3f}s",
            ]  # fmt: skip
            out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
            try:
                result = json.loads(out.stdout)
            except ValueError:
                result = {}
            if not report.check(
                "group reset across snapshots is confirmed",
                out.returncode == 0 and result.get("ok") is True,
                (out.stderr or out.stdout)[-500:],
            ):
                return report
            expiry = result["paused_until_ms"] / 1000
            wait_until(lambda: time.time() > expiry, 10)

            def after() -> dict[int, list[int]]:
                got: dict[int, list[int]] = {}
                for m in members:
                    for x in m.log().handed:
                        if x.handed_at >= expiry:
                            got.setdefault(x.partition, []).append(x.offset)
                return {p: sorted(v) for p, v in got.items()}

            report.check(
                "every partition is consumed again after the reset",
                wait_until(lambda: len(after()) == partitions, 15),
            )
            wrong = {
                p: offs[:8]
                for p, offs in after().items()
                if offs[0] != new or offs != list(range(new, new + len(offs)))
            }
            report.check(f"every partition resumes exactly at {new}", not wrong, str(wrong))
            h.wait_produced()
            time.sleep(2 * hb)
            h.one_holder_each(members)
            # everyone stops (claims released); then both observers must see the same worlds
            for m in members:
                m.terminate()
            h.observer.wait_caught_up(10)
            late_observer.wait_caught_up(10)
            same = _worlds(h.observer) == _worlds(late_observer)
            report.check("the late observer's worlds equal the full replay's, byte for byte", same)
        finally:
            late_observer.close()
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.snapshots")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=["alo", "amo"], default=None)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.CRITICAL + 1, logging.WARNING, logging.INFO][args.verbose])
    report = run(args.seed, mode=mode_for(args.seed, args.mode))
    report.print()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
