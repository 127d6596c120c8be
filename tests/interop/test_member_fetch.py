"""One fetch loop per member, embedded and over the network (docs/architecture.md, "Consumer core:
decisions apart from threads"): threads do not grow with held partitions, an idle want
wakes nothing, and a partition dropped (revoked) and wanted again is read afresh."""

from __future__ import annotations

import gc
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from logmarshal import EmbeddedCluster, Marshaler, connect
from logmarshal.cluster import Message
from logmarshal.consumer import Consumer
from logmarshal.consumer.fetcher import MemberFetcher
from logmarshal.core import Bounds, Event, Fetch, Fetched, LookUp
from logmarshal.errors import NetworkError
from logmarshal.metrics import MarshalerMetrics
from logmarshal.network import partition_reader, readers
from storage import NewRecord
from tests.collections_seen import collections_seen


@pytest.fixture(params=["embedded", "network"])
def cluster(request, tmp_path) -> Iterator[object]:
    if request.param == "embedded":
        with EmbeddedCluster(tmp_path / "embedded") as opened:
            yield opened
        return
    broker = request.getfixturevalue("broker")
    with connect(bootstrap=broker.bootstrap) as opened:
        yield opened


def _produce(cluster, topic: str, partition: int, n: int) -> None:
    cluster.produce(
        topic,
        partition,
        [NewRecord(value=b"v%d" % i, timestamp=int(time.time() * 1000)) for i in range(n)],
    )


def _threads() -> tuple[int, int]:
    """(Python threads, OS threads) of this process but the in-process broker's (its I/O
    pool grows with its own load: not the member's)."""
    with open("/proc/self/status") as f:
        os_threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    broker = sum(t.name.startswith("broker") for t in threading.enumerate())
    return threading.active_count() - broker, os_threads - broker


def _settled_threads(hold: float = 0.5, timeout: float = 30.0) -> tuple[int, int]:
    """:func:`_threads` once it has not changed for ``hold`` seconds: the threads of clients
    that earlier tests closed end in their own time (librdkafka's), and one ending between
    two counts is not the member's."""
    deadline = time.monotonic() + timeout
    last, since = _threads(), time.monotonic()
    while time.monotonic() - since < hold:
        assert time.monotonic() < deadline, f"the thread count never settled: {last}"
        time.sleep(0.05)
        now = _threads()
        if now != last:
            last, since = now, time.monotonic()
    return last


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_threads_do_not_grow_with_held_partitions(cluster) -> None:
    _settled_threads()  # (once failed after the network tests: a closed client's thread)
    marshaler = Marshaler(cluster, "m", "g", 0.5)
    try:
        counts = {}
        for n in (4, 64):
            topic = f"t{n}"
            cluster.create_topic(topic, n)
            consumer = Consumer(marshaler, topic, rebalance="none", greedy=True)
            _wait(lambda consumer=consumer, n=n: len(consumer.claims()) == n)
            time.sleep(0.5)  # heartbeats and fetches under way
            counts[n] = _settled_threads()
            consumer.close()
        assert counts[4] == counts[64], counts
    finally:
        marshaler.close()


