"""The one small interface through which logmarshal talks to a log.

Everything above it (producer, marshaler, consumers, admin, audit) is written against
:class:`Cluster`, so the same code runs on the embedded data directory and, through the Kafka
wire protocol, on logmarshal's broker or an Apache Kafka cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import attrs

from storage import NewRecord, TopicConfig

__all__ = [
    "FETCH_MAX_BYTES",
    "AsyncProducer",
    "BatchFetcher",
    "BoundsAsker",
    "Cluster",
    "ColumnFetcher",
    "FetchCanceller",
    "FetchWaker",
    "Message",
    "MultiBatchFetcher",
    "MultiProducer",
    "PartitionOffsets",
    "PartitionReader",
    "ProduceResult",
    "Read",
    "ReaderSource",
    "RecordDeleter",
    "TopicDescription",
    "check_max_bytes",
]

Header = tuple[str, bytes | None]

#: the most bytes one fetch of one partition answers by default: Kafka's
#: ``max.partition.fetch.bytes`` default (1 MiB); at least one record is answered, however
#: large, so a record above it is never stuck
FETCH_MAX_BYTES = 1 << 20
_INT32_MAX = (1 << 31) - 1


def check_max_bytes(max_bytes: object, name: str = "max_bytes") -> None:
    """A fetch's bound in bytes: an int in 1..2**31-1, Kafka's int32 (0 or less was read as
    "the first batch" by the embedded cluster and sent as it was to a broker)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"{name} must be an int, got {max_bytes!r}")
    if not 1 <= max_bytes <= _INT32_MAX:
        raise ValueError(f"{name} must be in [1, {_INT32_MAX}], got {max_bytes}")


