"""A small DSL over :class:`Topology`: every operator adds one processor node.

Stateless operators (filter, map, ...) are processors forwarding what they compute;
``group_by``/``group_by_key`` after a key change repartition through an internal topic
(a sink and a source, so the aggregation runs in a sub-topology of its own, keyed
correctly); ``count``/``reduce``/``aggregate`` keep the table in a state store and forward
every update downstream, which :meth:`KTable.to_stream` exposes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .processor import Processor, StreamRecord
from .serde import Deserializer, Serializer, json_deserializer, json_serializer
from .stores import StoreSpec
from .topology import Topology, TopologyError

__all__ = ["KGroupedStream", "KStream", "KTable", "StreamsBuilder", "TimeWindows"]


@attrs.frozen
class TimeWindows:
    """Tumbling windows of ``size_ms`` by event time: a record at t is in window
    ``[t - t % size, t - t % size + size)``. No grace period: a late record updates its
    window whenever it comes (windows are never closed), and a windowed key is the JSON
    list ``[key, start]``."""

    size_ms: int = attrs.field()

    @size_ms.validator
    def _size(self, _a: object, value: int) -> None:
        # (True was a size of 1 ms; a size past int64 is no time Kafka's records carry)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
            raise ValueError(f"a window size is a positive int (ms, int64), got {value!r}")

    @classmethod
    def of(cls, size_ms: int) -> TimeWindows:
        return cls(size_ms)

    def start(self, timestamp: int) -> int:
        return timestamp - timestamp % self.size_ms


class _Fn(Processor):
    """A processor applying ``fn(self, record)``."""

    def __init__(self, fn: Callable[[_Fn, StreamRecord], None]) -> None:
        self._fn = fn

    def process(self, record: StreamRecord) -> None:
        self._fn(self, record)


def _factory(fn: Callable[[_Fn, StreamRecord], None]) -> Callable[[], Processor]:
    return lambda: _Fn(fn)


class StreamsBuilder:
    """Builds a :class:`Topology`; ``prefix`` names the internal repartition topics
    (``<prefix>-<node>-repartition``): use the application id."""

    def __init__(self, prefix: str = "streams") -> None:
        self.topology = Topology()
        self.prefix = prefix
        self._seq = itertools.count(1)

    def _name(self, kind: str) -> str:
        return f"KSTREAM-{kind}-{next(self._seq):010d}"

    def stream(
        self,
        topics: str | Iterable[str],
        *,
        key_deserializer: Deserializer = json_deserializer,
        value_deserializer: Deserializer = json_deserializer,
    ) -> KStream:
        name = self._name("SOURCE")
        self.topology.add_source(
            name, topics, key_deserializer=key_deserializer, value_deserializer=value_deserializer
        )
        return KStream(self, name)

    def build(self) -> Topology:
        self.topology.validate()
        return self.topology


class KStream:
    def __init__(self, builder: StreamsBuilder, node: str, key_changed: bool = False) -> None:
        self._b = builder
        self.node = node
        self.key_changed = key_changed

    def _add(
        self,
        kind: str,
        fn: Callable[[_Fn, StreamRecord], None],
        key_changed: bool | None = None,
        parents: tuple[str, ...] | None = None,
    ) -> KStream:
        name = self._b._name(kind)
        self._b.topology.add_processor(name, _factory(fn), parents or (self.node,))
        return KStream(self._b, name, self.key_changed if key_changed is None else key_changed)

    def filter(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            if predicate(r.key, r.value):
                p.context.forward(r.key, r.value)

        return self._add("FILTER", fn)

    def filter_not(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        return self.filter(lambda k, v: not predicate(k, v))

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            k, v = mapper(r.key, r.value)
            p.context.forward(k, v)

        return self._add("MAP", fn, key_changed=True)

    def map_values(self, mapper: Callable[[Any], Any]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            p.context.forward(r.key, mapper(r.value))

        return self._add("MAPVALUES", fn)

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            for k, v in mapper(r.key, r.value):
                p.context.forward(k, v)

        return self._add("FLATMAP", fn, key_changed=True)

    def flat_map_values(self, mapper: Callable[[Any], Iterable[Any]]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            for v in mapper(r.value):
                p.context.forward(r.key, v)

        return self._add("FLATMAPVALUES", fn)

    def peek(self, action: Callable[[Any, Any], None]) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            action(r.key, r.value)
            p.context.forward(r.key, r.value)

        return self._add("PEEK", fn)

    def branch(self, *predicates: Callable[[Any, Any], bool]) -> list[KStream]:
        """One stream per predicate; a record goes to the first that matches (or none)."""
        if not predicates:
            raise TopologyError("branch needs at least one predicate")
        branch_node = self._b._name("BRANCH")
        children = [self._b._name("BRANCHCHILD") for _ in predicates]

        def fn(p: _Fn, r: StreamRecord) -> None:
            for pred, child in zip(predicates, children, strict=True):
                if pred(r.key, r.value):
                    p.context.forward(r.key, r.value, to=child)
                    return

        def passthrough(p: _Fn, r: StreamRecord) -> None:
            p.context.forward(r.key, r.value)

        self._b.topology.add_processor(branch_node, _factory(fn), (self.node,))
        out = []
        for child in children:
            self._b.topology.add_processor(child, _factory(passthrough), (branch_node,))
            out.append(KStream(self._b, child, self.key_changed))
        return out

    def merge(self, other: KStream) -> KStream:
        def fn(p: _Fn, r: StreamRecord) -> None:
            p.context.forward(r.key, r.value)

        return self._add(
            "MERGE",
            fn,
            key_changed=self.key_changed or other.key_changed,
            parents=(self.node, other.node),
        )

    def to(
        self,
        topic: str,
        *,
        key_serializer: Serializer = json_serializer,
        value_serializer: Serializer = json_serializer,
        partitioner: Callable[[Any, Any, int], int] | None = None,
    ) -> None:
        self._b.topology.add_sink(
            self._b._name("SINK"),
            topic,
            (self.node,),
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            partitioner=partitioner,
        )

    def through(self, topic: str) -> KStream:
        """Write to ``topic`` (which must exist) and continue from it: a new sub-topology
        whose tasks are that topic's partitions."""
        self.to(topic)
        return self._b.stream(topic)

    def _repartitioned(self) -> KStream:
        name = self._b._name("REPARTITION")
        topic = f"{self._b.prefix}-{name}-repartition"
        self._b.topology.internal_topics.add(topic)
        self.to(topic)
        return self._b.stream(topic)

    def group_by_key(self) -> KGroupedStream:
        """Group by the current key; repartitions first if an upstream operator may have
        changed the key (map, flat_map, group_by)."""
        return KGroupedStream(self._repartitioned() if self.key_changed else self)

    def group_by(self, selector: Callable[[Any, Any], Any]) -> KGroupedStream:
        rekeyed = self.map(lambda k, v: (selector(k, v), v))
        return KGroupedStream(rekeyed._repartitioned())


