"""Members as real processes over a broker process on 127.0.0.1, with real signals.

The broker is logmarshal's, or Apache Kafka when the setup says so (``Setup.kafka``).

A thin stage over :class:`scenarios.process_harness.Procs`: SIGKILL kills, SIGSTOP freezes, SIGCONT
thaws, SIGTERM leaves (commits flushed, claims released), and a restart starts a new process
of the same client_id (imported ahead, so that it connects the moment the old one goes).
What each member handed out comes from its report file; ownership from an observer that
replays ``__marshal`` over the network. Every process it starts is stopped when it closes
(bounded waits, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

from logmarshal._coordlog import COORDINATION_TOPIC, iter_columns
from rationalizer import DecodeError, WorldState, coordination_partition, decode

from ..common import wait_until
from ..process_harness import MemberProc, Procs
from .base import Handed, Member, Setup, Stage, StageError, members_in_log

__all__ = ["Judged", "ProcessStage"]


@attrs.frozen
class Judged:
    """One coordination record about a data partition and its verdict, from a fresh replay
    of the broker's log: who sent what, when the log appended it (seconds), and the
    outcome (an Effect's value if accepted, else a Reason's)."""

    offset: int
    log_time: float
    kind: str
    sender: tuple[str, str]
    accepted: bool
    outcome: str


class ProcessStage(Stage):
    kind = "processes"

    def __init__(self, setup: Setup) -> None:
        # the real network and processes are the faults here (setup.faults is not used)
        Stage.__init__(self, setup)
        if setup.kafka is not None:
            self.report.mode = f"{setup.mode}, {self.kind} over {setup.kafka.describe()}"
        self.procs = Procs(
            setup.name,
            setup.seed,
            mode=setup.mode,
            hb=setup.hb,
            partitions=setup.partitions,
            data_dir=setup.data_dir,
            kafka=setup.kafka,
        )
        self.procs.report = self.report
        try:
            self.procs.start()
            self.procs.connect()
        except BaseException:
            self.procs.close()
            raise

    @property
    def produced(self) -> dict[int, int]:  # type: ignore[override]
        return self.procs.produced

    # -- members ---------------------------------------------------------------------------

    def _joined(self, procs: list[MemberProc]) -> None:
        if not self.procs.joined(procs):
            raise StageError(f"{[p.name for p in procs if not p.instance_id]} did not start")

    def _wrap(self, proc: MemberProc, options: dict[str, Any]) -> Member:
        member = Member(self._name(proc.client_id), proc.client_id, options, proc)
        self.members.append(member)
        return member

    def start(self, client_id: str, **options: Any) -> Member:
        return self.start_group([client_id], **options)[0]

    def start_group(self, client_ids: list[str], **options: Any) -> list[Member]:
        procs = self.procs.members_together(client_ids, **options)
        self._joined(procs)
        return [self._wrap(p, options) for p in procs]

    def _start_again(self, member: Member, before: Callable[[], None]) -> Member:
        proc = self.procs.member(member.client_id, go=False, **member.options)
        wait_until(lambda: proc.imported or not proc.alive, 20, step=0.02)
        before()
        proc.go()
        self._joined([proc])
        return self._wrap(proc, member.options)

    def kill(self, member: Member) -> None:
        member.impl.kill()

    def freeze(self, member: Member, worker_too: bool = True) -> None:
        member.impl.signal(signal.SIGSTOP)

    def thaw(self, member: Member) -> None:
        member.impl.signal(signal.SIGCONT)

    def leave(self, member: Member) -> bool:
        code = member.impl.terminate()
        return code == 0 and member.impl.log().exited

    def alive(self, member: Member) -> bool:
        return bool(member.impl.alive)

    # -- data --------------------------------------------------------------------------------

    def produce(self, per_partition: int) -> None:
        self.procs.produce(per_partition)

    def produce_in_background(self, per_partition: int, seconds: float) -> None:
        self.procs.produce_in_background(per_partition, seconds)

    def wait_produced(self) -> None:
        self.procs.wait_produced()

    # -- views -------------------------------------------------------------------------------

    def holders(self) -> dict[int, tuple[str, str] | None]:
        return self.procs.holders()

    def announced(self) -> set[str]:
        return members_in_log(self.procs.observer, self.procs.group)

    def positions(self) -> dict[int, int | None]:
        return self.procs.positions()

    def judged(self, partition: int) -> list[Judged]:
        """Every record about ``partition`` with its verdict, replayed from the log's start
        (the members' own replays keep no history of verdicts)."""
        cluster = self.procs.cluster
        assert cluster is not None and self.procs.observer is not None
        topic = self.procs.topic
        cp = coordination_partition(topic, partition, self.procs.observer.coordination_partitions)
        start = cluster.earliest_offset(COORDINATION_TOPIC, cp)
        end = cluster.latest_offset(COORDINATION_TOPIC, cp)
        if start > 0:
            raise StageError(f"{COORDINATION_TOPIC}/{cp} was truncated: no full history")
        world = WorldState()
        out = []
        for cols in iter_columns(cluster, cp, start, end):
            records = list(zip(*cols, strict=True))
            for (offset, ts, key, value), verdict in zip(
                records, world.apply_many(records), strict=True
            ):
                try:
                    message = decode(key, value)
                except DecodeError:
                    continue
                if getattr(message, "topic", None) != topic or verdict is None:
                    continue
                if getattr(message, "partition", None) != partition:
                    continue
                outcome = verdict.effect if verdict.accepted else verdict.reason
                out.append(
                    Judged(
                        offset,
                        ts / 1000,
                        type(message).__name__,
                        (message.client_id, message.instance_id),
                        verdict.accepted,
                        "" if outcome is None else str(outcome.value),
                    )
                )
        return out

    def identity(self, member: Member) -> tuple[str, str | None]:
        return member.impl.identity

    def believed(self, member: Member) -> frozenset[int]:
        return member.impl.believed()

    def fenced_at(self, member: Member) -> float | None:
        return member.impl.log().fenced_at

    def delivered(self, member: Member) -> list[Handed]:
        return member.impl.log().handed

    # -- time --------------------------------------------------------------------------------

    def now(self) -> float:
        return time.time()  # member report files use it too

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        return wait_until(predicate, timeout, step=0.02)

    def close(self) -> None:
        if not self.report.ok and os.environ.get("SCENARIO_SHOW_OUTPUT"):
            print(self.procs.failure_output(), file=sys.stderr)
        self.procs.close()
