"""The network cluster: :class:`~logmarshal.cluster.Cluster` over Kafka brokers through
librdkafka, with the replay's stored batches read by its own client (:mod:`.fetch_client`).
The package's docstring (``logmarshal/network/__init__.py``) says how the clients are used."""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from storage import NewRecord, TopicConfig
from storage._datadir import validate_topic_name

from .._seconds import seconds
from ..cluster import (
    FETCH_MAX_BYTES,
    Columns,
    Message,
    PartitionOffsets,
    PastMarkers,
    ProduceResult,
    TopicDescription,
    check_max_bytes,
)
from ..errors import (
    ClosedError,
    InvalidConfig,
    NetworkError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from . import admin_requests
from .error_map import _leader_moving, _map_error, _raise_from, result_of
from .fetch_client import _batch_transport, _BatchReader, _SplitLeaders
from .partition_reader import _PartitionReader
from .produce import produce_records
from .readers import _Reader
from .reports import DeliveryReports
from .settings import (
    _config_to_send,
    client_producer_settings,
    consumer_settings,
    producer_settings,
)

log = logging.getLogger(__name__)

__all__ = ["LOGMARSHAL_CLUSTER_ID_PREFIX", "NetworkCluster", "broker_of"]

_MAX_READERS = 64
#: a durable producer failed for good is replaced at most this often after the first time
_REMAKE_AFTER = 5.0


#: logmarshal's broker names its cluster ``logmarshal-<crc>`` (``logmarshal`` bare in tests);
#: Apache Kafka's cluster ids are base64 UUIDs (22 characters, no such prefix)
LOGMARSHAL_CLUSTER_ID_PREFIX = "logmarshal"


def broker_of(cluster_id: str | None) -> str:
    """``"logmarshal"`` or ``"kafka"``: whose brokers gave ``cluster_id`` (a Metadata
    response's)."""
    return "logmarshal" if (cluster_id or "").startswith(LOGMARSHAL_CLUSTER_ID_PREFIX) else "kafka"


#: how long the member reader's check for a cut log (OffsetForLeaderEpoch) waits for the leader
_EPOCH_TIMEOUT = 5.0
#: how long every metadata request through one admin client may fail before it is replaced
_ADMIN_STALL_AFTER = 15.0


class NetworkCluster:
    """:class:`~logmarshal.cluster.Cluster` over Kafka brokers at ``bootstrap``.

    ``config`` adds librdkafka settings (e.g. ``security.protocol``) to every client.
    ``timeout`` bounds every administrative call.
    """

    #: librdkafka may cut one produce call in several batches, and a batch refused (a
    #: record over the topic's max.message.bytes) does not stop the later ones: a call that
    #: raised may have stored part of its records (its error's note says which)
    produce_is_atomic = False

    def __init__(
        self,
        bootstrap: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(bootstrap, str) or not bootstrap.strip():
            raise ValueError(f"bootstrap needs at least one HOST:PORT, got {bootstrap!r}")
        seconds("timeout", timeout, above=0)  # (nan: every call would time out at once)
        if config is not None and not (
            isinstance(config, Mapping) and all(isinstance(k, str) for k in config)
        ):
            raise TypeError(f"config must map librdkafka setting names to values, got {config!r}")
        if config is not None and {"bootstrap.servers", "metadata.broker.list"} & set(config):
            # (it replaced bootstrap without a word: another cluster, named as this one)
            raise ValueError("config names the brokers: give them as bootstrap, not in config")
        self.bootstrap = bootstrap
        self._timeout = timeout
        self._base: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "log.connection.close": False,
            "log_level": 4,
            **(config or {}),
        }
        self._closed = False
        self._lock = threading.Lock()
        # Fail early (and clearly) if nothing answers at bootstrap, through a client that
        # logs nothing: one that did printed librdkafka's FAIL line at each reconnection,
        # about 195 of them before the error (the CLI probes with a socket first)
        try:
            probe = AdminClient({**self._base, "log_level": 0})
        except KafkaException as exc:  # an unknown setting, a value librdkafka refuses
            raise ValueError(f"config: {exc.args[0].str() if exc.args else exc}") from None
        try:
            #: the cluster id the brokers gave at connection: whose brokers they are
            #: (logmarshal's name theirs ``logmarshal...``) known without asking again
            self.cluster_id: str | None = probe.list_topics(timeout=min(timeout, 10.0)).cluster_id
        except KafkaException as exc:
            raise NetworkError(f"cannot reach brokers at {bootstrap}: {exc}") from None
        finally:
            del probe  # (librdkafka handles are destroyed with their last reference)
        self._admin: AdminClient | None = AdminClient(dict(self._base))
        #: since when every metadata request failed (None: the last one was answered)
        self._metadata_failing_since: float | None = None
        #: admin clients replaced after metadata requests failed for _ADMIN_STALL_AFTER
        self.admin_renewals = 0
        self._producers: dict[bool, Producer] = {}
        self._reports: DeliveryReports | None = None  # the durable producer's
        #: when a failed durable producer was last replaced, and how many times
        self._durable_remade = -float("inf")
        self._durable_generation = 0
        self._readers: dict[tuple[str, int, bool], _PartitionReader] = {}
        # per (topic, partitions, the calling thread's ident): see _batch_reader
        self._batch_readers: dict[tuple[str, tuple[int, ...], int], _BatchReader] = {}
        self._batches_ok, self._batch_tls = _batch_transport(self._base)
        self._group = f"logmarshal-reader-{uuid.uuid4().hex}"
        self._offsets_consumer: Consumer | None = None
        #: offsets consumers replaced while another thread may be calling them: closed with
        #: the cluster (closed at once, that call raised RuntimeError("Consumer closed"))
        self._retired_offsets: list[Consumer] = []

    # ------------------------------------------------------------------ clients

    @property
    def client_config(self) -> dict[str, Any]:
        """The librdkafka settings this cluster's clients connect with (bootstrap, TLS,
        SASL, ...): for another client that must reach the cluster as they do (a copy)."""
        return dict(self._base)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the cluster at {self.bootstrap} is closed")

    def _admin_client(self) -> AdminClient:
        """The admin client, while the cluster is open (``close`` lets go of it)."""
        admin = self._admin
        if admin is None:
            raise ClosedError(f"the cluster at {self.bootstrap} is closed")
        return admin

    def _consumer_conf(self, *, committed: bool = True) -> dict[str, Any]:
        """librdkafka's settings for a reader (``committed``: read_committed, else
        read_uncommitted; :func:`.settings.consumer_settings` says which reads use which)."""
        return consumer_settings(self._base, self._group, committed=committed)

    def _producer(self, durable: bool) -> Producer:
        with self._lock:
            self._check_open()  # (one made after close would live on, never flushed)
            producer = self._producers.get(durable)
            if producer is None:
                producer = Producer(
                    producer_settings(self._base, durable=durable, timeout=self._timeout)
                )
                self._producers[durable] = producer
            return producer

    def _durable(self) -> DeliveryReports:
        """The durable producer's writes, its reports served by a thread of their own (and
        by nothing else: :mod:`.reports`). One librdkafka failed for good is replaced: at
        once the first time, then at most every ``_REMAKE_AFTER`` seconds (a fatal error
        that comes back, such as a missing permission, fails the writes meanwhile)."""
        while True:
            with self._lock:
                self._check_open()
                reports = self._reports
                if reports is not None and not reports.broken:
                    return reports
                if reports is not None:
                    now = time.monotonic()
                    if now < self._durable_remade + _REMAKE_AFTER:
                        raise NetworkError(
                            f"{self.bootstrap}: the durable producer failed for good again; "
                            f"another is made {_REMAKE_AFTER:g} s after the last"
                        )
                    # a new producer id; the old one's requests were all answered first
                    log.warning(
                        "%s: a new durable producer replaces the failed one", self.bootstrap
                    )
                    self._durable_remade = now
                    self._producers.pop(True, None)
                    self._reports = None
                    self._durable_generation += 1
                generation = self._durable_generation
            producer = self._producer(True)  # (this one's, made once under the lock)
            with self._lock:
                self._check_open()
                if self._durable_generation != generation:
                    continue  # (replaced meanwhile: that producer may be the failed one)
                if self._reports is None:
                    self._reports = DeliveryReports(
                        producer, f"logmarshal-reports:{self.bootstrap}", self._timeout
                    )
                return self._reports

    def client_producer(self, settings: Mapping[str, Any]) -> Producer:
        """A librdkafka producer of its own for :class:`logmarshal.Producer`, with the
        cluster's connection settings plus ``settings`` (acks, linger, batch size,
        partitioner). Its own, not :meth:`produce`'s: a user's flush then waits for the
        user's records only, and their batching settings are not the coordination writes'."""
        self._check_open()
        return Producer(client_producer_settings(self._base, settings))

    def open_reader(self, *, max_bytes: int = FETCH_MAX_BYTES) -> _Reader:
        """:class:`~logmarshal.cluster.ReaderSource`: one librdkafka consumer reading many
        partitions (a Consumer's claims), assigned and unassigned as they change."""
        self._check_open()
        check_max_bytes(max_bytes)
        return _Reader(
            self._consumer_conf(),
            self._timeout,
            max_bytes,
            self._bounds,
            log_ends=self._ends,
            epoch_end=self.epoch_end,
        )

    def _bounds(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int] | Exception]:
        """Earliest and latest offsets of many partitions: one ListOffsets request per
        end (AdminClient.list_offsets), each partition's error apart."""
        if self._closed:
            closed = ClosedError(f"the cluster at {self.bootstrap} is closed")
            return {key: closed for key in keys}
        return admin_requests.list_bounds(self._admin_client(), keys, self._timeout)

    def _ends(
        self, keys: Sequence[tuple[str, int]], timeout: float
    ) -> dict[tuple[str, int], int | Exception]:
        """Latest offsets of many partitions in one ListOffsets request, each partition's
        error apart (the member reader's stall check)."""
        if self._closed:
            closed = ClosedError(f"the cluster at {self.bootstrap} is closed")
            return {key: closed for key in keys}
        return admin_requests.list_ends(self._admin_client(), keys, timeout)

    def _offsets(self) -> Consumer:
        with self._lock:
            if self._offsets_consumer is None:
                self._offsets_consumer = Consumer(self._consumer_conf())
            return self._offsets_consumer

    def _reader(self, topic: str, partition: int, committed: bool = True) -> _PartitionReader:
        key = (topic, partition, committed)
        with self._lock:
            reader = self._readers.get(key)
            if reader is None:
                if len(self._readers) >= _MAX_READERS:
                    self._evict_idle_reader()
                conf = self._consumer_conf(committed=committed)
                ends = self._ends if committed else None
                reader = _PartitionReader(conf, topic, partition, log_ends=ends)
                self._readers[key] = reader
            return reader

    def _evict_idle_reader(self, readers: dict[Any, Any] | None = None) -> None:
        readers = self._readers if readers is None else readers
        for key, reader in sorted(readers.items(), key=lambda kv: kv[1].last_used):
            if _close_unused(reader):
                del readers[key]
                return

    def _batch_reader(self, topic: str, partitions: tuple[int, ...]) -> _BatchReader:
        """The calling thread's reader (connection) of these partitions. A thread's own: a
        replay's long poll holds its reader for ``fetch_wait``, so Marshalers sharing this
        cluster (several groups in one process) would each wait for the others' long polls
        before their own began. The readers of threads that ended are closed here."""
        key = (topic, partitions, threading.get_ident())
        with self._lock:
            reader = self._batch_readers.get(key)
            if reader is None:
                self._drop_orphans()
                if len(self._batch_readers) >= _MAX_READERS:
                    self._evict_idle_reader(self._batch_readers)
                if len(partitions) == 1:
                    leader = functools.partial(self._leader, topic, partitions[0])
                else:
                    leader = functools.partial(self._common_leader, topic, partitions)
                reader = _BatchReader(topic, partitions, leader, self._timeout, self._batch_tls)
                self._batch_readers[key] = reader
            return reader

    def cancel_fetches(self, threads: Iterable[int]) -> None:
        """:class:`~logmarshal.cluster.FetchCanceller`: the fetch each of ``threads`` is in
        on this cluster's replay connections (its own: :meth:`_batch_reader`) raises
        ClosedError now, so a stopping Marshaler's close does not wait out ``fetch_wait``."""
        wanted = set(threads)
        with self._lock:
            readers = [r for key, r in self._batch_readers.items() if key[2] in wanted]
        for reader in readers:
            reader.cancel()

    def _drop_orphans(self) -> None:
        """Close the batch readers of threads that ended (a closed Marshaler's replay), with
        ``self._lock`` held: no call can be using one (but :meth:`close` may be closing it)."""
        alive = {t.ident for t in threading.enumerate()}
        for key in [k for k in self._batch_readers if k[2] not in alive]:
            if _close_unused(self._batch_readers[key]):
                del self._batch_readers[key]

    def _common_leader(self, topic: str, partitions: tuple[int, ...]) -> tuple[str, int]:
        """Host and port of the one leader of all ``partitions`` (fresh metadata);
        _SplitLeaders if they have more than one."""
        return self._metadata(admin_requests.common_leader, topic, partitions, self._timeout)

    def _leader(self, topic: str, partition: int) -> tuple[str, int]:
        """Host and port of the partition's leader, from fresh metadata."""
        return self._metadata(admin_requests.leader, topic, partition, self._timeout)

    def _metadata(self, ask: Callable[..., Any], *args: Any) -> Any:
        """``ask(admin, *args)``, a metadata request. An admin client whose every metadata
        request failed with a NetworkError for ``_ADMIN_STALL_AFTER`` is replaced: after
        Kafka nodes restarted, one member's admin client answered "Broker transport
        failure" for 147 s while the other clients of the same process reached the brokers,
        and the member's replay, which asks it for leaders, stood still (CI, 2026-12-06)."""
        admin = self._admin_client()
        try:
            found = ask(admin, *args)
        except NetworkError as exc:
            self._metadata_failed(admin, exc)
            raise
        self._metadata_failing_since = None
        return found

    def _metadata_failed(self, admin: AdminClient, exc: NetworkError) -> None:
        now = time.monotonic()
        with self._lock:
            if self._admin is not admin or self._closed:
                return  # replaced meanwhile, or closed
            since = self._metadata_failing_since
            if since is None:
                self._metadata_failing_since = now
                return
            if now - since < _ADMIN_STALL_AFTER:
                return
            log.warning(
                "%s: every metadata request failed for %.0f s (%s); replacing the admin client",
                self.bootstrap,
                now - since,
                exc,
            )
            # (a call in flight on the old one keeps it alive until it returns)
            self._admin = AdminClient(dict(self._base))
            self._metadata_failing_since = None
            self.admin_renewals += 1

    # ------------------------------------------------------------------ topics

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: TopicConfig | Mapping[str, str | int] | None = None,
    ) -> TopicDescription:
        self._check_open()
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise InvalidConfig(f"partition count must be a positive integer, got {partitions!r}")
        settings = _config_to_send(config)
        topic = NewTopic(name, partitions, replication_factor=-1, config=settings)
        future = self._admin_client().create_topics([topic], request_timeout=self._timeout)[name]
        exists: TopicExists | None = None
        try:
            result_of(future, self._timeout, name)
        except TopicExists as error:
            # Another client created it a moment ago: wait until its metadata shows, so the
            # caller that goes on to describe it (as ensure_coordination_topic does) finds it.
            exists = error
        deadline = time.monotonic() + self._timeout
        while True:  # Kafka propagates new topics' metadata asynchronously
            try:
                description = self.describe_topic(name)
            except (UnknownTopic, UnknownPartition):
                # the topic, or one of its partitions, not known yet to the broker asked
                # (a 3-node Kafka: a member that won the race to create __marshal died of
                # UnknownPartition here, in CI on 2026-11-30)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            if exists is not None:
                raise exists
            return description

    def delete_topic(self, name: str) -> None:
        self._check_open()
        future = self._admin_client().delete_topics([name], request_timeout=self._timeout)[name]
        result_of(future, self._timeout, name)
        with self._lock:
            doomed = [k for k in self._readers if k[0] == name]
            readers = [self._readers.pop(k) for k in doomed]
        for reader in readers:
            with reader.lock:
                reader.close()

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """:class:`~logmarshal.cluster.RecordDeleter` through Kafka's DeleteRecords
        (``AdminClient.delete_records``), so it works on Apache Kafka too; returns each
        partition's low watermark as the broker reports it."""
        self._check_open()
        return admin_requests.delete_records(self._admin_client(), topic, before, self._timeout)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        self._check_open()
        current = self.partitions(name)
        if isinstance(total, bool) or not isinstance(total, int) or total <= current:
            raise InvalidConfig(
                f"topic {name!r} has {current} partitions; the count can only grow, got {total}"
            )
        future = self._admin_client().create_partitions(
            [NewPartitions(name, total)], request_timeout=self._timeout
        )[name]
        result_of(future, self._timeout, name)
        deadline = time.monotonic() + self._timeout
        while self.partitions(name) < total and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.describe_topic(name)

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None]
    ) -> TopicDescription:
        """IncrementalAlterConfigs: SET each value, DELETE (reset) each None."""
        self._check_open()
        TopicConfig().with_changes(changes)  # refuse unknown names and bad values here too
        admin_requests.alter_configs(self._admin_client(), name, changes, self._timeout)
        return self.describe_topic(name)

    def topics(self) -> list[str]:
        self._check_open()
        return admin_requests.topic_names(self._admin_client(), self._timeout)

    def partitions(self, topic: str, timeout: float | None = None) -> int:
        self._check_open()
        bound = self._timeout if timeout is None else min(timeout, self._timeout)
        return self._metadata(admin_requests.partition_count, topic, bound)

    def topic_config(self, name: str) -> dict[str, str]:
        """The topic's configs logmarshal knows, by Kafka name (defaults included)."""
        self._check_open()
        return admin_requests.known_configs(self._admin_client(), name, self._timeout)

    def describe_topic(self, name: str) -> TopicDescription:
        self._check_open()
        count = self.partitions(name)
        config = self.topic_config(name)
        offsets = []
        for p in range(count):
            low, high = self._watermarks(name, p)
            offsets.append(PartitionOffsets(p, low, high))
        return TopicDescription(name, count, config, tuple(offsets))

    # ------------------------------------------------------------------ records

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
        if durable:
            return self._durable().produce(topic, partition, records)
        return produce_records(self._producer(False), topic, partition, records, self._timeout)

    def produce_async(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        done: Callable[[dict[int, ProduceResult | Exception]], None],
    ) -> None:
        """:class:`~logmarshal.cluster.AsyncProducer`: durable writes of each partition's
        records that do not wait; ``done`` hears of the partitions answered together (a
        partition whose broker is away holds up only its own answer)."""
        self._check_open()
        self._durable().submit(topic, batches, done)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> list[Message]:
        check_max_bytes(max_bytes)
        return self._read(
            topic, partition, offset, lambda reader: reader.fetch(offset, max_bytes, max_wait)
        )

    def fetch_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> Columns | PastMarkers:
        """:class:`~logmarshal.cluster.ColumnFetcher`: what :meth:`fetch` returns, as columns,
        except that records of aborted transactions are included (read_uncommitted): this is
        the coordination log's read where stored batches cannot be fetched, and it must
        hand out what :meth:`fetch_batches` does (docs/broker.md, "Apache Kafka"), a trailing
        transaction marker included (:class:`PastMarkers`)."""
        check_max_bytes(max_bytes)
        return self._read(
            topic,
            partition,
            offset,
            lambda reader: reader.fetch_columns(offset, max_bytes, max_wait),
            committed=False,
        )

    def fetch_batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> bytes | PastMarkers | None:
        """:class:`~logmarshal.cluster.BatchFetcher`: the stored batches from the one holding
        ``offset`` on, as the leader serves them (see :class:`_BatchReader` for why replay
        reads these rather than librdkafka's records). None when the connection needs what
        only librdkafka speaks here (SASL, or TLS settings beyond CA, client certificate and
        hostname check): the caller then reads records, and a damaged batch stalls it."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offsets are never negative, got {offset}")
        check_max_bytes(max_bytes)
        if not self._batches_ok:
            return None
        reader = self._batch_reader(topic, (partition,))
        with reader.lock:
            return reader.fetch(offset, max_bytes, max_wait)

    def fetch_batches_many(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> dict[int, bytes | PastMarkers | Exception] | None:
        """:class:`~logmarshal.cluster.MultiBatchFetcher`: :meth:`fetch_batches` of several
        partitions of ``topic`` in one Fetch request on one connection, answered as soon as
        any of them has records (or after ``max_wait``). Per partition, its stored batches
        or the error its leader answered; a failure of the connection is raised for all.
        None when one request cannot carry them: the partitions have different leaders, or
        the connection needs what only librdkafka speaks here (then fetch each alone)."""
        self._check_open()
        if any(offset < 0 for offset in offsets.values()):
            raise ValueError(f"offsets are never negative, got {dict(offsets)}")
        check_max_bytes(max_bytes)
        if not self._batches_ok or not offsets:
            return None
        reader = self._batch_reader(topic, tuple(offsets))
        with reader.lock:
            try:
                return reader.fetch_many(offsets, max_bytes, max_wait)
            except _SplitLeaders:
                return None

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """:class:`~logmarshal.cluster.BoundsAsker`: ``(earliest, latest)`` of the partition
        as its leader knows them now, asked on the replay's own connection to it (fresh
        metadata after a failure). The replay asks this after a leader change, when
        librdkafka's cached metadata may still name a dead leader for many seconds."""
        self._check_open()
        if not self._batches_ok:
            return self._watermarks(topic, partition)
        reader = self._batch_reader(topic, (partition,))
        with reader.lock:
            return reader.bounds(partition)

    def epoch_end(self, topic: str, partition: int, epoch: int) -> int | None:
        """Where the partition's log of leader epoch ``epoch`` ends on its leader now
        (KIP-320's OffsetForLeaderEpoch): the member reader's check after a leader change.
        None where it cannot be known here: on logmarshal's broker (one copy of each
        partition: no election cuts a log), over a connection only librdkafka speaks.
        NetworkError when the node asked cannot tell (not the leader, an epoch past its own,
        no answer): asked again with fresh metadata."""
        self._check_open()
        if not self._batches_ok or broker_of(self.cluster_id) == "logmarshal":
            return None
        # a connection of its own, to the leader fresh metadata names, with a short timeout:
        # asked after a leader change, when a replay connection may still lead to the old
        # leader, frozen, and wait out the cluster's whole timeout (30 s) per partition
        timeout = min(self._timeout, _EPOCH_TIMEOUT)  # (the metadata asked with it too)
        leader = functools.partial(self._metadata, admin_requests.leader, topic, partition, timeout)
        reader = _BatchReader(topic, (partition,), leader, timeout, self._batch_tls)
        try:
            return reader.epoch_end(partition, epoch)
        finally:
            reader.close()

    def epoch_ends(
        self, topic: str, epochs: Mapping[int, int]
    ) -> dict[int, int | Exception | None]:
        """:meth:`epoch_end` of many partitions of ``topic``: one metadata request, and one
        OffsetForLeaderEpoch request per leader (a member starting 256 partitions asked
        each on a connection of its own, one after another: 2.9 s before its last one
        started). Each partition's error apart."""
        self._check_open()
        if not self._batches_ok or broker_of(self.cluster_id) == "logmarshal":
            return dict.fromkeys(epochs)
        timeout = min(self._timeout, _EPOCH_TIMEOUT)
        try:
            found = self._metadata(admin_requests.leaders, topic, sorted(epochs), timeout)
        except Exception as exc:  # (each partition's answer: the error; counted above)
            return dict.fromkeys(epochs, exc)
        out: dict[int, int | Exception | None] = {}
        by_leader: dict[tuple[str, int], dict[int, int]] = {}
        for partition, epoch in epochs.items():
            leader = found[partition]
            if isinstance(leader, Exception):
                out[partition] = leader
            else:
                by_leader.setdefault(leader, {})[partition] = epoch
        for address, asked in by_leader.items():
            reader = _BatchReader(
                topic, tuple(sorted(asked)), functools.partial(_same, address), timeout,
                self._batch_tls,
            )  # fmt: skip
            try:
                out.update(reader.epoch_ends(asked))
            finally:
                reader.close()
        return out

    def _read(
        self, topic: str, partition: int, offset: int, read: Any, *, committed: bool = True
    ) -> Any:
        """Run ``read(reader)`` on the partition's reader, its errors mapped as the embedded
        cluster raises them (one place for what fetch and fetch_columns share)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offsets are never negative, got {offset}")
        reader = self._reader(topic, partition, committed)
        with reader.lock:
            try:
                return read(reader)
            except KafkaException as exc:
                raise _raise_from(exc, topic, partition) from None

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        stale_metadata_retried = False
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return self._offsets().get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout, cached=False
                )
            except KafkaException as exc:
                kafka_error = exc.args[0] if exc.args else None
                error = _raise_from(exc, topic, partition)
            if _leader_moving(kafka_error) and time.monotonic() < deadline:
                # Apache Kafka: a new topic's partitions elect leaders after CreateTopics
                # returns, and a leader moves on a node's failure; both pass.
                time.sleep(0.1)
                continue
            if stale_metadata_retried or not isinstance(error, UnknownPartition | UnknownTopic):
                break
            if partition >= self.partitions(topic):
                break
            # The partition exists (it was just added): this consumer's metadata is stale.
            stale_metadata_retried = True
            self._reset_offsets_consumer()
        raise error

    def _reset_offsets_consumer(self) -> None:
        with self._lock:
            old, self._offsets_consumer = self._offsets_consumer, None
            if old is not None:
                self._retired_offsets.append(old)

    def earliest_offset(self, topic: str, partition: int) -> int:
        self._check_open()
        return self._watermarks(topic, partition)[0]

    def latest_offset(self, topic: str, partition: int) -> int:
        self._check_open()
        return self._watermarks(topic, partition)[1]

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        self._check_open()
        try:
            (found,) = self._offsets().offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=self._timeout
            )
        except KafkaException as exc:
            raise _raise_from(exc, topic, partition) from None
        if found.error is not None:
            raise _map_error(found.error, topic, partition)
        return None if found.offset < 0 else found.offset

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            readers: list[_PartitionReader | _BatchReader] = [
                *self._readers.values(),
                *self._batch_readers.values(),
            ]
            self._readers.clear()
            self._batch_readers.clear()
            producers = list(self._producers.values())
            self._producers.clear()  # else they live (and reconnect) as long as this object
            offsets, self._offsets_consumer = self._offsets_consumer, None
            retired, self._retired_offsets = self._retired_offsets, []
            reports, self._reports = self._reports, None
        if reports is not None:
            reports.close(self._timeout)
        for producer in producers:
            try:
                producer.flush(self._timeout)
            except KafkaException:  # (a producer failed for good: nothing more of it to wait for)
                log.debug("%s: flushing a failed producer at close", self.bootstrap, exc_info=True)
        for reader in readers:
            with reader.lock:
                reader.close()
        for consumer in (*retired, *([] if offsets is None else [offsets])):
            consumer.close()
        self._admin = None  # librdkafka handles are destroyed with their last reference
        producers.clear()

    def __enter__(self) -> NetworkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NetworkCluster({self.bootstrap!r})"


def _close_unused(reader: _PartitionReader | _BatchReader) -> bool:
    """Close ``reader`` unless a call holds it now; whether it was closed."""
    if not reader.lock.acquire(blocking=False):
        return False
    try:
        reader.close()
    finally:
        reader.lock.release()
    return True


def _same(address: tuple[str, int]) -> tuple[str, int]:
    """A leader's address as known (a batch of asks made from one metadata answer)."""
    return address
