"""reset: 3 consumers while ``logmarshal group reset --to-offset N --execute`` runs in a
subprocess.

Checks: nothing handed out during the pause (once members had 2·HB to notice), every
partition resumes exactly at N after the expiry, and nobody keeps a stale claim. Real
processes only (the harness of :mod:`scenarios.process_harness`); also
``python -m scenarios.processes reset``.

    python -m scenarios.reset --seed 7 [--mode alo|amo] [--data-dir D] [--kafka] [-v]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from .common import OnKafka, Report, main_on_processes, wait_until
from .process_harness import ROOT, procs

__all__ = ["main", "reset_target", "run"]


def reset_target(seed: int) -> int:
    """The offset the reset scenario moves every partition to (the audit test checks it)."""
    return 10 + seed % 7


def run(
    seed: int, *, mode: str, data_dir: str | None = None, kafka: OnKafka | None = None
) -> Report:
    hb = 0.5
    partitions = 6
    new = reset_target(seed)
    with procs(
        "reset", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir, kafka=kafka
    ) as h:
        report = h.report
        h.connect()
        members = h.start_group(3, first=100, per_partition=200, seconds=6.0)
        if members is None:
            return report

        threshold = 2 * new + h.rng.randint(0, 20)

        def progressed() -> bool:
            assert h.observer is not None
            return all(
                (h.observer.resume_offset(h.topic, p) or 0) > threshold for p in range(partitions)
            )

        if not report.check(
            "every partition is consumed past the target", wait_until(progressed, 20)
        ):
            return report
        pause_for = 2 * hb + h.rng.uniform(0.2, 1.0)
        command = [
            sys.executable,
            "-m",
            "logmarshal",
            "--bootstrap",
            h.bootstrap,
            "--json",
            "group",
            "reset",
            h.group,
            "--topic",
            h.topic,
            "--to-offset",
            str(new),
            "--execute",
            "--pause-for",
            f"{pause_for:.3f}s",
        ]
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        written_at = time.time()
        try:
            result = json.loads(run.stdout)
        except ValueError:
            result = {}
        ok = run.returncode == 0 and result.get("ok") is True
        if not report.check(
            "group reset --execute is confirmed", ok, (run.stderr or run.stdout)[-500:]
        ):
            return report
        expiry = result["paused_until_ms"] / 1000
        report.figures["pause seconds"] = result["pause_ms"] / 1000
        wait_until(lambda: time.time() > expiry, 10)
        quiet = [
            (m.name, x.partition, x.offset)
            for m in members
            for x in m.log().handed
            if written_at + 2 * hb <= x.handed_at < expiry
        ]
        report.check("nothing handed out during the pause (after 2·HB)", not quiet, str(quiet[:5]))

        def after() -> dict[int, list[int]]:
            out: dict[int, list[int]] = {}
            for m in members:
                for x in m.log().handed:
                    if x.handed_at >= expiry:
                        out.setdefault(x.partition, []).append(x.offset)
            return {p: sorted(v) for p, v in out.items()}

        resumed = wait_until(
            lambda: len(after()) == partitions and all(len(v) >= 5 for v in after().values()), 15
        )
        report.check("every partition is consumed again after the pause", resumed)
        wrong = {}
        for p, offsets in sorted(after().items()):
            if offsets[0] != new or offsets != list(range(new, new + len(offsets))):
                wrong[p] = offsets[:8]
        report.check(f"every partition resumes exactly at {new}", not wrong, str(wrong))
        first_after = min(
            (x.handed_at for m in members for x in m.log().handed if x.handed_at >= expiry),
            default=expiry,
        )
        report.figures["first hand-out after the expiry (s)"] = first_after - expiry
        h.wait_produced()
        time.sleep(2 * hb)
        h.one_holder_each(members)
        return report


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.reset --seed N [--mode alo|amo] [--data-dir D] [-v]``."""
    return main_on_processes("python -m scenarios.reset", argv, {"reset": run}, "reset")


if __name__ == "__main__":
    sys.exit(main())
