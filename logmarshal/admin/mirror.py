"""Mirror a Marshal group's positions into Kafka's committed offsets (Apache Kafka).

On Apache Kafka the broker is not ours, so Kafka's tools (kafka-consumer-groups, Burrow,
admin clients) only see what is committed in ``__consumer_offsets``. ``logmarshal group
mirror-offsets`` copies each partition's position, as replayed from ``__marshal``, into the
committed offsets of a Kafka group of the same name (or another, ``kafka_group``). The
copy is for watching lag only: logmarshal never reads it back, ``__marshal`` stays the one
source of truth, and a stale or failed mirror changes nothing for the consumers.

The command is for a group whose members are stopped, or for mirroring under another
name; running Consumers mirror their own positions on Apache Kafka
(:mod:`logmarshal.consumer.mirror`, ``Consumer(mirror_offsets=...)``). On logmarshal's own
broker there is nothing to mirror: the broker serves the positions to Kafka's tools itself
and refuses OffsetCommit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ..errors import LogmarshalError
from ..network.cluster import LOGMARSHAL_CLUSTER_ID_PREFIX, broker_of
from .describe import require_group
from .reader import CoordinationState

__all__ = [
    "LOGMARSHAL_CLUSTER_ID_PREFIX",
    "KafkaOffsetSink",
    "MirrorError",
    "OffsetSink",
    "broker_of",
    "changed_positions",
    "positions",
]

log = logging.getLogger(__name__)

Positions = dict[tuple[str, int], int]

#: Kafka group states of a group with no members (DEAD: no such group); any other state, or
#: any member, is a live consumer group
_IDLE_STATES = frozenset({"EMPTY", "DEAD", "UNKNOWN"})

#: answers of a group coordinator still being elected or loaded: asked again, briefly
_COORDINATOR_MOVING = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"}
)


class MirrorError(LogmarshalError):
    """Kafka refused the mirrored offsets (the message says why and what to do)."""


class ReadInPart(MirrorError):
    """Kafka answered the committed offsets of some partitions and refused others' (one
    partition's pending transaction must not hold up the rest): ``found`` has the answered
    partitions' offsets (those the group has), ``failed`` the partitions refused."""

    def __init__(
        self,
        message: str,
        found: dict[tuple[str, int], int],
        failed: list[tuple[str, int]],
        epochs: dict[tuple[str, int], int | None] | None = None,
    ) -> None:
        super().__init__(message)
        self.found = found
        self.failed = failed
        #: the leader epoch committed with each offset found (None: none was)
        self.epochs = epochs or {}


class OffsetSink(Protocol):
    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None: ...


def positions(state: CoordinationState, group: str) -> Positions:
    """Next offset to consume per partition, where the log ever set a position."""
    require_group(state, group)
    return {
        (s.topic, s.partition): s.resume_offset for s in state.partitions(group) if s.has_position
    }


def changed_positions(current: Positions, mirrored: Mapping[tuple[str, int], int]) -> Positions:
    """What must be (re)committed: new partitions and moved positions (also backwards)."""
    return {k: v for k, v in current.items() if mirrored.get(k) != v}