class Message(NamedTuple):
    """One record read back from a partition.

    A named tuple, as kafka-python's ``ConsumerRecord``: one is built for every record a
    consumer reads, and an attrs frozen class costs about five times as much to build, which
    capped a network consumer near 0.2 M msg/s (``bench/consumer.py --network``).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@attrs.frozen
class ProduceResult:
    """Where produced records landed: ``base_offset..last_offset`` (lowest and highest).

    The records are in order but not always contiguous: a client library may send one call's
    records in several batches, and another writer's batch can land between them.
    :attr:`offsets` has each record's own offset.
    """

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    log_append_time: int = -1  # -1 unless the topic uses LogAppendTime
    #: each record's offset, in order; empty means the contiguous base_offset..last_offset
    record_offsets: tuple[int, ...] = ()

    @property
    def offsets(self) -> tuple[int, ...]:
        """The offset of every record of the call, in the order they were given."""
        if self.record_offsets:
            return self.record_offsets
        return tuple(range(self.base_offset, self.last_offset + 1))


@attrs.frozen
class PartitionOffsets:
    partition: int
    earliest: int
    latest: int


@attrs.frozen
class TopicDescription:
    name: str
    partitions: int
    config: Mapping[str, str]
    offsets: tuple[PartitionOffsets, ...]


@runtime_checkable
class Cluster(Protocol):
    """A partitioned log: topics, produce, fetch, offsets.

    Offsets follow Kafka: ``earliest_offset`` is the first offset still stored, and
    ``latest_offset`` the next one to be written (so an empty partition has both equal).
    Errors are those of :mod:`logmarshal.errors`.
    """

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: TopicConfig | Mapping[str, str | int] | None = None,
    ) -> TopicDescription: ...

    def delete_topic(self, name: str) -> None: ...

    def add_partitions(self, name: str, total: int) -> TopicDescription: ...

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None]
    ) -> TopicDescription:
        """Set Kafka-named topic configs (None resets one to its default); durable and in
        force when this returns. Internal topics (``__...``) keep their timestamp type."""
        ...

    def topics(self) -> list[str]: ...

    def describe_topic(self, name: str) -> TopicDescription: ...

    def partitions(self, topic: str, timeout: float | None = None) -> int:
        """How many partitions ``topic`` has; ``timeout`` bounds a look-up over the network
        (None: the cluster's own bound). A member's driver asks once per HB, bounded."""
        ...

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[NewRecord],
        *,
        durable: bool = False,
    ) -> ProduceResult:
        """Append ``records`` as one batch; ``durable`` means on disk before returning.

        A cluster whose ``produce_is_atomic`` is true stores all of a call's records or none.
        One without it (NetworkCluster: librdkafka cuts a call in several batches, and a
        batch refused does not stop the later ones) may have stored part of a call that
        raised, so a writer whose last record vouches for those before it (a streams commit
        marker) writes that record alone once the others are stored."""
        ...

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> list[Message]:
        """Records from ``offset`` on; waits up to ``max_wait`` seconds while there are none."""
        ...

    def earliest_offset(self, topic: str, partition: int) -> int: ...

    def latest_offset(self, topic: str, partition: int) -> int: ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``, or None."""
        ...

    def close(self) -> None: ...


# -- optional capabilities ------------------------------------------------------------------
# A Cluster may offer more than the interface above. Callers test for a capability with
# ``isinstance(cluster, ColumnFetcher)`` (the protocols are runtime-checkable) and fall back
# to the plain interface otherwise, so wrappers (fault injection) and other implementations
# keep working without it. (A path taken per read tests the method itself, as that isinstance
# does, for less: ``getattr(cluster, "fetch_columns", None)``.)

#: offsets, timestamps, keys, values of consecutive records
Columns = tuple[list[int], list[int], list["bytes | None"], list["bytes | None"]]


@attrs.frozen
class PastMarkers:
    """A fetch of stored batches found only transaction markers (Kafka's control batches:
    they take offsets and hold no record) from its offset on, up to ``next_offset``, and
    nothing after them: a replay's position moves past them, or a catch-up to the log's end
    would wait at a trailing marker for a record that may never come (a foreign
    transactional writer to ``__marshal``; logmarshal never writes transactionally)."""

    next_offset: int


@runtime_checkable
class ColumnFetcher(Protocol):
    """Bulk reads without a ``Message`` per record: what replay and export need."""

    def fetch_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> Columns | PastMarkers:
        """The records from ``offset`` on as four lists, as :meth:`Cluster.fetch` would, or
        :class:`PastMarkers` when only transaction markers follow ``offset`` (a cluster that
        knows of them)."""
        ...


@runtime_checkable
class BatchFetcher(Protocol):
    """Stored batches as bytes, for a replay that decodes them itself (and so skips a batch
    that does not decode whole, on every cluster alike)."""

    def fetch_batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> bytes | PastMarkers | None:
        """The stored batches from the one holding ``offset`` on (:class:`PastMarkers` if
        only transaction markers), or None when this cluster cannot serve them under its
        configuration (read records instead)."""
        ...


@runtime_checkable
class MultiBatchFetcher(Protocol):
    """Stored batches of several partitions of one topic in one request, for a replay of
    them all that long-polls once instead of once per partition (one answer then carries
    the appends to any of them)."""

    def fetch_batches_many(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        max_bytes: int = FETCH_MAX_BYTES,
        max_wait: float = 0.0,
    ) -> dict[int, bytes | PastMarkers | Exception] | None:
        """Per partition of ``offsets``, its stored batches from the one holding its offset
        on (about ``max_bytes`` each; :class:`PastMarkers` if only transaction markers), or
        the error it alone met (OffsetOutOfRange, ...), answered once any has records or
        after ``max_wait``; a failure of the whole request is raised. None when one request
        cannot carry them (fetch each alone instead)."""
        ...


@runtime_checkable
class MultiProducer(Protocol):
    """Records for several partitions of one topic in one call, whose readers hear of them
    once all are appended: a heartbeat pass's records, one per coordination partition,
    then reach a replay in one answer, not one each."""

    def produce_many(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        *,
        durable: bool = False,
    ) -> dict[int, ProduceResult | Exception]:
        """:meth:`Cluster.produce` of each partition's records (in order, one flush each);
        per partition, where they landed or the error it alone met."""
        ...


@runtime_checkable
class AsyncProducer(Protocol):
    """Durable writes that do not wait for their answers: one thread can write to every
    coordination partition while a partition whose broker is away holds up only its own
    answer (a network cluster; the embedded one is a :class:`MultiProducer`)."""

    def produce_async(
        self,
        topic: str,
        batches: Mapping[int, Sequence[NewRecord]],
        done: Callable[[dict[int, ProduceResult | Exception]], None],
    ) -> None:
        """Durable :meth:`Cluster.produce` of each partition's records (in order); ``done``
        is called from a thread of the cluster's with the partitions answered together,
        until each was answered once (where its records landed, or the error it alone
        met). ``done`` must not block: it holds up every other answer."""
        ...


@runtime_checkable
class FetchWaker(Protocol):
    """Fetches that stop waiting on request (Kafka's consumer ``wakeup()``): a replay that
    is stopping wakes its long polls instead of waiting them out."""

    def wake_fetches(self, topic: str, partitions: Iterable[int]) -> None:
        """Every fetch now waiting on one of ``partitions`` returns what is there (maybe
        nothing), as if its wait were over."""
        ...


@runtime_checkable
class FetchCanceller(Protocol):
    """Fetches that another thread can end (a network cluster, whose replay reads on a
    connection of each thread's own): a replay that is stopping ends its own long poll, and
    nobody else's, instead of waiting it out."""

    def cancel_fetches(self, threads: Iterable[int]) -> None:
        """The fetch each of ``threads`` (``threading.get_ident()``) is in raises
        ClosedError now; a thread in none is left alone."""
        ...


@runtime_checkable
class RecordDeleter(Protocol):
    """Kafka's DeleteRecords: advance partitions' log start offsets."""

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Delete records below ``before[partition]``; returns each partition's new earliest
        offset (its low watermark): exactly the offset asked for, as Kafka's DeleteRecords
        answers, or the current one where the log already starts past it."""
        ...


@runtime_checkable
class BoundsAsker(Protocol):
    """A cluster that can ask a partition's leader for its bounds directly (not through a
    cached view): the replay's check that its log did not go back uses it when there."""

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(earliest, latest)`` offsets of the partition, as its leader knows them now."""
        ...


class Read(NamedTuple):
    """One answer of a :class:`PartitionReader`: the records of (topic, partition) from
    ``offset`` on (what :meth:`Cluster.fetch` would return), or the error reading there;
    ``log_end``: the partition's high watermark as the reader last knew it (-1: unknown)."""

    topic: str
    partition: int
    offset: int
    records: list[Message]
    error: Exception | None = None
    log_end: int = -1


