"""A partition ``__marshal`` has no position for starts at the Kafka group's committed offset
(``core/fetching.on_bounds``): what the Consumer reads of them, and when, on an embedded
cluster with the group's offsets in memory. Found by an attack on 4150c99:

- the mirror wrote offset 0 for a partition with no position at all (``auto_offset_reset=
  "error"``), and the next member read it back as the group's place: records handed out
  where ``NoPosition`` was due;
- one failed read (OffsetFetch) applied ``auto_offset_reset``: an AMO group whose
  ``__marshal`` was made again handed every record out again. A Kafka consumer retries;
- the read ran on the member's one fetch thread: a read that took seconds held up every
  other partition of the member.

On Apache Kafka: tests/kafka/test_mirror.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Mapping

import pytest

from logmarshal.admin.mirror import KafkaOffsetSink, MirrorError, ReadInPart
from logmarshal.consumer.fetcher import MemberFetcher
from logmarshal.core import Bounds, LookUp
from logmarshal.errors import NoPosition

from ..consumer_world import TOPIC, drain, produce, wait_until

Key = tuple[str, int]


class GroupOffsets:
    """Kafka's committed offsets of the group, in memory: ``commit`` is an OffsetCommit,
    ``committed`` an OffsetFetch. The next ``failing`` reads raise; while ``gate`` is clear,
    reads wait for it (bounded)."""

    def __init__(self, offsets: Mapping[Key, int] | None = None) -> None:
        self.offsets: dict[Key, int] = dict(offsets or {})
        self.reads: list[list[Key]] = []
        self.failing = 0
        self.waiting = 0
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def live(self, group: str) -> None:
        return None

    def commit(self, group: str, offsets: Mapping[Key, int]) -> None:
        with self._lock:
            self.offsets.update(offsets)

    def committed(self, group: str, keys: Iterable[Key]) -> dict[Key, int]:
        keys = list(keys)
        with self._lock:
            self.waiting += 1
        try:
            assert self.gate.wait(30), "the test never opened the gate"
        finally:
            with self._lock:
                self.waiting -= 1
        with self._lock:
            self.reads.append(keys)
            if self.failing:
                self.failing -= 1
                raise RuntimeError("COORDINATOR_NOT_AVAILABLE")
            return {k: self.offsets[k] for k in keys if k in self.offsets}


def no_position(consumer) -> bool:
    try:
        consumer.poll(0.05)
    except NoPosition:
        return True
    return False


def test_a_partition_without_a_position_mirrors_none_and_the_next_member_keeps_its_policy(
    realtime,
) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 10)
    kafka = GroupOffsets()
    first = realtime.consumer("c1", auto_offset_reset="error", mirror_offsets=kafka)
    wait_until(lambda: no_position(first), what="NoPosition")
    first.close()  # (the mirror's last commit is at close)
    assert kafka.offsets == {}
    second = realtime.consumer("c2", auto_offset_reset="error", mirror_offsets=kafka)
    wait_until(lambda: no_position(second), what="NoPosition for the next member too")
    assert kafka.reads and kafka.offsets == {}


def test_a_failed_read_is_read_again_not_taken_for_no_offset(realtime, caplog) -> None:
    """AMO, ``__marshal`` deleted and made again: the group's mirrored offsets are its place,
    however many reads fail first."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 30)
    kafka = GroupOffsets()
    first = realtime.consumer("c1", mode="amo", mirror_offsets=kafka)
    assert [m.offset for m in drain(first, 30)] == list(range(30))
    first.close()
    assert kafka.offsets == {(TOPIC, 0): 30}
    for marshaler in realtime.marshalers:
        marshaler.close()
    realtime.cluster.delete_topic("__marshal")
    kafka.failing = 3
    second = realtime.consumer("c2", mode="amo", mirror_offsets=kafka)
    produce(realtime.cluster, 0, 5)
    assert [m.offset for m in drain(second, 5, timeout=15)] == list(range(30, 35))
    assert len(kafka.reads) >= 4  # three failed, then the one that answered
    said = [r for r in caplog.records if "cannot read the Kafka group's committed" in r.message]
    assert len(said) == 1 and "they start once it answers" in said[0].message


