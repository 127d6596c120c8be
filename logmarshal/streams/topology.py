"""A topology: sources, processors, sinks and state stores, validated before it runs.

Nodes name their parents; nothing is checked while adding except duplicate names and
argument types, so a topology can be written in any order. :meth:`Topology.validate`
reports every structural mistake with the node's name; co-partitioning needs the cluster
and is checked by :meth:`Topology.check_copartitioned` when an application starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..cluster import Cluster
from ..errors import LogmarshalError, UnknownTopic
from .processor import Processor
from .serde import Deserializer, Serializer, json_deserializer, json_serializer
from .stores import StoreSpec

__all__ = ["SinkNode", "SourceNode", "SubTopology", "Topology", "TopologyError"]

Partitioner = Callable[[Any, Any, int], int]


class TopologyError(LogmarshalError):
    """The topology cannot run as written; the message names the node or store at fault."""


@attrs.frozen
class SourceNode:
    name: str
    topics: tuple[str, ...]
    pattern: re.Pattern[str] | None
    key_deserializer: Deserializer
    value_deserializer: Deserializer


@attrs.frozen
class ProcessorNode:
    name: str
    factory: Callable[[], Processor]
    parents: tuple[str, ...]


@attrs.frozen
class SinkNode:
    name: str
    topic: str
    parents: tuple[str, ...]
    key_serializer: Serializer
    value_serializer: Serializer
    #: (key, value, partitions) -> partition; None: hash of the serialized key (murmur2)
    partitioner: Partitioner | None


@attrs.frozen
class SubTopology:
    """Nodes connected through parents or shared stores; its tasks are partition p of
    every source topic (resolved), the first of which (sorted) carries the task's claim."""

    index: int
    nodes: tuple[str, ...]
    source_topics: tuple[str, ...]
    stores: tuple[str, ...]

    @property
    def lead_topic(self) -> str:
        return self.source_topics[0]


