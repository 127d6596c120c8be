"""A task: one sub-topology on partition p of its source topics, with its stores.

Pure of Marshal: the runner feeds it messages (a polled batch at a time) and asks it to
commit. ``commit`` flushes the sinks, then writes every dirty store (its write-behind cache
flushed: one record per changed key) to its changelog in one batch per store whose records
carry the input positions the state reflects; only then may the runner commit the inputs
to the consumer (which heartbeats them). Restoring reads the changelogs back; the task then
resumes from the positions its state reflects, skipping store writes for input a store
already reflects, so each input record updates each store exactly once.

The changelog records, and how a restore judges them (fences, epochs, compaction):
:mod:`.changelog`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from storage import NewRecord

from ..cluster import Cluster, Message
from ..errors import LogmarshalError, RecordTooLarge
from .changelog import (
    CHANGELOG_BATCH_BYTES,
    COMMIT_HEADER,
    COMMIT_KEY,
    EPOCH_HEADER,
    FENCE_KEY,
    NO_EPOCH,
    POSITIONS_HEADER,
    _epoch_of,
    changelog_topic,
    commit_header,
    epoch_bounds,
    fetch_below,
    marker_key,
    marker_of,
    read_changelog,
    valid_commits,
)
from .processor import Processor, PunctuationType, StreamRecord
from .serde import bytes_deserializer, json_deserializer, string_deserializer
from .stores import KeyValueStore, StoreDamaged
from .task_restore import restore_stores
from .topology import SinkNode, SubTopology, Topology, TopologyError

__all__ = [
    "COMMIT_KEY",
    "EPOCH_HEADER",
    "FENCE_KEY",
    "POSITIONS_HEADER",
    "Fenced",
    "RecordNotAtomic",
    "Task",
    "changelog_topic",
    "epoch_bounds",
    "marker_key",
    "marker_of",
    "read_changelog",
    "valid_commits",
]

log = logging.getLogger(__name__)

SinkSend = Callable[[str, bytes | None, bytes | None, int, int, tuple], None]


class RecordNotAtomic(LogmarshalError):
    """An atomic record could not be kept or undone whole: a sink write released once it
    succeeded failed (the writes before it went out), or undoing a failed one's store
    writes failed. Not the record's failure, so never retried or dead-lettered: the App
    stops, committing nothing of the task since its last commit."""


class Fenced(LogmarshalError):
    """A newer owner of the task has fenced this task's epoch in a changelog: what this task
    writes is not valid state any more; the runner drops the task."""


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
        if (
            name not in self._task.topology.store_users
            or self._node not in (self._task.topology.store_users[name])
        ):
            raise TopologyError(f"processor {self._node!r} is not connected to store {name!r}")
        return self._task.stores[name]


#: how a node hands a record to one child (a processor's ``process``, or a sink's write)
_Delivery = Callable[[StreamRecord], None]
#: a source topic's key and value deserializers and its source node's deliveries
_Source = tuple[Callable[[bytes | None], Any], Callable[[bytes | None], Any], tuple[_Delivery, ...]]
#: stream time of no punctuation due (never reached) and of one whose due is not known yet
_NEVER = 1 << 62
_AT_ONCE = -(1 << 62)
#: serde's deserializers, each of which maps None to None: a task does not call them for
#: a None key (most records have none; a call per record saved)
_NULL_KEEPING = (string_deserializer, bytes_deserializer, json_deserializer)
#: builds a StreamRecord from its fields without the named tuple's Python ``__new__``
_new_record = tuple.__new__


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
        epoch: int = NO_EPOCH,
        atomic_records: bool = False,
    ) -> None:
        self.application_id = application_id
        #: the fencing epoch of the claim this task runs under (tags its changelog records)
        self.epoch = epoch
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
        #: per store: the next changelog offset not yet accounted for (set by restore): every
        #: record before it is one this task read, wrote, or inspected in a gap
        self._chain: dict[str, int] = {}
        #: commit calls of this epoch so far (each marker says which it ends: lm-commit)
        self._seq = 0
        #: per store: the marker (offset, positions) of the epoch's last commit that reached
        #: every store (the fence until one did): where a restore takes a store back to
        self._complete: dict[str, tuple[int, dict[str, int] | None]] = {}
        #: per source topic: input below this went to the sinks before a commit a restore
        #: took back (:meth:`restore`)
        self._sent_below: dict[str, int] = {}
        #: a commit call failed (some stores may have its marker): no more commits, since
        #: the next one could not name the last commit every store has (``prev``)
        self._commit_failed: BaseException | None = None
        self._punctuations: list[_Punctuation] = []
        #: the lowest stream time at which a stream-time punctuator may be due
        self._stream_due = _NEVER
        #: whether any wall-clock punctuator is scheduled
        self._wall_clock_scheduled = False
        self._sources: dict[str, _Source] = {}  # topic -> its source, filled on first use
        #: per source topic: the stores whose restored state already reflects that topic's
        #: input below an offset (writes for such input are dropped: :meth:`_deliver_guarded`)
        self._guards: dict[str, list[tuple[KeyValueStore | None, int]]] = {}
        #: the record being delivered went to the sinks before (a store reflects it)
        self._sent = False
        self._processors: dict[str, Processor] = {}
        for name in sub.nodes:
            if name in topology.processors:
                self._processors[name] = topology.processors[name].factory()
        #: per node: its children's names, and how to hand each child a record
        self._children = {name: tuple(topology.children_of(name)) for name in sub.nodes}
        self._delivery: dict[str, _Delivery] = {}
        for name in sub.nodes:
            if name in self._processors:
                self._delivery[name] = self._processors[name].process
            elif name in topology.sinks:
                self._delivery[name] = functools.partial(self._sink, topology.sinks[name])
        self._deliveries = {
            name: tuple(self._delivery[c] for c in children)
            for name, children in self._children.items()
        }
        #: whether a record whose processing raised leaves nothing behind (see
        #: :meth:`process_batch`); its sink writes wait in ``_held`` until it succeeded
        self.atomic_records = atomic_records
        self._held: list[tuple] = []
        if atomic_records:
            for store in stores.values():
                store._journal_writes(True)
        #: the stores' journals (each emptied as an atomic record starts: _begin_record)
        self._journals = [s._journal for s in stores.values() if s._journal is not None]
        for name, proc in self._processors.items():
            proc.init(_Context(self, name))

    # -- processing -----------------------------------------------------------------------

    def _source_for(self, topic: str) -> _Source:
        found = self._sources.get(topic)
        if found is not None:
            return found
        for name in self.sub.nodes:
            node = self.topology.sources.get(name)
            if node and (topic in node.topics or (node.pattern and node.pattern.fullmatch(topic))):
                found = (node.key_deserializer, node.value_deserializer, self._deliveries[name])
                self._sources[topic] = found
                return found
        raise TopologyError(f"task {self.task_id}: no source reads topic {topic!r}")

    def process(self, message: Message) -> None:
        """Run one input message through the sub-topology."""
        self.process_batch((message,))

    def process_batch(
        self,
        messages: Iterable[Message],
        on_error: Callable[[Message, Exception], None] | None = None,
        *,
        punctuate: bool = True,
    ) -> None:
        """Run input messages through the sub-topology, in order, each exactly as
        :meth:`process` would; what is the same for a run of one topic's messages (its
        source, deserializers, children, store guards) is looked up once. A message whose
        processing raises goes to ``on_error`` (which retries, dead-letters or raises) and
        the batch goes on; without ``on_error`` the exception propagates, the messages
        before it processed.

        The loop is the streams layer's per-record cost (docs/performance.md, "Streams"):
        a record is one ``tuple.__new__``, and a source with one child (the usual one)
        hands it over without a loop.

        With ``atomic_records``, a record whose processing raised leaves nothing behind
        before ``on_error`` sees it: its store writes are undone and its sink writes
        dropped, so a retry or a dead-lettering does not keep half of it (a word count's
        line counted in part, then counted again). Only the record's own writes are: a
        punctuator's, between records, stay. What cannot be kept or undone whole raises
        :class:`RecordNotAtomic`. A stream-time punctuator's failure is not the record's: it
        propagates, as a wall-clock one's does. ``punctuate=False``: stream time stays
        (a retry moves it once it succeeded: :meth:`advance_stream_time`)."""
        atomic = self.atomic_records
        positions = self.positions
        guards_of = self._guards
        topic = ""  # no topic is named "": the first message looks its source up
        guards = None
        only: _Delivery | None = None
        keyless = False  # whether a None key deserializes to None without a call
        text = False  # whether values are decoded here (string_deserializer, inlined)
        for m in messages:
            try:
                if m[0] != topic:
                    key_of, value_of, deliveries = self._source_for(m[0])
                    topic = m[0]
                    guards = guards_of.get(topic) if guards_of else None
                    only = deliveries[0] if len(deliveries) == 1 else None
                    keyless = any(key_of is d for d in _NULL_KEEPING)
                    text = value_of is string_deserializer
                _, partition, offset, ts, key, value, headers = m
                self.current = record = _new_record(
                    StreamRecord,
                    (
                        None if key is None and keyless else key_of(key),
                        (None if value is None else value.decode()) if text else value_of(value),
                        ts,
                        topic,
                        partition,
                        offset,
                        headers,
                    ),
                )
                self.current_timestamp = ts
                if atomic:
                    self._begin_record()
                if guards:
                    self._deliver_guarded(record, deliveries, guards)
                elif only is not None:
                    only(record)
                else:
                    for deliver in deliveries:
                        deliver(record)
                if atomic and self._held:
                    self._release_held()
            except Exception as exc:
                self.current = None
                if atomic:
                    self._undo_record()
                if on_error is None or isinstance(exc, RecordNotAtomic):
                    raise
                on_error(m, exc)
                continue
            positions[topic] = offset + 1
            # advance_stream_time, inlined: a method call per record on the hot path
            if ts > self.stream_time and punctuate:
                self.stream_time = ts
                if ts >= self._stream_due:
                    self.current = None
                    if guards:  # (fired by a record replayed: as that record's delivery)
                        self._punctuate_guarded(ts, offset, guards)
                    else:
                        self._punctuate(PunctuationType.STREAM_TIME, ts)
        # a wall-clock punctuation, or a record forwarded outside processing, has no input
        # record behind it
        self.current = None

    def advance_stream_time(self, ts: int) -> None:
        """Stream time to ``ts`` if that is later, firing the stream-time punctuators due."""
        if ts > self.stream_time:
            self.stream_time = ts
            if ts >= self._stream_due:
                self.current = None
                self._punctuate(PunctuationType.STREAM_TIME, ts)

    def _begin_record(self) -> None:
        """An atomic record starts: the journals keep what it changes, and only that (what
        a punctuator wrote before it is not undone if it fails)."""
        for journal in self._journals:
            if journal:
                journal.clear()

    def _release_held(self) -> None:
        """An atomic record's processing returned: its sink writes go out. The first one
        refused fails the record (nothing of it went out); one refused after others went
        out leaves the record half visible: :class:`RecordNotAtomic`."""
        held, self._held = self._held, []
        send = self._send
        for i, args in enumerate(held):
            try:
                send(*args)
            except Exception as exc:
                if not i:
                    raise
                raise RecordNotAtomic(
                    f"task {self.task_id}: sink write {i + 1} of {len(held)} of a record, to "
                    f"{args[0]!r}, failed ({exc!r}) after the ones before it went out"
                ) from exc

    def _undo_record(self) -> None:
        """An atomic record failed: its store writes are undone, its sink writes dropped.
        An undo that fails (a full disk) leaves the stores half undone: RecordNotAtomic
        (a damaged store's StoreDamaged as it is: the task is restored anyway)."""
        self._held = []
        try:
            for store in self.stores.values():
                store._undo_record()
        except StoreDamaged:
            raise
        except Exception as exc:
            raise RecordNotAtomic(
                f"task {self.task_id}: undoing a failed record's store writes failed ({exc!r})"
            ) from exc

    def _deliver_guarded(
        self,
        record: StreamRecord,
        deliveries: tuple[_Delivery, ...],
        guards: list[tuple[KeyValueStore | None, int]],
    ) -> None:
        """Deliver a record with the writes of the stores that already reflect it dropped,
        and its sink writes too if any store does: they went out before that store's commit
        (the sinks are flushed first), and values computed now from a store that already
        counted the record overshoot (a count forwarded 201 where it had forwarded 101)."""
        with self._guarded(record[5], guards):
            for deliver in deliveries:
                deliver(record)

    def _punctuate_guarded(
        self, ts: int, offset: int, guards: list[tuple[KeyValueStore | None, int]]
    ) -> None:
        """The stream-time punctuators a replayed record fires, guarded as its delivery:
        they ran when it was first processed (the writes of a store that reflects it went
        into that store, their sink writes out), and now read a store that is ahead."""
        with self._guarded(offset, guards):
            self._punctuate(PunctuationType.STREAM_TIME, ts)

    @contextlib.contextmanager
    def _guarded(
        self, offset: int, guards: list[tuple[KeyValueStore | None, int]]
    ) -> Iterator[None]:
        """While the input at ``offset`` is replayed: the writes of each store that
        reflects it dropped, and if one does, every sink write."""
        sent = False
        for store, done in guards:
            if store is not None:  # (None: the sinks' guard only)
                store._drop_writes(offset < done)
            sent = sent or offset < done
        self._sent = sent
        try:
            yield
        finally:
            self._sent = False
            for store, _ in guards:
                if store is not None:
                    store._drop_writes(False)

    def _forward(self, node: str, key: Any, value: Any, to: str | None) -> None:
        if to is None:
            deliveries = self._deliveries[node]
        else:
            if to not in self._children[node]:
                raise TopologyError(f"{node!r} forwards to {to!r}, which is not its child")
            deliveries = (self._delivery[to],)
        base = self.current
        if base is None:
            record = _new_record(
                StreamRecord, (key, value, self.current_timestamp, None, -1, -1, ())
            )
        else:
            record = _new_record(
                StreamRecord,
                (key, value, self.current_timestamp, base[3], base[4], base[5], base[6]),
            )
        for deliver in deliveries:
            deliver(record)

    def _sink(self, sink: SinkNode, record: StreamRecord) -> None:
        if self._sent:
            return  # (sent before a crash: _deliver_guarded)
        key = sink.key_serializer(record.key)
        value = sink.value_serializer(record.value)
        partition = -1
        if sink.partitioner is not None:
            n = self._partitions_of(sink.topic)
            partition = sink.partitioner(record.key, record.value, n)
            if not isinstance(partition, int) or not 0 <= partition < n:
                raise TopologyError(
                    f"sink {sink.name!r}: partitioner returned {partition!r} for {n} partitions"
                )
        ts = record.timestamp if record.timestamp >= 0 else self._now_ms()
        if self.atomic_records and self.current is not None:
            self._held.append((sink.topic, key, value, partition, ts, record.headers))
        else:
            self._send(sink.topic, key, value, partition, ts, record.headers)

    def _rebuild_guards(self) -> None:
        """After a restore: which stores' writes to drop for which input (store_positions),
        and below which input nothing goes to the sinks (``_sent_below``)."""
        self._guards = {}
        for name, positions in self.store_positions.items():
            for topic, done in positions.items():
                if done > self.positions.get(topic, -1):  # (else it never drops a write)
                    self._guards.setdefault(topic, []).append((self.stores[name], done))
        for topic, done in self._sent_below.items():
            if done > self.positions.get(topic, -1):
                self._guards.setdefault(topic, []).append((None, done))

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
        self._next_stream_due()
        return p

    def _next_stream_due(self) -> None:
        self._stream_due = min(
            (
                _AT_ONCE if p.due is None else p.due
                for p in self._punctuations
                if p.kind is PunctuationType.STREAM_TIME and not p.cancelled
            ),
            default=_NEVER,
        )
        self._wall_clock_scheduled = any(
            p.kind is PunctuationType.WALL_CLOCK_TIME and not p.cancelled
            for p in self._punctuations
        )

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
        self._next_stream_due()
        return fired

    def punctuate_wall_clock(self) -> int:
        """Fire wall-clock punctuators that are due on the injected clock (the runner asks
        after every poll: without any, that costs one attribute read)."""
        if not self._wall_clock_scheduled:
            return 0
        return self._punctuate(PunctuationType.WALL_CLOCK_TIME, self._now_ms())

    # -- state ----------------------------------------------------------------------------

    def _epoch_header(self) -> tuple[str, bytes]:
        return (EPOCH_HEADER, str(self.epoch).encode())

    def _append(
        self, cluster: Cluster, name: str, records: list[NewRecord], durable: bool
    ) -> tuple[int, bool]:
        """Produce to store ``name``'s changelog partition and account for every record
        between the last one we accounted for and ours (another writer's): a record of a
        higher epoch means a newer owner has the task (:class:`Fenced`); a lower epoch's
        data record (a stale or cut-short commit, invalid) gets its key rewritten by our
        next commit. Returns our last offset and whether a foreign fence marker was among
        the others' records."""
        topic = changelog_topic(self.application_id, name)
        result = cluster.produce(topic, self.partition, records, durable=durable)
        foreign_fence = False
        for offset in result.offsets:
            if offset > self._chain[name]:
                foreign_fence |= self._inspect_gap(cluster, name, self._chain[name], offset)
            self._chain[name] = max(self._chain[name], offset + 1)
        return result.last_offset, foreign_fence

    def _inspect_gap(self, cluster: Cluster, name: str, start: int, stop: int) -> bool:
        topic = changelog_topic(self.application_id, name)
        store = self.stores[name]
        fence = False
        offset = start
        while offset < stop:
            for m in fetch_below(cluster, topic, self.partition, offset, stop):
                if m.offset >= stop:
                    return fence
                epoch = _epoch_of(m.headers)
                if epoch > self.epoch:
                    raise Fenced(
                        f"task {self.task_id}: {topic}/{self.partition} has a record of epoch "
                        f"{epoch} at {m.offset}, above ours ({self.epoch}): a newer owner"
                    )
                kind = marker_of(m.key)
                if kind is FENCE_KEY:
                    fence = True
                elif m.key is not None and kind is None and m.key not in store.dirty:
                    store.dirty[m.key] = store._get(m.key)
                offset = m.offset + 1
        return fence

    def write_changelogs(self, cluster: Cluster, durable: bool = True) -> int:
        """Write each dirty store to its changelog, in batches of bounded size, and end
        every store's with a commit marker (a clean store's too, when any store is dirty)
        that carries the task's positions and says which commit call of the epoch it ends
        (``lm-commit``): a restore applies a commit only once it sees its marker, only if no
        fence invalidates it, and takes the stores a crash left a commit ahead back to the
        one before (:func:`~logmarshal.streams.task_restore.rollbacks`), so every store of a
        task is restored to one commit. Every record carries the task's epoch. Raises
        :class:`Fenced` when another writer's record of a higher epoch is found among ours.
        Returns the number of data records written."""
        if not self._chain and self.stores:
            raise RuntimeError(f"task {self.task_id}: restore (and fence) before writing")
        if isinstance(self._commit_failed, Fenced):
            raise Fenced(f"task {self.task_id}: fenced at an earlier commit") from (
                self._commit_failed
            )
        if self._commit_failed is not None:
            raise RuntimeError(
                f"task {self.task_id}: an earlier commit failed part way; set the task up "
                "again (restore) before it commits"
            ) from self._commit_failed
        names = sorted(self.stores)
        taken: dict[str, dict[bytes, bytes | None]] = {}
        try:
            for name in names:
                taken[name] = self.stores[name].take_dirty()
        except BaseException:
            self._untake(taken)  # (a store's flush failed: nothing written)
            raise
        if not any(taken.values()):
            return 0
        self._seq += 1
        task_positions = json.dumps(self.positions, sort_keys=True).encode()
        epoch = self._epoch_header()
        ts = self._now_ms()
        written = 0
        markers: dict[str, tuple[int, dict[str, int] | None]] = {}
        for name in names:
            store = self.stores[name]
            dirty = taken.pop(name)
            reflected = self._reflected(name)
            positions = (
                task_positions
                if reflected is None
                else json.dumps(reflected, sort_keys=True).encode()
            )
            commit = commit_header(self._seq, names, self._complete.get(name, (-1, None)))
            header = ((POSITIONS_HEADER, positions), epoch, (COMMIT_HEADER, commit))
            batch: list[NewRecord] = []
            size = 0
            try:
                for k, v in dirty.items():
                    if batch and size + len(k) + len(v or b"") > CHANGELOG_BATCH_BYTES:
                        self._append(cluster, name, batch, durable)
                        batch, size = [], 0
                    batch.append(NewRecord(v, key=k, headers=(epoch,), timestamp=ts))
                    size += len(k) + len(v or b"")
                if batch and not getattr(cluster, "produce_is_atomic", False):
                    # part of a call may be stored: the marker vouches for its records only
                    # once they are (else a restore applies the commit without them)
                    self._append(cluster, name, batch, durable)
                    batch = []
                key = marker_key(COMMIT_KEY, self.epoch)
                batch.append(NewRecord(positions, key=key, headers=header, timestamp=ts))
                marker, _ = self._append(cluster, name, batch, durable)
            except BaseException as exc:
                # not committed everywhere, and maybe not nowhere (a produce that timed out
                # may have stored its records): only a restore can tell which commit every
                # store has. The dirty keys are kept (a write raised before any record went
                # out is not lost to a caller who restores); a fenced task never commits again
                self._commit_failed = exc
                if not isinstance(exc, Fenced):
                    self._untake({name: dirty} | taken)
                exc.add_note(f"task {self.task_id}: writing store {name!r}'s changelog")
                if isinstance(exc, RecordTooLarge) and batch:
                    big = max(batch, key=lambda r: len(r.key or b"") + len(r.value or b""))
                    exc.add_note(
                        f"its largest record: key {big.key!r:.80}, {len(big.value or b'')} "
                        "value bytes (the changelog's max.message.bytes bounds each record; "
                        "every commit fails until it is raised or the value is made smaller)"
                    )
                raise
            kept = reflected or dict(self.positions)
            try:
                store.checkpoint(marker, kept, self.epoch)
            except BaseException as exc:
                # (a damaged file met by the checkpoint, after this store's marker): with
                # stores left to write, the commit is in some changelogs and not in others,
                # so it failed part way as any other; after the last, it is whole
                if taken:
                    self._commit_failed = exc
                self._untake(taken)
                raise
            markers[name] = (marker, kept)
            written += len(dirty)
        self._complete = markers  # (this commit reached every store)
        return written

    def _untake(self, taken: dict[str, dict[bytes, bytes | None]]) -> None:
        """Give stores back the dirty keys a failed commit call did not write: they are
        not lost to a caller who restores, and the next commit writes them."""
        for name, dirty in taken.items():
            self.stores[name].untake_dirty(dirty)

    @property
    def commit_failed(self) -> bool:
        """A commit call failed part way: the task commits nothing more (set it up again)."""
        return self._commit_failed is not None

    def _reflected(self, store: str) -> dict[str, int] | None:
        """The input positions ``store`` reflects, where they are past the task's (a store
        a restore found ahead of another: :meth:`restore`), else None (the task's)."""
        ahead = self.store_positions.get(store)
        if not ahead or all(self.positions.get(t, -1) >= o for t, o in ahead.items()):
            return None
        return self.positions | {t: max(o, self.positions.get(t, -1)) for t, o in ahead.items()}

    def restore(self, cluster: Cluster, *, attempts: int = 3) -> dict[str, int]:
        """Rebuild every store from the valid commits of its changelog partition (last
        record per key wins, so a compacted changelog restores the same), then fence: write
        a fence marker (our epoch, the offset the restore read up to) to each changelog.
        Returns the positions to resume from (topic -> next offset); empty when no store has
        been written. Raises :class:`Fenced` if a newer owner's records are found."""
        for attempt in range(1, attempts + 1):
            if self._restore_once(cluster, use_local=attempt == 1, attempt=attempt):
                break
            log.info(
                "task %s: another fence landed between our restore and our fence; "
                "restoring again (attempt %d)",
                self.task_id,
                attempt + 1,
            )
        else:
            raise Fenced(
                f"task {self.task_id}: could not fence its changelogs in {attempts} attempts"
            )
        resume: dict[str, int] = {}
        for pos in self.store_positions.values():
            for t, o in pos.items():
                resume[t] = min(resume.get(t, o), o)
        # a store with no commit (or none past an input) may reflect none of that input (a
        # crash between two stores' first commits: the successor resumed where the first
        # ended, and the second never saw the input before it): the task reflects none of
        # it, and the App resumes from its consumer's position; the guards keep the others
        # from counting what they reflect twice, and their commits say what they reflect
        for t in list(resume):
            if len(self.stores) > sum(t in pos for pos in self.store_positions.values()):
                del resume[t]
        self.positions.update(resume)
        self._rebuild_guards()
        return resume

    def _restore_once(self, cluster: Cluster, use_local: bool, attempt: int = 1) -> bool:
        self.restored_records = 0
        self.store_positions = {}
        self._chain = {}
        self._sent_below = {}

        def counting(
            apply: Callable[[bytes, bytes | None], None],
        ) -> Callable[[bytes, bytes | None], None]:
            def inner(key: bytes, value: bytes | None) -> None:
                self.restored_records += 1
                apply(key, value)

            return inner

        restored, backs = restore_stores(
            cluster,
            self.application_id,
            self.partition,
            self.stores,
            lambda store: counting(store.restore),
            use_local=use_local,
            epoch=self.epoch,
        )
        for back in backs.values():
            for t, o in back.sent.items():
                self._sent_below[t] = max(self._sent_below.get(t, o), o)
        clean = True
        # (commit calls of our epoch before this restore: a task set up again under the
        # same claim goes on counting, or its commits would look older than the last one's)
        self._seq = max(
            (
                meta.seq
                for r in restored.values()
                for offset, epoch, _ in r.found.commits
                if epoch == self.epoch and (meta := r.found.meta.get(offset)) is not None
            ),
            default=0,
        )
        self._complete = {}
        rewrite = any(r.found.uncommitted for r in restored.values())
        for name in sorted(restored):
            store, r = self.stores[name], restored[name]
            found = r.found
            for key in found.uncommitted:
                # rewrite what a cut-short or stale commit left as a key's last record, so
                # that for every key the last record is a valid commit's (compaction may
                # keep the invalid record and drop the committed one)
                store.dirty[key] = store._get(key)
            if found.positions is not None:
                self.store_positions[name] = found.positions
            self._chain[name] = r.end
            fence = json.dumps(
                {
                    "epoch": self.epoch,
                    "base": r.end,
                    "through": {str(e): o for e, o in sorted(r.through.items()) if e < self.epoch},
                    "positions": found.positions,
                    "stores": sorted(self.stores),
                    "round": attempt,
                    "rewrite": rewrite,
                },
                sort_keys=True,
            ).encode()
            at, foreign_fence = self._append(
                cluster,
                name,
                [
                    NewRecord(
                        fence,
                        key=marker_key(FENCE_KEY, self.epoch),
                        headers=(self._epoch_header(),),
                        timestamp=self._now_ms(),
                    )
                ],
                durable=True,
            )
            if foreign_fence:
                # a fence of a lower epoch may still be effective there and invalidate part
                # of what we restored: read it all again (it precedes our fence now)
                clean = False
                continue
            # the store now equals the valid state through our fence marker
            store.checkpoint(at, found.positions, self.epoch)
            self._complete[name] = (at, found.positions)
        return clean

    def close(self) -> None:
        for proc in self._processors.values():
            try:
                proc.close()
            except Exception:  # a failing close must not keep the stores open
                log.exception("task %s: processor close failed", self.task_id)
        failed: BaseException | None = None
        for store in self.stores.values():
            try:
                store.close()
            except Exception as exc:  # (a damaged one's rollback): the others close too
                log.exception("task %s: store %s's close failed", self.task_id, store.name)
                failed = failed or exc
        if failed is not None:
            raise failed