class _Answers:
    def __init__(self) -> None:
        self.q: queue.SimpleQueue[Event] = queue.SimpleQueue()

    def __call__(self, events: Sequence[Event]) -> None:
        for event in events:
            self.q.put(event)

    def next(self, timeout: float = 10.0) -> Event:
        return self.q.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            event = self.q.get(timeout=seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected answer {event!r}")


def test_fetch_loop_follows_claims_away_and_back(cluster) -> None:
    cluster.create_topic("t", 2)
    _produce(cluster, "t", 0, 5)
    _produce(cluster, "t", 1, 5)
    answers = _Answers()
    fetcher = MemberFetcher(cluster, answers, max_bytes=1 << 20, max_wait=0.2, name="fetch")
    try:
        fetcher.request(LookUp(1, "t", 0))
        assert answers.next() == Bounds(1, "t", 0, 0, 5)
        fetcher.request(Fetch(2, "t", 0, 0))
        fetcher.request(Fetch(3, "t", 1, 0))
        got = {}
        for _ in range(2):
            event = answers.next()
            assert isinstance(event, Fetched)
            got[event.token] = [m.offset for m in event.records]
        assert got == {2: list(range(5)), 3: list(range(5))}

        # idle wants: nothing is answered until records arrive (no empty answers)
        fetcher.request(Fetch(4, "t", 0, 5))
        fetcher.request(Fetch(5, "t", 1, 5))
        assert answers.none_within(0.6)

        # partition 0 moves away: nothing of it is answered any more
        fetcher.drop([("t", 0)])
        _produce(cluster, "t", 0, 3)
        _produce(cluster, "t", 1, 2)
        event = answers.next()
        assert isinstance(event, Fetched) and event.token == 5
        assert [m.offset for m in event.records] == [5, 6]
        assert answers.none_within(0.5)

        # and comes back (a new tenure, a new token): read afresh from where it resumes
        fetcher.request(Fetch(6, "t", 0, 5))
        event = answers.next()
        assert isinstance(event, Fetched) and event.token == 6
        assert [m.offset for m in event.records] == [5, 6, 7]

        # a move (seek) back: the newer request replaces the older one
        fetcher.request(Fetch(7, "t", 0, 8))
        fetcher.request(Fetch(8, "t", 0, 2))
        event = answers.next()
        assert isinstance(event, Fetched) and event.token == 8
        assert [m.offset for m in event.records] == list(range(2, 8))
        assert answers.none_within(0.3)
    finally:
        fetcher.stop()
        fetcher.thread.join(10)
    assert not fetcher.thread.is_alive()


def test_consumer_hands_out_nothing_of_a_partition_it_gave_up(cluster) -> None:
    cluster.create_topic("t", 2)
    marshaler = Marshaler(cluster, "m", "g", 0.5)
    consumer = Consumer(marshaler, "t", rebalance="none", greedy=True, reclaim_cooldown=6.0)
    try:
        _wait(lambda: len(consumer.claims()) == 2)
        consumer._give_up(("t", 0), "test")
        _wait(lambda: consumer.claims() == [("t", 1)])
        _produce(cluster, "t", 0, 3)
        _produce(cluster, "t", 1, 3)
        seen = []
        # a window well inside the cooldown (partition 0 cannot be claimed back in it) and
        # long enough for a fresh librdkafka reader's first fetch: over the network that
        # came 0.9 s after the assignment in 1 of 2 runs (librdkafka debug "fetch"), which
        # a 0.8 s window mistook for a delayed hand-out
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            seen += [(m.partition, m.offset) for m in consumer.poll(0.1)]
        assert seen == [(1, 0), (1, 1), (1, 2)]
        # after the cooldown it claims partition 0 back and reads it from its position
        _wait(lambda: len(consumer.claims()) == 2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < 6:
            batch = consumer.poll(0.2)
            consumer.commit(*batch)
            seen += [(m.partition, m.offset) for m in batch]
        assert sorted(seen) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    finally:
        consumer.close()
        marshaler.close()


@pytest.fixture(params=["c-fields", "c-messages", "python-messages"])
def messages_kind(request, monkeypatch) -> str:
    """The network reader's Messages: built by ``_fastconsume.batch`` from confluent-kafka's
    Message fields (C, once their layout was checked), by ``_fastconsume.messages`` through
    their methods (C; a confluent-kafka whose layout differs), both not GC-tracked, or by
    the Python maps the reader falls back to without the extension."""
    if request.param != "python-messages" and readers._messages_c is None:
        pytest.skip("logmarshal._fastconsume was not built (no C compiler at install)")
    if request.param == "c-fields":
        assert readers._FIELDS_READABLE  # confluent-kafka's layout is the one checked
    else:
        monkeypatch.setattr(readers, "_FIELDS_READABLE", False)
    if request.param == "python-messages":
        monkeypatch.setattr(readers, "_messages_c", None)
    return request.param


def _read_through(reader, keys: dict[tuple[str, int], int], want: int) -> dict:
    """Every record of ``keys`` from their offsets on, through a PartitionReader's wants,
    until ``want`` records of each came (fails after 30 s)."""
    got: dict[tuple[str, int], list] = {key: [] for key in keys}
    for key, offset in keys.items():
        reader.want(*key, offset)
    deadline = time.monotonic() + 30
    while any(len(records) < want for records in got.values()):
        assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
        for read in reader.poll(0.2):
            assert read.error is None, read.error
            key = (read.topic, read.partition)
            got[key] += read.records
            if len(got[key]) < want:
                reader.want(*key, read.records[-1].offset + 1)
    return got


def test_network_reader_messages_carry_every_field(broker, messages_kind) -> None:
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 1)
        records = [
            NewRecord(value=b"v0", key=b"k0", timestamp=1_700_000_000_000),
            NewRecord(value=None, key=b"k1", timestamp=1_700_000_000_001),  # a tombstone
            NewRecord(value=b"v2", headers=(("h", b"1"), ("e", None)), timestamp=1_700_000_000_002),
        ]
        cluster.produce("t", 0, records)
        reader = cluster.open_reader()
        try:
            got = _read_through(reader, {("t", 0): 0}, 3)[("t", 0)]
        finally:
            reader.close()
        assert [tuple(m) for m in got] == [
            ("t", 0, 0, 1_700_000_000_000, b"k0", b"v0", ()),
            ("t", 0, 1, 1_700_000_000_001, b"k1", None, ()),
            ("t", 0, 2, 1_700_000_000_002, None, b"v2", (("h", b"1"), ("e", None))),
        ]
        assert all(type(m) is Message for m in got)
        # C: out of the cyclic GC's sight (they wait in buffers by the ten thousand)
        assert [gc.is_tracked(m) for m in got] == [messages_kind == "python-messages"] * 3
        assert [tuple(m) for m in cluster.fetch("t", 0, 0)] == [tuple(m) for m in got]
        # the bytes of keys and values, which bound a fetch's answer and the read-ahead
        raw_reader = KafkaConsumer(cluster._consumer_conf())
        try:
            raw_reader.assign([TopicPartition("t", 0, 0)])
            raw: list = []
            deadline = time.monotonic() + 30
            while len(raw) < 3 and time.monotonic() < deadline:
                raw += raw_reader.consume(3 - len(raw), 0.5)
        finally:
            raw_reader.close()
        records, size = readers._messages("t", 0, raw)
        assert [tuple(m) for m in records] == [tuple(m) for m in got]
        assert size == len(b"k0v0k1v2")


def test_network_read_ahead_suspended_and_resumed_loses_and_repeats_nothing(
    broker, monkeypatch
) -> None:
    """A partition read far ahead of its wants is unassigned, then assigned again where
    the read-ahead ends: every record comes once, in order, whatever librdkafka had
    fetched meanwhile."""
    monkeypatch.setattr(readers, "_AHEAD_MAX", 40)
    monkeypatch.setattr(readers, "_FETCH_MAX_RECORDS", 7)
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 2)
        for partition in (0, 1):
            for start in range(0, 600, 100):
                cluster.produce(
                    "t",
                    partition,
                    [NewRecord(value=b"%d" % (start + i), timestamp=1) for i in range(100)],
                )
        reader = cluster.open_reader()
        suspended = []
        keep = reader._keep_records

        def counting_keep(key, records, size) -> None:
            keep(key, records, size)
            suspended.append(len(reader._suspended))

        monkeypatch.setattr(reader, "_keep_records", counting_keep)
        try:
            got = _read_through(reader, {("t", 0): 0, ("t", 1): 0}, 600)
        finally:
            reader.close()
    assert max(suspended) > 0  # the bound was reached: the path under test ran
    for key in (("t", 0), ("t", 1)):
        assert [m.offset for m in got[key]] == list(range(600)), key
        assert [m.value for m in got[key]] == [b"%d" % i for i in range(600)]


