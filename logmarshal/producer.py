"""Producer: batches records per partition and appends them through a :class:`Cluster`.

Like Kafka's producer, ``send`` only queues: a background sender appends a partition's records
as one batch when ``batch_size`` bytes have accumulated or the oldest has waited
``linger_ms``. Batching is what makes appends cheap; ``linger_ms=0`` sends at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import attrs

from storage import NewRecord

from .cluster import Cluster
from .errors import ClosedError
from .partitioners import Partitioner, resolve_partitioner

__all__ = ["Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

Serializer = Callable[[Any], bytes | None]
_BYTES_LIKE = (bytes, bytearray, memoryview)
_RECORD_OVERHEAD = 20  # rough per-record framing, for deciding when a batch is full


@attrs.frozen
class RecordMetadata:
    """Where a sent record was stored."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _as_bytes(obj: Any, serializer: Serializer | None, what: str) -> bytes | None:
    if serializer is not None:
        obj = serializer(obj)
    if obj is None or isinstance(obj, bytes):
        return obj
    if isinstance(obj, _BYTES_LIKE):
        return bytes(obj)
    raise TypeError(
        f"the {what} must be bytes or None, got {type(obj).__name__}; "
        f"pass a {what}_serializer (e.g. logmarshal.serializers.string_serializer)"
    )


def _headers(headers: Iterable[tuple[str, Any]] | None) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    out = []
    for name, value in headers:
        if not isinstance(name, str):
            raise TypeError(f"header names are str, got {type(name).__name__}")
        out.append((name, _as_bytes(value, None, "header value")))
    return tuple(out)


@attrs.define
class _Pending:
    """Records queued for one partition, waiting to become a batch."""

    created: float
    records: list[NewRecord] = attrs.field(factory=list)
    futures: list[Future[RecordMetadata]] = attrs.field(factory=list)
    size: int = 0


class Producer:
    """Sends records to a cluster's topics.

    ``partitioner`` is ``"murmur2"`` (Kafka's default for keys, round-robin without),
    ``"mmh3"``, ``"round_robin"`` or a callable ``(key, n_partitions) -> int``. ``durable``
    asks the cluster to have each batch on disk before the futures resolve. ``clock`` gives
    record timestamps in epoch milliseconds when ``send`` is not given one.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        partitioner: str | Partitioner = "murmur2",
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        batch_size: int = 16384,
        linger_ms: float = 5.0,
        durable: bool = False,
        metadata_max_age_ms: float = 5000.0,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 byte, got {batch_size}")
        if linger_ms < 0:
            raise ValueError(f"linger_ms cannot be negative, got {linger_ms}")
        self._cluster = cluster
        self._partitioner = resolve_partitioner(partitioner)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._batch_size = batch_size
        self._linger = linger_ms / 1000.0
        self._durable = durable
        self._metadata_max_age = metadata_max_age_ms / 1000.0
        self._clock = clock
        self._partition_counts: dict[str, tuple[int, float]] = {}
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._in_flight = 0
        self._flushing = 0
        self._closed = False
        self._cond = threading.Condition()
        self._sender = threading.Thread(target=self._run, name="logmarshal-producer", daemon=True)
        self._sender.start()

    # -- public API -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | None = None,
        timestamp: int | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to its :class:`RecordMetadata`.

        Mistakes the caller can fix (unknown topic, bad partition, wrong types) raise here
        rather than through the future.
        """
        key_bytes = _as_bytes(key, self._key_serializer, "key")
        value_bytes = _as_bytes(value, self._value_serializer, "value")
        record = NewRecord(
            value=value_bytes,
            key=key_bytes,
            headers=_headers(headers),
            timestamp=self._clock() if timestamp is None else timestamp,
        )
        target = self._choose_partition(topic, key_bytes, partition)
        size = (
            len(value_bytes or b"")
            + len(key_bytes or b"")
            + sum(len(k) + len(v or b"") for k, v in record.headers)
            + _RECORD_OVERHEAD
        )
        future: Future[RecordMetadata] = Future()
        with self._cond:
            if self._closed:
                raise ClosedError("send() after the producer was closed")
            pending = self._pending.get((topic, target))
            new_batch = pending is None
            if pending is None:
                pending = self._pending[(topic, target)] = _Pending(created=time.monotonic())
            pending.records.append(record)
            pending.futures.append(future)
            pending.size += size
            # a new batch sets a linger deadline the sender must learn of; a full one is ready
            if new_batch or pending.size >= self._batch_size:
                self._cond.notify_all()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until the cluster has it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout} s")
                    self._cond.wait(remaining)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender. Further sends raise :class:`ClosedError`."""
        with self._cond:
            if self._closed:
                return
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._sender.join(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _partition_count(self, topic: str, refresh: bool = False) -> int:
        cached = self._partition_counts.get(topic)
        now = time.monotonic()
        if refresh or cached is None or now - cached[1] > self._metadata_max_age:
            count = self._cluster.partitions(topic)
            self._partition_counts[topic] = (count, now)
            return count
        return cached[0]

    def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count = self._partition_count(topic)
        if partition is None:
            chosen = self._partitioner(key, count)
            if not isinstance(chosen, int) or not 0 <= chosen < count:
                raise ValueError(
                    f"the partitioner returned {chosen!r} for a topic of {count} partitions"
                )
            return chosen
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"partition must be an int, got {type(partition).__name__}")
        if partition >= count:  # the topic may have grown since we looked
            count = self._partition_count(topic, refresh=True)
        if not 0 <= partition < count:
            raise ValueError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        return partition

    def _ready(self, now: float) -> list[tuple[tuple[str, int], _Pending]]:
        if self._flushing or self._closed:
            ready = list(self._pending.items())
        else:
            ready = [
                (tp, p)
                for tp, p in self._pending.items()
                if p.size >= self._batch_size or now - p.created >= self._linger
            ]
        for tp, _ in ready:
            del self._pending[tp]
        return ready

    def _next_wakeup(self, now: float) -> float | None:
        if not self._pending:
            return None
        oldest = min(p.created for p in self._pending.values())
        return max(0.0, oldest + self._linger - now)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    ready = self._ready(time.monotonic())
                    if ready:
                        self._in_flight += len(ready)
                        break
                    if self._closed:
                        return
                    self._cond.wait(self._next_wakeup(time.monotonic()))
            for (topic, partition), pending in ready:
                self._send_batch(topic, partition, pending)
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _send_batch(self, topic: str, partition: int, pending: _Pending) -> None:
        try:
            result = self._cluster.produce(
                topic, partition, pending.records, durable=self._durable
            )
        except Exception as exc:  # every waiting future learns why its record was not stored
            log.warning("produce to %s/%d failed: %s", topic, partition, exc)
            for future in pending.futures:
                future.set_exception(exc)
            return
        for offset, record, future in zip(
            result.offsets, pending.records, pending.futures, strict=True
        ):
            timestamp = result.log_append_time if result.log_append_time >= 0 else record.timestamp
            future.set_result(RecordMetadata(topic, partition, offset, timestamp))
