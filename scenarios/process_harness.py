"""The real-process harness: a broker process, consumer and producer processes
(:mod:`scenarios.member`), real signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), and the checks.

The broker is logmarshal's own (``logmarshal broker start``) or Apache Kafka
(:class:`~scenarios.common.OnKafka`): a single-node :class:`~logmarshal.localkafka.KafkaCluster`
the run starts and stops by pid, or one already running that other runs share, where the
run's topic and group get names of their own (``__marshal`` is shared, as on any cluster).

The orchestrator (this process) starts the broker on a free port of 127.0.0.1, creates the
topic, produces, starts members, and watches the group through an *observer* Marshaler over
the network, which replays ``__marshal`` as every member does. What each member handed out
comes from its report file (see :mod:`scenarios.member`), written before the member could
be killed. Every process started here is stopped when the scenario ends, whatever happens
(each runs in its own process group; bounded waits, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from logmarshal._ports import free_port
from logmarshal.localbroker import LocalBroker
from logmarshal.localkafka import KafkaCluster
from logmarshal.marshaler import Marshaler
from logmarshal.network import NetworkCluster

from .common import GROUP, TOPIC, NumberedStream, OnKafka, new_dir, wait_until
from .stages.base import GroupChecks, Handed

__all__ = ["GROUP", "ROOT", "TOPIC", "MemberProc", "Procs", "free_port", "procs"]

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger(__name__)


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class _Child:
    """A child process in its own process group, with its output in a file."""

    def __init__(self, name: str, argv: list[str], workdir: Path) -> None:
        self.name = name
        self.argv = argv
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0

    def spawn(self) -> None:
        self.generation += 1
        out = open(self.workdir / f"{self.name}.{self.generation}.out", "wb")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc, sig)

    def kill(self) -> None:
        """SIGKILL and reap (a stopped process dies too)."""
        if self.proc is None:
            return
        _kill_group(self.proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (after SIGCONT, in case it is stopped); SIGKILL if it does not exit."""
        if self.proc is None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not exit within %.0f s of SIGTERM; killing it", self.name, timeout)
            self.kill()
            return None

    def output(self) -> str:
        path = self.workdir / f"{self.name}.{self.generation}.out"
        return path.read_text(errors="replace") if path.exists() else ""


@attrs.define
class MemberLog:
    """What a member's report file says."""

    instances: list[str] = attrs.field(factory=list)
    handed: list[Handed] = attrs.field(factory=list)
    claims: tuple[float, frozenset[int]] | None = None
    fenced_at: float | None = None
    exited: bool = False
    acked: dict[tuple[int, int], str] = attrs.field(factory=dict)
    #: (when, stalled seconds): it woke from a stall (``--wake-lag`` members only)
    woke: list[tuple[float, float]] = attrs.field(factory=list)


def read_log(path: Path) -> MemberLog:
    out = MemberLog()
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(" ")
        if len(parts) < 2:
            continue  # a line cut by a kill
        kind = parts[0]
        with contextlib.suppress(ValueError, IndexError):
            if kind == "H" and len(parts) == 5:
                out.handed.append(
                    Handed(int(parts[1]), int(parts[2]), float(parts[3]), float(parts[4]))
                )
            elif kind == "I":
                out.instances.append(parts[1])
            elif kind == "C":
                ps = (
                    frozenset(int(p) for p in parts[2].split(",") if p)
                    if len(parts) > 2
                    else frozenset()
                )
                out.claims = (float(parts[1]), ps)
            elif kind == "F":
                out.fenced_at = float(parts[1])
            elif kind == "W" and len(parts) == 3:
                out.woke.append((float(parts[1]), float(parts[2])))
            elif kind == "X":
                out.exited = True
            elif kind == "A" and len(parts) == 4:
                out.acked[(int(parts[1]), int(parts[2]))] = parts[3]
    return out


class MemberProc(_Child):
    """A consumer (or producer) process of :mod:`scenarios.member`."""

    def __init__(self, name: str, argv: list[str], workdir: Path, client_id: str) -> None:
        super().__init__(name, argv, workdir)
        self.client_id = client_id
        self.report_path = workdir / f"{name}.report"
        self.start_file = workdir / f"{name}.go"
        self.argv = [*argv, "--report", str(self.report_path), "--start-file", str(self.start_file)]

    @property
    def imported(self) -> bool:
        """It has imported everything and waits for :meth:`go`."""
        return Path(str(self.start_file) + ".ready").exists()

    def go(self) -> float:
        """Let it connect (it has imported everything already)."""
        self.start_file.touch()
        return time.time()

    def log(self) -> MemberLog:
        return read_log(self.report_path)

    @property
    def instance_id(self) -> str | None:
        instances = self.log().instances
        return instances[-1] if instances else None

    @property
    def identity(self) -> tuple[str, str | None]:
        return (self.client_id, self.instance_id)

    def believed(self) -> frozenset[int]:
        claims = self.log().claims
        return frozenset() if claims is None else claims[1]