def test_confluent_kafka_fields_are_read_in_c_only_as_checked() -> None:
    """``_fastconsume.batch`` reads confluent-kafka's Message struct only once
    ``layout_matches`` saw its fields where it reads them, and hands anything but one
    partition's records without errors back to the general path (None)."""
    if readers._batch_c is None:
        pytest.skip("logmarshal._fastconsume was not built (no C compiler at install)")
    from confluent_kafka import KafkaError
    from confluent_kafka import Message as KafkaMessage

    def kafka(partition: int, offset: int, **fields) -> KafkaMessage:
        return KafkaMessage(
            topic="t", partition=partition, offset=offset, value=b"v", timestamp=(1, 5), **fields
        )

    one = kafka(1, 2, key=b"k")
    assert readers._layout_matches([(one, "t", 1, 2, b"k", b"v", None, 5)])
    assert not readers._layout_matches([(one, "t", 1, 3, b"k", b"v", None, 5)])  # offset
    assert not readers._layout_matches([(one, "t", 1, 2, None, b"v", None, 5)])  # key
    topic, partition, records, size = readers._batch_c(Message, [one, kafka(1, 3)])
    assert (topic, partition, size) == ("t", 1, 3)  # bytes of keys and values
    assert [tuple(m) for m in records] == [
        ("t", 1, 2, 5, b"k", b"v", ()),
        ("t", 1, 3, 5, None, b"v", ()),
    ]
    assert readers._batch_c(Message, [one, kafka(2, 3)]) is None  # two partitions
    failed = kafka(1, 3, error=KafkaError(KafkaError._MSG_TIMED_OUT))
    assert readers._batch_c(Message, [one, failed]) is None  # an error
    assert readers._batch_c(Message, []) is None


