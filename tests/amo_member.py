"""An AMO member for the tests of a coordination log that loses records (on logmarshal's
broker and on Apache Kafka): a Marshaler and a Consumer on a network connection of their own,
polled by a thread that keeps every offset handed out with the monotonic time it was handed
out, and the times the Marshaler reported a halt."""

from __future__ import annotations

import threading
import time
from typing import Any

from logmarshal import Consumer, Marshaler
from logmarshal.metrics import MarshalerMetrics
from logmarshal.network import NetworkCluster


class PollingMember:
    """``pause`` seconds between polls (a slow member lives through the fault); ``check``
    is the Marshaler's rewind detection (off only to show what it prevents)."""

    def __init__(self, bootstrap: str, name: str, pause: float, *, check: bool, hb: float,
                 metrics: MarshalerMetrics | None = None, **consumer: Any) -> None:  # fmt: skip
        self.name = name
        self.cluster = NetworkCluster(bootstrap)
        self.marshaler = Marshaler(
            self.cluster, name, "g", hb, coordination_partitions=1, snapshot_records=None,
            snapshot_interval=None, metrics=metrics, _check_rewind=check,
        )  # fmt: skip
        self.consumer = Consumer(self.marshaler, "events", mode="amo", batch_size=10,
                                 max_reserved=10, rebalance="none", **consumer)  # fmt: skip
        self.handed: list[tuple[int, float]] = []
        self.halted_at: list[float] = []
        self.marshaler.add_halt_listener(lambda _: self.halted_at.append(time.monotonic()))
        self._pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poll-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.poll(0.1):
                self.handed.append((message.offset, time.monotonic()))
            self._stop.wait(self._pause)

    def offsets(self, since: float = 0.0) -> set[int]:
        return {o for o, t in list(self.handed) if t >= since}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close(timeout=5)
        self.marshaler.close(timeout=5)
        self.cluster.close()
