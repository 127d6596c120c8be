"""The embedded Producer splits a batch the cluster refuses as too large.

Kafka's producer, told MESSAGE_TOO_LARGE for a batch of several records, splits it and sends
the parts (Sender.completeBatch, RecordAccumulator.splitAndReenqueue): only a record too large
by itself fails. A topic's ``max.message.bytes`` bounds a whole batch, so without the split a
topic with a small limit refused every batch of small records, each of which fits alone.
"""

from __future__ import annotations

import pytest

from logmarshal import EmbeddedCluster, Producer, TimestampType, TopicConfig
from logmarshal.errors import RecordTooLarge
from logmarshal.producer import DeliveryCallback

LIMIT = 1000  # max.message.bytes of the topics here: a batch of ~60 small records


class Wrapper:
    """Records each produce call's size and outcome; ``fail_after``: calls that succeed
    before every later one raises ``error``."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self.inner = inner
        self.calls: list[tuple[int, str]] = []
        self.fail_after: int | None = None
        self.error: Exception = OSError("disk full")

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def produce(self, topic, partition, records, *, durable=False):
        stored = sum(outcome == "stored" for _, outcome in self.calls)
        if self.fail_after is not None and stored >= self.fail_after:
            self.calls.append((len(records), "failed"))
            raise self.error
        try:
            result = self.inner.produce(topic, partition, records, durable=durable)
        except RecordTooLarge:
            self.calls.append((len(records), "too large"))
            raise
        self.calls.append((len(records), "stored"))
        return result


def small_topic(cluster: EmbeddedCluster, partitions: int = 1, **config) -> str:
    cluster.create_topic("small", partitions, TopicConfig(max_message_bytes=LIMIT, **config))
    return "small"


def values(cluster: EmbeddedCluster, topic: str, partition: int = 0) -> list[bytes | None]:
    return [m.value for m in cluster.fetch(topic, partition, 0, max_bytes=1 << 30)]


def test_small_records_of_a_batch_over_max_message_bytes_are_all_stored(cluster) -> None:
    topic = small_topic(cluster)
    sent = [b"v%04d" % i for i in range(1000)]
    with Producer(cluster, linger_ms=10_000) as producer:
        deliveries = [producer.send(topic, value) for value in sent]
        producer.flush(10)
    assert [d.result(0).offset for d in deliveries] == list(range(1000))
    assert values(cluster, topic) == sent


def test_only_a_record_too_large_alone_fails_and_the_others_keep_their_order(cluster) -> None:
    topic = small_topic(cluster)
    wrapper = Wrapper(cluster)
    sent = [b"x" * 2 * LIMIT if i == 357 else b"v%04d" % i for i in range(1000)]
    reported: list = []

    def reporter(i: int) -> DeliveryCallback:
        return lambda meta, error: reported.append((i, meta, error))

    with Producer(wrapper, linger_ms=10_000) as producer:
        deliveries = [
            producer.send(topic, value, on_delivery=reporter(i)) for i, value in enumerate(sent)
        ]
        producer.flush(10)
    with pytest.raises(RecordTooLarge, match=f"limit of {LIMIT}"):
        deliveries[357].result(0)
    assert isinstance(deliveries[357].exception(0), RecordTooLarge)
    kept = [i for i in range(1000) if i != 357]
    assert [deliveries[i].result(0).offset for i in kept] == list(range(999))
    assert values(cluster, topic) == [sent[i] for i in kept]
    # each callback once, with its record's outcome
    assert sorted(i for i, _, _ in reported) == list(range(1000))
    for i, meta, error in reported:
        if i == 357:
            assert meta is None and isinstance(error, RecordTooLarge)
        else:
            assert error is None and meta == deliveries[i].result(0)
    # the usual path is one call; only the refused batch paid for the split, and the
    # record too large was tried alone
    assert wrapper.calls[0] == (1000, "too large")
    assert (1, "too large") in wrapper.calls
    assert sum(n for n, outcome in wrapper.calls if outcome == "stored") == 999


def test_a_fitting_batch_is_one_call(cluster) -> None:
    topic = small_topic(cluster)
    wrapper = Wrapper(cluster)
    with Producer(wrapper, linger_ms=10_000) as producer:
        for i in range(20):
            producer.send(topic, b"v%d" % i)
    assert wrapper.calls == [(20, "stored")]


def test_keyed_records_of_several_partitions_keep_their_order_per_partition(cluster) -> None:
    topic = small_topic(cluster, partitions=3)
    with Producer(cluster, linger_ms=10_000) as producer:
        deliveries = [
            (producer.send(topic, b"%d" % i, key=b"k%d" % (i % 7)), b"%d" % i) for i in range(1500)
        ]
        producer.flush(10)
    per_partition: dict[int, list[tuple[int, bytes]]] = {}
    for delivery, value in deliveries:
        meta = delivery.result(0)
        per_partition.setdefault(meta.partition, []).append((meta.offset, value))
    assert sum(map(len, per_partition.values())) == 1500
    for partition, landed in per_partition.items():
        # in the order sent, at the offsets reported
        assert [offset for offset, _ in landed] == list(range(len(landed)))
        assert values(cluster, topic, partition) == [value for _, value in landed]


def test_send_nowait_records_too_large_alone_are_raised_by_flush_only(cluster) -> None:
    topic = small_topic(cluster)
    producer = Producer(cluster, linger_ms=10_000)
    try:
        for i in range(1000):
            producer.send_nowait(topic, b"v%04d" % i, key=b"k")
        producer.flush(10)  # every record fits alone: nothing to raise
        assert cluster.latest_offset(topic, 0) == 1000
        producer.send_nowait(topic, b"before", key=b"k")
        producer.send_nowait(topic, b"x" * 2 * LIMIT, key=b"k")
        producer.send_nowait(topic, b"after", key=b"k")
        with pytest.raises(RecordTooLarge):
            producer.flush(10)
        producer.flush(10)  # raised once
    finally:
        producer.close()
    assert values(cluster, topic)[1000:] == [b"before", b"after"]


def test_a_tracked_record_too_large_alone_is_not_raised_by_flush(cluster) -> None:
    """Its caller has its Delivery (or callback): flush raises only send_nowait()'s."""
    topic = small_topic(cluster)
    errors: list = []
    with Producer(cluster, linger_ms=10_000) as producer:
        big = producer.send(topic, b"x" * 2 * LIMIT)
        for i in range(300):
            producer.send(topic, b"s%d" % i)
        producer.flush(10)
        for i in range(300):
            producer.send_nowait(topic, b"n%d" % i)
        producer.send(topic, b"y" * 2 * LIMIT, on_delivery=lambda meta, error: errors.append(error))
        producer.flush(10)
    assert isinstance(big.exception(0), RecordTooLarge)
    assert len(errors) == 1 and isinstance(errors[0], RecordTooLarge)
    assert cluster.latest_offset(topic, 0) == 600