@pytest.mark.parametrize("collecting", [True, False])
def test_no_collection_sees_a_batch_half_converted(collecting: bool) -> None:
    """``_fastconsume.batch`` frees confluent-kafka's Messages (it empties the list it was
    given) before a collection can run: none runs while they and the Messages built from
    them are alive together, which promoted theirs batch after batch and so started full
    collections of the whole heap. The collector's state is as it was afterwards; a batch
    handed back to the general path (None) is left as it was."""
    if readers._batch_c is None or not readers._FIELDS_READABLE:
        pytest.skip("logmarshal._fastconsume was not built, or cannot read these fields")
    from confluent_kafka import Message as KafkaMessage

    raw = [
        KafkaMessage(topic="t", partition=0, offset=i, value=b"v%d" % i, timestamp=(1, i))
        for i in range(50)
    ]
    mixed = [*raw[:2], KafkaMessage(topic="t", partition=1, offset=0, value=b"x")]
    with collections_seen(raw, collecting) as seen:
        _, _, records, _ = readers._batch_c(Message, raw)
        after = gc.isenabled()
        assert readers._batch_c(Message, mixed) is None
    assert after is collecting
    assert raw == [] and len(mixed) == 3
    assert [m.offset for m in records] == list(range(50))
    assert [m.value for m in records] == [b"v%d" % i for i in range(50)]
    if collecting and sys.version_info < (3, 12):  # (from 3.12 one runs at the next bytecode)
        assert seen  # collections ran: after the batch, never during it
    assert not [n for n in seen if n], "a collection ran while the batch was half converted"


def test_network_consumer_reads_on_the_callers_thread_while_records_flow(broker) -> None:
    """Over the network, ``poll()`` takes the records from librdkafka on the caller's thread
    while they flow (no hand-over from the fetch thread per answer), and hands each out once,
    in order."""
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 1)
        for _ in range(10):
            _produce(cluster, "t", 0, 1000)
        marshaler = Marshaler(cluster, "m", "g", 0.5)
        consumer = Consumer(marshaler, "t", rebalance="none", greedy=True, batch_size=100)
        answered_by: list[str] = []
        answer = consumer._fetcher._answer

        def noting(events: Sequence[Event]) -> None:
            if any(isinstance(e, Fetched) for e in events):
                answered_by.append(threading.current_thread().name)
            answer(events)

        consumer._fetcher._answer = noting  # type: ignore[method-assign]
        try:
            assert consumer._fetcher.pumps
            seen: list[int] = []
            deadline = time.monotonic() + 30
            while len(seen) < 10_000 and time.monotonic() < deadline:
                batch = consumer.poll(0.5)
                consumer.commit(*batch)
                seen += [m.offset for m in batch]
            assert seen == list(range(10_000))
            caller = threading.current_thread().name
            # the first answers may come from the fetch thread (the caller waits for its
            # claim); once records flow, the caller's own passes read most of them
            assert answered_by.count(caller) > len(answered_by) / 2, answered_by
        finally:
            consumer.close()
            marshaler.close()


def test_an_idle_network_reader_waits_in_librdkafka_in_longer_slices(broker, monkeypatch) -> None:
    """librdkafka's wait cannot be woken, so a reader waits in it in slices; each costs
    CPU (about 0.15 ms with 256 partitions assigned). Once nothing came and nothing new
    was wanted for a while, the slices are longer (docs/performance.md, "Idle member");
    a newly wanted partition makes them short again."""
    monkeypatch.setattr(readers, "_IDLE_AFTER", 0.3)
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("idle", 4)
        reader = cluster.open_reader()
        waits: list[float] = []
        real = reader._consumer

        class Counting:
            def poll(self, timeout: float):
                waits.append(timeout)
                return real.poll(timeout)

            def __getattr__(self, name: str):
                return getattr(real, name)

        reader._consumer = Counting()
        try:
            for p in range(3):
                reader.want("idle", p, 0)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                assert reader.poll(0.5) == []
            assert waits[0] == readers._LIBRDKAFKA_SLICE  # just wanted: short
            assert max(waits) == readers._IDLE_SLICE > readers._LIBRDKAFKA_SLICE  # idle: long
            waits.clear()
            reader.want("idle", 3, 0)  # a new claim's partition
            assert reader.poll(0.1) == []
            assert waits and waits[0] <= readers._LIBRDKAFKA_SLICE
        finally:
            reader._consumer = real
            reader.close()


