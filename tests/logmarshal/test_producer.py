from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from logmarshal import EmbeddedCluster, Producer, TimestampType, TopicConfig
from logmarshal import producer as producer_module
from logmarshal.errors import ClosedError, UnknownTopic
from logmarshal.partitioners import Murmur2Partitioner
from logmarshal.serializers import json_serializer, string_serializer


class CountingCluster:
    """Wraps a cluster to record every produce call (the batches the producer formed)."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self.inner = inner
        self.batches: list[tuple[str, int, int]] = []
        self.fail_with: Exception | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def produce(self, topic, partition, records, *, durable=False):
        if self.fail_with is not None:
            raise self.fail_with
        self.batches.append((topic, partition, len(records)))
        return self.inner.produce(topic, partition, records, durable=durable)


def read_all(cluster: EmbeddedCluster, topic: str, partition: int):
    return cluster.fetch(topic, partition, cluster.earliest_offset(topic, partition))


def test_send_returns_offsets_in_order_and_records_round_trip(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster, clock=lambda: 1_700_000_000_000) as producer:
        futures = [
            producer.send("t", f"v{i}".encode(), key=b"k", headers=[("h", b"x")]) for i in range(50)
        ]
    metas = [f.result(timeout=5) for f in futures]
    assert [m.offset for m in metas] == list(range(50))
    assert {m.timestamp for m in metas} == {1_700_000_000_000}
    messages = read_all(cluster, "t", 0)
    assert [m.value for m in messages] == [f"v{i}".encode() for i in range(50)]
    assert all(m.key == b"k" and m.headers == (("h", b"x"),) for m in messages)


def test_records_are_batched_by_size(cluster) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    with Producer(counting, batch_size=1000, linger_ms=10_000) as producer:
        for _ in range(100):
            producer.send("t", b"x" * 80)
    sizes = [n for _, _, n in counting.batches]
    assert sum(sizes) == 100
    assert len(sizes) < 20, "records of 100 B in batches of 1000 B: about 10 per batch"
    assert max(sizes) > 1


def test_linger_sends_a_partial_batch_without_flush(cluster) -> None:
    cluster.create_topic("t", 1)
    producer = Producer(cluster, batch_size=1 << 20, linger_ms=20)
    try:
        future = producer.send("t", b"lonely")
        assert future.result(timeout=5).offset == 0  # no flush: linger alone sent it
    finally:
        producer.close()


def test_keyed_records_follow_the_partitioner_and_keep_per_key_order(cluster) -> None:
    cluster.create_topic("t", 5)
    with Producer(cluster) as producer:
        for i in range(200):
            producer.send("t", str(i).encode(), key=f"key-{i % 7}".encode())
    expected = Murmur2Partitioner()
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for partition in range(5):
        for m in read_all(cluster, "t", partition):
            assert expected(m.key, 5) == partition
            per_key[m.key].append(int(m.value))
    assert sum(len(v) for v in per_key.values()) == 200
    assert all(values == sorted(values) for values in per_key.values())


def test_explicit_partition_and_custom_partitioner(cluster) -> None:
    cluster.create_topic("t", 3)
    with Producer(cluster, partitioner=lambda key, n: n - 1) as producer:
        assert producer.send("t", b"a").result(5).partition == 2
        assert producer.send("t", b"b", partition=0).result(5).partition == 0
        with pytest.raises(ValueError, match=r"partitions 0\.\.2, not 3"):
            producer.send("t", b"c", partition=3)


def test_a_bad_partitioner_result_is_refused(cluster) -> None:
    cluster.create_topic("t", 2)
    with (
        Producer(cluster, partitioner=lambda key, n: 5) as producer,
        pytest.raises(ValueError, match="partitioner returned 5"),
    ):
        producer.send("t", b"a")


def test_partition_growth_is_seen(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster) as producer:
        producer.send("t", b"a").result(5)
        cluster.add_partitions("t", 3)
        assert producer.send("t", b"b", partition=2).result(5).partition == 2


def test_serializers(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(
        cluster, key_serializer=string_serializer, value_serializer=json_serializer
    ) as producer:
        producer.send("t", {"n": 1, "s": "é"}, key="k").result(5)
    (message,) = read_all(cluster, "t", 0)
    assert message.key == b"k"
    assert message.value == '{"n":1,"s":"é"}'.encode()


def test_wrong_types_fail_at_send(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster) as producer:
        with pytest.raises(TypeError, match="value must be bytes or None, got str"):
            producer.send("t", "text")
        with pytest.raises(TypeError, match="header names are str"):
            producer.send("t", b"v", headers=[(b"h", b"v")])
        with pytest.raises(TypeError, match="partition must be an int"):
            producer.send("t", b"v", partition="0")  # type: ignore[arg-type]


def test_a_header_name_with_no_utf8_form_fails_at_send_alone(cluster) -> None:
    """A name with a lone surrogate (what ``surrogateescape`` decoding leaves) was taken by
    send(); the batch it joined failed in the sender thread, and with it every good record
    sent before it to that partition, flush() saying nothing (over the network it crashed
    the process inside librdkafka). An attack on the Producer, 2026-12-06."""
    from storage import NewRecord

    cluster.create_topic("t", 1)
    with Producer(cluster, linger_ms=200) as producer:
        good = [producer.send("t", b"good-%d" % i) for i in range(5)]
        with pytest.raises(ValueError, match="no UTF-8 form"):
            producer.send("t", b"bad", headers=[("\udcff", b"1")])
        producer.send("t", b"named", headers=[("é", b"1")])  # (not ASCII, but UTF-8)
    assert [d.result(5).offset for d in good] == [0, 1, 2, 3, 4]
    assert cluster.latest_offset("t", 0) == 6
    with pytest.raises(ValueError, match="no UTF-8 form"):
        NewRecord(b"v", headers=[("\udcff", b"1")], timestamp=0)


def test_arguments_of_the_wrong_kind_fail_where_they_are_given(cluster) -> None:
    """Found by an attack on the API: ``Producer(None)`` was taken, ``on_delivery=5`` failed
    later in a delivery report, ``flush(nan)`` was taken, and a dict of headers (what
    confluent-kafka takes) failed with "not enough values to unpack"."""
    cluster.create_topic("t", 1)
    with pytest.raises(TypeError, match="cluster must be a Cluster"):
        Producer(None)
    with Producer(cluster) as producer:
        with pytest.raises(TypeError, match="on_delivery must be callable"):
            producer.send("t", b"v", on_delivery=5)
        with pytest.raises(ValueError, match="timeout must be seconds"):
            producer.flush(float("nan"))
        with pytest.raises(TypeError, match="timeout must be seconds"):
            producer.flush("1")  # (was compared with 0: "'<=' not supported")
        with pytest.raises(TypeError, match="a header is a"):
            producer.send("t", b"v", headers=["ab"])
        producer.send("t", b"v", headers={"a": b"b", "c": None}).result(10)
    assert cluster.fetch("t", 0, 0)[0].headers == (("a", b"b"), ("c", None))


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(float("nan"), ValueError), (-1, ValueError), ("1", TypeError), (float("inf"), ValueError)],
)
def test_a_result_timeout_is_checked_as_flush_checks_its(cluster, timeout, error) -> None:
    """``result(nan)`` and ``result(-1)`` timed out at once, ``result("1")`` failed in
    comparing and ``result(inf)`` with a time_t overflow; over the network ``result(nan)``
    waited for ever. Timeouts are seconds from 0 to a year, or None, as for ``flush``."""
    cluster.create_topic("t", 1)
    with Producer(cluster) as producer:
        delivery = producer.send("t", b"v")
        for ask in (delivery.result, delivery.exception):
            with pytest.raises(error, match="timeout must be seconds"):
                ask(timeout)
        assert delivery.result(10).offset == 0


def test_unknown_topic_fails_at_send(cluster) -> None:
    with Producer(cluster) as producer, pytest.raises(UnknownTopic):
        producer.send("missing", b"v")


def test_a_failed_append_fails_every_future_of_the_batch(cluster) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    counting.fail_with = OSError("disk full")
    with Producer(counting, linger_ms=10_000) as producer:
        futures = [producer.send("t", b"x") for _ in range(3)]
        producer.flush(5)
    for future in futures:
        with pytest.raises(OSError, match="disk full"):
            future.result(0)
    assert cluster.latest_offset("t", 0) == 0


def test_send_after_close_is_refused(cluster) -> None:
    cluster.create_topic("t", 1)
    producer = Producer(cluster)
    producer.close()
    producer.close()  # idempotent
    with pytest.raises(ClosedError):
        producer.send("t", b"late")


def test_log_append_time_topics_report_the_brokers_time(tmp_path) -> None:
    with EmbeddedCluster(tmp_path, clock=lambda: 5_000, maintenance_interval=0) as cluster:
        cluster.create_topic("t", 1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME))
        with Producer(cluster, durable=True) as producer:
            meta = producer.send("t", b"v", timestamp=1).result(5)
        assert meta.timestamp == 5_000
        assert read_all(cluster, "t", 0)[0].timestamp == 5_000


def test_concurrent_senders_lose_nothing(cluster) -> None:
    cluster.create_topic("t", 3)
    with Producer(cluster, linger_ms=1) as producer:
        results: list = []

        def work(worker: int) -> None:
            results.extend(
                producer.send("t", f"{worker}-{i}".encode(), key=str(worker).encode())
                for i in range(300)
            )

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(f.exception() is None for f in results)
    values = [m.value for p in range(3) for m in read_all(cluster, "t", p)]
    assert sorted(values) == sorted(f"{w}-{i}".encode() for w in range(4) for i in range(300))


def test_callbacks_and_results_agree(cluster) -> None:
    cluster.create_topic("t", 2)
    seen: list = []
    with Producer(cluster) as producer:
        results = [
            producer.send(
                "t", b"%d" % i, key=b"k%d" % i, on_delivery=lambda m, e: seen.append((m, e))
            )
            for i in range(40)
        ]
    assert [e for _, e in seen] == [None] * 40
    assert sorted((m.partition, m.offset) for m, _ in seen) == sorted(
        (r.result(0).partition, r.result(0).offset) for r in results
    )
    assert all(r.done() and r.exception(0) is None for r in results)


def test_a_failed_append_reaches_the_callbacks_and_a_raising_callback_is_logged(
    cluster, caplog
) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    counting.fail_with = OSError("disk full")
    errors: list = []

    def broken(meta, error):
        errors.append(error)
        raise RuntimeError("user bug")

    with Producer(counting, linger_ms=10_000) as producer:
        delivery = producer.send("t", b"x", on_delivery=broken)
        producer.flush(5)
    assert isinstance(errors[0], OSError)
    assert isinstance(delivery.exception(0), OSError)
    assert "a delivery callback raised" in caplog.text


def test_a_cluster_timeout_fails_its_records_and_the_sender_goes_on(cluster) -> None:
    """A cluster whose produce raises the builtin TimeoutError (a wrapper bounding a call
    with ``Future.result(timeout)``): ``Delivery.exception`` took it for "not known yet"
    and raised it in the sender thread, which died; flush() then waited for good (a
    helper's attack, 2026-12-06). It is the records' error, and later sends are stored."""
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    counting.fail_with = TimeoutError("no answer within 5 s")
    errors: list = []
    with Producer(counting, linger_ms=1) as producer:
        first = producer.send("t", b"x", on_delivery=lambda meta, error: errors.append(error))
        producer.flush(10)
        assert isinstance(first.exception(0), TimeoutError) and first.done()
        assert len(errors) == 1 and isinstance(errors[0], TimeoutError)
        counting.fail_with = None
        second = producer.send("t", b"y")
        producer.flush(10)
        assert second.result(0).offset == 0
    assert [r.value for r in read_all(cluster, "t", 0)] == [b"y"]


def test_a_batch_never_outgrows_batch_size(cluster) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    with Producer(counting, batch_size=1000, linger_ms=10_000) as producer:
        for _ in range(30):
            producer.send("t", b"x" * 280)  # 300 B with the framing estimate: 3 a batch
    assert {n for _, _, n in counting.batches} == {3}


def test_records_with_and_without_headers_share_a_batch(cluster) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    with Producer(counting, linger_ms=10_000) as producer:
        producer.send("t", b"a")
        producer.send("t", b"b", headers=[("h", b"1")])
        producer.send("t", b"c")
    assert len(counting.batches) == 1
    assert [m.headers for m in read_all(cluster, "t", 0)] == [(), (("h", b"1"),), ()]


def test_bad_timestamps_fail_at_send(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster) as producer:
        with pytest.raises(TypeError, match="timestamp must be an int"):
            producer.send("t", b"v", timestamp=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="timestamp must be an int"):
            producer.send("t", b"v", timestamp=True)
        with pytest.raises(ValueError, match="does not fit in int64"):
            producer.send("t", b"v", timestamp=1 << 63)


def test_send_nowait_stores_records_and_a_failure_is_raised_by_the_next_flush(cluster) -> None:
    cluster.create_topic("t", 2)
    with Producer(cluster) as producer:
        for i in range(100):
            producer.send_nowait("t", b"%d" % i, key=b"k%d" % (i % 5))
    assert sum(cluster.latest_offset("t", p) for p in range(2)) == 100
    counting = CountingCluster(cluster)
    counting.fail_with = OSError("disk full")
    producer = Producer(counting, linger_ms=10_000)
    producer.send_nowait("t", b"lost", partition=0)
    with pytest.raises(OSError, match="disk full"):
        producer.flush(5)
    producer.flush(5)  # raised once
    counting.fail_with = None
    with pytest.raises(TypeError, match="value must be bytes"):
        producer.send_nowait("t", "text")
    producer.close()
    with pytest.raises(ClosedError):
        producer.send_nowait("t", b"late")


def test_usual_and_unusual_records_share_batches_in_order(cluster) -> None:
    """send()'s and send_nowait()'s shortcut (a keyed record, hashed before, with room in an
    open batch) and the general path append to the same batches: order, offsets, timestamps
    and headers come out as sent."""
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    sent: list[tuple[bytes, bytes, tuple, int | None]] = []
    with Producer(counting, linger_ms=10_000) as producer:
        deliveries = []
        for i in range(60):
            value, key = b"v%d" % i, b"k%d" % (i % 3)
            headers: tuple = (("h", b"%d" % i),) if i in (10, 40) else ()
            timestamp = 1_600_000_000_000 + i if i % 9 == 4 else None
            if i % 5 == 0:
                producer.send_nowait("t", value, key, headers=headers or None, timestamp=timestamp)
            else:
                deliveries.append(
                    (
                        i,
                        producer.send(
                            "t", value, key, headers=headers or None, timestamp=timestamp
                        ),
                    )
                )
            sent.append((value, key, headers, timestamp))
    assert len(counting.batches) == 1
    messages = read_all(cluster, "t", 0)
    assert [(m.value, m.key, m.headers) for m in messages] == [s[:3] for s in sent]
    for (_, _, _, timestamp), m in zip(sent, messages, strict=True):
        assert timestamp is None or m.timestamp == timestamp
    for i, delivery in deliveries:
        meta = delivery.result(0)
        assert (meta.offset, meta.timestamp) == (i, messages[i].timestamp)


def test_keyed_records_fill_batches_to_batch_size_only(cluster) -> None:
    cluster.create_topic("t", 1)
    counting = CountingCluster(cluster)
    with Producer(counting, batch_size=1000, linger_ms=10_000) as producer:
        for i in range(30):  # 300 B each with the framing estimate: 3 a batch
            producer.send("t", b"x" * 270, key=b"key-%05d" % (i % 2))
        for i in range(30):
            producer.send_nowait("t", b"x" * 270, key=b"key-%05d" % (i % 2))
    assert [n for _, _, n in counting.batches] == [3] * 20


def test_a_stale_partition_count_is_refreshed_for_keyed_records(cluster) -> None:
    cluster.create_topic("t", 1)
    with Producer(cluster, metadata_max_age_ms=0) as producer:
        assert producer.send("t", b"a", key=b"key").result(5).partition == 0
        producer.send_nowait("t", b"a", key=b"key")
        cluster.add_partitions("t", 4)
        # metadata_max_age_ms=0: the next keyed record sees the 4 partitions
        expected = Murmur2Partitioner()(b"key", 4)
        assert expected != 0
        assert producer.send("t", b"b", key=b"key").result(5).partition == expected
        producer.send_nowait("t", b"c", key=b"key")
    assert [m.value for m in read_all(cluster, "t", expected)] == [b"b", b"c"]


def test_closed_producers_refuse_usual_records_too(cluster) -> None:
    cluster.create_topic("t", 1)
    producer = Producer(cluster)
    producer.send("t", b"a", key=b"k").result(5)  # the key is hashed: the shortcut is open
    producer.close()
    with pytest.raises(ClosedError):
        producer.send("t", b"b", key=b"k")
    with pytest.raises(ClosedError):
        producer.send_nowait("t", b"b", key=b"k")
    assert cluster.latest_offset("t", 0) == 1


def test_a_clock_set_back_does_not_keep_a_partition_count(cluster, monkeypatch) -> None:
    """Partition counts expire by the wall clock (the read that stamps the record): one set
    back an hour must not make a count fresh for an hour more."""
    now = [1_800_000_000_000_000_000]
    monkeypatch.setattr(producer_module, "_time_ns", lambda: now[0])
    cluster.create_topic("t", 1)
    with Producer(cluster, metadata_max_age_ms=60_000) as producer:
        assert producer.send("t", b"a", key=b"key").result(5).partition == 0
        cluster.add_partitions("t", 4)
        now[0] += 1_000_000_000  # a second later: the count of 1 is still fresh
        assert producer.send("t", b"b", key=b"key").result(5).partition == 0
        now[0] -= 3600 * 1_000_000_000
        meta = producer.send("t", b"c", key=b"key").result(5)
    assert meta.partition == Murmur2Partitioner()(b"key", 4) != 0
    assert meta.timestamp == now[0] // 1_000_000


@pytest.mark.parametrize(
    ("setting", "value", "error", "match"),
    [
        ("linger_ms", float("nan"), ValueError, "linger_ms"),
        ("linger_ms", float("inf"), ValueError, "linger_ms"),
        ("linger_ms", -1, ValueError, "linger_ms"),
        ("linger_ms", 900_001, ValueError, "linger_ms"),  # librdkafka's bound, both paths
        ("linger_ms", True, TypeError, "linger_ms"),
        ("linger_ms", "5", TypeError, "linger_ms"),
        ("batch_size", True, TypeError, "batch_size"),
        ("batch_size", 1000.0, TypeError, "batch_size"),
        ("batch_size", float("nan"), TypeError, "batch_size"),
        ("batch_size", 0, ValueError, "batch_size"),
        ("batch_size", 1 << 31, ValueError, "batch_size"),
        ("metadata_max_age_ms", float("nan"), ValueError, "metadata_max_age_ms"),
        ("metadata_max_age_ms", float("inf"), ValueError, "metadata_max_age_ms"),
        ("metadata_max_age_ms", -1, ValueError, "metadata_max_age_ms"),
        ("metadata_max_age_ms", False, TypeError, "metadata_max_age_ms"),
        ("durable", "yes", TypeError, "durable"),
        ("durable", 1, TypeError, "durable"),
        ("clock", 1_700_000_000_000, TypeError, "clock"),
        ("key_serializer", "utf-8", TypeError, "key_serializer"),
        ("value_serializer", b"json", TypeError, "value_serializer"),
        ("client_config", [("acks", "all")], TypeError, "client_config"),
    ],
)
def test_bad_settings_are_refused_at_construction(cluster, setting, value, error, match) -> None:
    with pytest.raises(error, match=match):
        Producer(cluster, **{setting: value})


def test_unknown_settings_are_refused_and_good_ones_taken(cluster) -> None:
    with pytest.raises(TypeError, match="linger"):
        Producer(cluster, linger=5)  # type: ignore[call-arg]
    cluster.create_topic("t", 1)
    with Producer(
        cluster,
        batch_size=1,
        linger_ms=0,
        metadata_max_age_ms=0.5,
        durable=True,
        key_serializer=None,
        value_serializer=string_serializer,
        client_config={},
    ) as producer:
        assert producer.send("t", "v").result(5).offset == 0
    with Producer(cluster, linger_ms=900_000, batch_size=(1 << 31) - 1) as producer:
        producer.send("t", b"w")
    assert [m.value for m in read_all(cluster, "t", 0)] == [b"v", b"w"]


def test_a_delivery_callback_cannot_flush_and_its_close_does_not_wait(cluster) -> None:
    """A callback runs on the sender thread: its flush() waited for that thread, for good
    (every later record timed out, and so did close()), and so did its close(). As Kafka's
    producer, flush() there is refused and close() does not wait; a close() outside it
    does. A callback raising SystemExit stopped the sender without a word. An attack on
    the Producer, 2026-12-06."""
    cluster.create_topic("t", 1)
    got: dict[str, object] = {}
    producer = Producer(cluster)

    def flushing(metadata, error):
        try:
            producer.flush(5)
        except RuntimeError as exc:
            got["flush"] = exc

    def exiting(metadata, error):
        raise SystemExit(3)

    def closing(metadata, error):
        producer.close()
        got["closed"] = True

    producer.send("t", b"a", on_delivery=flushing).result(5)
    producer.flush(5)  # (its callbacks have run)
    assert "from a delivery callback" in str(got["flush"])
    producer.send("t", b"b", on_delivery=exiting).result(5)
    producer.flush(5)
    assert producer.send("t", b"c").result(5).offset == 2  # the sender went on
    producer.send("t", b"d", on_delivery=closing)
    producer.flush(5)
    assert got["closed"] is True  # (closed, and the flush it did not wait for is done)
    producer.close(5)  # (outside a callback: waits for the sender)
    assert not producer._sender.is_alive()
    with pytest.raises(ClosedError):
        producer.send("t", b"late")
    assert cluster.latest_offset("t", 0) == 4
