"""A task: one sub-topology on partition p of its source topics, with its stores.

Pure of Marshal: the runner feeds it messages and asks it to commit. ``commit`` flushes the
sinks, then writes every dirty store to its changelog in one batch per store whose records
carry the input positions the state reflects; only then may the runner commit the inputs
to the consumer (which heartbeats them). Restoring reads the changelogs back; the task then
resumes from the positions its state reflects, skipping store writes for input a store
already reflects, so each input record updates each store exactly once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import attrs

from storage import NewRecord

from ..cluster import Cluster, Message
from .processor import Processor, PunctuationType, StreamRecord
from .stores import KeyValueStore
from .topology import SubTopology, Topology, TopologyError

__all__ = ["POSITIONS_HEADER", "Task", "changelog_topic", "read_changelog"]

log = logging.getLogger(__name__)

#: header on changelog records: JSON {topic: next input offset} the state reflects
POSITIONS_HEADER = "lm-positions"
#: key of the record that ends each commit in a changelog (value: the positions as JSON);
#: not valid JSON, so no store key can equal it
COMMIT_KEY = b"\x00logmarshal-commit"
#: changelog records are produced in batches of at most this many key+value bytes
CHANGELOG_BATCH_BYTES = 256 * 1024

SinkSend = Callable[[str, bytes | None, bytes | None, int, int, tuple], None]


def changelog_topic(application_id: str, store: str) -> str:
    return f"{application_id}-{store}-changelog"


@attrs.frozen
class Replayed:
    """What a changelog replay found: the positions the last commit marker carries, that
    marker's offset, and the keys written after it by a commit that never finished."""

    positions: dict[str, int] | None
    marker_offset: int | None
    uncommitted: frozenset[bytes]


def _replay(
    cluster: Cluster, topic: str, partition: int, apply: Callable[[bytes, bytes | None], None],
    start: int | None = None, last: dict[str, int] | None = None,
) -> Replayed:
    """Apply the records of a changelog partition from ``start`` (default: its beginning)
    up to its last commit marker, in order; records after that marker belong to a commit
    cut short by a crash and are not applied. Under compaction the rule still holds: the
    next writer rewrites those keys (see :meth:`Task.restore`), so for every key the last
    record before the last marker is the committed value."""
    offset = cluster.earliest_offset(topic, partition) if start is None else start
    end = cluster.latest_offset(topic, partition)
    pending: list[tuple[bytes, bytes | None]] = []
    marker: int | None = None
    while offset < end:
        batch = cluster.fetch(topic, partition, offset)
        if not batch:
            break
        for m in batch:
            if m.key == COMMIT_KEY:
                for k, v in pending:
                    apply(k, v)
                pending.clear()
                last = {str(t): int(o) for t, o in json.loads(m.value or b"{}").items()}
                marker = m.offset
            elif m.key is not None:
                pending.append((m.key, m.value))
            offset = m.offset + 1
    if pending:
        log.warning("%s/%d: %d changelog record(s) after the last commit marker (a commit "
                    "cut short) ignored", topic, partition, len(pending))
    return Replayed(last, marker, frozenset(k for k, _ in pending))


def read_changelog(
    cluster: Cluster, application_id: str, store: str, partition: int
) -> tuple[dict[Any, Any], dict[str, int] | None]:
    """The table a store's changelog partition restores to, and the input positions it
    reflects: what a task would start from (for tests, tools and the demo)."""
    from .stores import InMemoryStore

    mem = InMemoryStore(store)
    found = _replay(cluster, changelog_topic(application_id, store), partition, mem.restore)
    return mem.all(), found.positions