def test_a_partition_librdkafka_stopped_fetching_gets_a_new_consumer(
    broker, monkeypatch, caplog
) -> None:
    """librdkafka can stop fetching an assigned partition after its leader's broker restarts
    (confluentinc/librdkafka#5153; a Kafka fault test's member got nothing for 95 s). Here
    the partition is paused inside librdkafka, which looks the same to the reader: assigned,
    records in the log, none delivered. Once it waited ``_STALL_AFTER`` while the log holds
    more, the reader replaces its librdkafka consumer: the records come, each once, and a
    partition with read-ahead on hand loses and repeats nothing. A partition idle at its
    log's end is no stall."""
    monkeypatch.setattr(readers, "_STALL_AFTER", 0.5)
    monkeypatch.setattr(readers, "_FETCH_MAX_RECORDS", 7)
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 3)
        _produce(cluster, "t", 0, 5)
        _produce(cluster, "t", 2, 20)
        reader = cluster.open_reader()
        try:
            got = _read_through(reader, {("t", 0): 0}, 5)[("t", 0)]
            assert [m.offset for m in got] == list(range(5))
            reader.want("t", 1, 0)  # idle at its end throughout
            reader.want("t", 2, 0)
            first: list = []
            deadline = time.monotonic() + 30
            while not first:
                assert time.monotonic() < deadline
                first = [m for read in reader.poll(0.2) for m in read.records]
            assert [m.offset for m in first] == list(range(7))

            reader._consumer.pause([TopicPartition("t", 0)])  # librdkafka stops fetching it
            _produce(cluster, "t", 0, 5)
            with caplog.at_level("WARNING", logger=readers.__name__):
                later = _read_through(reader, {("t", 0): 5, ("t", 2): 7}, 5)
            assert [m.offset for m in later[("t", 0)]] == [5, 6, 7, 8, 9]
            assert reader.renewals == 1
            assert any("t/0 wants offset 5" in r.getMessage() for r in caplog.records)
            at = later[("t", 2)][-1].offset + 1
            rest = _read_through(reader, {("t", 2): at}, 20 - at)[("t", 2)] if at < 20 else []
            assert [m.offset for m in first + later[("t", 2)] + rest] == list(range(20))

            # every partition at its log's end now: checks find no stall
            reader.want("t", 0, 10)
            reader.want("t", 1, 0)
            reader.want("t", 2, 20)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                assert reader.poll(0.2) == []
            assert reader.renewals == 1
        finally:
            reader.close()


def test_a_stall_check_that_cannot_reach_the_brokers_fails_no_poll(broker, monkeypatch) -> None:
    """The stall check's ListOffsets request timed out while a Kafka node restarted (CI,
    2026-12-06): it raised out of ``poll``, whose answers were taken already, and stopped the
    member's fetch loop. A check that fails now fails nothing: the poll answers, and the
    check runs again later and finds the stall."""
    monkeypatch.setattr(readers, "_STALL_AFTER", 0.3)
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 1)
        _produce(cluster, "t", 0, 5)
        reader = cluster.open_reader()
        try:
            first = _read_through(reader, {("t", 0): 0}, 5)[("t", 0)]
            assert [m.offset for m in first] == list(range(5))
            reader._consumer.pause([TopicPartition("t", 0)])  # librdkafka stops fetching it
            _produce(cluster, "t", 0, 5)
            ends = reader._log_ends
            checks = []

            def unreachable(keys, timeout):
                checks.append(keys)
                raise NetworkError("no answer within 1 s")

            reader._log_ends = unreachable
            reader.want("t", 0, 5)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                assert reader.poll(0.1) == []  # (it raised NetworkError here)
            assert checks and reader.renewals == 0
            reader._log_ends = ends  # the brokers answer again: the stall is found
            later = _read_through(reader, {("t", 0): 5}, 5)[("t", 0)]
            assert [m.offset for m in later] == [5, 6, 7, 8, 9]
            assert reader.renewals == 1
        finally:
            reader.close()