def test_a_slow_read_holds_up_no_other_partition(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    kafka = GroupOffsets()
    consumer = realtime.consumer("c1", mirror_offsets=kafka)
    assert [m.offset for m in drain(consumer, 5)] == list(range(5))
    kafka.gate.clear()  # Kafka's coordinator answers no read now
    realtime.cluster.add_partitions(TOPIC, 2)  # a partition with no position: it asks
    produce(realtime.cluster, 1, 3)
    wait_until(lambda: kafka.waiting, timeout=10, what="the read of partition 1")
    produce(realtime.cluster, 0, 5)
    got = drain(consumer, 5)  # partition 0 goes on while partition 1's read waits
    assert [(m.partition, m.offset) for m in got] == [(0, o) for o in range(5, 10)]
    assert kafka.waiting == 1
    kafka.gate.set()
    got = drain(consumer, 3)
    assert [(m.partition, m.offset) for m in got] == [(1, 0), (1, 1), (1, 2)]


def test_a_dropped_partition_keeps_no_answer_and_close_waits_for_no_read(realtime) -> None:
    """Closing while a read waits: close returns, and the read's late answer is dropped."""
    realtime.cluster.create_topic(TOPIC, 1)
    kafka = GroupOffsets({(TOPIC, 0): 3})
    kafka.gate.clear()
    consumer = realtime.consumer("c1", mirror_offsets=kafka)
    wait_until(lambda: kafka.waiting, timeout=10, what="the read of partition 0")
    closer = threading.Thread(target=consumer.close)
    closer.start()
    closer.join(10)
    assert not closer.is_alive()
    kafka.gate.set()  # (the read thread ends with the read; nothing of it is used)
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.endswith("-committed")],
        what="the read thread to end",
    )


@pytest.mark.parametrize("failing", [0, 2])
def test_a_group_offset_inside_the_log_is_where_a_new_member_starts(realtime, failing) -> None:
    realtime.cluster.create_topic(TOPIC, 2)
    produce(realtime.cluster, 0, 10)
    produce(realtime.cluster, 1, 10)
    kafka = GroupOffsets({(TOPIC, 0): 7})  # partition 1: none (the policy: earliest)
    kafka.failing = failing
    consumer = realtime.consumer("c1", mirror_offsets=kafka)
    got = drain(consumer, 13, timeout=15)
    assert sorted((m.partition, m.offset) for m in got) == [(0, 7), (0, 8), (0, 9)] + [
        (1, o) for o in range(10)
    ]


# -- the fetch thread's parked look-ups (a second attack, on f4187b4) ---------------------------


@pytest.fixture
def fetcher_of(cluster):
    """A member's fetch thread over ``cluster``, its answers in ``.answered``; stopped after."""
    made: list[MemberFetcher] = []

    def make(committed) -> MemberFetcher:
        answered: list = []
        fetcher = MemberFetcher(
            cluster,
            answered.extend,
            max_bytes=1 << 20,
            max_wait=0.05,
            name="logmarshal-consumer-fetch:test",
            committed=committed,
        )
        fetcher.answered = answered  # type: ignore[attr-defined]  # (the test's view)
        made.append(fetcher)
        return fetcher

    yield make
    for fetcher in made:
        fetcher.stop()
        fetcher.thread.join(5)


def bounds_of(fetcher) -> list[tuple[int, int | None]]:
    return [(e.token, e.committed) for e in list(fetcher.answered) if isinstance(e, Bounds)]


def test_an_answer_between_the_look_and_the_parking_starts_the_partition(
    cluster, fetcher_of
) -> None:
    """A newer look-up of a partition whose read is in flight: its pass finds no answer yet,
    the read answers (and finds nothing parked to tell), then the pass parks it. It was left
    parked for good, its answer kept, nothing asking again (the partition never started)."""
    cluster.create_topic(TOPIC, 1)
    gate = threading.Event()
    fetcher = fetcher_of(lambda keys: {(TOPIC, 0): 2} if gate.wait(10) else {})
    reads = fetcher._reads
    told = threading.Event()
    tell = reads._answered

    def answered(keys) -> None:
        tell(keys)
        told.set()

    reads._answered = answered
    take, looks = reads.take, []

    def take_then_answer(key):
        found = take(key)
        looks.append(found)
        if len(looks) == 2:  # the newer look-up's pass, before it parks: the read answers
            gate.set()
            assert told.wait(10)
        return found

    reads.take = take_then_answer
    fetcher.request(LookUp(1, TOPIC, 0, True))
    wait_until(lambda: fetcher._parked, what="the first look-up parked")
    fetcher.request(LookUp(2, TOPIC, 0, True))  # (replaces it, as the core may)
    wait_until(lambda: bounds_of(fetcher), what="the newer look-up answered")
    assert bounds_of(fetcher) == [(2, 2)]