class Procs(NumberedStream, GroupChecks):
    """One real-process scenario run: workdir, broker(s), members, observer, checks."""

    def __init__(
        self,
        name: str,
        seed: int,
        *,
        mode: str,
        hb: float,
        partitions: int,
        data_dir: str | None = None,
        brokers: int = 1,
        kafka: OnKafka | None = None,
    ) -> None:
        self._begin(
            name,
            seed,
            mode=mode,
            hb=hb,
            partitions=partitions,
            where="processes" if kafka is None else f"processes over {kafka.describe()}",
            # the same seeded choices on either broker
            rng_key=f"processes/{name}/{seed}",
        )
        if kafka is not None and brokers != 1:
            raise ValueError("on Apache Kafka the harness runs one node")
        self.kafka = kafka
        self.kafka_cluster: KafkaCluster | None = None
        self.topic, self.group = TOPIC, GROUP
        if kafka is not None and kafka.bootstrap:
            # a shared cluster: this run's own names (one run's records are not another's)
            run_id = f"{name}-{seed}-{os.urandom(4).hex()}"
            self.topic, self.group = f"{TOPIC}-{run_id}", f"{GROUP}-{run_id}"
        data_dir = new_dir(data_dir)
        # not TemporaryDirectory: its finalizer would remove a workdir kept for inspection
        self.workdir = Path(tempfile.mkdtemp(prefix=f"logmarshal-proc-{name}-"))
        self.data_root = Path(data_dir) if data_dir is not None else self.workdir / "data"
        self.brokers: list[LocalBroker] = []
        self.members: list[MemberProc] = []
        self.cluster: NetworkCluster | None = None
        self.observer: Marshaler | None = None
        self._init_stream()
        self._broker_count = brokers

    # -- processes --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the broker(s); separate from ``__init__`` so a failed start is cleaned up."""
        if self.kafka is None:
            self._start_brokers(self._broker_count)
        elif self.kafka.bootstrap:
            self.bootstrap = self.kafka.bootstrap
        else:
            self.kafka_cluster = KafkaCluster(self.data_root / "kafka")
            self.kafka_cluster.start()
            self.bootstrap = self.kafka_cluster.bootstrap

    def crash_broker(self) -> None:
        """SIGKILL the (one) broker: logmarshal's, or the Kafka node this run started."""
        if self.kafka_cluster is not None:
            self.kafka_cluster.kill(1)
        elif self.kafka is not None:
            raise RuntimeError("a shared Apache Kafka is not this run's to kill")
        else:
            self.brokers[0].kill()

    def restart_broker(self) -> None:
        """Start the crashed broker again on its data and port; returns once it answers."""
        if self.kafka_cluster is not None:
            self.kafka_cluster.restart(1)
        else:
            self.brokers[0].start()

    def partition_dir(self, topic: str, partition: int) -> Path:
        """Where the (one) broker keeps ``topic/partition``'s segments: the same directory
        layout and record batch format (v2) on both brokers."""
        if self.kafka_cluster is not None:
            return self.kafka_cluster.node(1).workdir / "data" / f"{topic}-{partition}"
        if self.kafka is not None:
            raise RuntimeError("a shared Apache Kafka's files are not this run's")
        return self.data_root / f"{topic}-{partition}"

    def _start_brokers(self, n: int) -> None:
        if n == 1:
            broker = self._broker(self.data_root, "broker0")
            self.brokers.append(broker)
            broker.start()
        else:
            ports = [free_port() for _ in range(n)]
            cluster_file = self.workdir / "cluster.txt"
            cluster_file.write_text(
                "".join(f"{i + 1} 127.0.0.1:{port}\n" for i, port in enumerate(ports))
            )
            for i, port in enumerate(ports):
                args = ["--cluster-file", str(cluster_file), "--broker-id", str(i + 1)]
                self.brokers.append(
                    self._broker(self.data_root / f"broker{i + 1}", f"broker{i + 1}", port, args)
                )
            for broker in self.brokers:
                broker.start()
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)

    def _broker(
        self, data_dir: Path, name: str, port: int = 0, args: list[str] | None = None
    ) -> LocalBroker:
        """``logmarshal broker start`` on ``data_dir``; restartable on the same port."""
        return LocalBroker(self.workdir, data_dir=data_dir, name=name, port=port, args=args or ())

    def connect(self, coordination_partitions: int = 8) -> None:
        """The orchestrator's own connection, the topic, and the observer."""
        # librdkafka's own log lines (connection refused while a broker is down) are noise here
        self.cluster = NetworkCluster(self.bootstrap, timeout=15.0, config={"log_level": 2})
        self.cluster.create_topic(self.topic, self.partitions)
        self.observer = Marshaler(
            self.cluster,
            "observer",
            self.group,
            self.hb,
            fetch_wait=0.1,
            # the observer measures: it sees every record at once, without a member's linger
            fetch_linger=0,
            coordination_partitions=coordination_partitions,
        )

    def member(self, client_id: str, *, go: bool = True, **options: object) -> MemberProc:
        """Start a consumer process; with ``go=False`` it waits for :meth:`MemberProc.go`."""
        argv = [
            sys.executable,
            "-m",
            "scenarios.member",
            "consume",
            "--bootstrap",
            self.bootstrap,
            "--client-id",
            client_id,
            "--mode",
            self.mode,
            "--hb",
            str(self.hb),
            "--group",
            self.group,
        ]
        if "topic" not in options:
            argv += ["--topic", self.topic]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value is not None and value is not False:
                argv += [flag, str(value)]
        count = sum(1 for m in self.members if m.client_id == client_id)
        name = client_id if count == 0 else f"{client_id}.{count}"
        member = MemberProc(name, argv, self.workdir, client_id)
        self.members.append(member)
        member.spawn()
        if go:
            member.go()
        return member

    def producer(self, per_partition: int, seconds: float, *, batch: int = 10) -> MemberProc:
        """A producer process writing acks=all, logging every acknowledged offset."""
        argv = [
            sys.executable,
            "-m",
            "scenarios.member",
            "produce",
            "--bootstrap",
            self.bootstrap,
            "--topic",
            self.topic,
            "--partitions",
            str(self.partitions),
            "--per-partition",
            str(per_partition),
            "--seconds",
            str(seconds),
            "--batch",
            str(batch),
            "--seed",
            str(self.seed),
            "--timeout",
            "30",
        ]
        member = MemberProc("producer", argv, self.workdir, "producer")
        self.members.append(member)
        member.spawn()
        member.go()
        return member

    def joined(self, members: list[MemberProc], timeout: float = 20.0) -> bool:
        return wait_until(lambda: all(m.instance_id for m in members), timeout, step=0.05)

    # -- the group, as the log and the members see it ---------------------------------------

    def holders(self) -> dict[int, tuple[str, str] | None]:
        assert self.observer is not None
        return {p: self.observer.holder(self.topic, p) for p in range(self.partitions)}

    def members_together(self, client_ids: list[str], **options: object) -> list[MemberProc]:
        """Start members and let them connect at the same moment (imports done first), so
        that none finds every partition taken by the others before it joins."""
        members = [self.member(c, go=False, **options) for c in client_ids]
        wait_until(lambda: all(m.imported or not m.alive for m in members), 20, step=0.02)
        for m in members:
            m.go()
        return members

    def start_group(
        self, size: int, *, first: int, per_partition: int, seconds: float
    ) -> list[MemberProc] | None:
        """Produce ``first`` records per partition, start ``size`` members together, and once
        they joined keep a stream flowing; None (after a failed check) if they did not start."""
        self.produce(first)
        members = self.members_together([f"c{i}" for i in range(size)])
        if not self.report.check("the members start", self.joined(members)):
            return None
        self.produce_in_background(per_partition=per_partition, seconds=seconds)
        return members

    # the primitives of GroupChecks (owned_by, drained, delivery, one_holder_each, ...)

    def positions(self) -> dict[int, int | None]:
        assert self.observer is not None
        return {p: self.observer.resume_offset(self.topic, p) for p in range(self.partitions)}

    def identity(self, member: MemberProc) -> tuple[str, str | None]:
        return member.identity

    def believed(self, member: MemberProc) -> frozenset[int]:
        return member.believed()

    def alive(self, member: MemberProc) -> bool:
        return member.alive

    def fenced_at(self, member: MemberProc) -> float | None:
        return member.log().fenced_at

    def delivered(self, member: MemberProc) -> list[Handed]:
        return member.log().handed

    def wait_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        return wait_until(predicate, timeout, step=0.02)

    # -- the end ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop everything this run started (members first, then the observer, brokers)."""
        self._producing.clear()
        self.wait_produced()
        for member in self.members:
            member.kill()
        if self.observer is not None:
            with contextlib.suppress(Exception):
                self.observer.close(timeout=5)
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()
        for broker in self.brokers:
            broker.stop(timeout=15)  # flushed, lock released: the log can be audited afterwards
        if self.kafka_cluster is not None:
            self.kafka_cluster.stop()  # SIGTERM by pid, SIGKILL what is left after 30 s
        if os.environ.get("SCENARIO_KEEP_WORKDIR"):
            print(f"workdir kept in {self.workdir}", file=sys.stderr)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def failure_output(self) -> str:
        """The tail of every child's output, for a failed run."""
        nodes = [] if self.kafka_cluster is None else self.kafka_cluster.nodes
        return "\n".join(
            [f"--- kafka node {n.node_id}\n{n.log_tail()[-3000:]}" for n in nodes]
            + [
                f"--- {child.name}\n{child.output()[-3000:]}"
                for child in [*self.brokers, *self.members]
            ]
        )


@contextlib.contextmanager
def procs(name: str, seed: int, **options: object) -> Iterator[Procs]:
    p = Procs(name, seed, **options)  # type: ignore[arg-type]
    try:
        p.start()
        yield p
    finally:
        if not p.report.ok and os.environ.get("SCENARIO_SHOW_OUTPUT"):
            print(p.failure_output(), file=sys.stderr)
        p.close()
