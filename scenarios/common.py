"""What every scenario shares: the report, the one bounded wait, the mode by seed, the
numbered data stream and the command-line parts.

The bottom of the scenarios package: it imports nothing of it. The scenarios themselves are
written once against a :class:`scenarios.stages.base.Stage` and run on any of its three
implementations (the simulator, members as threads in one process, real processes); see
:mod:`scenarios.stages` and :mod:`scenarios.scenario`.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from logmarshal import NewRecord

__all__ = [
    "GROUP",
    "STAGES",
    "TOPIC",
    "Check",
    "NumberedStream",
    "OnKafka",
    "Report",
    "add_kafka_options",
    "configure_logging",
    "kafka_from",
    "main_on_processes",
    "mode_for",
    "new_dir",
    "parse_args",
    "wait_until",
]

GROUP = "scenario"
TOPIC = "events"
#: where a scenario can run (:func:`scenarios.scenario.make_stage`)
STAGES = ("sim", "threads", "network", "processes")


@attrs.frozen
class OnKafka:
    """Real processes over Apache Kafka instead of logmarshal's broker.

    ``bootstrap``: an Apache Kafka already running, shared with other runs (so this run's
    topic and group get names of their own); None: the run starts a single-node
    :class:`logmarshal.localkafka.KafkaCluster` of its own and stops it (by pid) at the end.
    """

    bootstrap: str | None = None

    def describe(self) -> str:
        return f"Apache Kafka at {self.bootstrap}" if self.bootstrap else "Apache Kafka"


@attrs.define
class Check:
    name: str
    ok: bool
    detail: str = ""


@attrs.define
class Report:
    scenario: str
    seed: int
    mode: str
    checks: list[Check] = attrs.field(factory=list)
    figures: dict[str, float] = attrs.field(factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return bool(ok)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def print(self) -> None:
        print(f"scenario {self.scenario}, seed {self.seed}, mode {self.mode}")
        for c in self.checks:
            print(
                f"  [{'ok' if c.ok else 'VIOLATION'}] {c.name}"
                + (f": {c.detail}" if c.detail else "")
            )
        for name, value in self.figures.items():
            print(f"  {name} = {value:.3f}")
        print("PASS" if self.ok else "FAIL")


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds passed (False).

    The one bounded wait of the scenarios, their stages and the tests that run members in
    threads; a simulated stage waits with :meth:`scenarios.stages.base.Stage.wait_until` instead,
    which advances the simulated clock rather than sleeping.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        time.sleep(step)
    return True


def new_dir(data_dir: str | None) -> str | None:
    """``--data-dir``: it must be new or empty (a scenario's log is checked from scratch)."""
    if data_dir is not None and os.path.isdir(data_dir) and os.listdir(data_dir):
        raise SystemExit(f"--data-dir {data_dir} is not empty; give a new directory")
    return data_dir


def mode_for(seed: int, mode: str | None) -> str:
    """Seeds alternate between the modes unless one is asked for."""
    return mode if mode is not None else ("alo" if seed % 2 == 0 else "amo")


class NumberedStream:
    """A scenario's data: records numbered per partition (value = offset), produced to TOPIC.

    Used by the stages that run on a real cluster; a subclass provides ``self.cluster`` and
    ``self.partitions`` and calls :meth:`_init_stream`.
    """

    cluster: Any
    partitions: int
    #: the data topic (a run on a shared Kafka has a name of its own)
    topic: str = TOPIC

    def _init_stream(self) -> None:
        self.produced: dict[int, int] = dict.fromkeys(range(self.partitions), 0)
        self._producer: threading.Thread | None = None
        self._producing = threading.Event()

    def produce(self, per_partition: int) -> None:
        """The next ``per_partition`` numbers to every partition, one batch each."""
        for p in range(self.partitions):
            now = int(time.time() * 1000)
            self.cluster.produce(
                self.topic,
                p,
                [
                    NewRecord(value=b"%d" % (self.produced[p] + i), timestamp=now)
                    for i in range(per_partition)
                ],
            )
            self.produced[p] += per_partition

    def produce_in_background(self, per_partition: int, seconds: float, rounds: int = 20) -> None:
        """Keep a stream flowing while the scenario runs."""
        each = max(1, per_partition // rounds)

        def run() -> None:
            for _ in range(rounds):
                if not self._producing.is_set():
                    return
                self.produce(each)
                time.sleep(seconds / rounds)

        self._producing.set()
        self._producer = threading.Thread(target=run, name="scenario-producer", daemon=True)
        self._producer.start()

    def wait_produced(self) -> None:
        if self._producer is not None:
            self._producer.join(60)

    def stop_producing(self) -> None:
        self._producing.clear()
        self.wait_produced()

    def all_offsets(self) -> set[tuple[int, int]]:
        return {(p, o) for p, n in self.produced.items() for o in range(n)}


def parse_args(name: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m scenarios.{name}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="keep the log here afterwards")
    parser.add_argument("--mode", choices=["alo", "amo"], default=None, help="default: by seed")
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default=None,
        help="where the members run: the simulator, threads of this process (default), or "
        "real processes with a broker",
    )
    parser.add_argument("--processes", action="store_true", help="the same as --stage processes")
    add_kafka_options(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    if args.kafka and args.stage not in (None, "processes"):
        parser.error("--kafka runs on real processes only (--stage processes)")
    if args.processes or args.kafka:
        args.stage = "processes"
    args.stage = args.stage or "threads"
    return args


def add_kafka_options(parser: argparse.ArgumentParser) -> None:
    """``--kafka [--kafka-bootstrap HOST:PORT]``: real processes over Apache Kafka."""
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="real processes over Apache Kafka (a single-node KafkaCluster started for the "
        "run and stopped by pid) instead of logmarshal's broker",
    )
    parser.add_argument(
        "--kafka-bootstrap",
        metavar="HOST:PORT",
        help="with --kafka: an Apache Kafka already running (the run's topic and group get "
        "names of their own)",
    )


def kafka_from(args: argparse.Namespace) -> OnKafka | None:
    """The :class:`OnKafka` the ``--kafka`` options ask for, or None."""
    if args.kafka_bootstrap and not args.kafka:
        raise SystemExit("--kafka-bootstrap goes with --kafka")
    return OnKafka(args.kafka_bootstrap) if args.kafka else None


def configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=[logging.CRITICAL + 1, logging.WARNING, logging.INFO][min(verbose, 2)],
        format="%(relativeCreated)7.0f %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    if verbose:
        os.environ["SCENARIO_SHOW_OUTPUT"] = "1"


def main_on_processes(
    prog: str,
    argv: list[str] | None,
    scenarios: Mapping[str, Callable[..., Report]],
    name: str | None = None,
) -> int:
    """The command line of the scenarios only real processes can play: ``prog [SCENARIO]
    --seed N [--mode M] [--data-dir D] [-v]`` (the scenario is asked for unless ``name``)."""
    parser = argparse.ArgumentParser(prog=prog)
    if name is None:
        parser.add_argument("scenario", choices=sorted(scenarios))
    parser.add_argument("--processes", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="keep the broker's log here afterwards")
    parser.add_argument("--mode", choices=["alo", "amo"], default=None, help="default: by seed")
    add_kafka_options(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    run = scenarios[name or args.scenario]
    kafka = kafka_from(args)
    extra = {} if kafka is None else {"kafka": kafka}
    try:
        report = run(
            args.seed, mode=mode_for(args.seed, args.mode), data_dir=args.data_dir, **extra
        )
    except ValueError as exc:  # asked for what cannot be (a scenario that has no Kafka form)
        raise SystemExit(str(exc)) from None
    report.print()
    if args.data_dir:
        print(f"log kept in {args.data_dir}")
    return 0 if report.ok else 1
