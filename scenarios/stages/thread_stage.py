"""Members as threads of this process on one embedded cluster (``threads``), or each on its
own connection to logmarshal's broker on 127.0.0.1 (``network``: the network edge, its
librdkafka clients, delivery reports' thread and one writer thread).

Each member gets its own :class:`~logmarshal._faults.FaultyCluster` (so it can be frozen or
killed alone) and its own Marshaler, as separate processes would; an observer Marshaler reads
ownership from the log. Every random choice comes from the seed: which member fails, when,
and which writes and reads meet a fault (on the network, when the calls interleave with the
broker's answers is not the seed's).
"""

from __future__ import annotations

import contextlib
import logging
import random
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import logmarshal
from logmarshal import EmbeddedCluster
from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.cluster import Cluster
from logmarshal.consumer import Consumer
from logmarshal.errors import ClosedError
from logmarshal.localbroker import LocalBroker
from logmarshal.marshaler import Marshaler

from ..common import GROUP, TOPIC, NumberedStream, new_dir, wait_until
from .base import Handed, Member, Setup, Stage, StageError, members_in_log

__all__ = ["NetworkThreadStage", "ThreadMember", "ThreadStage", "light_faults"]

log = logging.getLogger(__name__)


def light_faults(seed: int) -> FaultPlan:
    """Background noise a scenario runs under: some slow, lost and failed calls."""
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


DELAYS_ONLY = FaultPlan(produce_delay=0.1, produce_delay_range=(0.0, 0.01), fetch_delay=0.1)