class KafkaOffsetSink:
    """Commits as a memberless group (OffsetCommit, generation -1), as a standalone consumer
    does: through a librdkafka consumer of the group that never joins it.

    Not through the AdminClient's AlterConsumerGroupOffsets: librdkafka (2.16) aborts the
    whole process when a coordinator-bound admin request loses its connection (assertion
    ``eonce->refcnt > 0`` in ``rd_kafka_admin_coord_response_parse``, librdkafka PR 5397),
    which a mirror meets whenever a Kafka node dies under it (measured: the 3-node fault
    test, a core dump at the node's kill). The consumer's commit goes through its group
    coordinator state machine instead, which survives a coordinator that dies."""

    def __init__(
        self, bootstrap: str, config: Mapping[str, object] | None = None, timeout: float = 30.0
    ) -> None:
        from confluent_kafka.admin import AdminClient

        # librdkafka's values: str, numbers and bools, but also loggers and callbacks (Any)
        self._config: dict[str, Any] = {"bootstrap.servers": bootstrap, **(config or {})}
        self._admin = AdminClient(dict(self._config))
        self._timeout = timeout
        self._committers: dict[str, Any] = {}
        self._answers: list[tuple[Any, list[Any]]] = []
        #: one commit at a time on a group's client (the mirror thread's)
        self._lock = threading.Lock()
        #: the reads (OffsetFetch, a member's committed-offsets thread) have clients of their
        #: own: a read the coordinator holds for its whole timeout (a pending transaction)
        #: delays no commit, the last one at close included
        self._readers: dict[str, Any] = {}
        self._reading = threading.Lock()  # one read at a time
        self._state = threading.Lock()  # guards the two below
        self._closed = False
        self._busy = False  # a read is in flight (its thread closes the readers if closed)

    def close(self) -> None:
        """Close the group clients (the sink is not used after). A read in flight is not
        waited for: its thread closes the readers once it ends."""
        with self._lock:
            committers, self._committers = self._committers, {}
        for consumer in committers.values():
            consumer.close()
        with self._state:
            self._closed = True
            readers = {} if self._busy else self._readers
            if not self._busy:
                self._readers = {}
        for consumer in readers.values():
            consumer.close()

    def _committer(self, group: str, clients: dict[str, Any] | None = None) -> Any:
        clients = self._committers if clients is None else clients
        consumer = clients.get(group)
        if consumer is None:
            from confluent_kafka import Consumer

            consumer = Consumer({
                **self._config, "group.id": group, "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "on_commit": lambda error, parts: self._answers.append((error, parts)),
            })  # fmt: skip
            clients[group] = consumer
        return consumer

    def broker(self) -> str:
        """``"logmarshal"`` or ``"kafka"``: whose brokers answer, told by the cluster id
        in a Metadata response. Raises :class:`MirrorError` when they do not answer."""
        from confluent_kafka import KafkaException

        try:
            cluster_id = self._admin.list_topics(timeout=self._timeout).cluster_id
        except KafkaException as exc:
            raise MirrorError(f"cannot read the cluster id: {exc.args[0]}") from None
        return broker_of(cluster_id)

    def live(self, group: str, attempts: int = 5, backoff: float = 0.2) -> str | None:
        """Why Kafka's group ``group`` is a live consumer group (its state and members), or
        None when it has no members or does not exist. A coordinator being elected is asked
        again ``attempts`` times; other errors raise :class:`MirrorError`."""
        from confluent_kafka import KafkaException

        for attempt in range(attempts):
            try:
                found = self._admin.describe_consumer_groups([group])[group].result(self._timeout)
            except KafkaException as exc:
                error = exc.args[0]
                if error.name() in _COORDINATOR_MOVING and attempt + 1 < attempts:
                    time.sleep(backoff * (attempt + 1))
                    continue
                if error.name() == "GROUP_ID_NOT_FOUND":
                    return None
                raise MirrorError(f"cannot describe Kafka group {group!r}: {error}") from None
            except TimeoutError:  # (Future.result's: it escaped as no MirrorError)
                raise MirrorError(
                    f"cannot describe Kafka group {group!r}: no answer within {self._timeout:g} s"
                ) from None
            state = getattr(found.state, "name", str(found.state)).upper()
            if found.members or state not in _IDLE_STATES:
                return f"state {state}, {len(found.members)} member(s)"
            return None
        return None  # unreachable: the last attempt returns or raises

    def committed(self, group: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Kafka's committed offsets (next offsets) of ``group`` for ``keys``, those it has
        (OffsetFetch, through the group's client). Raises :class:`MirrorError`, and
        :class:`ReadInPart` when some partitions were answered and others refused."""
        return {k: offset for k, (offset, _) in self.committed_epochs(group, keys).items()}

    def committed_epochs(
        self, group: str, keys: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """:meth:`committed`, each offset with the leader epoch committed with it (of the
        record before it, as read), or None (KIP-320)."""
        from confluent_kafka import KafkaException, TopicPartition

        parts = [TopicPartition(t, p) for t, p in sorted(keys)]
        if not parts:
            return {}
        with self._reading:
            with self._state:
                if self._closed:
                    raise MirrorError(f"cannot read the offsets of Kafka group {group!r}: closed")
                self._busy = True
            try:
                found = self._committer(group, self._readers).committed(
                    parts, timeout=self._timeout
                )
            except KafkaException as exc:
                error = str(exc.args[0])
                raise MirrorError(
                    f"cannot read the offsets of Kafka group {group!r}: {error}{_hint(error)}"
                ) from None
            finally:
                with self._state:
                    self._busy = False
                    readers: dict[str, Any] = self._readers if self._closed else {}
                    if self._closed:
                        self._readers = {}
                for consumer in readers.values():  # (closed while this read was in flight)
                    consumer.close()
        answered = [tp for tp in found if tp.error is None and tp.offset >= 0]
        offsets = {(tp.topic, tp.partition): tp.offset for tp in answered}
        epochs = {(tp.topic, tp.partition): _epoch(tp.leader_epoch) for tp in answered}
        failed = [tp for tp in found if tp.error is not None]
        if failed:
            errors = ", ".join(f"{tp.topic}/{tp.partition}: {tp.error}" for tp in failed)
            raise ReadInPart(
                f"cannot read the offsets of Kafka group {group!r}: {errors}",
                offsets,
                [(tp.topic, tp.partition) for tp in failed],
                epochs,
            )
        return {k: (offset, epochs[k]) for k, offset in offsets.items()}

    def commit(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        epochs: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        """Commit ``offsets``, with the leader epoch of the record before each where
        ``epochs`` has it (a later start checks its log was not cut below it: KIP-320)."""
        with self._lock:
            self._commit(group, offsets, epochs or {})

    def _commit(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        epochs: Mapping[tuple[str, int], int],
    ) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        parts = [
            TopicPartition(t, p, o, leader_epoch=epochs.get((t, p), -1))  # (-1: none; not None)
            for (t, p), o in sorted(offsets.items())
        ]
        consumer = self._committer(group)
        self._answers.clear()
        try:
            consumer.commit(offsets=parts, asynchronous=True)
            deadline = time.monotonic() + self._timeout
            while not self._answers and time.monotonic() < deadline:
                consumer.poll(0.05)  # serves the commit's answer (on_commit)
        except KafkaException as exc:
            error = str(exc.args[0])
            raise MirrorError(
                f"Kafka refused the offsets of group {group!r}: {error}{_hint(error)}"
            ) from None
        if not self._answers:
            raise MirrorError(
                f"no answer to the offsets of group {group!r} within {self._timeout:g} s"
            )
        error, answered = self._answers[-1]
        if error is not None:
            raise MirrorError(
                f"Kafka refused the offsets of group {group!r}: {error}{_hint(str(error))}"
            )
        failed = [tp for tp in answered if tp.error is not None]
        if failed:
            errors = ", ".join(f"{tp.topic}/{tp.partition}: {tp.error}" for tp in failed)
            raise MirrorError(f"Kafka refused offsets of group {group!r}: {errors}{_hint(errors)}")


def _epoch(found: int | None) -> int | None:
    """A committed leader epoch, None where none was committed (librdkafka says -1 or None)."""
    return found if found is not None and found >= 0 else None


def _hint(error: str) -> str:
    if "GROUP_AUTHORIZATION_FAILED" not in error:
        return ""
    return (
        " (logmarshal's own broker refuses OffsetCommit: it serves Marshal groups to Kafka's "
        "tools itself, so there is nothing to mirror; on Apache Kafka, allow this client "
        "Read on the group)"
    )
