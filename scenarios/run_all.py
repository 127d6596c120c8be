"""Run every scenario for many seeds on one stage and print a summary table.

    python -m scenarios.run_all --seeds 100 [--stage sim|threads|network|processes] [--jobs 2]
    python -m scenarios.run_all --processes --seeds 20 [--only reset,broker-crash] [-v]
    python -m scenarios.run_all --kafka --seeds 2 [--kafka-bootstrap HOST:PORT]

``failover``, ``pause``, ``handoff``, ``restart``, ``race``, ``rebalance`` and ``upgrade`` are
written once
(:mod:`scenarios.scenario`) and run on the simulator (``--stage sim``: simulated time, a seed
replays exactly), on members in threads of one process (``threads``, the default; ``network``:
each on a connection of its own to logmarshal's broker, the network edge under the same
injected faults) or on real processes with a broker (``processes``; ``--processes`` is the
same); the real-process
stage adds ``broker-crash``, ``reset``, ``multi-broker`` and ``zombie`` (the woken zombie of
docs/protocol-notes.md; AMO only, whatever the seed). Each run happens in a fresh process.
A failing seed is printed with the command that replays it.

``--kafka`` runs the processes stage over Apache Kafka instead of logmarshal's broker: one
single-node :class:`logmarshal.localkafka.KafkaCluster` started here, shared by the runs
(each with a topic and group of its own) and stopped by pid before ``broker-crash``, whose
runs each start a node of their own to kill (never two of these JVMs at once).
``--kafka-bootstrap`` shares one already running instead (``broker-crash`` is then skipped).
A scenario that has no Kafka form is skipped with its reason printed under the summary.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed

from logmarshal.localkafka import KafkaCluster

from . import failover, handoff, pause, race, rebalance, restart, upgrade
from .common import STAGES, OnKafka, add_kafka_options, kafka_from, mode_for
from .processes import NOT_ON_KAFKA
from .processes import SCENARIOS as ON_PROCESSES
from .scenario import Scenario

#: written once, runnable on every stage
WRITTEN_ONCE: dict[str, Scenario] = {
    "failover": failover.SCENARIO,
    "handoff": handoff.SCENARIO,
    "race": race.SCENARIO,
    "pause": pause.SCENARIO,
    "restart": restart.SCENARIO,
    "rebalance": rebalance.SCENARIO,
    "upgrade": upgrade.SCENARIO,
}
STAGED = tuple(WRITTEN_ONCE)
DEFAULT = {
    "sim": STAGED,
    "threads": STAGED,
    "network": STAGED,
    "processes": (
        "failover",
        "pause",
        "handoff",
        "restart",
        "rebalance",
        "broker-crash",
        "reset",
        "multi-broker",
        "zombie",
        "upgrade",
    ),
}
FIGURES = {
    "failover": "failover seconds",
    "handoff": "handoff seconds",
    "restart": "restart takeover seconds",
    "pause": "frozen seconds",
    "race": "claims per member (max)",
    "rebalance": "balanced after a SIGKILL (3 -> 2) (s)",
    "broker-crash": "first hand-out after the restart (s)",
    "reset": "first hand-out after the expiry (s)",
    "multi-broker": "d's last hand-out after the kill (s)",
    "zombie": "offsets handed out twice",
    "upgrade": "lost (allowed in AMO)",
}


#: the scenarios that kill the broker: on Kafka each run has a node of its own
OWN_KAFKA = frozenset({"broker-crash"})


def skipped_on_kafka(kafka: OnKafka) -> dict[str, str]:
    """The scenarios ``--kafka`` leaves out, and why."""
    out = dict(NOT_ON_KAFKA)
    if kafka.bootstrap:
        out["broker-crash"] = "it kills and restarts the node: it needs a Kafka of its own"
    return out


def _one(
    name: str, seed: int, stage: str = "threads", kafka: OnKafka | None = None
) -> tuple[str, int, str, bool, float, list[str], dict[str, float]]:
    logging.basicConfig(level=logging.CRITICAL + 1)
    mode = mode_for(seed, None)
    started = time.monotonic()
    extra = {} if kafka is None else {"kafka": kafka}
    try:
        if name in WRITTEN_ONCE:
            report = WRITTEN_ONCE[name].run(seed, mode=mode, stage=stage, **extra)
        else:
            report = ON_PROCESSES[name](seed, mode=mode, **extra)
    except Exception as exc:  # a crash is a failure too
        return name, seed, mode, False, time.monotonic() - started, [repr(exc)], {}
    failed = report.failures()
    mode = report.mode.split(",")[0]  # a scenario may run in one mode only (zombie: AMO)
    return name, seed, mode, report.ok, time.monotonic() - started, failed, report.figures


Results = dict[str, list[tuple[int, str, bool, float, list[str], dict[str, float]]]]


def _run_many(
    names: list[str],
    seeds: range,
    stage: str,
    kafka: OnKafka | None,
    jobs: int,
    verbose: bool,
    results: Results,
) -> None:
    """Every seed of every scenario in ``names``, each in a fresh process, into ``results``;
    a failure is printed as it ends, with the command that replays it."""
    if not names:
        return
    with ProcessPoolExecutor(max_workers=jobs, max_tasks_per_child=1) as pool:
        futures = [pool.submit(_one, name, seed, stage, kafka) for name in names for seed in seeds]
        for future in as_completed(futures):
            name, seed, mode, ok, took, failed, figures = future.result()
            results[name].append((seed, mode, ok, took, failed, figures))
            if verbose:
                shown = ", ".join(f"{k} {v:g}" for k, v in figures.items())
                print(f"{'ok  ' if ok else 'FAIL'} {name} seed {seed}: {shown}", flush=True)
            if not ok:
                print(f"FAIL {name} seed {seed} ({mode}): {'; '.join(failed)}", flush=True)
                module = name.replace("-", "_")
                extra = f" --stage {stage}" if name in STAGED else ""
                if kafka is not None:  # a shared Kafka stopped at the end: one of its own
                    extra += " --kafka"
                print(
                    f"     replay: python -m scenarios.{module}{extra} --seed {seed} -v",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.run_all")
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 (default 100)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=None, help="default 2 (1 for processes)")
    parser.add_argument("--only", default=None)
    parser.add_argument("--stage", choices=STAGES, default="threads", help="default: threads")
    parser.add_argument("--processes", action="store_true", help="the same as --stage processes")
    add_kafka_options(parser)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every run's figures as it ends"
    )
    args = parser.parse_args(argv)
    kafka = kafka_from(args)
    stage = "processes" if args.processes or kafka is not None else args.stage
    names = [n for n in (args.only or ",".join(DEFAULT[stage])).split(",") if n]
    allowed = set(STAGED) | (set(DEFAULT["processes"]) if stage == "processes" else set())
    if set(names) - allowed:
        parser.error(f"not on the {stage} stage: {', '.join(sorted(set(names) - allowed))}")
    skipped = {} if kafka is None else skipped_on_kafka(kafka)
    skipped = {n: why for n, why in skipped.items() if n in names}
    names = [n for n in names if n not in skipped]
    where = f"{stage} stage" + ("" if kafka is None else f" over {kafka.describe()}")
    jobs = args.jobs or (1 if stage == "processes" else 2)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results: Results = defaultdict(list)
    started = time.monotonic()
    if kafka is None or kafka.bootstrap:
        _run_many(names, seeds, stage, kafka, jobs, args.verbose, results)
    else:
        # one Kafka for the runs that share one (a warm JVM, started once), then those that
        # kill their node, each on its own: never two of this run's JVMs at a time
        shared = [n for n in names if n not in OWN_KAFKA]
        if shared:
            with (
                tempfile.TemporaryDirectory(prefix="logmarshal-run-all-kafka-") as tmp,
                KafkaCluster(tmp) as cluster,  # stopped by pid, whatever happens
            ):
                print(f"Apache Kafka at {cluster.bootstrap}, shared by the runs", flush=True)
                on = OnKafka(cluster.bootstrap)
                _run_many(shared, seeds, stage, on, jobs, args.verbose, results)
        own = [n for n in names if n in OWN_KAFKA]
        _run_many(own, seeds, stage, kafka, jobs, args.verbose, results)
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
        figure = FIGURES[name]
        values = sorted(r[5][figure] for r in rows if figure in r[5])
        shown = f"{values[len(values) // 2]:.3f} / {values[-1]:.3f}" if values else "-"
        print(
            f"{name:<12} {len(rows):>5} {passed:>5} {len(rows) - passed:>5} {alo:>4} "
            f"{len(rows) - alo:>4} {sum(durations) / max(1, len(rows)):>7.2f} "
            f"{max(durations, default=0):>6.2f}  {figure}: {shown}"
        )
    for name, why in skipped.items():
        print(f"{name:<12} skipped on Apache Kafka: {why}")
    print(f"total {time.monotonic() - started:.0f} s, {failures} failing run(s) on the {where}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
