"""One handler per Kafka API, over a :class:`storage.DataDir`.

Handlers run on the broker's event loop. Reads (Fetch, ListOffsets, Metadata) are served
inline from the page cache; appends that must reach the disk (acks=all, or a topic with a
flush policy) and topic changes run in a worker thread so one fsync never stalls the other
connections. Every failure a client can cause becomes a Kafka error code in the response;
only a request that cannot be parsed at all closes its connection. The group APIs are
:mod:`.groups`', the topic admin APIs :mod:`.topic_admin`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka.protocol.admin.topics import DeleteRecordsResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata.metadata import MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdResponse

from storage._config import TopicConfig
from storage._datadir import DataDir, validate_topic_name
from storage._errors import (
    OffsetOutOfRange,
    PolicyViolation,
    StorageError,
    UnknownPartition,
    UnknownTopic,
)
from storage._log import PartitionLog
from storage._records import decode_batch

from .cluster_file import ClusterLayout
from .decoding import decode_body
from .errors import ErrorCode, ProtocolError, error_code_for
from .groups import GroupHandlers, GroupViewProvider
from .idempotence import Idempotence, ProducerIdAllocator, has_producer_id
from .metrics import BrokerMetrics, first_error
from .nulls import null_refusal, null_violation
from .pacing import OFF_LOOP_BYTES, PACE, Pace
from .topic_admin import TopicAdminHandlers
from .wire import (
    SUPPORTED,
    ApiKey,
    ApiSpec,
    FetchPartitionResult,
    RequestHeader,
    api_versions_response,
    encode_fetch_response,
    encode_response,
)

__all__ = ["Handlers"]

log = logging.getLogger(__name__)

#: Kafka's broker default of ``fetch.max.bytes``: the records one Fetch answer holds at most
#: (past it only the first batch of the first partition with records, as KIP-74 has it)
FETCH_MAX_BYTES = 57_671_680
#: the longest a Fetch waits for data, whatever it asks (an earlier, empty answer is always
#: allowed): no client waits longer for an answer (Java's request.timeout.ms is 30 s), and a
#: long-poll of a client that went away holds its request until then
FETCH_MAX_WAIT_S = 30.0

_LATEST = -1
_EARLIEST = -2
_MAX_TIMESTAMP = -3  # ListOffsets v7 on (KIP-734)
_SYNC_STALE_S = 1.0
_METADATA_ANSWERS = 64  # distinct Metadata questions whose answers are kept
_METADATA_CACHED_NAMES = 100  # a question naming more topics is answered, not kept

Response = bytes | list[bytes] | None


class _Waiters:
    """Fetch long-polls waiting for appends, keyed by (topic, partition); loop-thread only."""

    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], set[asyncio.Future[None]]] = {}

    def register(self, keys: Iterable[tuple[str, int]]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._by_partition.setdefault(key, set()).add(future)
        return future

    def unregister(self, keys: Iterable[tuple[str, int]], future: asyncio.Future[None]) -> None:
        for key in keys:
            waiting = self._by_partition.get(key)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._by_partition[key]

    def notify(self, key: tuple[str, int]) -> None:
        for future in self._by_partition.pop(key, ()):
            if not future.done():
                future.set_result(None)


def _compressed(records: bytes | memoryview | None) -> bool:
    """Does any batch of ``records`` say it is compressed (attributes' codec bits)? Reads
    the batch headers only; a batch that runs past the end is the append's to refuse."""
    if not records:
        return False
    view = memoryview(records)
    pos = 0
    while pos + 23 <= len(view):
        if view[pos + 22] & 0x07:  # (attributes: int16 at 21; the codec in its low byte)
            return True
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if length < 49:  # (no batch is shorter: the append refuses it)
            return False
        pos += 12 + length
    return False


def _each_partition_once(topics: Iterable[Any]) -> list[tuple[str, Any]]:
    """A Fetch's (topic, partition listing)s, each partition once where it first appears,
    as its last listing asks (Kafka keeps a Fetch's partitions in a map): one listed 200,000
    times was read, and long-polled, 200,000 times at each append."""
    unique: dict[tuple[str, int], tuple[str, Any]] = {}
    for t in topics:
        for p in t.partitions:
            unique[(t.topic, p.partition)] = (t.topic, p)
    return list(unique.values())


class Handlers:
    """The request handlers of one broker (one data directory, one place in the cluster)."""

    def __init__(
        self,
        data_dir: DataDir,
        layout: ClusterLayout,
        *,
        cluster_id: str = "logmarshal",
        executor: ThreadPoolExecutor | None = None,
        big_executor: ThreadPoolExecutor | None = None,
        peer_client: Any = None,
        group_view: GroupViewProvider | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.layout = layout
        self.cluster_id = cluster_id
        self._executor = executor or ThreadPoolExecutor(4, thread_name_prefix="broker-io")
        #: large requests' decoding and encoding (pacing.py), one at a time
        self._big = big_executor or ThreadPoolExecutor(1, thread_name_prefix="broker-big")
        self._waiters = _Waiters()
        #: Metadata answers by (version, topics asked): (what they depend on, the frames)
        self._metadata_answers: dict[Any, tuple[Any, _Frames]] = {}
        self._peer = peer_client
        # Producer ids are never reused (persisted blocks); sequences are checked per partition.
        self._producer_ids = ProducerIdAllocator(data_dir.path, layout.self_id)
        self._idempotence = Idempotence()
        self._last_sync = 0.0
        self._sync_started = 0.0
        self._sync_task: asyncio.Task[None] | None = None
        # Prometheus series (set by the server with --metrics-port); per request, the first
        # error code of its answer, keyed by the frame being answered.
        self.metrics: BrokerMetrics | None = None
        self._last_error: dict[int, int] = {}
        # Topic admin (topic_admin.py): changed on the controller only.
        self.topics = TopicAdminHandlers(data_dir, layout, self._executor, self._know_topics)
        self._table = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.CREATE_TOPICS: self.topics.create_topics,
            ApiKey.DELETE_TOPICS: self.topics.delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.DESCRIBE_CONFIGS: self.topics.describe_configs,
            ApiKey.CREATE_PARTITIONS: self.topics.create_partitions,
            ApiKey.ALTER_CONFIGS: self.topics.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.topics.incremental_alter_configs,
            ApiKey.DELETE_RECORDS: self.delete_records,
        }
        # Group APIs also see the client id (to explain a refused classic consumer).
        self.groups = GroupHandlers(layout, group_view, self._executor)
        self._group_table = {
            ApiKey.FIND_COORDINATOR: self.groups.find_coordinator,
            ApiKey.LIST_GROUPS: self.groups.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.groups.describe_groups,
            ApiKey.OFFSET_FETCH: self.groups.offset_fetch,
            ApiKey.JOIN_GROUP: self.groups.join_group,
            ApiKey.SYNC_GROUP: self.groups.sync_group,
            ApiKey.HEARTBEAT: self.groups.heartbeat,
            ApiKey.LEAVE_GROUP: self.groups.leave_group,
            ApiKey.OFFSET_COMMIT: self.groups.offset_commit,
        }

    # ------------------------------------------------------------------ dispatch

    async def handle(self, header: RequestHeader, frame: memoryview) -> Response:
        """Answer one request; ProtocolError (a request that does not parse) means: close the
        connection."""
        if self.metrics is None:
            return await self._handle(header, frame)
        started = time.perf_counter()
        response = await self._handle(header, frame)
        elapsed = time.perf_counter() - started
        if response is None:
            size = 0
        elif isinstance(response, list):
            size = sum(len(part) for part in response)
        else:
            size = len(response)
        self.metrics.observe(
            header.api_key, self._last_error.pop(id(frame), 0), elapsed, len(frame) + 4, size
        )
        return response

    async def _handle(self, header: RequestHeader, frame: memoryview) -> Response:
        key, version = header.api_key, header.api_version
        if key == ApiKey.API_VERSIONS:
            versions = SUPPORTED[key]
            ok = versions.min_version <= version <= versions.max_version
            error = ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_VERSION
            return api_versions_response(header.correlation_id, version, error)
        spec = SUPPORTED.get(key)
        if spec is None:
            raise ProtocolError(f"unknown api key {key}")
        if not spec.min_version <= version <= spec.max_version:
            raise ProtocolError(
                f"api key {key} version {version} is not supported "
                f"({spec.min_version}-{spec.max_version})"
            )
        body = frame[header.body_offset :]
        big = len(frame) > OFF_LOOP_BYTES
        if big:  # (pacing.py: on a thread of its own, one such request at a time)
            loop = asyncio.get_running_loop()
            request, null_field = await loop.run_in_executor(
                self._big, _decoded_and_checked, spec, body, version, key
            )
        else:
            request, null_field = _decoded_and_checked(spec, body, version, key)
        del body
        if null_field is not None:
            if self.metrics is not None:
                self._last_error[id(frame)] = ErrorCode.INVALID_REQUEST
            return self._refuse_null(header, spec, request, null_field)
        if key in self._group_table:
            result = await self._group_table[key](request, version, header.client_id)
        else:
            running = self._table[key](request, version)
            del request  # (a handler that waits, a Fetch's long-poll, lets go of it early)
            result = await running
        if self.metrics is not None:
            carried = getattr(result, "error", None)  # hand-encoded answers carry it
            self._last_error[id(frame)] = first_error(result) if carried is None else carried
        if result is None or isinstance(result, bytes | list):
            return _with_correlation(result, header.correlation_id)
        if big:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._big, encode_response, header.correlation_id, spec, version, result
            )
        return encode_response(header.correlation_id, spec, version, result)

    def _refuse_null(
        self, header: RequestHeader, spec: ApiSpec, request: Any, field: str
    ) -> Response:
        """INVALID_REQUEST for a null the schema forbids (storage.broker.nulls); nothing runs.

        A Produce with acks=0 gets no answer, as every acks=0 produce here (the records are
        not stored)."""
        key, version = header.api_key, header.api_version
        log.warning(
            "client %r: api key %d v%d: %s is null but not nullable; answered INVALID_REQUEST",
            header.client_id,
            key,
            version,
            field,
        )
        if key == ApiKey.PRODUCE and request.acks == 0:
            return None
        result = null_refusal(key, version, request, spec.response, field)
        if isinstance(result, list):
            return _with_correlation(result, header.correlation_id)
        return encode_response(header.correlation_id, spec, version, result)

    # ------------------------------------------------------------------ topic knowledge

    async def _know_topics(self, names: Iterable[str] | None) -> None:
        """On a non-controller broker, pull topic metadata from the controller when needed.

        ``names`` None means "all topics" (Metadata without a list): refreshed when older
        than a second. A named topic unknown here waits for a refresh that started after
        this request arrived (concurrent requests share one), so a topic just created on
        the controller is always found.
        """
        if self._peer is None or self.layout.is_controller:
            return
        arrived = time.monotonic()
        if names is None:
            if arrived - self._last_sync <= _SYNC_STALE_S:
                return
        else:
            known = set(self.data_dir.topics())
            if all(n in known for n in names):
                return
        try:
            while True:
                task = self._sync_task
                if task is None or (task.done() and self._sync_started < arrived):
                    self._sync_started = time.monotonic()
                    task = self._sync_task = asyncio.ensure_future(self._sync_from_controller())
                await asyncio.wait_for(asyncio.shield(task), 5.0)
                if self._sync_started >= arrived:
                    return
        except Exception as exc:
            log.warning("cannot refresh topics from the controller: %s", exc)

    async def _sync_from_controller(self) -> None:
        try:
            wanted = await self._peer.topics()
            local = {n: self.data_dir.describe(n).partitions for n in self.data_dir.topics()}
            # every topic's config, not only the missing ones': changes made on the
            # controller (AlterConfigs) reach this broker's logs too
            configs = await self._peer.topic_configs(list(wanted)) if wanted else {}
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._apply_topics, wanted, local, configs)
        finally:
            self._last_sync = time.monotonic()

    def _apply_topics(
        self, wanted: dict[str, int], local: dict[str, int], configs: dict[str, dict[str, str]]
    ) -> None:
        for name, count in wanted.items():
            try:
                if name not in local:
                    config = TopicConfig.from_dict(configs.get(name, {}))
                    self.data_dir.create_topic(name, count, config)
                    log.info("learned topic %s (%d partitions) from the controller", name, count)
                elif count > local[name]:
                    self.data_dir.add_partitions(name, count)
                if name in local and name in configs:
                    config = TopicConfig.from_dict(configs[name])
                    current = self.data_dir.describe(name).config
                    if config != current or config.explicit != current.explicit:
                        self.data_dir.alter_config(name, config)
                        log.info("mirrored a config change of topic %s from the controller", name)
            except StorageError as exc:
                log.warning("cannot mirror topic %s: %s", name, exc)
        for name in local:
            if name not in wanted:
                log.info("topic %s was deleted on the controller; deleting it here", name)
                try:
                    self.data_dir.delete_topic(name)
                except StorageError as exc:
                    log.warning("cannot delete topic %s: %s", name, exc)

    # ------------------------------------------------------------------ produce

    async def produce(self, request: Any, version: int) -> Any:
        acks = request.acks
        topics = request.topic_data
        await self._know_topics(t.name for t in topics)
        reject: ErrorCode | None = None
        if acks not in (0, 1, -1):
            reject = ErrorCode.INVALID_REQUIRED_ACKS
        elif request.transactional_id is not None:
            reject = ErrorCode.INVALID_REQUEST  # no transactions
        work: list[tuple[str, int, PartitionLog | None, Any, ErrorCode]] = []
        slow = acks == -1
        pace = Pace()
        for topic in topics:
            for part in topic.partition_data:
                await pace()
                plog, error = self._leader_log(topic.name, part.index)
                if reject is not None:
                    error = reject
                elif error == ErrorCode.NONE and not part.records:
                    error = ErrorCode.CORRUPT_MESSAGE
                if plog is not None and (
                    plog.config.flush_messages is not None or plog.config.flush_ms is not None
                ):
                    slow = True
                if (
                    plog is not None
                    and has_producer_id(part.records)
                    and self._idempotence.needs_load(plog)
                ):
                    slow = True  # the first idempotent append reads the partition's headers
                if plog is not None and part.records and plog.may_roll(len(part.records)):
                    slow = True  # sealing a full segment fsyncs it: not on the event loop
                if plog is not None and not slow and _compressed(part.records):
                    # checking its records decompresses them: 2 KB of zstd may be 60 MiB
                    # (a helper's attack held the loop 10 s with one 0.5 MB request)
                    slow = True
                work.append((topic.name, part.index, plog, part.records, error))
        if slow or len(work) > PACE:  # (many partitions: pacing.py)
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(
                self._executor, _append_all, work, acks == -1, self._idempotence
            )
        else:
            results = _append_all(work, False, self._idempotence)
        for (name, index, _, _, _), (code, _, _, _) in zip(work, results, strict=True):
            if code == ErrorCode.NONE:
                self._waiters.notify((name, index))
        if acks == 0:
            return None
        r = ProduceResponse[version]
        by_topic: dict[str, list[Any]] = {}
        for (name, index, _, _, _), (code, base, append_time, start) in zip(
            work, results, strict=True
        ):
            await pace()
            by_topic.setdefault(name, []).append(
                r.TopicProduceResponse.PartitionProduceResponse(
                    index=index,
                    error_code=code,
                    base_offset=base,
                    log_append_time_ms=append_time,
                    log_start_offset=start,
                    record_errors=[],
                    error_message=None if code == ErrorCode.NONE else code.name,
                )
            )
        return r(
            responses=[
                r.TopicProduceResponse(name=name, partition_responses=parts)
                for name, parts in by_topic.items()
            ],
            throttle_time_ms=0,
        )

    def _leader_log(self, topic: str, partition: int) -> tuple[PartitionLog | None, ErrorCode]:
        try:
            plog = self.data_dir.partition(topic, partition)
        except (UnknownTopic, UnknownPartition):
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except StorageError:
            return None, ErrorCode.KAFKA_STORAGE_ERROR
        if not self.layout.leads(topic, partition):
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return plog, ErrorCode.NONE

    # ------------------------------------------------------------------ fetch

    async def fetch(self, request: Any, version: int) -> list[bytes]:
        max_wait = min(max(request.max_wait_ms, 0) / 1000.0, FETCH_MAX_WAIT_S)
        min_bytes = max(request.min_bytes, 0)
        # Kafka's fetch.max.bytes bounds what one answer holds, whatever the request asks
        # (one Fetch listing a partition 200 times at 2 GiB each built a 1.6 GB answer)
        max_bytes = min(request.max_bytes if version >= 3 else 0x7FFFFFFF, FETCH_MAX_BYTES)
        wanted = _each_partition_once(request.topics)
        del request  # (200,000 listings held through the long-poll: 100 MB each)
        await self._know_topics({name for name, _ in wanted})
        deadline = time.monotonic() + max_wait
        while True:
            results, total, failed = await self._read_fetch_paced(wanted, max_bytes)
            remaining = deadline - time.monotonic()
            if failed or total >= min_bytes or remaining <= 0:
                break
            keys = [(name, p.partition) for name, p in wanted]
            future = self._waiters.register(keys)
            try:
                await asyncio.wait_for(future, remaining)
            except TimeoutError:
                pass
            finally:
                self._waiters.unregister(keys, future)
        by_topic: dict[str, list[FetchPartitionResult]] = {}
        for name, result in results:
            by_topic.setdefault(name, []).append(result)
        if len(results) > PACE:  # (pacing.py)
            encoded = await asyncio.get_running_loop().run_in_executor(
                self._big, encode_fetch_response, 0, version, list(by_topic.items())
            )
        else:
            encoded = encode_fetch_response(0, version, list(by_topic.items()))
        frames = _Frames(encoded)
        frames.error = next((r.error for _, r in results if r.error), 0)
        return frames

    async def _read_fetch_paced(
        self, wanted: list[tuple[str, Any]], max_bytes: int
    ) -> tuple[list[tuple[str, FetchPartitionResult]], int, bool]:
        """:meth:`_read_fetch`, in slices of ``PACE`` partitions with a turn of the event
        loop between them (pacing.py)."""
        if len(wanted) <= PACE:
            return self._read_fetch(wanted, max_bytes)
        results: list[tuple[str, FetchPartitionResult]] = []
        total, failed = 0, False
        for start in range(0, len(wanted), PACE):
            if start:
                await asyncio.sleep(0)
            more, total, failed_here = self._read_fetch(
                wanted[start : start + PACE], max_bytes, total
            )
            results += more
            failed |= failed_here
        return results, total, failed

    def _read_fetch(
        self, wanted: list[tuple[str, Any]], max_bytes: int, total: int = 0
    ) -> tuple[list[tuple[str, FetchPartitionResult]], int, bool]:
        """One pass over the partitions, after ``total`` bytes read already; the first
        batch is always served (KIP-74)."""
        results = []
        failed = False
        budget = max_bytes - total
        for name, p in wanted:
            plog, error = self._leader_log(name, p.partition)
            if plog is None:
                results.append((name, FetchPartitionResult(p.partition, error, -1, -1, b"")))
                failed = True
                continue
            limit = min(p.partition_max_bytes, budget) if total else p.partition_max_bytes
            try:
                data = plog.read(p.fetch_offset, max(limit, 0)).data if limit > 0 else b""
            except OffsetOutOfRange as exc:
                results.append(
                    (
                        name,
                        FetchPartitionResult(
                            p.partition,
                            ErrorCode.OFFSET_OUT_OF_RANGE,
                            exc.log_end_offset,
                            exc.log_start_offset,
                            b"",
                        ),
                    )
                )
                failed = True
                continue
            except StorageError as exc:
                log.warning("fetch %s/%d failed: %s", name, p.partition, exc)
                results.append(
                    (name, FetchPartitionResult(p.partition, error_code_for(exc), -1, -1, b""))
                )
                failed = True
                continue
            total += len(data)
            budget -= len(data)
            results.append(
                (
                    name,
                    FetchPartitionResult(
                        p.partition, 0, plog.log_end_offset, plog.log_start_offset, data
                    ),
                )
            )
        return results, total, failed

    # ------------------------------------------------------------------ delete records

    async def delete_records(self, request: Any, version: int) -> Any:
        """DeleteRecords (API key 21): move log start offsets to exactly the offsets
        Kafka's AdminClient ``delete_records`` asks for (kept on disk before the answer;
        whole segments below are removed), and answer each partition's new low watermark;
        ``-1`` means the high watermark, as in Kafka."""
        await self._know_topics(t.name for t in request.topics)
        r = DeleteRecordsResponse[version]
        loop = asyncio.get_running_loop()
        topics = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                error, low = await loop.run_in_executor(
                    self._executor, self._delete_before, topic.name, p.partition_index, p.offset
                )
                parts.append(
                    r.DeleteRecordsTopicResult.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=low, error_code=error
                    )
                )
            topics.append(r.DeleteRecordsTopicResult(name=topic.name, partitions=parts))
        return r(throttle_time_ms=0, topics=topics)

    def _delete_before(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        plog, error = self._leader_log(topic, partition)
        if plog is None:
            return error, -1
        if not plog.records_deletable:  # before the offset's checks, as Kafka's leader
            return ErrorCode.POLICY_VIOLATION, -1
        if offset == -1:
            offset = plog.log_end_offset
        if offset < 0:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        try:
            low = plog.delete_before(offset)
        except OffsetOutOfRange:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        except PolicyViolation as exc:  # the client's request, not the broker's failure
            log.info("delete-records %s/%d refused: %s", topic, partition, exc)
            return error_code_for(exc), -1
        except StorageError as exc:
            log.warning("delete-records %s/%d failed: %s", topic, partition, exc)
            return error_code_for(exc), -1
        log.info("delete-records %s/%d before %d: log starts at %d", topic, partition, offset, low)
        return ErrorCode.NONE, low

    # ------------------------------------------------------------------ list offsets

    async def list_offsets(self, request: Any, version: int) -> Any:
        await self._know_topics(t.name for t in request.topics)
        r = ListOffsetsResponse[version]
        topics = []
        pace = Pace()
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                await pace()
                error, ts, offset = self._offset_for(
                    topic.name, p.partition_index, p.timestamp, version
                )
                parts.append(
                    r.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=error,
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=0 if error == ErrorCode.NONE else -1,
                    )
                )
            topics.append(r.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        return r(throttle_time_ms=0, topics=topics)

    def _offset_for(
        self, topic: str, partition: int, timestamp: int, version: int
    ) -> tuple[int, int, int]:
        plog, error = self._leader_log(topic, partition)
        if plog is None:
            return error, -1, -1
        if timestamp == _LATEST:
            return ErrorCode.NONE, -1, plog.log_end_offset
        if timestamp == _EARLIEST:
            return ErrorCode.NONE, -1, plog.log_start_offset
        if timestamp == _MAX_TIMESTAMP and version >= 7:
            try:
                found = plog.max_timestamp_and_offset()
            except StorageError as exc:
                return error_code_for(exc), -1, -1
            return (ErrorCode.NONE, -1, -1) if found is None else (ErrorCode.NONE, *found)
        if timestamp < 0:
            return ErrorCode.INVALID_REQUEST, -1, -1
        try:
            offset = plog.offset_for_timestamp(timestamp)
            if offset is None:
                return ErrorCode.NONE, -1, -1
            return ErrorCode.NONE, _timestamp_at(plog, offset, timestamp), offset
        except StorageError as exc:
            return error_code_for(exc), -1, -1

    # ------------------------------------------------------------------ metadata

    async def metadata(self, request: Any, version: int) -> Any:
        requested = request.topics
        names: list[str] | None
        if requested is None or (version == 0 and not requested):
            names = None
        else:
            # each once (Kafka takes them as a set): a million copies of one name were
            # answered, cached and held, a million times
            names = list(dict.fromkeys(t.name for t in requested))
            del requested, request
        await self._know_topics(names)
        counts: list[tuple[str, int, tuple[int, ...]]] = []
        pace = Pace()
        for name in self.data_dir.topics() if names is None else names:
            await pace()
            try:
                count = self.data_dir.partition_count(name)
                counts.append((name, count, self.data_dir.unwritable(name)))
            except StorageError:
                counts.append((name, -1, ()))
        # Every member asks this once per HB (and librdkafka on its own): the same answer
        # while no topic, partition count or broker changed, so it is built and encoded once
        # (a 256-partition topic cost the broker ~5 ms each time: 15 % of its loop at 32
        # member processes)
        key = (version, None if names is None else tuple(names))
        signature = (tuple(counts), self.layout)
        cached = self._metadata_answers.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        if len(counts) > PACE:  # (pacing.py: built and encoded off the event loop)
            loop = asyncio.get_running_loop()
            frames = await loop.run_in_executor(self._big, self._metadata_frames, version, counts)
        else:
            frames = self._metadata_frames(version, counts)
        if names is not None and len(names) > _METADATA_CACHED_NAMES:
            return frames  # (a question that large is not a member's: not kept)
        if len(self._metadata_answers) >= _METADATA_ANSWERS:
            self._metadata_answers.clear()
        self._metadata_answers[key] = (signature, frames)
        return frames

    def _metadata_frames(
        self, version: int, counts: list[tuple[str, int, tuple[int, ...]]]
    ) -> _Frames:
        """The Metadata answer encoded, its correlation id apart (set per request)."""
        response = self._metadata_response(version, counts)
        frame = encode_response(0, SUPPORTED[ApiKey.METADATA], version, response)
        frames = _Frames([frame[:8], frame[8:]])
        frames.error = first_error(response)
        return frames

    def _metadata_response(
        self, version: int, counts: list[tuple[str, int, tuple[int, ...]]]
    ) -> Any:
        """The Metadata answer for these topics, partition counts (-1: unknown topic) and
        partitions whose appends stopped at a failed fsync: their replica is reported
        offline, as Kafka reports a replica on an offline log directory (reads go on)."""
        r = MetadataResponse[version]
        brokers = [
            r.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
            for b in self.layout.sorted_brokers
        ]
        topics = []
        for name, count, unwritable in counts:
            if count < 0:
                topics.append(
                    r.MetadataResponseTopic(
                        error_code=_unknown_topic_code(name),
                        name=name,
                        is_internal=False,
                        partitions=[],
                    )
                )
                continue
            parts = []
            for p in range(count):
                leader = self.layout.leader(name, p)
                parts.append(
                    r.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=leader,
                        leader_epoch=0,
                        replica_nodes=[leader],
                        isr_nodes=[leader],
                        offline_replicas=[leader] if p in unwritable else [],
                    )
                )
            topics.append(
                r.MetadataResponseTopic(
                    error_code=0, name=name, is_internal=False, partitions=parts
                )
            )
        return r(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.cluster_id,
            controller_id=self.layout.controller_id,
            topics=topics,
        )

    async def init_producer_id(self, request: Any, version: int) -> Any:
        r = InitProducerIdResponse[version]
        if request.transactional_id is not None:
            return r(
                throttle_time_ms=0,
                error_code=ErrorCode.INVALID_REQUEST,
                producer_id=-1,
                producer_epoch=-1,
            )
        loop = asyncio.get_running_loop()
        try:
            producer_id = await loop.run_in_executor(self._executor, self._producer_ids.next_id)
        except (OSError, StorageError) as exc:
            log.error("cannot reserve producer ids: %s", exc)
            return r(
                throttle_time_ms=0,
                error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                producer_id=-1,
                producer_epoch=-1,
            )
        return r(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)


