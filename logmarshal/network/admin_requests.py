"""The network connection's questions to the cluster through librdkafka's AdminClient
(metadata, configs, offsets, record deletion), each answer's errors raised or returned as
the embedded cluster's exceptions. :class:`NetworkCluster` adds what it keeps across calls
(open checks, waiting for metadata to propagate, its readers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    BrokerMetadata,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)

from ..errors import LogmarshalError, NetworkError, UnknownPartition, UnknownTopic
from .error_map import _map_error, _raise_from, result_of
from .fetch_client import _SplitLeaders
from .settings import _INTERNAL_TOPICS, _KNOWN_CONFIGS


def topic_names(admin: AdminClient, timeout: float) -> list[str]:
    """The topics' names, sorted, without Kafka's internal ones."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _raise_from(exc) from None
    return sorted(n for n in metadata.topics if n not in _INTERNAL_TOPICS)


def partition_count(admin: AdminClient, topic: str, timeout: float) -> int:
    """How many partitions ``topic`` has (UnknownTopic while it has no metadata yet)."""
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _raise_from(exc, topic) from None
    info = metadata.topics.get(topic)
    error = None if info is None else info.error
    if info is None or error is not None:
        if error is not None and error.code() not in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
            KafkaError.LEADER_NOT_AVAILABLE,
        ):
            raise _map_error(error, topic)
        raise UnknownTopic(topic)
    if not info.partitions:
        raise UnknownTopic(topic)
    return len(info.partitions)


def known_configs(admin: AdminClient, name: str, timeout: float) -> dict[str, str]:
    """The topic's configs logmarshal knows, by Kafka name (defaults included)."""
    resource = ConfigResource("topic", name)
    future = admin.describe_configs([resource], request_timeout=timeout)[resource]
    entries = result_of(future, timeout, name)
    return {
        key: entry.value
        for key, entry in entries.items()
        if key in _KNOWN_CONFIGS and entry.value is not None
    }


def alter_configs(
    admin: AdminClient, name: str, changes: Mapping[str, str | int | None], timeout: float
) -> None:
    """IncrementalAlterConfigs: SET each value, DELETE (reset) each None."""
    entries = [
        ConfigEntry(
            key,
            None if value is None else str(value),
            incremental_operation=(
                AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
            ),
        )
        for key, value in changes.items()
    ]
    resource = ConfigResource("topic", name, incremental_configs=entries)
    future = admin.incremental_alter_configs([resource], request_timeout=timeout)[resource]
    result_of(future, timeout, name)


def delete_records(
    admin: AdminClient, topic: str, before: Mapping[int, int], timeout: float
) -> dict[int, int]:
    """Kafka's DeleteRecords (so it works on Apache Kafka too): each partition's low
    watermark as the broker reports it."""
    wanted = [TopicPartition(topic, p, o) for p, o in before.items()]
    if not wanted:
        return {}
    futures = admin.delete_records(wanted, request_timeout=timeout)
    out = {}
    for tp, future in futures.items():
        out[tp.partition] = result_of(future, timeout, topic, tp.partition).low_watermark
    return out


def _list_offsets(
    admin: AdminClient,
    keys: Sequence[tuple[str, int]],
    spec: OffsetSpec,
    timeout: float,
    isolation: IsolationLevel | None = None,
) -> dict[tuple[str, int], int | Exception] | Exception:
    """One ListOffsets request (AdminClient.list_offsets) for ``spec`` of every partition
    of ``keys``, each partition's error apart; the request's own failure as one error."""
    wanted = {TopicPartition(t, p): spec for t, p in keys}
    isolated = {} if isolation is None else {"isolation_level": isolation}
    try:
        futures = admin.list_offsets(wanted, request_timeout=timeout, **isolated)
    except KafkaException as exc:
        return _raise_from(exc)
    out: dict[tuple[str, int], int | Exception] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = result_of(
                future, timeout, tp.topic, tp.partition
            ).offset
        except LogmarshalError as exc:
            out[(tp.topic, tp.partition)] = exc
    return out


