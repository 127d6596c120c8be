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

import inspect
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from storage import NewRecord, TopicConfig

from .cluster import (
    FETCH_MAX_BYTES,
    Cluster,
    Message,
    PastMarkers,
    ProduceResult,
    TopicDescription,
)
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

    What the inner cluster's class offers of several partitions in one call
    (``produce_many``, ``fetch_batches_many``: the embedded edge's one writer thread and one
    replay thread; ``produce_async``: the network edge's writer) is offered here too, each
    partition meeting its faults as in a call of its own, and ``wake_fetches`` and
    ``cancel_fetches`` are passed through (a stopping replay is not gated); a wrapper of a
    cluster without them has none. The answers of ``produce_async`` that come while the
    member is frozen are held until it thaws (its threads would not run meanwhile; the
    inner cluster's thread that answers is shared, so it is not held up), and once it is
    killed every one is the fault.
    """

    produce_many: Callable[..., dict[int, ProduceResult | Exception]]
    produce_async: Callable[..., None]
    fetch_batches_many: Callable[..., dict[int, bytes | PastMarkers | Exception] | None]
    wake_fetches: Callable[[str, Iterable[int]], None]
    cancel_fetches: Callable[[Iterable[int]], None]

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
        #: answers of produce_async that came while frozen: (done, results), in order
        self._held: list[tuple[Callable[[dict[int, ProduceResult | Exception]], None], dict]] = []
        self.events: list[FaultEvent] = []
        #: a call's records land together or not at all where the inner cluster's do (its
        #: faults are whole calls: lost before the log, or their answer lost after it)
        self.produce_is_atomic: bool = getattr(inner, "produce_is_atomic", False)
        if inspect.getattr_static(inner, "produce_many", None) is not None:
            self.produce_many = self._produce_many
        if inspect.getattr_static(inner, "produce_async", None) is not None:
            self.produce_async = self._produce_async
        if inspect.getattr_static(inner, "fetch_batches_many", None) is not None:
            self.fetch_batches_many = self._fetch_batches_many
        if inspect.getattr_static(inner, "wake_fetches", None) is not None:
            self.wake_fetches = inner.wake_fetches  # type: ignore[attr-defined]  # just checked
        if inspect.getattr_static(inner, "cancel_fetches", None) is not None:
            self.cancel_fetches = inner.cancel_fetches  # type: ignore[attr-defined]  # just checked

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
        with self._lock:
            self._running.set()
            held, self._held = self._held, []
        for done, results in held:  # what came while frozen, heard now
            done(results)

    def kill(self) -> None:
        log.info("fault: killing %s", self._name)
        with self._lock:
            self._dead = True
            self._running.set()  # wake blocked calls so they fail
            held, self._held = self._held, []
        for done, results in held:
            done(self._killed(results))

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

    def _roll(self, operation: str, topic: str, partition: int) -> tuple[str, int]:
        """The dice of one ``operation`` ("produce" or "fetch") on one partition: its delay
        slept (then the gate again), a failure recorded; returns ``"fail"``, ``"drop"`` or
        ``"ok"``, and the call's number (a drop is recorded where it is carried out)."""
        plan = self._plan
        if operation == "produce":
            delay_p, delays = plan.produce_delay, plan.produce_delay_range
            fail, drop = plan.produce_fail, plan.produce_drop
        else:
            delay_p, delays = plan.fetch_delay, plan.fetch_delay_range
            fail, drop = plan.fetch_fail, plan.fetch_drop
        rng, n = self._rng(operation, topic, partition)
        if rng.random() < delay_p:
            delay = rng.uniform(*delays)
            self._record(FaultEvent(self._name, operation, topic, partition, n, "delay", delay))
            self._sleep(delay)
            self._gate()
        roll = rng.random()
        if roll < fail:
            self._record(FaultEvent(self._name, operation, topic, partition, n, "fail"))
            return "fail", n
        return ("drop" if roll < fail + drop else "ok"), n

    def _dropped(self, topic: str, partition: int, n: int) -> InjectedFault:
        """Record the lost answer of a produce that reached the log; the fault it raises."""
        self._record(FaultEvent(self._name, "produce", topic, partition, n, "drop"))
        return InjectedFault(f"the answer to a produce to {topic}/{partition} was lost")

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
        if not self._applies(topic):
            return self._inner.produce(topic, partition, records, durable=durable)
        kind, n = self._roll("produce", topic, partition)
        if kind == "fail":
            raise InjectedFault(f"produce to {topic}/{partition} lost before the log")
        result = self._inner.produce(topic, partition, records, durable=durable)
        if kind == "drop":
            raise self._dropped(topic, partition, n)
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
        if not self._applies(topic):
            return self._inner.fetch(
                topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait
            )
        kind, n = self._roll("fetch", topic, partition)
        if kind == "fail":
            raise InjectedFault(f"fetch from {topic}/{partition} failed")
        if kind == "drop":
            self._record(FaultEvent(self._name, "fetch", topic, partition, n, "drop"))
            self._sleep(min(max_wait, 0.01))
            return []
        messages = self._inner.fetch(
            topic, partition, offset, max_bytes=max_bytes, max_wait=max_wait
        )
        self._gate()  # a member frozen during a long poll does not see its answer until thawed
        return messages

    def _produce_many(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        *,
        durable: bool = False,
    ) -> dict[int, ProduceResult | Exception]:
        """``produce_many`` of the inner cluster, each partition's share meeting the faults
        of a ``produce`` of its own (the same dice, counted per partition): a failed one is
        not written, a dropped one is written and answered with the fault."""
        self._gate()
        inner: Callable[..., dict[int, ProduceResult | Exception]]
        inner = self._inner.produce_many  # type: ignore[attr-defined]  # offered only if there
        if not self._applies(topic):
            return inner(topic, batches, durable=durable)
        failed, send, dropped = self._deal(topic, batches)
        out = dict(failed)
        if send:
            out.update(self._with_drops(topic, inner(topic, send, durable=durable), dropped))
        return {partition: out[partition] for partition in batches}

    def _deal(
        self, topic: str, batches: Mapping[int, Sequence[NewRecord]]
    ) -> tuple[
        dict[int, ProduceResult | Exception], dict[int, Sequence[NewRecord]], dict[int, int]
    ]:
        """The dice of each partition's share of a call of several, as a ``produce`` of its
        own would meet them: (the failed ones' faults, what to send, the dropped ones with
        their call's number)."""
        failed: dict[int, ProduceResult | Exception] = {}
        send: dict[int, Sequence[NewRecord]] = {}
        dropped: dict[int, int] = {}
        for partition, records in batches.items():
            kind, n = self._roll("produce", topic, partition)
            if kind == "fail":
                failed[partition] = InjectedFault(
                    f"produce to {topic}/{partition} lost before the log"
                )
                continue
            send[partition] = records
            if kind == "drop":
                dropped[partition] = n
        return failed, send, dropped

    def _with_drops(
        self, topic: str, results: dict[int, ProduceResult | Exception], dropped: dict[int, int]
    ) -> dict[int, ProduceResult | Exception]:
        """``results`` with the dropped partitions that landed answered with the fault."""
        out = dict(results)
        for partition, n in dropped.items():
            if partition in out and not isinstance(out[partition], Exception):
                out[partition] = self._dropped(topic, partition, n)
        return out

    def _produce_async(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        done: Callable[[dict[int, ProduceResult | Exception]], None],
    ) -> None:
        """``produce_async`` of the inner cluster, each partition's share meeting the faults
        of a ``produce`` of its own (delays are slept here, on the caller's thread): a failed
        one is not written and is answered with the fault, a dropped one is written and
        answered with the fault. A call that raises answers none (as the inner one)."""
        self._gate()
        inner: Callable[..., None]
        inner = self._inner.produce_async  # type: ignore[attr-defined]  # offered only if there
        answer = self._answer_to(done)
        if not self._applies(topic):
            inner(topic, batches, answer)
            return
        failed, send, dropped = self._deal(topic, batches)

        def landed(results: dict[int, ProduceResult | Exception]) -> None:
            answer(self._with_drops(topic, results, dropped))

        if send:
            inner(topic, send, landed)
        if failed:  # (after the others were handed over: a call that raises answers none)
            answer(failed)

    def _answer_to(
        self, done: Callable[[dict[int, ProduceResult | Exception]], None]
    ) -> Callable[[dict[int, ProduceResult | Exception]], None]:
        """``done`` as this member hears it: held while frozen, the fault once killed."""

        def answer(results: dict[int, ProduceResult | Exception]) -> None:
            with self._lock:
                if not self._dead and not self._running.is_set():
                    self._held.append((done, results))
                    return
                dead = self._dead
            done(self._killed(results) if dead else results)

        return answer

    def _killed(
        self, results: dict[int, ProduceResult | Exception]
    ) -> dict[int, ProduceResult | Exception]:
        """What a killed member hears of ``results``: nothing but the fault."""
        fault = InjectedFault(f"{self._name} is dead")
        return {p: r if isinstance(r, Exception) else fault for p, r in results.items()}

    def _fetch_batches_many(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> dict[int, bytes | PastMarkers | Exception] | None:
        """``fetch_batches_many`` of the inner cluster, each partition meeting the faults of
        a ``fetch`` of its own: a failed one is answered with the fault (and nobody waits
        for the others), a dropped one with nothing yet."""
        self._gate()
        inner: Callable[..., dict[int, bytes | PastMarkers | Exception] | None]
        inner = self._inner.fetch_batches_many  # type: ignore[attr-defined]  # offered only if there
        if not self._applies(topic):
            got = inner(topic, offsets, max_bytes=max_bytes, max_wait=max_wait)
            self._gate()
            return got
        out: dict[int, bytes | PastMarkers | Exception] = {}
        ask: dict[int, int] = {}
        failed = False
        for partition, offset in offsets.items():
            kind, n = self._roll("fetch", topic, partition)
            if kind == "fail":
                out[partition] = InjectedFault(f"fetch from {topic}/{partition} failed")
                failed = True
            elif kind == "drop":
                self._record(FaultEvent(self._name, "fetch", topic, partition, n, "drop"))
                out[partition] = b""
            else:
                ask[partition] = offset
        if ask:
            got = inner(topic, ask, max_bytes=max_bytes, max_wait=0.0 if failed else max_wait)
            if got is None:
                return None
            out.update(got)
        else:
            self._sleep(min(max_wait, 0.01))
        self._gate()  # a member frozen during a long poll does not see its answer until thawed
        return {partition: out[partition] for partition in offsets}

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

    def partitions(self, topic: str, timeout: float | None = None) -> int:
        self._gate()
        return self._inner.partitions(topic, timeout=timeout)

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
