"""The embedded cluster: a data directory opened in this process.

It is the default for a single process and for the demo: no server to start, and the files
are the very ones the broker serves, so a directory can later be put behind
``logmarshal broker start`` unchanged.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from storage import (
    DataDir,
    NewRecord,
    StorageError,
    TopicConfig,
    UnknownPartition,
    UnknownTopic,
    encode_batch,
)
from storage._datadir import TopicInfo
from storage._records import decode_columns_from, decode_readable

from ._batching import columns_of, encode_plain
from .cluster import (
    FETCH_MAX_BYTES,
    Columns,
    Message,
    PartitionOffsets,
    ProduceResult,
    Read,
    TopicDescription,
    bounds_one_by_one,
    check_max_bytes,
)
from .errors import ClosedError

try:  # optional (setup.py): Messages out of the cyclic GC's sight
    from ._fastconsume import from_records as _from_records
except ImportError:  # pragma: no cover - built wherever a compiler is
    _from_records = None

__all__ = ["EmbeddedCluster"]

log = logging.getLogger(__name__)


def _as_config(config: TopicConfig | Mapping[str, str | int] | None) -> TopicConfig:
    if config is None:
        return TopicConfig()
    if isinstance(config, TopicConfig):
        return config
    return TopicConfig.from_dict(config)


def _describe(info: TopicInfo) -> TopicDescription:
    return TopicDescription(
        name=info.name,
        partitions=info.partitions,
        config=info.config.to_dict(),
        offsets=tuple(
            PartitionOffsets(p.partition, p.log_start_offset, p.log_end_offset)
            for p in info.partition_info
        ),
    )


class EmbeddedCluster:
    """:class:`~logmarshal.cluster.Cluster` over a :class:`storage.DataDir`.

    Owns the directory's lock until :meth:`close`. The DataDir's maintenance thread applies
    retention every ``maintenance_interval`` seconds (Kafka's log.retention.check.interval.ms;
    0 disables it) and runs the cleaner, as it does under the broker.
    """

    #: a produce call is one batch appended: all of its records are stored, or none
    produce_is_atomic = True

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], int] | None = None,
        maintenance_interval: float = 30.0,
    ) -> None:
        if maintenance_interval < 0:
            raise ValueError(f"maintenance_interval must be >= 0, got {maintenance_interval!r}")
        self._dir = DataDir(
            data_dir, clock=clock, retention_check_interval_ms=round(maintenance_interval * 1000)
        )
        self._closed = threading.Event()
        # the readers waiting on each partition, told of every append made through
        # produce() (the only writer: one process owns the directory)
        self._watch_lock = threading.Lock()
        self._watchers: dict[tuple[str, int], tuple[_Reader | _Waiter, ...]] = {}

    @property
    def data_dir(self) -> DataDir:
        return self._dir

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise ClosedError(f"the cluster at {self._dir.path} is closed")

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: TopicConfig | Mapping[str, str | int] | None = None,
    ) -> TopicDescription:
        self._check_open()
        return _describe(self._dir.create_topic(name, partitions, _as_config(config)))

    def delete_topic(self, name: str) -> None:
        self._check_open()
        self._dir.delete_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        self._check_open()
        return _describe(self._dir.add_partitions(name, total))

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None]
    ) -> TopicDescription:
        self._check_open()
        config = self._dir.describe(name).config.with_changes(changes)
        return _describe(self._dir.alter_config(name, config))

    def topics(self) -> list[str]:
        self._check_open()
        return self._dir.topics()

    def describe_topic(self, name: str) -> TopicDescription:
        self._check_open()
        return _describe(self._dir.describe(name))

    def topic_config(self, name: str) -> TopicConfig:
        self._check_open()
        return self._dir.describe(name).config

    def partitions(self, topic: str, timeout: float | None = None) -> int:
        """A member's driver asks this once per HB: the count only, not every partition's
        offsets and size (at once: ``timeout`` has nothing to bound)."""
        self._check_open()
        return self._dir.partition_count(topic)

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[NewRecord],
        *,
        durable: bool = False,
    ) -> ProduceResult:
        self._check_open()
        if not records:
            raise ValueError("produce needs at least one record")
        result = self._append(topic, partition, records, durable)
        self._tell_readers(topic, (partition,))
        return result

    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        *,
        durable: bool = False,
    ) -> dict[int, ProduceResult | Exception]:
        """:class:`~logmarshal.cluster.MultiProducer`: each partition's records appended (one
        flush each), then the readers told of them all at once."""
        self._check_open()
        if any(not records for records in batches.values()):
            raise ValueError("produce needs at least one record for each partition")
        out: dict[int, ProduceResult | Exception] = {}
        try:
            for partition, records in batches.items():
                try:
                    out[partition] = self._append(topic, partition, records, durable)
                except StorageError as exc:  # this partition's alone (unknown, a failed write)
                    self._check_open()
                    out[partition] = exc
        finally:
            self._tell_readers(topic, [p for p, r in out.items() if type(r) is ProduceResult])
        return out

    def _append(
        self, topic: str, partition: int, records: Sequence[NewRecord], durable: bool
    ) -> ProduceResult:
        log_ = self._dir.partition(topic, partition)
        # the usual batch is encoded column-wise (logmarshal._batching), about twice as fast
        # as encode_batch and the same bytes; encode_batch takes every other case
        columns = columns_of(records)
        batch = None if columns is None else encode_plain(columns)
        info = log_.append(batch or encode_batch(list(records)), flush=durable)
        return ProduceResult(
            topic=topic,
            partition=partition,
            base_offset=info.base_offset,
            last_offset=info.last_offset,
            log_append_time=info.log_append_time,
        )

    def _tell_readers(self, topic: str, partitions: Iterable[int]) -> None:
        """The readers waiting on these partitions hear of the appends made to them."""
        watchers = self._watchers
        for partition in partitions:
            key = (topic, partition)
            for reader in watchers.get(key, ()):
                reader.appended(key)

    def _read(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait: float
    ) -> bytes:
        """Stored batches from ``offset`` on, waiting up to ``max_wait`` s for some."""
        self._check_open()
        if type(offset) is not int:  # (a float read as an offset by one path, refused by another)
            raise TypeError(f"an offset is an int, got {offset!r}")
        if offset < 0:
            raise ValueError(f"offsets are never negative, got {offset}")
        _check_wait(max_wait)
        check_max_bytes(max_bytes)
        log_ = self._dir.partition(topic, partition)
        data = log_.read(offset, max_bytes).data
        if not data and max_wait > 0 and log_.wait_for(offset, max_wait):
            data = log_.read(offset, max_bytes).data
        return data

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> list[Message]:
        data = self._read(topic, partition, offset, max_bytes, max_wait)
        records, damage = decode_readable(data)
        if _from_records is not None:  # (empties records, untracked: _fastconsume.c)
            out = _from_records(Message, topic, partition, records, offset)
        else:
            out = [
                Message(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in records
                if r.offset >= offset
            ]
        if damage is not None and not out:
            raise damage  # CorruptBatch: the caller may skip to damage.next_offset
        return out

    def fetch_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> Columns:
        """:class:`~logmarshal.cluster.ColumnFetcher`: stored batches parsed straight into
        columns, about three times cheaper than a ``Message`` per record."""
        data = self._read(topic, partition, offset, max_bytes, max_wait)
        # a damaged stored batch: the records before it, then CorruptBatch to skip it
        return decode_columns_from(data, offset)

    def fetch_batches_many(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> dict[int, bytes | Exception] | None:
        """:class:`~logmarshal.cluster.MultiBatchFetcher`: per partition of ``offsets``, its
        stored batches from its offset on (about ``max_bytes`` each) or the error it alone
        met (OffsetOutOfRange, ...), answered once any has records or after ``max_wait``.
        One long poll for them all, woken by an append to any: the replay of every
        coordination partition is then one thread, as over the network, and the records a
        heartbeat pass writes to several partitions come back in one answer (one step of
        the core instead of one per partition). None for no partitions."""
        self._check_open()
        if any(offset < 0 for offset in offsets.values()):
            raise ValueError(f"offsets are never negative, got {dict(offsets)}")
        _check_wait(max_wait)
        check_max_bytes(max_bytes)
        if not offsets:
            return None
        got = self._read_many(topic, offsets, max_bytes)
        if max_wait <= 0 or any(got.values()):  # (an error is an answer too)
            return got
        waiter = _Waiter()
        keys = [(topic, p) for p in offsets]
        for key in keys:
            self._watch(key, waiter, True)
        try:
            # read again once watched: an append since the first read is not missed
            got = self._read_many(topic, offsets, max_bytes)
            if not any(got.values()) and waiter.wait(max_wait):
                # what was appended to (all, when woken otherwise); the rest stay empty
                appended = {p: offsets[p] for _, p in tuple(waiter.keys) if p in offsets} or offsets
                got.update(self._read_many(topic, appended, max_bytes))
            return got
        finally:
            for key in keys:
                self._watch(key, waiter, False)

    def _read_many(
        self, topic: str, offsets: Mapping[int, int], max_bytes: int
    ) -> dict[int, bytes | Exception]:
        """One read of each partition, without waiting; what one partition alone met is its
        answer (an unknown topic or a closed cluster is raised for all)."""
        self._check_open()
        out: dict[int, bytes | Exception] = {}
        for p, offset in offsets.items():
            try:
                log_ = self._dir.partition(topic, p)
                # nothing new (the usual answer of a replay's partitions): no read
                out[p] = b"" if offset == log_.log_end_offset else log_.read(offset, max_bytes).data
            except UnknownTopic:
                raise
            except StorageError as exc:  # OffsetOutOfRange, UnknownPartition, a failed read
                self._check_open()
                out[p] = exc
        return out

    def wake_fetches(self, topic: str, partitions: Iterable[int]) -> None:
        """:class:`~logmarshal.cluster.FetchWaker`: every fetch now waiting on one of these
        partitions returns what is there (maybe nothing), as if its wait were over."""
        if self._closed.is_set():
            return  # (a closed cluster's logs woke their waiters as they closed)
        for p in partitions:
            for watcher in self._watchers.get((topic, p), ()):
                if isinstance(watcher, _Waiter):
                    watcher.wake()
            try:
                log_ = self._dir.partition(topic, p)
            except (UnknownTopic, UnknownPartition, StorageError):
                continue  # (no such partition, or closed meanwhile: nobody waits on it)
            log_.wake_waiters()

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """:class:`~logmarshal.cluster.RecordDeleter`: each log starts at its offset from
        now on, as Kafka's (the whole segments below it leave the disk)."""
        self._check_open()
        return {p: self._dir.partition(topic, p).delete_before(o) for p, o in before.items()}

    def earliest_offset(self, topic: str, partition: int) -> int:
        self._check_open()
        return self._dir.partition(topic, partition).log_start_offset

    def latest_offset(self, topic: str, partition: int) -> int:
        self._check_open()
        return self._dir.partition(topic, partition).log_end_offset

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        self._check_open()
        return self._dir.partition(topic, partition).offset_for_timestamp(timestamp_ms)

    def open_reader(self, *, max_bytes: int = FETCH_MAX_BYTES) -> _Reader:
        """:class:`~logmarshal.cluster.ReaderSource`: one loop's reads of many partitions,
        woken by this cluster's appends to them (never by a timer per partition)."""
        self._check_open()
        check_max_bytes(max_bytes)
        return _Reader(self, max_bytes)

    def _watch(self, key: tuple[str, int], reader: _Reader | _Waiter, on: bool) -> None:
        """Copy on write: produce() reads the map without a lock."""
        with self._watch_lock:
            now = self._watchers.get(key, ())
            if on:
                new = now if reader in now else (*now, reader)
            else:
                new = tuple(r for r in now if r is not reader)
            if new:
                self._watchers[key] = new
            else:
                self._watchers.pop(key, None)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._dir.close()
        with self._watch_lock:
            readers = {r for rs in self._watchers.values() for r in rs}
        for reader in readers:
            reader.wake()

    def __enter__(self) -> EmbeddedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedCluster({str(self._dir.path)!r})"


