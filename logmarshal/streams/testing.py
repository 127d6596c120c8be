"""Run a topology without a cluster or Marshal: records in, sink records and stores out.

Every sub-topology runs as task 0 (one partition); a sink writing a topic that another
sub-topology reads (a repartition or ``through`` topic) feeds that sub-topology, so DSL
results can be checked against hand-computed ones. Keys and values go through the
topology's real serializers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ..cluster import Message
from .serde import Serializer, json_deserializer, json_serializer
from .stores import InMemoryStore, KeyValueStore
from .task import Task
from .topology import Topology

__all__ = ["TopologyTestDriver"]


class TopologyTestDriver:
    def __init__(
        self,
        topology: Topology,
        *,
        now_ms: Callable[[], int] = lambda: 0,
        application_id: str = "test",
    ) -> None:
        self.topology = topology
        self._now_ms = now_ms
        self.outputs: dict[str, list[tuple[bytes | None, bytes | None, int]]] = {}
        self._queue: deque[Message] = deque()
        self._offsets: dict[str, int] = {}
        self.tasks: list[Task] = []
        self._task_of: dict[str, Task] = {}
        for sub in topology.subtopologies(None):
            stores: dict[str, KeyValueStore] = {s: InMemoryStore(s) for s in sub.stores}
            task = Task(application_id, topology, sub, 0, stores, self._send, lambda _t: 1, now_ms)
            self.tasks.append(task)
            for topic in sub.source_topics:
                self._task_of[topic] = task

    def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        ts: int,
        headers: tuple,
    ) -> None:
        self.outputs.setdefault(topic, []).append((key, value, ts))
        if topic in self._task_of:
            self._queue.append(self._message(topic, key, value, ts, headers))

    def _message(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: tuple = ()
    ) -> Message:
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        return Message(topic, 0, offset, ts, key, value, headers)

    def pipe(
        self,
        topic: str,
        key: Any,
        value: Any,
        timestamp: int = 0,
        *,
        key_serializer: Serializer = json_serializer,
        value_serializer: Serializer = json_serializer,
    ) -> None:
        """Feed one record to the sources reading ``topic``, and everything it causes."""
        if topic not in self._task_of:
            raise ValueError(f"no source reads topic {topic!r}")
        self._queue.append(
            self._message(topic, key_serializer(key), value_serializer(value), timestamp)
        )
        while self._queue:
            m = self._queue.popleft()
            self._task_of[m.topic].process(m)

    def advance_wall_clock(self) -> int:
        """Fire wall-clock punctuators due on the injected clock (advance it first)."""
        return sum(t.punctuate_wall_clock() for t in self.tasks)

    def read(
        self,
        topic: str,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
    ) -> list[tuple[Any, Any]]:
        kd = key_deserializer or json_deserializer
        vd = value_deserializer or json_deserializer
        return [(kd(k), vd(v)) for k, v, _ in self.outputs.get(topic, [])]

    def store(self, name: str) -> dict[Any, Any]:
        for task in self.tasks:
            if name in task.stores:
                return task.stores[name].all()
        raise KeyError(name)
