"""What the tests of a coordination log that loses records share (on logmarshal's broker, in
the audit and on Apache Kafka): a segment cut back as a lost disk or an unclean election
leaves it, and an AMO member on a network connection of its own, polled by a thread that keeps
every offset handed out with the monotonic time it was handed out, and the times the
Marshaler reported a halt."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Any

from logmarshal import Consumer, Marshaler
from logmarshal.errors import LogmarshalError
from logmarshal.metrics import MarshalerMetrics
from logmarshal.network import NetworkCluster
from storage import NewRecord


def write_until(cluster: NetworkCluster, topic: str, timeout: float) -> int | None:
    """The offset of a durable write to ``topic``/0 through ``cluster``, asked again until it
    lands or ``timeout`` is over (None): a failed producer's writes fail while it is retired."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = NewRecord(value=b"after", timestamp=int(time.time() * 1000))
        try:
            return cluster.produce(topic, 0, [record], durable=True).base_offset
        except LogmarshalError:
            time.sleep(0.5)
    return None


def cut_segment(partition_dir: Path, offset: int) -> int:
    """Cut the newest segment of a partition (its log closed or its broker stopped) back to its
    first batch at or after ``offset``; its indexes are rebuilt when it opens. Returns the log
    end it leaves (a batch of several records that spans ``offset`` stays whole)."""
    segment = max(partition_dir.glob("*.log"))
    data = segment.read_bytes()
    pos, end = 0, int(segment.stem)
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= offset:
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        end = base + delta + 1
        pos += 12 + length
    assert pos < len(data), "nothing to cut"
    with open(segment, "r+b") as f:
        f.truncate(pos)
    for index in partition_dir.glob(f"{segment.stem}.*index"):
        index.unlink()
    return end


class PollingMember:
    """``pause`` seconds between polls (a slow member lives through the fault); ``check``
    is the Marshaler's rewind detection (off only to show what it prevents)."""

    def __init__(self, bootstrap: str, name: str, pause: float, *, check: bool, hb: float,
                 metrics: MarshalerMetrics | None = None, snapshot_records: int | None = None,
                 restore_snapshots: bool = True, timeout: float = 30.0,
                 **consumer: Any) -> None:  # fmt: skip
        self.name = name
        self.cluster = NetworkCluster(bootstrap, timeout=timeout)
        # snapshots (when asked for) are published, never truncated under the test
        self.marshaler = Marshaler(
            self.cluster, name, "g", hb, coordination_partitions=1,
            snapshot_records=snapshot_records, snapshot_interval=None, truncate=False,
            restore_snapshots=restore_snapshots, metrics=metrics, _check_rewind=check,
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
