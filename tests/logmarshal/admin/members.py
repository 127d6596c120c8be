"""Consumers running in threads on one embedded cluster, recording what they hand out: the
scenarios' :class:`~scenarios.stages.thread_stage.ThreadMember`, on a cluster the test sets
up."""

from __future__ import annotations

import threading
import time
from typing import Any

from logmarshal import EmbeddedCluster, NewRecord
from scenarios.stages.thread_stage import ThreadMember

TOPIC = "events"


def member(cluster: EmbeddedCluster, name: str, hb: float, **marshaler: Any) -> ThreadMember:
    """One ALO member of group ``g`` (4 coordination partitions) that takes 2 ms per
    message; ``marshaler``: more Marshaler options (``admin_keys``)."""
    return ThreadMember(
        cluster,
        name,
        "g",
        hb,
        topic=TOPIC,
        handle_delay=0.002,
        batch_size=5,
        marshaler_options={"fetch_wait": 0.05, "coordination_partitions": 4, **marshaler},
    )


def handed(members: list[ThreadMember], since: float = 0.0) -> dict[int, list[int]]:
    """Partition -> the offsets ``members`` handed out by polls returning at ``since`` or
    later (wall clock), in order."""
    out: dict[int, list[int]] = {}
    for x in sorted((x for m in members for x in m.handed()), key=lambda x: x.handed_at):
        if x.handed_at >= since:
            out.setdefault(x.partition, []).append(x.offset)
    return out


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
