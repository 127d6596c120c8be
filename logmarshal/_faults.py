"""A fault-injecting :class:`~logmarshal.cluster.Cluster` wrapper, for tests and scenarios.

Each member of a test gets its own wrapper around the shared cluster, so one member's
writes can be delayed, lost or failed, its reads starved, the whole member frozen (what
SIGSTOP does to a process's I/O) or killed. Every decision is drawn from a random source
seeded by ``(seed, name, operation, topic, partition, n)`` where ``n`` counts that
operation on that partition: the n-th heartbeat write of a member meets the same fault in
every run with the same seed, however the threads interleave, which is what makes a
failure replayable.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import attrs

from storage import NewRecord, TopicConfig

from .cluster import FETCH_MAX_BYTES, Cluster, Message, ProduceResult, TopicDescription
from .errors import RetriableError

__all__ = ["FaultEvent", "FaultPlan", "FaultyCluster", "InjectedFault"]

log = logging.getLogger(__name__)


class InjectedFault(RetriableError):
    """A failure the wrapper made up (a lost request or response, a dead member)."""


def _probability(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be a probability in [0, 1], got {value!r}")


def _delay_range(_inst: object, attribute: attrs.Attribute[tuple[float, float]], value) -> None:
    low, high = value
    if not 0 <= low <= high:
        raise ValueError(f"{attribute.name} must be (low, high) with 0 <= low <= high")


@attrs.frozen
class FaultPlan:
    """Probabilities per call. ``produce_fail``: the request is lost before the log, nothing is
    written. ``produce_drop``: the record *is* written but the answer is lost, so the caller
    cannot know (the ambiguous case). ``fetch_fail`` raises; ``fetch_drop`` answers "nothing
    yet". Delays are drawn uniformly from their range. ``topics`` limits faults to those
    topics (None: every topic)."""

    produce_delay: float = attrs.field(default=0.0, validator=_probability)
    produce_delay_range: tuple[float, float] = attrs.field(
        default=(0.0, 0.02), validator=_delay_range
    )
    produce_fail: float = attrs.field(default=0.0, validator=_probability)
    produce_drop: float = attrs.field(default=0.0, validator=_probability)
    fetch_delay: float = attrs.field(default=0.0, validator=_probability)
    fetch_delay_range: tuple[float, float] = attrs.field(
        default=(0.0, 0.02), validator=_delay_range
    )
    fetch_fail: float = attrs.field(default=0.0, validator=_probability)
    fetch_drop: float = attrs.field(default=0.0, validator=_probability)
    topics: frozenset[str] | None = attrs.field(
        default=None, converter=attrs.converters.optional(frozenset)
    )


@attrs.frozen
class FaultEvent:
    """One injected fault (the log of a run, for explaining a failure)."""

    member: str
    operation: str
    topic: str
    partition: int
    n: int
    kind: str
    delay: float = 0.0


class FaultyCluster:
    """Wraps ``inner`` and injects the faults of ``plan``; see the module docstring.

    :meth:`freeze` blocks every call (those under way finish) until :meth:`thaw`;
    :meth:`kill` makes every call, including blocked ones, fail at once for good. Closing
    the wrapper kills it and leaves ``inner`` open (it is shared).
    """

    def __init__(
        self,
        inner: Cluster,
        plan: FaultPlan | None = None,
        *,
        seed: int = 0,
        name: str = "member",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._inner = inner
        self._plan = plan if plan is not None else FaultPlan()
        self._seed = seed
        self._name = name
        self._sleep = sleep
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str, int]] = Counter()
        self._running = threading.Event()
        self._running.set()
        self._dead = False
        self.events: list[FaultEvent] = []

    @property
    def inner(self) -> Cluster:
        return self._inner

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    @plan.setter
    def plan(self, plan: FaultPlan) -> None:
        self._plan = plan

    @property
    def frozen(self) -> bool:
        return not self._running.is_set()

    @property
    def killed(self) -> bool:
        return self._dead

    def freeze(self) -> None:
        log.info("fault: freezing %s", self._name)
        self._running.clear()

    def thaw(self) -> None:
        log.info("fault: thawing %s", self._name)
        self._running.set()

    def kill(self) -> None:
        log.info("fault: killing %s", self._name)
        self._dead = True
        self._running.set()  # wake blocked calls so they fail

    def injected(self) -> Counter[str]:
        """How many faults of each kind were injected so far."""
        with self._lock:
            return Counter(e.kind for e in self.events)

    # -- the gate and the dice -------------------------------------------------------------

    def _gate(self) -> None:
        while True:
            if self._dead:
                raise InjectedFault(f"{self._name} is dead")
            if self._running.wait(0.05):
                if self._dead:
                    raise InjectedFault(f"{self._name} is dead")
                return

    def _rng(self, operation: str, topic: str, partition: int) -> tuple[random.Random, int]:
        with self._lock:
            key = (operation, topic, partition)
            n = self._counts[key]
            self._counts[key] = n + 1
        return random.Random(f"{self._seed}/{self._name}/{operation}/{topic}/{partition}/{n}"), n

    def _record(self, event: FaultEvent) -> None:
        with self._lock:
            self.events.append(event)

    def _applies(self, topic: str) -> bool:
        topics = self._plan.topics
        return topics is None or topic in topics

    # -- faulty operations ------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[NewRecord],
        *,
        durable: bool = False,
    ) -> ProduceResult:
        self._gate()
        plan = self._plan
        if not self._applies(topic):
            return self._inner.produce(topic, partition, records, durable=durable)
        rng, n = self._rng("produce", topic, partition)
        if rng.random() < plan.produce_delay:
            delay = rng.uniform(*plan.produce_delay_range)
            self._record(FaultEvent(self._name, "produce", topic, partition, n, "delay", delay))
            self._sleep(delay)
            self._gate()
        roll = rng.random()
        if roll < plan.produce_fail:
            self._record(FaultEvent(self._name, "produce", topic, partition, n, "fail"))
            raise InjectedFault(f"produce to {topic}/{partition} lost before the log")
        result = self._inner.produce(topic, partition, records, durable=durable)
        if roll < plan.produce_fail + plan.produce_drop:
            self._record(FaultEvent(self._name, "produce", topic, partition, n, "drop"))
            raise InjectedFault(f"the answer to a produce to {topic}/{partition} was lost")
        return result

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> list[Message]:
        self._gate()
        plan = self._plan
        if not self._applies(topic):
            return self._inner.fetch(
                topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait
            )
        rng, n = self._rng("fetch", topic, partition)
        if rng.random() < plan.fetch_delay:
            delay = rng.uniform(*plan.fetch_delay_range)
            self._record(FaultEvent(self._name, "fetch", topic, partition, n, "delay", delay))
            self._sleep(delay)
            self._gate()
        roll = rng.random()
        if roll < plan.fetch_fail:
            self._record(FaultEvent(self._name, "fetch", topic, partition, n, "fail"))
            raise InjectedFault(f"fetch from {topic}/{partition} failed")
        if roll < plan.fetch_fail + plan.fetch_drop:
            self._record(FaultEvent(self._name, "fetch", topic, partition, n, "drop"))
            self._sleep(min(max_wait, 0.01))
            return []
        messages = self._inner.fetch(
            topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait
        )
        self._gate()  # a member frozen during a long poll does not see its answer until thawed
        return messages

    # -- passed through (behind the freeze/kill gate) ----------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: TopicConfig | Mapping[str, str | int] | None = None,
    ) -> TopicDescription:
        self._gate()
        return self._inner.create_topic(name, partitions, config)

    def delete_topic(self, name: str) -> None:
        self._gate()
        self._inner.delete_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        self._gate()
        return self._inner.add_partitions(name, total)

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None]
    ) -> TopicDescription:
        self._gate()
        return self._inner.alter_topic_config(name, changes)

    def topics(self) -> list[str]:
        self._gate()
        return self._inner.topics()

    def describe_topic(self, name: str) -> TopicDescription:
        self._gate()
        return self._inner.describe_topic(name)

    def partitions(self, topic: str) -> int:
        self._gate()
        return self._inner.partitions(topic)

    def earliest_offset(self, topic: str, partition: int) -> int:
        self._gate()
        return self._inner.earliest_offset(topic, partition)

    def latest_offset(self, topic: str, partition: int) -> int:
        self._gate()
        return self._inner.latest_offset(topic, partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        self._gate()
        return self._inner.offset_for_time(topic, partition, timestamp_ms)

    def close(self) -> None:
        """Kill this member's connection; the shared inner cluster stays open."""
        self.kill()

    def __repr__(self) -> str:
        state = "dead" if self._dead else "frozen" if self.frozen else "running"
        return f"FaultyCluster({self._name!r}, seed={self._seed}, {state})"