class _Waiter:
    """One :meth:`EmbeddedCluster.fetch_batches_many` long poll: woken by the first append
    to any of its partitions, by :meth:`~EmbeddedCluster.wake_fetches` or by a close."""

    __slots__ = ("_event", "keys")

    def __init__(self) -> None:
        self._event = threading.Event()
        #: the partitions appended to since it was made
        self.keys: set[tuple[str, int]] = set()

    def appended(self, key: tuple[str, int]) -> None:
        self.keys.add(key)
        self._event.set()

    def wake(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


class _Reader:
    """:class:`~logmarshal.cluster.PartitionReader` of the embedded cluster: a wanted
    partition is read when it is wanted and again after each append to it."""

    def __init__(self, cluster: EmbeddedCluster, max_bytes: int) -> None:
        self._cluster = cluster
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._wanted: dict[tuple[str, int], int] = {}
        self._ready: set[tuple[str, int]] = set()  # wanted and maybe readable
        self._woken = False

    def want(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self._cluster._watch(key, self, True)  # before the first read: no append is missed
        with self._cond:
            self._wanted[key] = offset
            self._ready.add(key)

    def drop(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        with self._cond:
            self._wanted.pop(key, None)
            self._ready.discard(key)
        self._cluster._watch(key, self, False)

    def bounds(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int] | Exception]:
        return bounds_one_by_one(self._cluster, keys)

    def appended(self, key: tuple[str, int]) -> None:
        with self._cond:
            if key in self._wanted:
                self._ready.add(key)
                self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def poll(self, timeout: float) -> list[Read]:
        with self._cond:
            if not self._ready and not self._woken and timeout > 0:
                self._cond.wait(timeout)
            self._woken = False
            ready, self._ready = self._ready, set()
            todo = [(key, self._wanted[key]) for key in ready if key in self._wanted]
        out = []
        for (topic, partition), offset in todo:
            try:
                records = self._cluster.fetch(topic, partition, offset, max_bytes=self._max_bytes)
                end = self._cluster.latest_offset(topic, partition) if records else -1
            except Exception as exc:  # answered: the caller decides whether to ask again
                out.append(Read(topic, partition, offset, [], exc))
            else:
                if not records:
                    continue  # nothing yet: the next append wakes it
                out.append(Read(topic, partition, offset, records, log_end=end))
            with self._cond:
                if self._wanted.get((topic, partition)) == offset:
                    del self._wanted[(topic, partition)]
        return out

    def close(self) -> None:
        with self._cond:
            keys = list(self._wanted)
            self._wanted.clear()
            self._ready.clear()
        for key in keys:
            self._cluster._watch(key, self, False)


def _check_wait(max_wait: float) -> None:
    """A long poll's wait: a finite number of seconds (inf overflowed the wait deep inside,
    nan read as none; Kafka's max_wait_ms is an int32 of milliseconds)."""
    if not -float("inf") < max_wait < float("inf"):
        raise ValueError(f"max_wait must be a finite number of seconds, got {max_wait}")