def test_a_consumers_reader_renewal_is_counted(broker, monkeypatch) -> None:
    """What the reader's WARNING says is also a series an operator can alert on:
    ``logmarshal_consumer_reader_renewals_total`` of the Consumer whose fetch loop replaced
    its librdkafka consumer (the stall made as in the test above), and the records after
    the stall are handed out, each once."""
    monkeypatch.setattr(readers, "_STALL_AFTER", 0.5)
    metrics = MarshalerMetrics()
    labels = {"group": "g", "client_id": "a"}
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 1)
        _produce(cluster, "t", 0, 5)
        with Marshaler(cluster, "a", "g", 0.5, coordination_partitions=1, metrics=metrics) as m:
            consumer = Consumer(
                m, "t", mode="amo", batch_size=10, max_reserved=10, rebalance="none"
            )
            try:
                handed: list[int] = []
                deadline = time.monotonic() + 30
                while len(handed) < 5 and time.monotonic() < deadline:
                    handed += [msg.offset for msg in consumer.poll(0.2)]
                assert handed == list(range(5))
                name = "logmarshal_consumer_reader_renewals_total"
                assert metrics.registry.get_sample_value(name, labels) == 0.0
                reader = consumer._fetcher._reader
                reader._consumer.pause([TopicPartition("t", 0)])  # librdkafka stops
                _produce(cluster, "t", 0, 5)
                deadline = time.monotonic() + 30
                while len(handed) < 10 and time.monotonic() < deadline:
                    handed += [msg.offset for msg in consumer.poll(0.2)]
                assert handed == list(range(10))
                assert metrics.registry.get_sample_value(name, labels) == 1.0
            finally:
                consumer.close()


def test_a_partition_reader_whose_librdkafka_consumer_stopped_is_replaced(
    broker, monkeypatch
) -> None:
    """``NetworkCluster.fetch`` (records of one partition: the CLI's read, a streams
    restore) answered nothing below the log end when librdkafka had stopped fetching the
    partition (librdkafka#5153, made here by pausing it), for as long as the reader lived.
    It replaces that consumer, once per call, as the member's fetch loop does."""
    monkeypatch.setattr(partition_reader, "_EMPTY_CHECK_WAIT", 1.0)
    with connect(bootstrap=broker.bootstrap) as cluster:
        cluster.create_topic("t", 1)
        _produce(cluster, "t", 0, 5)
        assert [m.offset for m in cluster.fetch("t", 0, 0)] == list(range(5))
        reader = cluster._reader("t", 0)
        reader._consumer.pause([TopicPartition("t", 0)])  # librdkafka stops
        _produce(cluster, "t", 0, 5)
        assert [m.offset for m in cluster.fetch("t", 0, 5)] == list(range(5, 10))
        assert reader.renewals == 1
        assert cluster.fetch("t", 0, 10) == []  # at the log end: no stall, no renewal
        assert reader.renewals == 1


def test_a_read_tells_the_log_end_amo_reserves_up_to(cluster) -> None:
    """Every answer with records carries the partition's log end as the reader knows it
    (the network reader: librdkafka's high watermark from the fetch answer, no request),
    which AMO reserves up to, ahead of what was fetched (``delivery.AtMostOnce``)."""
    cluster.create_topic("t", 1)
    for _ in range(3):
        _produce(cluster, "t", 0, 10)
    reader = cluster.open_reader(max_bytes=1)  # (a batch an answer: never the whole log)
    try:
        reader.want("t", 0, 0)
        deadline = time.monotonic() + 30
        reads: list = []
        while not reads:
            assert time.monotonic() < deadline, "no answer in 30 s"
            reads = reader.poll(0.2)
        [read] = reads
        assert read.error is None, read.error
        assert read.records and read.records[-1].offset < 29
        assert read.log_end == 30
        _produce(cluster, "t", 0, 5)  # the next answer tells the end as it is then
        reader.want("t", 0, read.records[-1].offset + 1)
        ends = []
        while not ends or ends[-1] < 35:
            assert time.monotonic() < deadline, ends
            for later in reader.poll(0.2):
                ends.append(later.log_end)
                reader.want("t", 0, later.records[-1].offset + 1)
        assert ends == sorted(ends) and ends[-1] == 35, ends
    finally:
        reader.close()
