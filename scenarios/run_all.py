"""Run every scenario for many seeds and print a summary table.

    python -m scenarios.run_all --seeds 100 [--jobs 2] [--only failover,race]
    python -m scenarios.run_all --processes --seeds 20 [--jobs 1] [--only reset,broker-crash]

Each run happens in a fresh process (members share nothing but the data directory, as real
processes would); with ``--processes`` each run starts its own broker and member processes
(:mod:`scenarios.processes`). A failing seed is printed with the command that replays it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed

SCENARIOS = ("failover", "handoff", "race", "pause", "restart")
PROCESS_SCENARIOS = (
    "failover",
    "pause",
    "handoff",
    "restart",
    "broker-crash",
    "reset",
    "multi-broker",
)
FIGURES = {
    "failover": "failover seconds",
    "handoff": "handoff seconds (close to successor owning all)",
    "restart": "restart takeover seconds",
    "pause": "frozen seconds",
    "race": "claims per member (max)",
}
PROCESS_FIGURES = {
    "failover": "failover seconds",
    "handoff": "handoff seconds (SIGTERM to successor owning all)",
    "restart": "restart takeover seconds",
    "pause": "stopped seconds",
    "broker-crash": "first hand-out after the restart (s)",
    "reset": "first hand-out after the expiry (s)",
    "multi-broker": "d's last hand-out after the kill (s)",
}


def _one(
    name: str, seed: int, processes: bool = False
) -> tuple[str, int, str, bool, float, list[str], dict[str, float]]:
    import logging

    logging.basicConfig(level=logging.CRITICAL + 1)
    from .common import mode_for

    mode = mode_for(seed, None)
    if processes:
        from .processes import SCENARIOS as real

        run = real[name]
    else:
        run = importlib.import_module(f"scenarios.{name}").run
    started = time.monotonic()
    try:
        report = run(seed, mode=mode)
    except Exception as exc:  # a crash is a failure too
        return name, seed, mode, False, time.monotonic() - started, [repr(exc)], {}
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    return name, seed, mode, report.ok, time.monotonic() - started, failed, report.figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.run_all")
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 (default 100)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=None, help="default 2 (1 with --processes)")
    parser.add_argument("--only", default=None)
    parser.add_argument(
        "--processes", action="store_true", help="the real-process scenarios (broker + members)"
    )
    args = parser.parse_args(argv)
    default = PROCESS_SCENARIOS if args.processes else SCENARIOS
    names = [n for n in (args.only or ",".join(default)).split(",") if n]
    jobs = args.jobs or (1 if args.processes else 2)
    figure_names = PROCESS_FIGURES if args.processes else FIGURES
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results: dict[str, list[tuple[int, str, bool, float, list[str], dict[str, float]]]]
    results = defaultdict(list)
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs, max_tasks_per_child=1) as pool:
        futures = [
            pool.submit(_one, name, seed, args.processes) for name in names for seed in seeds
        ]
        for future in as_completed(futures):
            name, seed, mode, ok, took, failed, figures = future.result()
            results[name].append((seed, mode, ok, took, failed, figures))
            if not ok:
                print(f"FAIL {name} seed {seed} ({mode}): {'; '.join(failed)}", flush=True)
                module = name.replace("-", "_")
                extra = " --processes" if args.processes and name in SCENARIOS else ""
                print(
                    f"     replay: python -m scenarios.{module}{extra} --seed {seed} -v",
                    flush=True,
                )
    print()
    print(
        f"{'scenario':<12} {'runs':>5} {'pass':>5} {'fail':>5} {'alo':>4} {'amo':>4} "
        f"{'mean s':>7} {'max s':>6}  key figure (p50 / max)"
    )
    failures = 0
    for name in names:
        rows = results[name]
        passed = sum(1 for r in rows if r[2])
        failures += len(rows) - passed
        alo = sum(1 for r in rows if r[1] == "alo")
        durations = [r[3] for r in rows]
        figure = figure_names[name]
        values = sorted(r[5][figure] for r in rows if figure in r[5])
        shown = f"{values[len(values) // 2]:.3f} / {values[-1]:.3f}" if values else "-"
        print(
            f"{name:<12} {len(rows):>5} {passed:>5} {len(rows) - passed:>5} {alo:>4} "
            f"{len(rows) - alo:>4} {sum(durations) / max(1, len(rows)):>7.2f} "
            f"{max(durations, default=0):>6.2f}  {figure}: {shown}"
        )
    print(f"total {time.monotonic() - started:.0f} s, {failures} failing run(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