@attrs.define
class _Punctuation:
    interval_ms: int
    kind: PunctuationType
    fn: Callable[[int], None]
    node: str
    due: int | None  # None: stream time not known yet
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class _GuardedStore:
    """The store as a processor sees it: writes are dropped for input records the store's
    restored state already reflects (a crash left it ahead of another store)."""

    def __init__(self, store: KeyValueStore, task: Task) -> None:
        self._store = store
        self._task = task

    def put(self, key: Any, value: Any) -> None:
        if not self._task._store_reflects_current(self._store.name):
            self._store.put(key, value)

    def delete(self, key: Any) -> None:
        self.put(key, None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _Context:
    """The ProcessorContext of one node in one task."""

    def __init__(self, task: Task, node: str) -> None:
        self._task = task
        self._node = node

    application_id = property(lambda self: self._task.application_id)
    task_id = property(lambda self: self._task.task_id)
    topic = property(lambda self: self._task.current.topic if self._task.current else None)
    partition = property(lambda self: self._task.current.partition if self._task.current else -1)
    offset = property(lambda self: self._task.current.offset if self._task.current else -1)
    timestamp = property(lambda self: self._task.current_timestamp)
    headers = property(lambda self: self._task.current.headers if self._task.current else ())

    def forward(self, key: Any, value: Any, to: str | None = None) -> None:
        self._task._forward(self._node, key, value, to)

    def schedule(
        self, interval_ms: int, kind: PunctuationType, punctuator: Callable[[int], None]
    ) -> _Punctuation:
        if not isinstance(interval_ms, int) or interval_ms < 1:
            raise ValueError(f"a punctuation interval is a positive int (ms), got {interval_ms!r}")
        if not isinstance(kind, PunctuationType):
            raise ValueError(f"kind must be STREAM_TIME or WALL_CLOCK_TIME, got {kind!r}")
        return self._task._schedule(self._node, interval_ms, kind, punctuator)

    def commit(self) -> None:
        self._task.commit_requested = True

    def get_state_store(self, name: str) -> Any:
        if name not in self._task.topology.store_users or self._node not in (
            self._task.topology.store_users[name]
        ):
            raise TopologyError(f"processor {self._node!r} is not connected to store {name!r}")
        return _GuardedStore(self._task.stores[name], self._task)


class Task:
    def __init__(
        self,
        application_id: str,
        topology: Topology,
        sub: SubTopology,
        partition: int,
        stores: dict[str, KeyValueStore],
        send: SinkSend,
        partitions_of: Callable[[str], int],
        now_ms: Callable[[], int],
    ) -> None:
        self.application_id = application_id
        self.topology = topology
        self.sub = sub
        self.partition = partition
        self.task_id = f"{sub.index}_{partition}"
        self.stores = stores
        self._send = send
        self._partitions_of = partitions_of
        self._now_ms = now_ms
        self.current: StreamRecord | None = None
        self.current_timestamp = -1
        self.stream_time = -1
        #: next input offset per source topic the state (after this task's work) reflects
        self.positions: dict[str, int] = {}
        #: per store: positions its restored state reflects (writes skipped below them)
        self.store_positions: dict[str, dict[str, int]] = {}
        self.commit_requested = False
        #: changelog records applied by the last restore (fewer when a local file is reused)
        self.restored_records = 0
        self._punctuations: list[_Punctuation] = []
        self._source_of: dict[str, str] = {}  # topic -> source node, filled on first use
        self._processors: dict[str, Processor] = {}
        for name in sub.nodes:
            if name in topology.processors:
                self._processors[name] = topology.processors[name].factory()
        for name, proc in self._processors.items():
            proc.init(_Context(self, name))

    # -- processing -----------------------------------------------------------------------

    def _source_for(self, topic: str) -> str:
        name = self._source_of.get(topic)
        if name is None:
            for src in self.sub.nodes:
                node = self.topology.sources.get(src)
                if node and (topic in node.topics or (node.pattern and node.pattern.fullmatch(topic))):
                    self._source_of[topic] = name = src
                    break
        if name is None:
            raise TopologyError(f"task {self.task_id}: no source reads topic {topic!r}")
        return name

    def process(self, message: Message) -> None:
        """Run one input message through the sub-topology."""
        source = self.topology.sources[self._source_for(message.topic)]
        record = StreamRecord(
            key=source.key_deserializer(message.key),
            value=source.value_deserializer(message.value),
            timestamp=message.timestamp,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            headers=message.headers,
        )
        self.current = record
        self.current_timestamp = record.timestamp
        try:
            for child in self.topology.children_of(source.name):
                self._deliver(child, record)
        finally:
            self.current = None
        self.positions[message.topic] = message.offset + 1
        if record.timestamp > self.stream_time:
            self.stream_time = record.timestamp
            self._punctuate(PunctuationType.STREAM_TIME, self.stream_time)

    def _store_reflects_current(self, store: str) -> bool:
        cur = self.current
        if cur is None or cur.topic is None:
            return False
        done = self.store_positions.get(store, {}).get(cur.topic)
        return done is not None and cur.offset < done

    def _forward(self, node: str, key: Any, value: Any, to: str | None) -> None:
        children = self.topology.children_of(node)
        if to is not None:
            if to not in children:
                raise TopologyError(f"{node!r} forwards to {to!r}, which is not its child")
            children = [to]
        base = self.current
        record = StreamRecord(
            key, value, self.current_timestamp,
            *( (base.topic, base.partition, base.offset, base.headers) if base else ()),
        )
        for child in children:
            self._deliver(child, record)

    def _deliver(self, name: str, record: StreamRecord) -> None:
        proc = self._processors.get(name)
        if proc is not None:
            proc.process(record)
            return
        sink = self.topology.sinks[name]
        key = sink.key_serializer(record.key)
        value = sink.value_serializer(record.value)
        partition = -1
        if sink.partitioner is not None:
            n = self._partitions_of(sink.topic)
            partition = sink.partitioner(record.key, record.value, n)
            if not isinstance(partition, int) or not 0 <= partition < n:
                raise TopologyError(
                    f"sink {name!r}: partitioner returned {partition!r} for {n} partitions"
                )
        ts = record.timestamp if record.timestamp >= 0 else self._now_ms()
        self._send(sink.topic, key, value, partition, ts, record.headers)

    # -- punctuation ----------------------------------------------------------------------

    def _schedule(
        self, node: str, interval_ms: int, kind: PunctuationType, fn: Callable[[int], None]
    ) -> _Punctuation:
        if kind is PunctuationType.WALL_CLOCK_TIME:
            due: int | None = self._now_ms() + interval_ms
        else:
            due = None if self.stream_time < 0 else self.stream_time + interval_ms
        p = _Punctuation(interval_ms, kind, fn, node, due)
        self._punctuations.append(p)
        return p

    def _punctuate(self, kind: PunctuationType, now: int) -> int:
        fired = 0
        for p in list(self._punctuations):
            if p.cancelled or p.kind is not kind:
                continue
            if p.due is None:
                p.due = now + p.interval_ms
                continue
            if now >= p.due:
                self.current_timestamp = now
                p.fn(now)
                fired += 1
                # once per call, however many intervals passed; the next is aligned
                p.due += p.interval_ms * ((now - p.due) // p.interval_ms + 1)
        self._punctuations = [p for p in self._punctuations if not p.cancelled]
        return fired

    def punctuate_wall_clock(self) -> int:
        """Fire wall-clock punctuators that are due on the injected clock."""
        return self._punctuate(PunctuationType.WALL_CLOCK_TIME, self._now_ms())

    # -- state ----------------------------------------------------------------------------

    def write_changelogs(self, cluster: Cluster, durable: bool = True) -> int:
        """Write each dirty store to its changelog, in batches of bounded size, ending with
        a commit marker that carries the task's positions: a restore applies a commit only
        once it sees its marker. Returns the number of data records written."""
        positions = json.dumps(self.positions, sort_keys=True).encode()
        header = ((POSITIONS_HEADER, positions),)
        ts = self._now_ms()
        written = 0
        for name in sorted(self.stores):
            dirty = self.stores[name].take_dirty()
            if not dirty:
                continue
            topic = changelog_topic(self.application_id, name)
            batch: list[NewRecord] = []
            size = 0
            for k, v in dirty.items():
                if batch and size + len(k) + len(v or b"") > CHANGELOG_BATCH_BYTES:
                    cluster.produce(topic, self.partition, batch, durable=durable)
                    batch, size = [], 0
                batch.append(NewRecord(v, key=k, timestamp=ts))
                size += len(k) + len(v or b"")
            batch.append(NewRecord(positions, key=COMMIT_KEY, headers=header, timestamp=ts))
            result = cluster.produce(topic, self.partition, batch, durable=durable)
            self.stores[name].checkpoint(result.last_offset, dict(self.positions))
            written += len(dirty)
        return written

    def restore(self, cluster: Cluster) -> dict[str, int]:
        """Rebuild every store from its changelog partition (last record per key wins, so
        a compacted changelog restores the same). Returns the positions to resume from
        (topic -> next offset); empty when no store has been written."""
        self.restored_records = 0

        def counting(apply: Callable[[bytes, bytes | None], None]
                     ) -> Callable[[bytes, bytes | None], None]:
            def inner(key: bytes, value: bytes | None) -> None:
                self.restored_records += 1
                apply(key, value)
            return inner

        for name, store in self.stores.items():
            topic = changelog_topic(self.application_id, name)
            earliest = cluster.earliest_offset(topic, self.partition)
            end = cluster.latest_offset(topic, self.partition)
            local = store.local_checkpoint()
            if local is not None and earliest <= local[0] < end:
                # the local file equals the changelog through local[0]: replay the rest
                found = _replay(cluster, topic, self.partition, counting(store.restore),
                                start=local[0] + 1, last=local[1])
            else:
                store.clear()
                found = _replay(cluster, topic, self.partition, counting(store.restore))
            last = found.positions
            if found.marker_offset is not None:
                store.checkpoint(found.marker_offset, last)
            for key in found.uncommitted:
                # rewrite what a cut-short commit left after the last marker, so that for
                # every key the last record before the next marker is the committed value
                # (compaction may keep the cut-short record and drop the committed one)
                store.dirty[key] = store._get(key)
            if last is not None:
                self.store_positions[name] = last
        resume: dict[str, int] = {}
        for pos in self.store_positions.values():
            for t, o in pos.items():
                resume[t] = min(resume.get(t, o), o)
        self.positions.update(resume)
        return resume

    def close(self) -> None:
        for proc in self._processors.values():
            try:
                proc.close()
            except Exception:  # a failing close must not keep the stores open
                log.exception("task %s: processor close failed", self.task_id)
        for store in self.stores.values():
            store.close()