class _Frames(list):
    """A hand-encoded answer (buffers) that remembers its first error code, for metrics."""

    error: int = 0


def _decoded_and_checked(
    spec: ApiSpec, body: memoryview, version: int, key: int
) -> tuple[Any, str | None]:
    """The request decoded, and the first null its schema forbids (None: none); pure, so
    a large request's runs off the event loop. ProtocolError: it does not decode."""
    try:
        request = decode_body(spec.request, body, version, produce=key == ApiKey.PRODUCE)
    except Exception as exc:  # any decoder failure is a malformed request
        raise ProtocolError(f"api key {key} v{version} does not decode: {exc!r}") from None
    return request, null_violation(request, version)


def _with_correlation(result: bytes | list[bytes] | None, correlation_id: int) -> Response:
    """Hand-built responses carry correlation id 0 in their frame head; set the real one."""
    if result is None:
        return None
    if isinstance(result, list):
        head = bytearray(result[0])
        head[4:8] = correlation_id.to_bytes(4, "big", signed=True)
        return [bytes(head), *result[1:]]
    return result


def _append_all(
    work: list[tuple[str, int, PartitionLog | None, Any, ErrorCode]],
    flush: bool,
    idempotence: Idempotence | None = None,
) -> list[tuple[ErrorCode, int, int, int]]:
    """Append each partition's batches; per partition: (error, base, append time, log start).

    Batches of idempotent producers go through ``idempotence``: a retry of a stored batch
    is answered with the original offsets (and not stored again).
    """
    out: list[tuple[ErrorCode, int, int, int]] = []
    for name, index, plog, records, error in work:
        if plog is None or error != ErrorCode.NONE:
            out.append((error, -1, -1, -1))
            continue
        try:
            if idempotence is not None and has_producer_id(records):
                info, original = idempotence.append(plog, records, flush=flush)
                if original is not None:
                    log.info(
                        "produce to %s/%d: retried batch (offsets %d-%d) not stored again",
                        name,
                        index,
                        original.first_offset,
                        original.last_offset,
                    )
                    out.append(
                        (
                            ErrorCode.NONE,
                            original.first_offset,
                            original.append_time,
                            plog.log_start_offset,
                        )
                    )
                    continue
                assert info is not None
            else:
                info = plog.append(records, flush=flush)
        except StorageError as exc:
            code = error_code_for(exc)
            log.info("produce to %s/%d refused (%s): %s", name, index, code.name, exc)
            out.append((code, -1, -1, -1))
            continue
        out.append((ErrorCode.NONE, info.base_offset, info.log_append_time, plog.log_start_offset))
    return out


def _timestamp_at(plog: PartitionLog, offset: int, fallback: int) -> int:
    """The timestamp of the record at ``offset`` (ListOffsets reports it)."""
    try:
        data = plog.read(offset, 1).data
        _, records = decode_batch(data)
    except Exception:
        return fallback
    for rec in records:
        if rec.offset >= offset:
            return rec.timestamp
    return fallback


def new_cluster_id() -> str:
    return uuid.uuid4().hex[:22]


def _unknown_topic_code(name: str) -> ErrorCode:
    """Metadata's code for a topic it does not have: INVALID_TOPIC_EXCEPTION for a name no
    topic can have (Kafka's getTopicMetadata; clients fail at once), else the retriable
    UNKNOWN_TOPIC_OR_PARTITION (it may be created)."""
    try:
        validate_topic_name(name)
    except StorageError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