class ThreadMember:
    """One consumer "process" in a thread: fault wrapper, Marshaler, Consumer, and a worker
    that polls, records every message it is handed (:class:`Handed`, wall-clock times),
    optionally takes ``handle_delay`` per message, and commits it.

    Also used on its own by tests that need live members on a cluster they set up.
    """

    def __init__(
        self,
        cluster: Cluster,
        client_id: str,
        group: str,
        hb: float,
        *,
        topic: str = TOPIC,
        plan: FaultPlan | None = None,
        seed: int = 0,
        instance: int = 0,
        handle_delay: float = 0.0,
        marshaler_options: dict[str, Any] | None = None,
        **consumer_options: Any,
    ) -> None:
        self.client_id = client_id
        self.fault = FaultyCluster(cluster, plan, seed=seed, name=client_id)
        marshaler: dict[str, Any] = {
            "fetch_wait": 0.1,
            "rng": random.Random(f"{seed}/{client_id}/{instance}"),
        }
        marshaler.update(marshaler_options or {})
        self.marshaler = Marshaler(self.fault, client_id, group, hb, **marshaler)
        options: dict[str, Any] = {"batch_size": 20, "fetch_wait": 0.1}
        options.update(consumer_options)
        self.consumer = Consumer(
            self.marshaler, topic, rng=random.Random(f"{seed}/{client_id}/consumer"), **options
        )
        self._handle_delay = handle_delay
        self._handed: list[Handed] = []
        self._fenced_at: float | None = None
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._lock = threading.Lock()
        self.closed = False
        self._worker = threading.Thread(
            target=self._work, name=f"scenario-{client_id}", daemon=True
        )
        self._worker.start()

    @property
    def identity(self) -> tuple[str, str]:
        return self.marshaler.identity

    def _work(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(0.05):
                continue
            started = time.time()
            try:
                batch = self.consumer.poll(0.05)
            except Exception:
                if self.consumer.closed:
                    return
                log.exception("%s: poll failed", self.client_id)
                time.sleep(0.05)
                continue
            handed_at = time.time()
            self.fenced_at()  # note the moment it knows
            for message in batch:
                if self.fault.killed:
                    break  # killed mid-batch: the rest is never handled
                self._running.wait()  # frozen mid-batch: resumes where it was, as SIGCONT does
                with self._lock:
                    self._handed.append(
                        Handed(message.partition, message.offset, started, handed_at)
                    )
                if self._handle_delay:
                    time.sleep(self._handle_delay)
                try:
                    self.consumer.commit(message)
                except ClosedError:
                    return  # closed under it (close() waits 5 s for this thread)

    def handed(self) -> list[Handed]:
        with self._lock:
            return list(self._handed)

    def fenced_at(self) -> float | None:
        """When this member was first seen to know it is fenced."""
        with self._lock:
            if self._fenced_at is None and self.consumer.fenced:
                self._fenced_at = time.time()
            return self._fenced_at

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

    @property
    def killed(self) -> bool:
        return self.fault.killed

    def close(self, release: bool = True) -> bool:
        """Stop the worker, then close (commits flushed, claims released unless killed);
        True if it was closed gracefully here."""
        if self.closed:
            return False
        self.closed = True
        graceful = release and not self.fault.killed
        self._stop.set()
        self._running.set()
        self._worker.join(5)
        self.consumer.close(release=graceful)
        graceful = graceful and self.consumer.closed and not self._worker.is_alive()
        self.marshaler.close(timeout=5)
        self.fault.close()  # kills the connection wrapper (the shared cluster stays open)
        return graceful


class ThreadStage(NumberedStream, Stage):
    """Members in threads on an embedded cluster in a temporary (or given) directory."""

    kind = "threads"
    partial_freeze = True

    def __init__(self, setup: Setup) -> None:
        Stage.__init__(self, setup)
        seed, name, partitions = setup.seed, setup.name, setup.partitions
        self._plan = light_faults(seed) if setup.faults == "light" else DELAYS_ONLY
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        data_dir = new_dir(setup.data_dir)
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"logmarshal-{name}-")
            data_dir = self._tmp.name
        self.data_dir = data_dir
        self.cluster = self._open(data_dir)
        self.cluster.create_topic(TOPIC, partitions)
        self._init_stream()
        self.observer = Marshaler(self.cluster, "observer", GROUP, self.hb, fetch_wait=0.1)
        self._instances = 0
        self._lock = threading.Lock()

    def _open(self, data_dir: str) -> Cluster:
        """The cluster the stage writes and observes through."""
        return EmbeddedCluster(data_dir, maintenance_interval=0)

    def _connection(self) -> Cluster:
        """A new member's connection (here: the one embedded cluster, shared)."""
        return self.cluster

    # -- members ---------------------------------------------------------------------------

    def start(self, client_id: str, **options: Any) -> Member:
        return self._start_again(Member(client_id, client_id, options), lambda: None)

    def start_group(self, client_ids: list[str], **options: Any) -> list[Member]:
        """Each member is made in its own thread, all released at once: joining races."""
        barrier = threading.Barrier(len(client_ids))
        made: dict[int, Member] = {}

        def make(i: int, client_id: str) -> None:
            barrier.wait(10)
            made[i] = self.start(client_id, **options)

        threads = [
            threading.Thread(target=make, args=(i, c), name=f"scenario-start-{c}")
            for i, c in enumerate(client_ids)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        if len(made) != len(client_ids):
            raise StageError(f"{len(client_ids) - len(made)} member(s) did not start")
        return [made[i] for i in range(len(client_ids))]

    def _start_again(self, member: Member, before: Callable[[], None]) -> Member:
        before()
        with self._lock:
            self._instances += 1
            instance = self._instances
            name = self._name(member.client_id)
        impl = ThreadMember(
            self._connection(),
            member.client_id,
            GROUP,
            self.hb,
            plan=self._plan,
            seed=self.seed,
            instance=instance,
            mode=self.mode,
            **member.options,
        )
        new = Member(name, member.client_id, member.options, impl)
        with self._lock:
            self.members.append(new)
        return new

    def kill(self, member: Member) -> None:
        member.impl.kill()

    def freeze(self, member: Member, worker_too: bool = True) -> None:
        member.impl.freeze(worker_too)

    def thaw(self, member: Member) -> None:
        member.impl.thaw()

    def leave(self, member: Member) -> bool:
        return bool(member.impl.close())

    def alive(self, member: Member) -> bool:
        return not member.impl.closed and not member.impl.killed

    # -- views -------------------------------------------------------------------------------

    def holders(self) -> dict[int, tuple[str, str] | None]:
        return {p: self.observer.holder(TOPIC, p) for p in range(self.partitions)}

    def announced(self) -> set[str]:
        return members_in_log(self.observer, GROUP)

    def positions(self) -> dict[int, int | None]:
        return {p: self.observer.resume_offset(TOPIC, p) for p in range(self.partitions)}

    def identity(self, member: Member) -> tuple[str, str]:
        return member.impl.identity

    def believed(self, member: Member) -> frozenset[int]:
        return frozenset(p for _, p in member.impl.consumer.claims())

    def fenced_at(self, member: Member) -> float | None:
        return member.impl.fenced_at()

    def delivered(self, member: Member) -> list[Handed]:
        return member.impl.handed()

    # -- time --------------------------------------------------------------------------------

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait_until(self, predicate: Callable[[], object], timeout: float) -> bool:
        return wait_until(predicate, timeout)

    def close(self) -> None:
        self.stop_producing()
        for member in self.members:
            with contextlib.suppress(Exception):
                member.impl.close()
        self.observer.close()
        self.cluster.close()
        if self._tmp is not None:
            self._tmp.cleanup()


class NetworkThreadStage(ThreadStage):
    """Members in threads, each on a connection of its own (a ``NetworkCluster``, as a
    process would have) to logmarshal's broker, a process on 127.0.0.1 started here and
    stopped by its pid at the end: the network edge under the same injected faults as the
    embedded one (a write's answer lost, late or refused, a member frozen or killed)."""

    kind = "network"

    def _open(self, data_dir: str) -> Cluster:
        self.broker: LocalBroker | None = LocalBroker(data_dir).start()
        self._connections: list[Cluster] = []
        return self._connect()

    def _connect(self) -> Cluster:
        assert self.broker is not None
        cluster = logmarshal.connect(bootstrap=self.broker.bootstrap)
        self._connections.append(cluster)
        return cluster

    def _connection(self) -> Cluster:
        return self._connect()

    def close(self) -> None:
        try:
            super().close()  # (closes the stage's own connection: the first one)
        finally:
            for cluster in self._connections[1:]:
                with contextlib.suppress(Exception):
                    cluster.close()
            if self.broker is not None:
                self.broker.stop()
                self.broker = None
