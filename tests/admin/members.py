"""Consumers running in threads on one embedded cluster, recording what they handle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler

TOPIC = "events"


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class Handled:
    """Every (partition, offset, wall time, member) handed to a handler, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, float, str]] = []

    def add(self, partition: int, offset: int, member: str) -> None:
        with self.lock:
            self.rows.append((partition, offset, time.time(), member))

    def snapshot(self) -> list[tuple[int, int, float, str]]:
        with self.lock:
            return list(self.rows)

    def per_partition(self, since: float = 0.0) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for p, o, t, _m in self.snapshot():
            if t >= since:
                out.setdefault(p, []).append(o)
        return out


class Member:
    """One Marshaler + ALO Consumer + a worker thread that handles slowly and commits."""

    def __init__(
        self,
        cluster: EmbeddedCluster,
        name: str,
        handled: Handled,
        hb: float,
        *,
        admin_keys: dict[str, bytes] | None = None,
        delay: float = 0.002,
    ) -> None:
        self.name = name
        self.marshaler = Marshaler(
            cluster,
            name,
            "g",
            hb,
            fetch_wait=0.05,
            coordination_partitions=4,
            admin_keys=admin_keys,
        )
        self.consumer = Consumer(self.marshaler, TOPIC, batch_size=5)
        self._handled = handled
        self._delay = delay
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.poll(0.05):
                self._handled.add(message.partition, message.offset, self.name)
                time.sleep(self._delay)
                self.consumer.commit(message)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.marshaler.close(timeout=5)


class Producer:
    """Appends a few records to every partition every ``interval`` seconds until stopped."""

    def __init__(self, cluster: EmbeddedCluster, partitions: int, interval: float = 0.05) -> None:
        self._cluster = cluster
        self._partitions = partitions
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = int(time.time() * 1000)
            for p in range(self._partitions):
                self._cluster.produce(TOPIC, p, [NewRecord(value=b"m", timestamp=now)] * 3)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
