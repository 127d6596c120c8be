"""A batch of records through librdkafka's producer, waiting for the call's own delivery
reports (not flush(): that waits for every message in flight); and what a call's reports
say. Durable writes (coordination records) have their reports served by a thread of their
own instead (:mod:`.reports`)."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Producer

from storage import NewRecord

from ..cluster import ProduceResult
from ..errors import NetworkError
from .error_map import _map_error, _raise_from

#: How long the waits for delivery reports last: the first one short, each next one twice as
#: long, up to the last. Callers share the producer (a member's coordination writers, a
#: thread per coordination partition), and a report is served by whichever caller polls:
#: once another caller's poll has run ours, our own poll waits for the *next* event or its
#: timeout. With 50 ms waits an AMO reservation's write took 7 ms (p50) while the consumer
#: read at full speed, against 1.6 ms alone; with 1 ms waits 4 ms (bench/consumer.py
#: --network, the amo row: 0.49 -> 0.65-0.72 M msg/s, 2026-11-30). But 1 ms waits all along
#: spun every waiting writer a thousand times a second while a loaded broker took long to
#: answer: 32 member processes starting at once (bench/rebalance.py --processes --members 32
#: --partitions 256) spent 56 s of system time against 12 and did not settle. Doubling
#: waits cost a write that waits T about log2(T / 1 ms) polls, and notice a report served by
#: another caller within about the time waited so far: the AMO write 4.5 ms (p50) against
#: 7.8-8.5 ms with 50 ms waits in the same run, and the 32 members settled as before.
_REPORT_WAIT_FIRST = 0.001
_REPORT_WAIT_MAX = 0.05


def produce_records(
    producer: Producer,
    topic: str,
    partition: int,
    records: Sequence[NewRecord],
    timeout: float,
) -> ProduceResult:
    """:meth:`NetworkCluster.produce`: ``records`` (at least one) to ``topic``/``partition``,
    each record's offset as its delivery report gave it; NetworkError when the reports do
    not all come within ``timeout``."""
    # each record's delivery report, by the record's index (reports may come in any
    # order, and from another caller's poll)
    reports: dict[int, tuple[KafkaError | None, int, tuple[int, int]]] = {}

    def delivered(index: int, error: KafkaError | None, message: Any) -> None:
        reports[index] = (error, message.offset(), message.timestamp())

    # No lock across calls and no flush(): flush waits for *every* message in flight,
    # so a call to a dead broker would hold up writes to live ones (a consumer's
    # heartbeats to a live coordination partition). Each call waits for its own
    # delivery reports only; librdkafka keeps each partition's records in order.
    deadline = time.monotonic() + timeout
    for index, rec in enumerate(records):
        while True:
            try:
                produce_one(producer, topic, partition, rec, functools.partial(delivered, index))
                break
            except BufferError:  # the local queue is full: serve callbacks, try again
                producer.poll(0.05)
                if time.monotonic() >= deadline:
                    raise NetworkError(
                        f"produce to {topic}/{partition}: the client's queue stayed full "
                        f"for {timeout} s"
                    ) from None
            except KafkaException as exc:
                if not _refreshed(producer, exc, topic, partition, deadline):
                    raise _raise_from(exc, topic, partition) from None
    wait = _REPORT_WAIT_FIRST
    while len(reports) < len(records) and time.monotonic() < deadline:
        producer.poll(min(wait, max(0.0, deadline - time.monotonic())))
        wait = min(wait * 2, _REPORT_WAIT_MAX)
    if len(reports) < len(records):
        raise NetworkError(f"produce to {topic}/{partition}: no acknowledgement within {timeout} s")
    result = produce_result(topic, partition, [reports[i] for i in range(len(records))])
    if isinstance(result, Exception):
        raise result
    return result


def _refreshed(
    producer: Producer, exc: KafkaException, topic: str, partition: int, deadline: float
) -> bool:
    """librdkafka refused a partition its metadata does not have yet (one just added):
    read the topic's metadata again, which updates its cache; True when it has the
    partition now (the record is handed over again). Its own refresh comes every 5 min."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError) or error.code() != KafkaError._UNKNOWN_PARTITION:
        return False
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    try:
        found = producer.list_topics(topic, timeout=left).topics.get(topic)
    except KafkaException:
        return False
    return found is not None and found.error is None and partition in found.partitions


def produce_one(
    producer: Producer,
    topic: str,
    partition: int,
    rec: NewRecord,
    on_delivery: Callable[[KafkaError | None, Any], None],
) -> None:
    """Hand one record to librdkafka (its BufferError and KafkaException are the caller's)."""
    producer.produce(
        topic,
        value=rec.value,
        key=rec.key,
        partition=partition,
        timestamp=rec.timestamp,
        headers=list(rec.headers) if rec.headers else None,
        on_delivery=on_delivery,
    )


def produce_result(
    topic: str,
    partition: int,
    reports: Sequence[tuple[KafkaError | None, int, tuple[int, int]]],
) -> ProduceResult | Exception:
    """What one call's delivery reports (error, offset, timestamp of each record, in order)
    say: where the records landed, or the first error met, with a note of the records
    stored all the same (librdkafka cut the call in batches, and only some were refused)."""
    for error, _, _ in reports:
        if error is not None:
            exc = _map_error(error, topic, partition)
            stored = [offset for e, offset, _ in reports if e is None]
            if stored:
                exc.add_note(
                    f"{len(stored)} of the call's {len(reports)} records were stored all the "
                    f"same, at offsets {min(stored)}..{max(stored)} of {topic}/{partition}"
                )
            return exc
    # each record's own offset: one call's records may span several batches, with
    # another writer's in between
    offsets = tuple(offset for _, offset, _ in reports)
    ts_type, ts = reports[0][2]
    log_append_time = ts if ts_type == TIMESTAMP_LOG_APPEND_TIME else -1
    contiguous = all(b == a + 1 for a, b in itertools.pairwise(offsets))
    return ProduceResult(
        topic,
        partition,
        min(offsets),
        max(offsets),
        log_append_time,
        record_offsets=() if contiguous else offsets,
    )
