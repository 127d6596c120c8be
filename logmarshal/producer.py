"""Producer: sends records to a cluster's topics, batched, with each record's offset on demand.

Two ways of sending, one API (docs/architecture.md, "Connections"):

* **Over the network** the records go straight to a librdkafka producer of the Producer's
  own (:meth:`NetworkCluster.client_producer <logmarshal.network.NetworkCluster.client_producer>`):
  librdkafka batches them (``linger_ms``, ``batch_size``), hashes keys with Kafka's murmur2
  (its ``murmur2_random`` partitioner is ours for keyed records) and reports each delivery.
  There is no second queue and no thread here: a record's report is stored by a C-level
  ``dict.__setitem__`` (no Python frame per record), and served by librdkafka's poll, which
  ``send`` calls now and then, and ``flush``, ``result`` and ``close`` call as they wait.
* **Any other cluster** (the embedded one, or a wrapper such as the fault injector): records
  are appended to a per-partition batch, kept as columns (:class:`~logmarshal._batching.
  RecordColumns`), which a background sender hands to ``Cluster.produce`` in one call when
  ``batch_size`` bytes have accumulated or the oldest record has waited ``linger_ms`` (in
  parts, in order, if the cluster refuses it as too large: :meth:`~logmarshal._batching.
  _Batch.send`, as Kafka's producer splits a batch refused with MESSAGE_TOO_LARGE).

``send`` returns a :class:`Delivery`: ``.result()`` gives the record's
:class:`RecordMetadata` (like a Future's), and no Future is built per record.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storage._records import check_new_timestamp

from ._batching import _Batch, as_bytes, checked_headers
from ._deliveries import (
    _UNTRACKED,
    Delivery,
    DeliveryCallback,
    RecordMetadata,
    _BatchDelivery,
    _call_back,
    _ClientDelivery,
    _ReportSink,
)
from ._seconds import seconds
from .cluster import Cluster
from .errors import ClosedError, NetworkError, RecordTooLarge
from .partitioners import Murmur2Partitioner, Partitioner, resolve_partitioner

try:
    from ._fastproduce import ErrorSink as _FastErrorSink
    from ._fastproduce import Report as _FastReport
    from ._fastproduce import Sender as _FastSender
except ImportError:  # built without a C compiler: _ClientDelivery, _ReportSink, Python send()
    _FastReport = _FastSender = _FastErrorSink = None

__all__ = ["Delivery", "Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

Serializer = Callable[[Any], bytes | None]
Header = tuple[str, bytes | None]

_RECORD_OVERHEAD = 20  # rough per-record framing, for deciding when a batch is full
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1  # batch_size's bound, Kafka's (an int) and librdkafka's
_MAX_LINGER_MS = 900_000  # librdkafka's bound of linger.ms (15 min)
#: sends between two librdkafka poll(0) calls: serves delivery reports while sending
#: without paying a poll (it releases and takes back the GIL) per record
_POLL_EVERY = 1000
#: how long send() waits for room when librdkafka's queue is full (Kafka's max.block.ms)
_MAX_BLOCK = 60.0
_monotonic = time.monotonic
_time_ns = time.time_ns


def wall_clock_ms() -> int:
    return _time_ns() // 1_000_000


def _check_settings(
    batch_size: Any,
    linger_ms: Any,
    metadata_max_age_ms: Any,
    durable: Any,
    clock: Any,
    client_config: Any,
    serializers: Mapping[str, Any],
) -> None:
    """A Producer's settings, refused at construction if of a wrong type or out of range
    (a bool is no number here; a nan or inf linger would never send a batch by time, or
    stop the sender thread)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int (bytes), got {batch_size!r}")
    if not 1 <= batch_size <= _INT32_MAX:
        raise ValueError(f"batch_size must be from 1 to {_INT32_MAX} bytes, got {batch_size}")
    for name, value, most in (
        ("linger_ms", linger_ms, _MAX_LINGER_MS),
        ("metadata_max_age_ms", metadata_max_age_ms, _INT64_MAX),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{name} must be a number (ms), got {value!r}")
        if not 0 <= value <= most:  # (nan and inf too)
            raise ValueError(f"{name} must be from 0 to {most} ms, got {value}")
    if type(durable) is not bool:
        raise TypeError(f"durable must be a bool, got {durable!r}")
    for name, function in (("clock", clock), *serializers.items()):
        if not callable(function) and (function is not None or name == "clock"):
            raise TypeError(f"{name} must be a callable, got {function!r}")
    if client_config is not None and not isinstance(client_config, Mapping):
        raise TypeError(f"client_config must be a mapping, got {client_config!r}")


_new_tuple = tuple.__new__


class Producer:
    """Sends records to a cluster's topics.

    ``partitioner`` is ``"murmur2"`` (Kafka's default for keys, round-robin without),
    ``"mmh3"``, ``"round_robin"`` or a callable ``(key, n_partitions) -> int``. ``durable``
    asks the cluster to have each batch on disk before it is acknowledged (acks=all over the
    network). ``clock`` gives record timestamps in epoch milliseconds when ``send`` is not
    given one. ``batch_size`` (bytes) and ``linger_ms`` bound a batch as Kafka's producer
    settings of those names do (``linger_ms`` up to librdkafka's 900,000). ``client_config``
    adds librdkafka settings to the network producer (ignored by other clusters). A setting
    of a wrong type (a bool for a number, say) or out of range (nan, inf) is refused here.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        partitioner: str | Partitioner = "murmur2",
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        batch_size: int = 1_000_000,
        linger_ms: float = 5.0,
        durable: bool = False,
        metadata_max_age_ms: float = 5000.0,
        clock: Callable[[], int] = wall_clock_ms,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        serializers = {"key_serializer": key_serializer, "value_serializer": value_serializer}
        if not isinstance(cluster, Cluster):
            raise TypeError(f"cluster must be a Cluster (logmarshal.connect()), got {cluster!r}")
        _check_settings(
            batch_size, linger_ms, metadata_max_age_ms, durable, clock, client_config, serializers
        )
        self._cluster = cluster
        self._partitioner = resolve_partitioner(partitioner)
        # Kafka's murmur2 on a key: librdkafka's murmur2_random hashes the same way, and the
        # partition it picks is trusted without a check (it is always in range)
        self._kafka_hash = type(self._partitioner) is Murmur2Partitioner
        self._hash_cache: dict[bytes, int] = getattr(self._partitioner, "_cache", {})
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._batch_size = batch_size
        self._linger = linger_ms / 1000.0
        self._durable = durable
        self._metadata_max_age_ns = int(metadata_max_age_ms * 1_000_000)
        self._clock = clock
        self._wall_clock = clock is wall_clock_ms
        #: topic -> (partitions, refresh after, read at), in time_ns: the wall clock, not the
        #: monotonic one, as the clock read for a record's timestamp serves this check too
        #: (a clock read costs ~80 ns on this machine, docs/performance.md "Producer"); a
        #: count is fresh while ``read at <= now <= refresh after``, so that a clock set back
        #: cannot keep it
        self._partition_counts: dict[str, tuple[int, int, int]] = {}
        self._closed = False
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # network: librdkafka's own producer, asked for on the cluster's type so that a
        # wrapper delegating attributes (a test's, the fault injector) keeps its produce()
        self._client: Any = None
        self._client_hashes = False
        self._plain_network = False
        # send()'s shortcut for records that need no serializer and no clock of ours, keyed
        # for Kafka's murmur2 (any cluster but the network one; until close)
        self._plain_local = (
            self._kafka_hash
            and key_serializer is None
            and value_serializer is None
            and self._wall_clock
        )
        self._unpolled = 0
        #: _fastproduce.Sender objects standing for send and send_nowait (network only)
        self._fast_senders: list[Any] = []
        self._lost_count = 0  # send_nowait() records that failed, since the last flush
        self._lost_error: BaseException | None = None
        #: threads serving this producer's delivery callbacks now (a flush there would wait
        #: for the callback it runs in)
        self._serving: set[int] = set()
        self._closed_in_callback = False  # (closed, not flushed: the next close() flushes)
        self._network = getattr(type(cluster), "client_producer", None) is not None
        if self._network:
            self._plain_local = False
            idempotent = durable or bool((client_config or {}).get("enable.idempotence"))
            settings = {
                "acks": "all" if idempotent else "1",  # (librdkafka's idempotence needs all)
                # durable records keep their order through retries and land once, as the
                # cluster's own durable writes (NetworkCluster._producer)
                "enable.idempotence": durable,
                "linger.ms": linger_ms,
                "batch.size": batch_size,
                "partitioner": "murmur2_random",
                **(client_config or {}),
            }
            # librdkafka hashes keyed records itself unless told to use another partitioner
            self._client_hashes = self._kafka_hash and settings["partitioner"] == "murmur2_random"
            # send()'s shortcut for records that need no serializer, partitioner or clock of
            # ours (until close)
            self._plain_network = (
                self._client_hashes
                and key_serializer is None
                and value_serializer is None
                and self._wall_clock
            )
            self._client = cluster.client_producer(settings)  # type: ignore[attr-defined]  # a NetworkCluster (checked above), not in the Cluster protocol
            self._produce = self._client.produce
            # send_nowait()'s records' one report callback, and where it keeps failures
            self._lost_reports: dict[Any, Any]
            if _FastErrorSink is not None:
                self._lost_reports = {}
                self._untracked_reports: Any = _FastErrorSink(self._lost_reports)
            else:
                self._lost_reports = self._untracked_reports = _ReportSink()
            # a record's Delivery (and report callback), built with no argument per record
            self._new_delivery: Callable[[], Any] = (
                functools.partial(_FastReport, self)
                if _FastReport is not None
                else type("_ClientDelivery", (_ClientDelivery,), {"__slots__": (), "_owner": self})
            )
            self._sender: threading.Thread | None = None
            self._install_fast_senders()
            return
        # any other cluster: per-partition batches, sent by a background thread
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: list[_Batch] = []
        self._in_flight = 0
        self._flushing = 0
        self._sender = threading.Thread(target=self._run, name="logmarshal-producer", daemon=True)
        self._sender.start()

    def _install_fast_senders(self) -> None:
        """Over the network, with the C extension: ``send`` and ``send_nowait`` of this
        Producer become ``_fastproduce.Sender`` objects, which do what the shortcuts at the
        top of those methods do without a Python frame (about a third of the Producer's own
        cost per record: docs/performance.md, "Producer") and hand any other call to the
        method itself. Not for a subclass that overrides either method."""
        if _FastSender is None or _FastReport is None or not self._plain_network:
            return
        cls = type(self)
        client = self._client
        for name, sink in (("send", None), ("send_nowait", self._untracked_reports)):
            method = getattr(cls, name)
            if method is not getattr(Producer, name):
                continue
            sender = _FastSender(
                self,
                client.produce,
                client.poll,
                self._partition_counts,
                method.__get__(self, cls),
                sink,
                _POLL_EVERY,
            )
            setattr(self, name, sender)
            self._fast_senders.append(sender)

    # -- public API -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> Delivery:
        """Queue one record; ``.result()`` of what it returns is its :class:`RecordMetadata`.

        ``on_delivery(metadata, error)`` is called once the outcome is known: from the
        sender thread, or over the network from librdkafka's poll (in a later ``send``,
        ``flush``, ``result`` or ``close``). Mistakes the caller can fix (unknown topic, bad
        partition, wrong types, a closed producer) raise here rather than in the result.
        """
        if (
            self._plain_network
            and type(key) is bytes
            and type(value) is bytes
            and partition is None
            and headers is None
            and timestamp is None
            and on_delivery is None
            and topic in self._partition_counts
        ):
            # the usual record over the network, every check below known to pass: a keyed
            # record of a topic seen before, librdkafka's murmur2 placing it, stamped by it
            # with the time now (0), a report of its own as its Delivery
            client = self._client
            delivery = self._new_delivery()
            try:
                # five arguments, not eight: each costs confluent-kafka's parser ~60
                # instructions (callgrind), and the rest are its defaults
                self._produce(topic, value, key, -1, delivery)
            except BufferError:
                self._produce_when_room((topic, value, key, -1, delivery))
            except Exception as exc:
                raise self._send_error(exc, topic, -1) from None
            if self._closed:
                self._sent_while_closing(client)
            self._unpolled += 1
            if self._unpolled >= _POLL_EVERY:
                self._unpolled = 0
                client.poll(0)
            return delivery
        if (
            self._plain_local
            and type(key) is bytes
            and type(value) is bytes
            and partition is None
            and headers is None
            and timestamp is None
            and on_delivery is None
        ):
            # the usual record for any other cluster: its key hashed before, its topic's
            # partition count fresh, room in its partition's open batch (which stays open):
            # appended here; anything else takes the general path below
            now_ns = _time_ns()
            cached = self._partition_counts.get(topic)
            hashed = self._hash_cache.get(key)
            if cached is not None and hashed is not None and cached[2] <= now_ns <= cached[1]:
                size = _RECORD_OVERHEAD + len(value) + len(key)
                self._lock.acquire()
                try:
                    batch = self._open.get((topic, hashed % cached[0]))
                    if (
                        batch is not None
                        and batch.size + size < self._batch_size
                        and batch.headers is None
                        and not self._closed
                    ):
                        index = len(batch.values)
                        batch.timestamps.append(now_ns // 1_000_000)
                        batch.keys.append(key)
                        batch.values.append(value)
                        batch.size += size
                        return _new_tuple(_BatchDelivery, (batch, index))
                finally:
                    self._lock.release()
        if self._closed:
            raise ClosedError("send() after the producer was closed")
        if on_delivery is not None and not callable(on_delivery):  # (it failed in a report)
            raise TypeError(f"on_delivery must be callable or None, got {on_delivery!r}")
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if type(value) is not bytes and value is not None:
            value = as_bytes(value, "value")
        if type(key) is not bytes and key is not None:
            key = as_bytes(key, "key")
        if headers is not None:
            headers = checked_headers(headers)
        if timestamp is not None:
            check_new_timestamp(timestamp)
        client = self._client
        now_ns = 0
        if partition is None and key is not None and self._kafka_hash:  # the usual record
            if self._client_hashes:
                # librdkafka hashes the key (murmur2, as ours) over the partitions it knows:
                # a count here only tells an unknown topic, raised at the first send to it
                if topic not in self._partition_counts:
                    self._partition_count(topic, refresh=True)
                target = -1
            else:
                cached = self._partition_counts.get(topic)
                now_ns = _time_ns()
                if cached is None or not cached[2] <= now_ns <= cached[1]:
                    count = self._partition_count(topic, refresh=True)
                else:
                    count = cached[0]
                # the partitioner's cache, read here: a call per record saved
                hashed = self._hash_cache.get(key)
                target = hashed % count if hashed is not None else self._partitioner(key, count)
        else:
            target = self._target(topic, key, partition)
        if client is not None:
            return self._send_to_client(
                client, topic, value, key, target, headers, timestamp, on_delivery
            )
        return self._append(topic, value, key, target, headers, timestamp, on_delivery, now_ns)

    def _send_to_client(
        self,
        client: Any,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        target: int,
        headers: tuple[tuple[str, bytes | None], ...] | None,
        timestamp: int | None,
        on_delivery: DeliveryCallback | None,
    ) -> Delivery:
        """:meth:`send`'s record, checked and placed, given to librdkafka's producer."""
        if on_delivery is None:
            delivery: Any = self._new_delivery()
            report = delivery
        elif on_delivery is _UNTRACKED:
            delivery = None
            report = self._untracked_reports
        else:
            delivery = self._new_delivery()
            report = self._reporter(delivery, on_delivery)
        if timestamp is None:
            # 0: librdkafka stamps the record with the time now, as our default clock would
            timestamp = 0 if self._wall_clock else self._clock()
        kafka_headers = list(headers) if headers else None
        # by position: topic, value, key, partition, on_delivery, callback (its alias),
        # timestamp, headers (keywords cost confluent-kafka a parse per record)
        try:
            self._produce(topic, value, key, target, report, None, timestamp, kafka_headers)
        except BufferError:
            self._produce_when_room(
                (topic, value, key, target, report, None, timestamp, kafka_headers)
            )
        except Exception as exc:
            raise self._send_error(exc, topic, target) from None
        if self._closed:
            self._sent_while_closing(client)
        self._unpolled += 1
        if self._unpolled >= _POLL_EVERY:
            self._unpolled = 0
            client.poll(0)
        return delivery

    def _append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        target: int,
        headers: tuple[tuple[str, bytes | None], ...] | None,
        timestamp: int | None,
        on_delivery: DeliveryCallback | None,
        now_ns: int,
    ) -> Delivery:
        """:meth:`send`'s record, checked and placed, appended to its partition's open batch
        (any cluster but the network's); ``now_ns``: the wall clock if :meth:`send` read it."""
        if timestamp is None:  # (the wall clock read above for the partition count, if any)
            timestamp = (now_ns or _time_ns()) // 1_000_000 if self._wall_clock else self._clock()
        size = _RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            size += sum(len(k) + len(v or b"") for k, v in headers)
        # acquire/release, not `with`: half the cost, and this runs for every record
        self._lock.acquire()
        try:
            if self._closed:
                raise ClosedError("send() after the producer was closed")
            batch = self._open.get((topic, target))
            if batch is None or (batch.size and batch.size + size > self._batch_size):
                batch = self._new_batch(topic, target, batch)
            index = len(batch.values)
            batch.timestamps.append(timestamp)
            batch.keys.append(key)
            batch.values.append(value)
            if headers:
                batch.add_headers(index, headers)
            elif batch.headers is not None:
                batch.headers.append(())
            if on_delivery is not None:
                if on_delivery is _UNTRACKED:
                    batch.untracked += 1
                else:
                    if batch.callbacks is None:
                        batch.callbacks = []
                    batch.callbacks.append((index, on_delivery))
            batch.size += size
            if batch.size >= self._batch_size:
                del self._open[(topic, target)]
                self._ready.append(batch)
                self._cond.notify_all()
        finally:
            self._lock.release()
        return _new_tuple(_BatchDelivery, (batch, index))

    def send_nowait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable[tuple[str, Any]] | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue one record whose outcome nobody will ask for: no per-record object (over
        the network its report goes to one shared sink; see docs/performance.md,
        "Producer"). A record that fails is not silent: the next :meth:`flush` (or
        :meth:`close`) raises the first such error. Mistakes the caller can fix raise here,
        as in :meth:`send`. (The usual record takes the shortcuts of :meth:`send`, written
        out again here: a call less per record.)
        """
        if (
            type(key) is bytes
            and type(value) is bytes
            and partition is None
            and headers is None
            and timestamp is None
        ):
            if self._plain_network:
                if topic in self._partition_counts:
                    client = self._client
                    sink = self._untracked_reports
                    try:
                        self._produce(topic, value, key, -1, sink)
                    except BufferError:
                        self._produce_when_room((topic, value, key, -1, sink))
                    except Exception as exc:
                        raise self._send_error(exc, topic, -1) from None
                    if self._closed:
                        self._sent_while_closing(client)
                    self._unpolled += 1
                    if self._unpolled >= _POLL_EVERY:
                        self._unpolled = 0
                        client.poll(0)
                    return
            elif self._plain_local:
                now_ns = _time_ns()
                cached = self._partition_counts.get(topic)
                hashed = self._hash_cache.get(key)
                if cached is not None and hashed is not None and cached[2] <= now_ns <= cached[1]:
                    size = _RECORD_OVERHEAD + len(value) + len(key)
                    self._lock.acquire()
                    try:
                        batch = self._open.get((topic, hashed % cached[0]))
                        if (
                            batch is not None
                            and batch.size + size < self._batch_size
                            and batch.headers is None
                            and not self._closed
                        ):
                            batch.timestamps.append(now_ns // 1_000_000)
                            batch.keys.append(key)
                            batch.values.append(value)
                            batch.size += size
                            batch.untracked += 1
                            return
                    finally:
                        self._lock.release()
        self.send(topic, value, key, partition, headers, timestamp, _UNTRACKED)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until the cluster has it (and, over the
        network, until every delivery report was served)."""
        if timeout is not None:
            seconds("timeout", timeout, at_least=0)  # (nan waited for ever)
        if threading.get_ident() in self._serving:
            raise RuntimeError(
                "flush() from a delivery callback would wait for the callback it runs in "
                "(refused, as Kafka's producer refuses it)"
            )
        if self._network:
            client = self._client
            if client is None:  # closed: everything was flushed then
                return
            left = client.flush() if timeout is None else client.flush(timeout)
            if left:
                raise TimeoutError(f"flush did not finish within {timeout} s ({left} records left)")
            self._raise_lost()
            return
        deadline = None if timeout is None else _monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._open or self._ready or self._in_flight:
                    remaining = None if deadline is None else deadline - _monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout} s")
                    self._cond.wait(remaining)
            finally:
                self._flushing -= 1
        self._raise_lost()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop. Sends from now on raise :class:`ClosedError` (also when close
        raises TimeoutError: what was sent before is still delivered, and reported). From a
        delivery callback it does not wait (as Kafka's producer): a close() outside it (a
        ``with`` block's) then does."""
        with self._cond:  # closed before the flush: a send racing it was taken, then lost
            if self._closed and not self._closed_in_callback:
                return
            self._closed = True
            self._plain_network = self._plain_local = False
            for sender in self._fast_senders:
                sender.close()  # later calls take the methods, which raise ClosedError
            self._cond.notify_all()
            if threading.get_ident() in self._serving:
                self._closed_in_callback = True
                return  # (its flush would wait for the callback this runs in)
            self._closed_in_callback = False
        self.flush(timeout)
        if self._sender is not None:
            self._sender.join(timeout)
        if self._client is not None:
            # every record is delivered: letting go of librdkafka's handle stops its threads
            # (a Delivery kept by the caller holds this Producer, not the handle)
            self._client = self._produce = None

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- both paths -------------------------------------------------------------------------

    def _partition_count(self, topic: str, refresh: bool = False) -> int:
        cached = self._partition_counts.get(topic)
        now = _time_ns()
        if refresh or cached is None or not cached[2] <= now <= cached[1]:
            count = self._cluster.partitions(topic)
            self._partition_counts[topic] = (count, now + self._metadata_max_age_ns, now)
            return count
        return cached[0]

    def _target(self, topic: str, key: bytes | None, partition: Any) -> int:
        """The partition of a record that is not a keyed one for murmur2: given, or chosen by
        the partitioner (checked unless it is ours)."""
        count = self._partition_count(topic)
        if partition is not None:
            return self._check_partition(topic, partition, count)
        target = self._partitioner(key, count)
        if not self._kafka_hash and (type(target) is not int or not 0 <= target < count):
            raise ValueError(
                f"the partitioner returned {target!r} for a topic of {count} partitions"
            )
        return target

    def _check_partition(self, topic: str, partition: Any, count: int) -> int:
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"partition must be an int, got {type(partition).__name__}")
        if partition >= count:  # the topic may have grown since we looked
            count = self._partition_count(topic, refresh=True)
        if not 0 <= partition < count:
            raise ValueError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        return partition

    # -- over the network: librdkafka ---------------------------------------------------------

    def _produce_when_room(self, args: tuple[Any, ...]) -> None:
        """librdkafka's queue is full: serve its reports until there is room (Kafka's
        producer blocks in send() the same way, up to max.block.ms)."""
        deadline = _monotonic() + _MAX_BLOCK
        while True:
            client = self._client
            if client is None:  # closed meanwhile (its flush made room, then let go)
                raise ClosedError("send() after the producer was closed")
            client.poll(0.05)
            try:
                self._produce(*args)
                return
            except BufferError:
                if _monotonic() > deadline:
                    raise NetworkError(
                        f"produce to {args[0]}: the client's queue stayed full for {_MAX_BLOCK} s"
                    ) from None
            except Exception as exc:
                raise self._send_error(exc, args[0], args[3]) from None

    def _send_error(self, exc: BaseException, topic: str, partition: int) -> BaseException:
        """What a send raises for librdkafka's ``produce`` raising ``exc``: ClosedError if
        close() let go of the client while the send ran (``_produce`` is None then)."""
        if self._produce is None:
            return ClosedError("send() after the producer was closed")
        return self._client_error(exc, topic, partition)

    def _sent_while_closing(self, client: Any) -> None:
        """A send that raced close(): its record reached librdkafka after the Producer was
        marked closed, maybe after close()'s flush, and nothing would serve it then (it
        was lost with the client's handle, its Delivery never done). Flush it here; the
        send waits for it, up to max.block.ms."""
        left = client.flush(_MAX_BLOCK)
        if left:
            log.warning("%d record(s) sent while the producer closed were not delivered", left)

    def _report_result(self, report: Any, timeout: float | None) -> RecordMetadata:
        """``result()`` of a record's Delivery over the network (``_fastproduce.Report`` or
        ``_ClientDelivery``): its report, served by librdkafka's poll if it has not come."""
        if timeout is not None:
            seconds("timeout", timeout, at_least=0)  # (nan waited for ever, as flush's did)
        if not report:
            self._await_delivery(report, timeout)
        error, message = report.error, report.message
        if error is not None:
            raise self._delivery_error(error, message)
        return RecordMetadata(
            message.topic(), message.partition(), message.offset(), message.timestamp()[1]
        )

    def _report_exception(self, report: Any, timeout: float | None) -> BaseException | None:
        if timeout is not None:
            seconds("timeout", timeout, at_least=0)  # (raised: no error of the record's)
        try:
            self._report_result(report, timeout)
        except TimeoutError:
            raise
        except BaseException as exc:
            return exc
        return None

    def _reporter(self, delivery: Any, callback: DeliveryCallback) -> Any:
        serving = self._serving

        def report(error: Any, message: Any) -> None:
            delivery(error, message)
            me = threading.get_ident()
            nested = me in serving  # (served by a poll inside another callback: it stays)
            serving.add(me)
            try:
                _call_back(callback, delivery)
            finally:
                if not nested:
                    serving.discard(me)

        return report

    def _await_delivery(self, delivery: Any, timeout: float | None) -> None:
        """Serve librdkafka's reports until ``delivery``'s has come (another thread's poll
        may serve it: hence short polls)."""
        deadline = None if timeout is None else _monotonic() + timeout
        while not delivery:
            client = self._client
            if client is None:  # closed after a flush that timed out: no report will come
                raise TimeoutError("the producer was closed before the record was delivered")
            remaining = 0.05 if deadline is None else min(0.05, deadline - _monotonic())
            if remaining <= 0:
                raise TimeoutError(f"the record was not delivered within {timeout} s")
            client.poll(remaining)

    def _client_error(self, exc: BaseException, topic: str, partition: int) -> BaseException:
        from .network import produce_error  # loaded already: the cluster is a NetworkCluster

        return produce_error(exc, topic, partition)

    def _delivery_error(self, error: Any, message: Any) -> BaseException:
        from .network import produce_error

        partition = message.partition()  # (None: failed before librdkafka chose one)
        exc = produce_error(error, message.topic(), -1 if partition is None else partition)
        if isinstance(exc, RecordTooLarge):  # (librdkafka fails a refused batch whole)
            exc.add_note(
                f"this record: key {len(message.key() or b'')} B, value "
                f"{len(message.value() or b'')} B. Every record of a batch the broker refuses "
                "as too large fails (librdkafka does not split it, as Kafka's Java producer "
                "does): keep records under the topic's max.message.bytes, or lower batch_size"
            )
        return exc

    def _lost(self, count: int, error: BaseException) -> None:
        with self._lock:
            self._lost_count += count
            if self._lost_error is None:
                self._lost_error = error

    def _raise_lost(self) -> None:
        """Raise (once) the first failure of send_nowait() records since the last flush."""
        if self._network:
            sink = self._lost_reports
            for error in [e for e in list(sink) if e is not None]:
                entry = sink.pop(error, None)  # [a message, how many failed so]
                if entry is not None:
                    self._lost(entry[1], self._delivery_error(error, entry[0]))
        with self._lock:
            count, error = self._lost_count, self._lost_error
            self._lost_count, self._lost_error = 0, None
        if error is not None:
            log.error("%d send_nowait() record(s) failed, the first: %s", count, error)
            raise error

    # -- any other cluster: batches for Cluster.produce ------------------------------------

    def _new_batch(self, topic: str, partition: int, full: _Batch | None) -> _Batch:
        """Under the lock: a new open batch, the previous one (if any) ready to send."""
        if full is not None:
            self._ready.append(full)
        batch = self._open[(topic, partition)] = _Batch(topic, partition)
        self._cond.notify_all()  # the sender learns of a new linger deadline
        return batch

    def _take_ready(self, now: float) -> list[_Batch]:
        ready, self._ready = self._ready, []
        if self._flushing or self._closed:
            lingered = list(self._open)
        else:
            lingered = [tp for tp, b in self._open.items() if now - b.created >= self._linger]
        for tp in lingered:
            ready.append(self._open.pop(tp))
        return ready

    def _next_wakeup(self, now: float) -> float | None:
        if not self._open:
            return None
        oldest = min(b.created for b in self._open.values())
        return max(0.0, oldest + self._linger - now)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    ready = self._take_ready(_monotonic())
                    if ready:
                        self._in_flight += len(ready)
                        break
                    if self._closed:
                        return
                    self._cond.wait(self._next_wakeup(_monotonic()))
            for batch in ready:
                try:
                    self._send_batch(batch)
                except Exception as exc:  # (a bug: the sender goes on, flush() is answered)
                    log.exception("produce to %s/%d: sending failed", batch.topic, batch.partition)
                    if batch.error is None:
                        batch.error = exc
                    batch.done.set()
                finally:
                    with self._cond:
                        self._in_flight -= 1
                        self._cond.notify_all()

    def _send_batch(self, batch: _Batch) -> None:
        batch.send(self._cluster.produce, self._durable)  # (split if refused as too large)
        if batch.error is not None:
            log.warning("produce to %s/%d failed: %s", batch.topic, batch.partition, batch.error)
        lost = batch.lost()
        if lost is not None:
            self._lost(*lost)
        # a Delivery the caller keeps holds its batch: let the payloads go (a result needs
        # the timestamps only)
        batch.keys, batch.values, batch.headers = [], [], None
        batch.done.set()
        callbacks, batch.callbacks = batch.callbacks, None
        if callbacks:
            me = threading.get_ident()
            self._serving.add(me)
            try:
                for index, callback in callbacks:
                    try:
                        _call_back(callback, _new_tuple(_BatchDelivery, (batch, index)))
                    except BaseException:  # (SystemExit: the sender is nobody's to stop)
                        log.exception("a delivery callback raised")
            finally:
                self._serving.discard(me)