def test_an_error_other_than_size_stops_the_split(cluster) -> None:
    """The records after a part that failed for another reason fail with it, as the whole
    batch would have: none lands after a record before it was lost."""
    topic = small_topic(cluster)
    wrapper = Wrapper(cluster)
    wrapper.fail_after = 2  # two parts are stored, then the disk is full
    with Producer(wrapper, linger_ms=10_000) as producer:
        deliveries = [producer.send(topic, b"v%04d" % i) for i in range(1000)]
        producer.flush(10)
    stored = cluster.latest_offset(topic, 0)
    assert 0 < stored < 1000
    assert [d.result(0).offset for d in deliveries[:stored]] == list(range(stored))
    for delivery in deliveries[stored:]:
        with pytest.raises(OSError, match="disk full"):
            delivery.result(0)
    assert values(cluster, topic) == [b"v%04d" % i for i in range(stored)]
    assert [outcome for _, outcome in wrapper.calls].count("failed") == 1


def test_parts_report_the_log_append_time_and_headers_are_kept(tmp_path) -> None:
    with EmbeddedCluster(tmp_path, clock=lambda: 5_000, maintenance_interval=0) as cluster:
        topic = small_topic(cluster, timestamp_type=TimestampType.LOG_APPEND_TIME)
        with Producer(cluster, linger_ms=10_000) as producer:
            deliveries = [
                producer.send(
                    topic, b"v%03d" % i, headers=[("h", b"%d" % i)] if i % 50 == 0 else None
                )
                for i in range(300)
            ]
        assert {d.result(0).timestamp for d in deliveries} == {5_000}
        messages = cluster.fetch(topic, 0, 0, max_bytes=1 << 30)
    assert [m.value for m in messages] == [b"v%03d" % i for i in range(300)]
    assert [m.headers for m in messages] == [
        (("h", b"%d" % i),) if i % 50 == 0 else () for i in range(300)
    ]