def test_a_look_up_dropped_while_its_bounds_are_read_is_not_parked(cluster, fetcher_of) -> None:
    """Dropped while its pass read the bounds (a network round trip), it was parked and asked
    anyway; the answer asked it again, and with its topic deleted it was retried for ever."""
    cluster.create_topic("gone", 1)
    fetcher = fetcher_of(lambda keys: {})
    reader_bounds, in_bounds, go_on = fetcher._reader.bounds, threading.Event(), threading.Event()

    def held_bounds(keys):
        found = reader_bounds(keys)
        in_bounds.set()
        assert go_on.wait(10)
        return found

    fetcher._reader.bounds = held_bounds
    fetcher.request(LookUp(1, "gone", 0, True))
    assert in_bounds.wait(10)
    fetcher.drop([("gone", 0)])  # the core gives it up (its topic is being deleted)
    cluster.delete_topic("gone")
    go_on.set()
    wait_until(lambda: not fetcher._requests and not fetcher._drops, what="the drop taken")
    time.sleep(0.3)  # (a few passes: a look-up asked again would be retried in them)
    assert not fetcher._parked and not fetcher._retries and bounds_of(fetcher) == []


def test_partitions_answered_start_while_one_refused_is_read_again(cluster, fetcher_of) -> None:
    """One partition refused (a transaction of its offsets still pending) held up every
    partition read with it: the read is one call. Those answered start now."""
    cluster.create_topic(TOPIC, 3)
    refused = [2]

    def committed(keys):
        found = {k: 5 for k in keys if k[1] == 0}
        failed = [k for k in keys if k[1] in refused]
        if failed:
            raise ReadInPart("UNSTABLE_OFFSET_COMMIT", found, failed)
        return found

    fetcher = fetcher_of(committed)
    for p in range(3):
        fetcher.request(LookUp(p + 1, TOPIC, p, True))
    wait_until(lambda: len(bounds_of(fetcher)) == 2, what="the two answered partitions")
    assert sorted(bounds_of(fetcher)) == [(1, 5), (2, None)]
    refused.clear()  # the transaction ends
    wait_until(lambda: len(bounds_of(fetcher)) == 3, timeout=10, what="the refused one read")
    assert sorted(bounds_of(fetcher)) == [(1, 5), (2, None), (3, None)]


def test_closing_the_kafka_sink_waits_for_no_read_in_flight() -> None:
    """A read the coordinator holds (a pending transaction: its whole timeout) held the
    sink's one lock, so the member's last mirror commit and the sink's close waited for it.
    Reads have clients of their own now: close returns, the read ends on its own."""
    with socket.socket() as silent:  # accepts, never answers: every read waits its timeout
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        sink = KafkaOffsetSink(f"127.0.0.1:{silent.getsockname()[1]}", timeout=3.0)
        failed: list[BaseException] = []

        def read() -> None:
            try:
                sink.committed("g", [(TOPIC, 0)])
            except MirrorError as exc:
                failed.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        silent.settimeout(10)
        held = [silent.accept()[0] for _ in range(2)]  # the sink's admin and the read's client
        closer = threading.Thread(target=sink.close)
        closer.start()
        closer.join(1.5)  # (half the read's timeout: it used to wait all of it)
        assert not closer.is_alive()
        reader.join(15)
        assert not reader.is_alive() and failed  # the read ended, refused, on its own
        with pytest.raises(MirrorError, match="closed"):
            sink.committed("g", [(TOPIC, 0)])
        for conn in held:
            conn.close()
