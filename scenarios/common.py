"""What every scenario shares: the command line, a cluster, members with fault wrappers,
a producer, an observer that reads ownership from the log, and the report.

Here the members of a scenario run in one process on the embedded cluster
(``--processes`` runs the real-process version instead: :mod:`scenarios.processes`); each
gets its own :class:`~logmarshal.faults.FaultyCluster` (so one can be frozen or killed) and its own Marshaler, as separate processes would. Every random choice comes from
the seed: which member fails, when, and which writes and reads meet a fault.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from logmarshal import EmbeddedCluster, Message, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.faults import FaultPlan, FaultyCluster
from logmarshal.marshaler import Marshaler

__all__ = [
    "Check",
    "Harness",
    "Member",
    "Report",
    "main_for",
    "wait_for",
]

GROUP = "scenario"
TOPIC = "events"


def light_faults(seed: int) -> FaultPlan:
    """Background noise every scenario runs under: some slow, lost and failed calls."""
    rng = random.Random(f"plan/{seed}")
    return FaultPlan(
        produce_delay=rng.uniform(0.0, 0.1),
        produce_delay_range=(0.0, 0.02),
        produce_fail=rng.uniform(0.0, 0.02),
        produce_drop=rng.uniform(0.0, 0.02),
        fetch_delay=rng.uniform(0.0, 0.1),
        fetch_delay_range=(0.0, 0.02),
        fetch_fail=rng.uniform(0.0, 0.01),
    )


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


def wait_for(predicate: Callable[[], object], timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


class Member:
    """One consumer process: fault wrapper, Marshaler, Consumer, and a worker thread that
    polls, "handles" (records) and commits every message."""

    def __init__(
        self,
        harness: Harness,
        client_id: str,
        *,
        plan: FaultPlan | None = None,
        **consumer_options: object,
    ) -> None:
        self.harness = harness
        self.client_id = client_id
        self.fault = FaultyCluster(harness.cluster, plan, seed=harness.seed, name=client_id)
        self.marshaler = Marshaler(
            self.fault,
            client_id,
            GROUP,
            harness.hb,
            fetch_wait=0.1,
            rng=random.Random(f"{harness.seed}/{client_id}/{harness.instances[client_id]}"),
        )
        harness.instances[client_id] += 1
        options = {"mode": harness.mode, "batch_size": 20, "fetch_wait": 0.1}
        options.update(consumer_options)
        self.consumer = Consumer(
            self.marshaler,
            TOPIC,
            rng=random.Random(f"{harness.seed}/{client_id}/consumer"),
            **options,  # type: ignore[arg-type]
        )
        #: (partition, offset, monotonic time poll handed it out)
        self.handled: list[tuple[int, int, float]] = []
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._lock = threading.Lock()
        self._worker = threading.Thread(
            target=self._work, name=f"scenario-{client_id}", daemon=True
        )
        self._worker.start()
        self.closed = False

    @property
    def instance_id(self) -> str:
        return self.marshaler.instance_id

    def _work(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(0.05):
                continue
            try:
                batch = self.consumer.poll(0.05)
            except Exception:
                if self.consumer.closed:
                    return
                logging.getLogger(__name__).exception("%s: poll failed", self.client_id)
                time.sleep(0.05)
                continue
            handed_at = time.monotonic()
            for message in batch:
                if self.fault.killed:
                    break  # killed mid-batch: the rest is never handled
                self._running.wait()  # frozen mid-batch: resumes where it was, as SIGCONT does
                self._handle(message, handed_at)

    def _handle(self, message: Message, handed_at: float) -> None:
        with self._lock:
            self.handled.append((message.partition, message.offset, handed_at))
        self.consumer.commit(message)

    def freeze(self, worker_too: bool = True) -> None:
        """SIGSTOP-like: its I/O blocks; with ``worker_too`` it hands out nothing either."""
        self.fault.freeze()
        if worker_too:
            self._running.clear()

    def thaw(self) -> None:
        self.fault.thaw()
        self._running.set()

    def kill(self) -> None:
        """An abrupt stop: no more handling, no more writes, nothing released."""
        self._stop.set()
        self.fault.kill()

    def handled_set(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(p, o) for p, o, _ in self.handled]

    def handed_out_after(self, t: float) -> list[tuple[int, int]]:
        with self._lock:
            return [(p, o) for p, o, at in self.handled if at > t]

    def close(self, release: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self._running.set()
        self._worker.join(5)
        self.consumer.close(release=release and not self.fault.killed)
        self.marshaler.close()
        self.fault.close()


class NumberedStream:
    """A scenario's data: records numbered per partition (value = offset), produced to TOPIC.

    Shared by the in-process and the real-process harnesses; a subclass provides
    ``self.cluster`` and ``self.partitions`` and calls :meth:`_init_stream`.
    """

    cluster: Any
    partitions: int

    def _init_stream(self) -> None:
        self.produced: dict[int, int] = dict.fromkeys(range(self.partitions), 0)
        self._producer: threading.Thread | None = None
        self._producing = threading.Event()

    def produce(self, per_partition: int) -> None:
        """The next ``per_partition`` numbers to every partition, one batch each."""
        for p in range(self.partitions):
            now = int(time.time() * 1000)
            self.cluster.produce(
                TOPIC,
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

    def all_offsets(self) -> set[tuple[int, int]]:
        return {(p, o) for p, n in self.produced.items() for o in range(n)}



class Harness(NumberedStream):
    """A cluster, a topic, a producer thread, an observer, and the members."""

    def __init__(
        self,
        name: str,
        seed: int,
        *,
        mode: str,
        hb: float,
        partitions: int,
        data_dir: str | None,
    ) -> None:
        self.name = name
        self.seed = seed
        self.rng = random.Random(f"{name}/{seed}")
        self.mode = mode
        self.hb = hb
        self.partitions = partitions
        self.report = Report(name, seed, mode)
        self._tmp = None
        if data_dir is not None and os.path.isdir(data_dir) and os.listdir(data_dir):
            raise SystemExit(f"--data-dir {data_dir} is not empty; give a new directory")
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"logmarshal-{name}-")
            data_dir = self._tmp.name
        self.data_dir = data_dir
        self.cluster = EmbeddedCluster(data_dir, maintenance_interval=0)
        self.cluster.create_topic(TOPIC, partitions)
        self.instances: Counter[str] = Counter()
        self.members: list[Member] = []
        self._init_stream()
        self.observer = Marshaler(self.cluster, "observer", GROUP, hb, fetch_wait=0.1)

    def member(self, client_id: str, **options: object) -> Member:
        plan = options.pop("plan", light_faults(self.seed))
        member = Member(self, client_id, plan=plan, **options)  # type: ignore[arg-type]
        self.members.append(member)
        return member

    def holders(self) -> dict[int, tuple[str, str] | None]:
        return {p: self.observer.holder(TOPIC, p) for p in range(self.partitions)}

    def owned_by(self, members: list[Member]) -> bool:
        identities = {m.marshaler.identity for m in members}
        return all(h in identities for h in self.holders().values())

    def drained(self, members: list[Member]) -> bool:
        """The last produced message of every partition was handled by one of ``members``
        (a position alone is not enough: in AMO it moves when a batch is reserved, just
        before it is handed out)."""
        last: dict[int, int] = {}
        for m in members:
            for p, o in m.handled_set():
                if o > last.get(p, -1):
                    last[p] = o
        return all(last.get(p, -1) >= n - 1 for p, n in self.produced.items() if n)

    def close(self) -> None:
        self._producing.clear()
        self.wait_produced()
        for member in self.members:
            with contextlib.suppress(Exception):
                member.close()
        self.observer.close()
        self.cluster.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def at_most_once(self, members: list[Member]) -> None:
        counts = Counter(o for m in members for o in m.handled_set())
        twice = sorted(o for o, c in counts.items() if c > 1)
        lost = len(self.all_offsets() - set(counts))
        self.report.figures["lost (allowed in AMO)"] = lost
        self.report.check(
            "AMO: no offset handed out twice", not twice, f"{len(twice)} repeated, e.g. {twice[:5]}"
        )

    def at_least_once(self, members: list[Member]) -> None:
        counts = Counter(o for m in members for o in m.handled_set())
        missing = sorted(self.all_offsets() - set(counts))
        self.report.figures["repeated (allowed in ALO)"] = sum(c - 1 for c in counts.values())
        self.report.check(
            "ALO: every produced offset handled at least once",
            not missing,
            f"{len(missing)} never handled, e.g. {missing[:5]}",
        )

    def delivery(self, members: list[Member]) -> None:
        if self.mode == "amo":
            self.at_most_once(members)
        else:
            self.at_least_once(members)


@contextlib.contextmanager
def harness(
    name: str, seed: int, *, mode: str, hb: float, partitions: int, data_dir: str | None
) -> Iterator[Harness]:
    h = Harness(name, seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir)
    try:
        yield h
    finally:
        h.close()


def parse_args(name: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m scenarios.{name}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="keep the log here afterwards")
    parser.add_argument("--mode", choices=["alo", "amo"], default=None, help="default: by seed")
    parser.add_argument(
        "--processes",
        action="store_true",
        help="run it with a broker process and member processes (scenarios.processes)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0)
    return parser.parse_args(argv)


def mode_for(seed: int, mode: str | None) -> str:
    """Seeds alternate between the modes unless one is asked for."""
    return mode if mode is not None else ("alo" if seed % 2 == 0 else "amo")


def main_for(name: str, run: Callable[..., Report], argv: list[str] | None = None) -> int:
    args = parse_args(name, argv)
    logging.basicConfig(
        level=[logging.CRITICAL + 1, logging.WARNING, logging.INFO][min(args.verbose, 2)],
        format="%(relativeCreated)7.0f %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    if args.processes:
        from .processes import SCENARIOS

        if name not in SCENARIOS:
            raise SystemExit(f"{name} has no real-process version ({', '.join(SCENARIOS)} do)")
        if args.verbose:
            os.environ["SCENARIO_SHOW_OUTPUT"] = "1"
        run = SCENARIOS[name]
    report = run(args.seed, mode=mode_for(args.seed, args.mode), data_dir=args.data_dir)
    report.print()
    if args.data_dir:
        print(f"log kept in {args.data_dir}")
    return 0 if report.ok else 1


def exit_with(code: int) -> None:
    sys.stdout.flush()
    sys.exit(code)