def list_bounds(
    admin: AdminClient, keys: Sequence[tuple[str, int]], timeout: float
) -> dict[tuple[str, int], tuple[int, int] | Exception]:
    """Earliest and latest offsets of many partitions: one ListOffsets request per
    end, each partition's error apart."""
    out: dict[tuple[str, int], Any] = {key: [0, 0] for key in keys}
    for i, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
        asked = [key for key, v in out.items() if isinstance(v, list)]
        if not asked:
            break
        found = _list_offsets(admin, asked, spec, timeout)
        if isinstance(found, Exception):
            return {key: found for key in keys}
        for key, offset in found.items():
            if isinstance(offset, Exception):
                out[key] = offset
            else:
                out[key][i] = offset
    return {key: tuple(v) if isinstance(v, list) else v for key, v in out.items()}


def list_ends(
    admin: AdminClient, keys: Sequence[tuple[str, int]], timeout: float
) -> dict[tuple[str, int], int | Exception]:
    """Last stable offsets of many partitions (read_committed, as the member reader
    reads): one ListOffsets request (its stall check, which needs no log start), each
    partition's error apart."""
    found = _list_offsets(admin, keys, OffsetSpec.latest(), timeout, IsolationLevel.READ_COMMITTED)
    if isinstance(found, Exception):
        return {key: found for key in keys}
    return found


def _topic_metadata(
    admin: AdminClient, topic: str, timeout: float, partition: int = -1
) -> tuple[Any, Any]:
    """Fresh metadata of ``topic``: the whole answer and the topic's; raises as the
    embedded cluster does (UnknownTopic where it has none)."""
    try:
        metadata = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise _raise_from(exc, topic, partition) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise UnknownTopic(topic)
    return metadata, found


def leader(admin: AdminClient, topic: str, partition: int, timeout: float) -> tuple[str, int]:
    """Host and port of the partition's leader, from fresh metadata."""
    metadata, found = _topic_metadata(admin, topic, timeout, partition)
    state = found.partitions.get(partition)
    if state is None:
        raise UnknownPartition(topic, partition)
    broker = metadata.brokers.get(state.leader)
    if broker is None:
        raise NetworkError(f"{topic}/{partition} has no leader now")
    return _address(broker)


def leaders(
    admin: AdminClient, topic: str, partitions: Sequence[int], timeout: float
) -> dict[int, tuple[str, int] | Exception]:
    """Host and port of each partition's leader, from one fresh metadata request; for a
    partition without one, the error saying why. Raises as :func:`leader` when the request
    fails (its caller counts a failing admin client)."""
    metadata, found = _topic_metadata(admin, topic, timeout)
    out: dict[int, tuple[str, int] | Exception] = {}
    for partition in partitions:
        state = found.partitions.get(partition)
        broker = None if state is None else metadata.brokers.get(state.leader)
        if state is None:
            out[partition] = UnknownPartition(topic, partition)
        elif broker is None:
            out[partition] = NetworkError(f"{topic}/{partition} has no leader now")
        else:
            out[partition] = _address(broker)
    return out


def common_leader(
    admin: AdminClient, topic: str, partitions: tuple[int, ...], timeout: float
) -> tuple[str, int]:
    """Host and port of the one leader of all ``partitions`` (fresh metadata);
    _SplitLeaders if they have more than one."""
    metadata, found = _topic_metadata(admin, topic, timeout)
    leaders = set()
    for partition in partitions:
        state = found.partitions.get(partition)
        if state is None:
            raise UnknownPartition(topic, partition)
        leaders.add(state.leader)
    if len(leaders) > 1:
        raise _SplitLeaders(topic, partitions)
    broker = metadata.brokers.get(leaders.pop())
    if broker is None:
        raise NetworkError(f"{topic}/{','.join(map(str, partitions))} have no leader now")
    return _address(broker)


def _address(broker: BrokerMetadata) -> tuple[str, int]:
    """A leader's host and port. (confluent_kafka types ``host`` as its Python default,
    None: librdkafka sets it on every broker of an answer, which this checks.)"""
    host = cast("str | None", broker.host)
    if host is None:
        raise NetworkError(f"broker {broker.id} has no host in the metadata")
    return host, broker.port