class Topology:
    def __init__(self) -> None:
        self.sources: dict[str, SourceNode] = {}
        self.processors: dict[str, ProcessorNode] = {}
        self.sinks: dict[str, SinkNode] = {}
        self.stores: dict[str, StoreSpec] = {}
        self.store_users: dict[str, set[str]] = {}
        #: topics the DSL repartitions through: created by the application, partitioned
        #: like the sub-topology that writes them
        self.internal_topics: set[str] = set()

    # -- building -------------------------------------------------------------------------

    def _new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TopologyError(f"a node name must be a non-empty str, got {name!r}")
        if name in self.sources or name in self.processors or name in self.sinks:
            raise TopologyError(f"a node named {name!r} already exists")

    def add_source(
        self,
        name: str,
        topics: str | Iterable[str] | re.Pattern[str],
        *,
        key_deserializer: Deserializer = json_deserializer,
        value_deserializer: Deserializer = json_deserializer,
    ) -> Topology:
        self._new_name(name)
        pattern: re.Pattern[str] | None = None
        names: tuple[str, ...] = ()
        if isinstance(topics, re.Pattern):
            pattern = topics
        else:
            names = (topics,) if isinstance(topics, str) else tuple(topics)
            if not names or not all(isinstance(t, str) and t for t in names):
                raise TopologyError(
                    f"source {name!r} needs topic names or a pattern, got {topics!r}"
                )
            # one source a topic, as Kafka Streams (the first source took every record and
            # the second got none; in two sub-topologies one was dropped or the App failed
            # after it had made its topics)
            for topic in names:
                other = next((s.name for s in self.sources.values() if topic in s.topics), None)
                if other is not None or names.count(topic) > 1:
                    raise TopologyError(
                        f"source {name!r}: topic {topic!r} is read by source "
                        f"{other or name!r} already (one source a topic: merge the streams)"
                    )
        self.sources[name] = SourceNode(name, names, pattern, key_deserializer, value_deserializer)
        return self

    def add_processor(
        self, name: str, factory: Callable[[], Processor], parents: str | Sequence[str]
    ) -> Topology:
        self._new_name(name)
        if not callable(factory):
            raise TopologyError(f"processor {name!r}: factory must be callable, got {factory!r}")
        self.processors[name] = ProcessorNode(name, factory, _names(parents))
        return self

    def add_sink(
        self,
        name: str,
        topic: str,
        parents: str | Sequence[str],
        *,
        key_serializer: Serializer = json_serializer,
        value_serializer: Serializer = json_serializer,
        partitioner: Partitioner | None = None,
    ) -> Topology:
        self._new_name(name)
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"sink {name!r} needs a topic name, got {topic!r}")
        self.sinks[name] = SinkNode(
            name, topic, _names(parents), key_serializer, value_serializer, partitioner
        )
        return self

    def add_state_store(self, spec: StoreSpec, *processors: str) -> Topology:
        if spec.name in self.stores:
            raise TopologyError(f"a store named {spec.name!r} already exists")
        self.stores[spec.name] = spec
        self.store_users[spec.name] = set(processors)
        return self

    def connect_store(self, store: str, *processors: str) -> Topology:
        if store not in self.stores:
            raise TopologyError(f"no store named {store!r} to connect to {processors}")
        self.store_users[store].update(processors)
        return self

    # -- validation -----------------------------------------------------------------------

    def parents_of(self, name: str) -> tuple[str, ...]:
        node = self.processors.get(name) or self.sinks.get(name)
        return () if node is None else node.parents

    def children_of(self, name: str) -> list[str]:
        return [n for n in (*self.processors, *self.sinks) if name in self.parents_of(n)]

    def validate(self) -> None:
        """Raise :class:`TopologyError` for the first mistake found."""
        if not self.sources:
            raise TopologyError("the topology has no source")
        nodes: list[ProcessorNode | SinkNode] = [*self.processors.values(), *self.sinks.values()]
        for node in nodes:
            if not node.parents:
                raise TopologyError(f"{node.name!r} has no parent")
            for parent in node.parents:
                if parent in self.sinks:
                    raise TopologyError(f"{node.name!r}: parent {parent!r} is a sink")
                if parent not in self.sources and parent not in self.processors:
                    raise TopologyError(f"{node.name!r}: unknown parent {parent!r}")
        cycle = self._find_cycle()
        if cycle:
            raise TopologyError("cycle: " + " -> ".join(cycle))
        for store, users in self.store_users.items():
            if not users:
                raise TopologyError(f"store {store!r} is connected to no processor")
            for user in users:
                if user not in self.processors:
                    raise TopologyError(f"store {store!r}: unknown processor {user!r}")
        for source in self.sources:
            if not self.children_of(source):
                raise TopologyError(f"source {source!r} has no children")

    def _find_cycle(self) -> list[str]:
        state: dict[str, int] = {}  # 1 visiting, 2 done
        path: list[str] = []

        def visit(name: str) -> list[str]:
            state[name] = 1
            path.append(name)
            for parent in self.parents_of(name):
                if state.get(parent) == 1:
                    return [*path[path.index(parent) :], parent]
                if state.get(parent) is None:
                    found = visit(parent)
                    if found:
                        return found
            path.pop()
            state[name] = 2
            return []

        for name in sorted((*self.processors, *self.sinks)):
            if name not in state:
                found = visit(name)
                if found:
                    return list(reversed(found))
        return []

    # -- structure ------------------------------------------------------------------------

    def resolve_sources(
        self, cluster: Cluster | None, own: Collection[str] = ()
    ) -> dict[str, tuple[str, ...]]:
        """Source name -> topic names; patterns are matched against the cluster's topics,
        but never the application's ``own`` (its changelogs), its repartition topics, nor
        an internal one (``__marshal``...): a pattern ``orders.*`` of the application
        ``orders`` took in its own changelog, and read back every commit's records as input."""
        out = {}
        for node in self.sources.values():
            if node.pattern is None:
                out[node.name] = node.topics
            else:
                topics = [] if cluster is None else cluster.topics()
                out[node.name] = tuple(
                    sorted(
                        t
                        for t in topics
                        if node.pattern.fullmatch(t)
                        and not t.startswith("__")
                        and t not in own
                        and t not in self.internal_topics
                    )
                )
        return out

    def check_sources(self, cluster: Cluster, own: Collection[str] = ()) -> None:
        """Every source topic not of the application's making exists, and every pattern
        matches one: checked before the application makes any topic."""
        for name, topics in self.resolve_sources(cluster, own).items():
            if not topics:
                raise TopologyError(f"source {name!r}: no topic matches its pattern")
            for topic in topics:
                if topic in self.internal_topics:
                    continue
                try:
                    cluster.partitions(topic)
                except UnknownTopic:
                    raise TopologyError(f"source topic {topic!r} does not exist") from None

    def subtopologies(
        self, cluster: Cluster | None = None, own: Collection[str] = ()
    ) -> list[SubTopology]:
        self.validate()
        parent = {n: n for n in (*self.sources, *self.processors, *self.sinks)}

        def find(n: str) -> str:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        for n in (*self.processors, *self.sinks):
            for p in self.parents_of(n):
                parent[find(n)] = find(p)
        for users in self.store_users.values():
            users_l = sorted(users)
            for u in users_l[1:]:
                parent[find(u)] = find(users_l[0])
        groups: dict[str, list[str]] = {}
        for n in parent:
            groups.setdefault(find(n), []).append(n)
        resolved = self.resolve_sources(cluster, own)
        subs = []
        ordered = sorted(
            groups.values(),
            key=lambda g: min(
                list(self.sources).index(s) if s in self.sources else 10**9 for s in g
            ),
        )
        for i, members in enumerate(ordered):
            topics = sorted({t for n in members if n in self.sources for t in resolved[n]})
            stores = sorted(s for s, users in self.store_users.items() if users & set(members))
            subs.append(SubTopology(i, tuple(members), tuple(topics), tuple(stores)))
        return subs

    def check_copartitioned(
        self, cluster: Cluster, own: Collection[str] = (), planned: Mapping[str, int] = {}
    ) -> list[SubTopology]:
        """The sub-topologies, after checking every source topic exists (or is ``planned``:
        a repartition topic not made yet, by its partition count) and the topics of each
        sub-topology have the same number of partitions."""
        subs = self.subtopologies(cluster, own)
        for sub in subs:
            if not sub.source_topics:
                raise TopologyError(f"sub-topology {sub.index}: no topic matches its sources")
            counts = {}
            for topic in sub.source_topics:
                try:
                    counts[topic] = planned.get(topic) or cluster.partitions(topic)
                except UnknownTopic:
                    raise TopologyError(f"source topic {topic!r} does not exist") from None
            if len(set(counts.values())) > 1:
                raise TopologyError(
                    f"sub-topology {sub.index}: sources are not co-partitioned: "
                    + ", ".join(f"{t} has {n}" for t, n in sorted(counts.items()))
                )
        return subs

    def describe(self) -> str:
        lines = ["Topology:"]
        for sub in self.subtopologies():
            lines.append(f"  Sub-topology {sub.index}:")
            for name in sub.nodes:
                children = ", ".join(self.children_of(name)) or "none"
                if name in self.sources:
                    src = self.sources[name]
                    what = src.pattern.pattern if src.pattern else ", ".join(src.topics)
                    lines.append(f"    Source: {name} (topics: [{what}]) --> {children}")
                elif name in self.processors:
                    stores = sorted(s for s, u in self.store_users.items() if name in u)
                    lines.append(
                        f"    Processor: {name} (stores: [{', '.join(stores)}]) --> {children}"
                        f" <-- {', '.join(self.processors[name].parents)}"
                    )
                else:
                    sink = self.sinks[name]
                    lines.append(
                        f"    Sink: {name} (topic: {sink.topic}) <-- {', '.join(sink.parents)}"
                    )
        return "\n".join(lines)


def _names(parents: str | Sequence[str]) -> tuple[str, ...]:
    names = (parents,) if isinstance(parents, str) else tuple(parents)
    if not all(isinstance(p, str) for p in names):
        raise TopologyError(f"parents must be node names, got {parents!r}")
    return names