class KGroupedStream:
    def __init__(self, stream: KStream, windows: TimeWindows | None = None) -> None:
        self._s = stream
        self._windows = windows

    def windowed_by(self, windows: TimeWindows) -> KGroupedStream:
        return KGroupedStream(self._s, windows)

    def aggregate(
        self,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        store: str | StoreSpec | None = None,
    ) -> KTable:
        """Table of ``aggregator(key, value, aggregate)`` per key (per key and window when
        windowed: keys become ``[key, window_start]``). Records with a None key or value are
        skipped, as in Kafka Streams."""
        b = self._s._b
        spec = (
            store
            if isinstance(store, StoreSpec)
            else StoreSpec(store or b._name("STATE-STORE"), "memory")
        )
        windows = self._windows
        name = b._name("AGGREGATE")

        class _Agg(Processor):
            def init(self, context: Any) -> None:
                super().init(context)
                self.store = context.get_state_store(spec.name)

            def process(self, r: StreamRecord) -> None:
                if r.key is None or r.value is None:
                    # like Kafka Streams: a null key cannot be grouped, and a null value (a
                    # tombstone) is no value to aggregate (a reducer or aggregator given
                    # None failed, or counted it; a reduce's first None deleted the key)
                    return
                key = r.key if windows is None else [r.key, windows.start(r.timestamp)]
                old = self.store.get(key)
                if old is not None:
                    new = aggregator(r.key, r.value, old)
                elif initializer is None:
                    new = r.value  # reduce: the first value is the aggregate
                else:
                    new = aggregator(r.key, r.value, initializer())
                self.store.put(key, new)
                self.context.forward(key, new)

        b.topology.add_processor(name, _Agg, (self._s.node,))
        b.topology.add_state_store(spec, name)
        return KTable(b, name, spec.name)

    def count(self, store: str | StoreSpec | None = None) -> KTable:
        return self.aggregate(lambda: 0, lambda _k, _v, agg: agg + 1, store)

    def reduce(
        self, reducer: Callable[[Any, Any], Any], store: str | StoreSpec | None = None
    ) -> KTable:
        return self.aggregate(None, lambda _k, v, acc: reducer(acc, v), store)


class KTable:
    def __init__(self, builder: StreamsBuilder, node: str, store: str) -> None:
        self._b = builder
        self.node = node
        self.store_name = store

    def to_stream(self) -> KStream:
        return KStream(self._b, self.node)
