"""Mirror a Marshal group's positions into Kafka's committed offsets (Apache Kafka).

On Apache Kafka the broker is not ours, so Kafka's tools (kafka-consumer-groups, Burrow,
admin clients) only see what is committed in ``__consumer_offsets``. ``logmarshal group
mirror-offsets`` copies each partition's position, as replayed from ``__marshal``, into the
committed offsets of a Kafka group of the same name (or another, ``kafka_group``). The
copy is for watching lag only: logmarshal never reads it back, ``__marshal`` stays the one
source of truth, and a stale or failed mirror changes nothing for the consumers.

A command rather than a Marshaler option: one process per group instead of every member
writing, no extra writes on the consumers' path, operator credentials for
``__consumer_offsets`` kept out of the consumers, and it works for a group whose members
are all stopped. On logmarshal's own broker there is nothing to mirror: the broker serves
the positions to Kafka's tools itself and refuses OffsetCommit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from .describe import require_group
from .reader import CoordinationState

__all__ = ["KafkaOffsetSink", "MirrorError", "OffsetSink", "changed_positions", "positions"]

log = logging.getLogger(__name__)

Positions = dict[tuple[str, int], int]


class MirrorError(Exception):
    """Kafka refused the mirrored offsets (the message says why and what to do)."""


class OffsetSink(Protocol):
    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None: ...


def positions(state: CoordinationState, group: str) -> Positions:
    """Next offset to consume per partition, where the log ever set a position."""
    require_group(state, group)
    return {
        (s.topic, s.partition): s.resume_offset
        for s in state.partitions(group)
        if s.has_position
    }


def changed_positions(current: Positions, mirrored: Mapping[tuple[str, int], int]) -> Positions:
    """What must be (re)committed: new partitions and moved positions (also backwards)."""
    return {k: v for k, v in current.items() if mirrored.get(k) != v}


class KafkaOffsetSink:
    """Commits through confluent-kafka's AdminClient (OffsetCommit as a memberless group)."""

    def __init__(self, bootstrap: str, config: Mapping[str, object] | None = None,
                 timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
        self._timeout = timeout

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

        parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group, parts)]
        try:
            result = self._admin.alter_consumer_group_offsets(request)[group].result(
                self._timeout
            )
        except KafkaException as exc:
            error = str(exc.args[0])
            raise MirrorError(f"Kafka refused the offsets of group {group!r}: {error}"
                              f"{_hint(error)}") from None
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            errors = ", ".join(f"{tp.topic}/{tp.partition}: {tp.error}" for tp in failed)
            raise MirrorError(f"Kafka refused offsets of group {group!r}: {errors}{_hint(errors)}")


def _hint(error: str) -> str:
    if "GROUP_AUTHORIZATION_FAILED" not in error:
        return ""
    return (
        " (logmarshal's own broker refuses OffsetCommit: it serves Marshal groups to Kafka's "
        "tools itself, so there is nothing to mirror; on Apache Kafka, allow this client "
        "Read on the group)"
    )