@runtime_checkable
class PartitionReader(Protocol):
    """Many partitions read by one loop (docs/architecture.md, "Consumer core: decisions apart from
    threads": one fetch loop per member, not one per partition).

    :meth:`want` asks for the records of a partition from an offset; :meth:`poll` answers
    the wants that have records (or an error), each once, and waits for them with one long
    poll over every wanted partition: a wanted partition where nothing arrives costs
    nothing until something does. ``want``, ``drop``, ``bounds`` and ``poll`` belong to one
    thread; :meth:`wake` may be called from any thread and makes a ``poll`` return now.
    """

    def want(self, topic: str, partition: int, offset: int) -> None:
        """Answer with records from ``offset`` on (replaces an earlier want of it)."""
        ...

    def drop(self, topic: str, partition: int) -> None:
        """Stop reading the partition (its unanswered want is forgotten)."""
        ...

    def bounds(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int] | Exception]:
        """Each partition's earliest and latest offsets, or the error finding them (all at
        once: a member that claims many partitions looks them all up together)."""
        ...

    def poll(self, timeout: float) -> list[Read]:
        """Answers to wants, waiting up to ``timeout`` seconds (or a :meth:`wake`) for one."""
        ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ReaderSource(Protocol):
    """A cluster that offers :class:`PartitionReader` s (a wrapper without it is read with
    :meth:`Cluster.fetch`, a partition at a time)."""

    def open_reader(self, *, max_bytes: int = FETCH_MAX_BYTES) -> PartitionReader: ...


def bounds_one_by_one(
    cluster: Cluster, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int] | Exception]:
    """:meth:`PartitionReader.bounds` through :meth:`Cluster.earliest_offset` and
    :meth:`Cluster.latest_offset`, a partition at a time (the error finding one is its
    answer), for readers whose cluster answers those calls cheaply in-process."""
    out: dict[tuple[str, int], tuple[int, int] | Exception] = {}
    for topic, partition in keys:
        try:
            out[(topic, partition)] = (
                cluster.earliest_offset(topic, partition),
                cluster.latest_offset(topic, partition),
            )
        except Exception as exc:
            out[(topic, partition)] = exc
    return out
