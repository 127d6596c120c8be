"""NetworkCluster.produce once held one lock and flush()ed, so a write to an unreachable
broker stopped writes to live ones (a consumer's heartbeats); and it assumed one call's
records land at contiguous offsets, which librdkafka does not promise.

librdkafka is replaced by a double that never answers for partition 1 (its leader is gone)
and answers partition 0 at once, so the interleaving is forced, not hoped for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from logmarshal import NewRecord, Producer
from logmarshal.errors import ClosedError, LogmarshalError, NetworkError
from logmarshal.network import NetworkCluster, reports
from logmarshal.network import cluster as cluster_module

DEAD = 1


class _Message:
    def __init__(self, offset: int, topic: str = "t", partition: int = 0) -> None:
        self._offset = offset
        self._topic = topic
        self._partition = partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (2, 1_700_000_000_000)  # LogAppendTime


class OneDeadLeader:
    """A stand-in for confluent_kafka.Producer: partition 1's leader never answers."""

    def __init__(self, offsets: list[int] | None = None) -> None:
        self._pending: list[tuple[int, Any]] = []
        self._lock = threading.Lock()
        self._offsets = offsets
        self._next = 0

    def produce(
        self,
        topic,
        value=None,
        key=None,
        partition=0,
        on_delivery=None,
        callback=None,
        timestamp=0,
        headers=None,
    ) -> None:  # confluent-kafka's order: logmarshal.Producer passes its arguments by position
        with self._lock:
            self._pending.append((partition, on_delivery))

    def _serve(self, held: tuple[int, ...] = (DEAD,)) -> int:
        """Report every pending record but those of the ``held`` partitions."""
        with self._lock:
            ready = [(p, cb) for p, cb in self._pending if p not in held]
            self._pending = [(p, cb) for p, cb in self._pending if p in held]
        for _p, callback in ready:
            if self._offsets is not None:
                offset = self._offsets.pop(0)
            else:
                offset, self._next = self._next, self._next + 1
            callback(None, _Message(offset))
        return len(ready)

    def poll(self, timeout: float = 0.0) -> int:
        served = self._serve()
        if not served and timeout:
            threading.Event().wait(min(timeout, 0.01))
        return served

    def flush(self, timeout: float = -1) -> int:
        self._serve()
        with self._lock:
            left = len(self._pending)
        if left:
            threading.Event().wait(timeout)
        return left


@pytest.fixture
def network(broker):
    with NetworkCluster(broker.bootstrap, timeout=3.0) as cluster:
        yield cluster


def test_a_dead_leader_does_not_hold_up_writes_to_a_live_one(network, monkeypatch) -> None:
    monkeypatch.setattr(network, "_producer", lambda durable: OneDeadLeader())
    failed: list[BaseException] = []

    def write_to_the_dead_leader() -> None:
        try:
            network.produce("t", DEAD, [NewRecord(b"stuck", timestamp=0)])
        except LogmarshalError as exc:
            failed.append(exc)

    stuck = threading.Thread(target=write_to_the_dead_leader)
    stuck.start()
    try:
        result = network.produce(
            "t", 0, [NewRecord(b"a", timestamp=0), NewRecord(b"b", timestamp=0)]
        )
        assert stuck.is_alive(), "the live write waited for the dead one"
        assert result.offsets == (0, 1)
    finally:
        stuck.join(10)
    assert failed and "no acknowledgement" in str(failed[0])


def test_records_of_one_call_keep_their_own_offsets(network, monkeypatch) -> None:
    monkeypatch.setattr(network, "_producer", lambda durable: OneDeadLeader([5, 6, 9]))
    result = network.produce("t", 0, [NewRecord(b"%d" % i, timestamp=0) for i in range(3)])
    assert (result.base_offset, result.last_offset, result.offsets) == (5, 9, (5, 6, 9))


def test_the_producer_reports_each_records_offset(network, monkeypatch) -> None:
    network.create_topic("t", 1)  # the Producer asks the cluster for the topic's partitions
    monkeypatch.setattr(network, "client_producer", lambda settings: OneDeadLeader([3, 7]))
    with Producer(network, linger_ms=10_000) as producer:
        futures = [producer.send("t", b"x", partition=0), producer.send("t", b"y", partition=0)]
        producer.flush()
        assert [f.result(5).offset for f in futures] == [3, 7]


class AllTimeOut:
    """A stand-in for confluent_kafka.Producer whose every delivery report is a failure."""

    def __init__(self) -> None:
        self._reports: list = []

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, *rest) -> None:
        self._reports.append((on_delivery, _Message(-1, topic, max(partition, 0))))

    def poll(self, timeout: float = 0.0) -> int:
        reports, self._reports = self._reports, []
        for callback, message in reports:
            callback(KafkaError(KafkaError._MSG_TIMED_OUT), message)
        return len(reports)

    def flush(self, timeout: float = -1) -> int:
        self.poll()
        return 0


def test_failed_deliveries_reach_results_and_the_next_flush(network, monkeypatch) -> None:
    network.create_topic("t", 1)
    monkeypatch.setattr(network, "client_producer", lambda settings: AllTimeOut())
    producer = Producer(network)
    tracked = producer.send("t", b"a")
    producer.send_nowait("t", b"b")
    producer.send_nowait("t", b"c")
    with pytest.raises(NetworkError, match="timed out"):
        producer.flush()  # the first failure of a send_nowait() record, raised once
    producer.flush()
    with pytest.raises(NetworkError, match="timed out"):
        tracked.result(0)  # a send() record's failure is its result's
    producer.close()


# -- durable writes: one thread serves their delivery reports (network.reports) ----------------


class OneReportAPoll(OneDeadLeader):
    """OneDeadLeader whose poll serves one report at a time, and which notes the thread of
    every poll (nothing but the reports' own thread may poll the durable producer)."""

    def __init__(self) -> None:
        super().__init__()
        self.pollers: set[str] = set()

    def _serve(self) -> int:
        with self._lock:
            ready = [(p, cb) for p, cb in self._pending if p != DEAD][:1]
            if ready:
                self._pending.remove(ready[0])
        for partition, callback in ready:
            offset, self._next = self._next, self._next + 1
            callback(None, _Message(offset, partition=partition))
        return len(ready)

    def poll(self, timeout: float = 0.0) -> int:
        self.pollers.add(threading.current_thread().name)
        return super().poll(timeout)


class _Done:
    """Every call of a write's ``done``: (when, what it was given)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, dict]] = []
        self.cond = threading.Condition()

    def __call__(self, results: dict) -> None:
        with self.cond:
            self.calls.append((time.monotonic(), dict(results)))
            self.cond.notify_all()

    def wait_for(self, partitions: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(
                lambda: sum(len(r) for _, r in self.calls) >= partitions, timeout
            )


def test_a_dead_leader_holds_up_only_its_own_durable_answers(network, monkeypatch) -> None:
    """A coordination write to partitions 0 and DEAD: 0 is answered at once, DEAD when its
    time is up; a write of another caller to 0 meanwhile is answered too; every poll of the
    producer is the reports thread's."""
    monkeypatch.setattr(reports, "_GRACE", 0.3)
    fake = OneReportAPoll()
    monkeypatch.setattr(network, "_producer", lambda durable: fake)
    done = _Done()
    start = time.monotonic()
    network.produce_async(
        "t",
        {
            0: [NewRecord(b"a", timestamp=0), NewRecord(b"b", timestamp=0)],
            DEAD: [NewRecord(b"c", timestamp=0)],
        },
        done,
    )
    assert done.wait_for(1, 2.0), "the live partition waited for the dead one"
    _, first = done.calls[0]
    assert list(first) == [0] and first[0].offsets == (0, 1)
    assert network.produce("t", 0, [NewRecord(b"d", timestamp=0)], durable=True).offsets == (2,)
    assert done.wait_for(2, 10.0)
    dead_at, dead = done.calls[1]
    assert list(dead) == [DEAD] and isinstance(dead[DEAD], NetworkError)
    assert dead_at - start >= 3.0  # (the network's timeout: librdkafka's delivery timeout)
    assert len(done.calls) == 2
    assert fake.pollers and all(name.startswith("logmarshal-reports:") for name in fake.pollers)


def test_a_calls_partitions_reported_in_turn_are_answered_together(network, monkeypatch) -> None:
    """librdkafka reports a write's partitions one at a time: answered in one piece (one
    step of the core for a heartbeat pass), not one each."""
    monkeypatch.setattr(reports, "_GATHER", 1.0)  # (a loaded machine's polls stay within it)
    fake = OneReportAPoll()
    monkeypatch.setattr(network, "_producer", lambda durable: fake)
    done = _Done()
    network.produce_async("t", {p: [NewRecord(b"x", timestamp=0)] for p in (0, 2, 3, 4)}, done)
    assert done.wait_for(4, 5.0)
    assert len(done.calls) == 1
    assert sorted(done.calls[0][1]) == [0, 2, 3, 4]


def test_closing_answers_the_durable_writes_in_flight(broker, monkeypatch) -> None:
    network = NetworkCluster(broker.bootstrap, timeout=1.0)
    fake = OneReportAPoll()
    monkeypatch.setattr(network, "_producer", lambda durable: fake)
    done = _Done()
    network.produce_async("t", {DEAD: [NewRecord(b"x", timestamp=0)]}, done)
    network.close()
    assert done.wait_for(1, 5.0)
    assert [type(r[DEAD]) for _, r in done.calls] == [ClosedError]
    with pytest.raises(ClosedError):
        network.produce_async("t", {0: [NewRecord(b"x", timestamp=0)]}, done)
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-reports:")]


class RefusesPartition1(OneReportAPoll):
    """Hands partition 0's records over; refuses partition 1's with an unexpected error."""

    def produce(self, topic, value=None, key=None, partition=0, on_delivery=None, **kw) -> None:
        if partition == 1:
            raise TypeError("refused")
        super().produce(topic, value, key, partition, on_delivery)


def test_a_partition_refused_on_hand_over_is_answered_once_alone(network, monkeypatch) -> None:
    """A record librdkafka refuses at once (any error) fails its partition alone, once; the
    partition handed over before it is answered as it lands, once."""
    fake = RefusesPartition1()
    monkeypatch.setattr(network, "_producer", lambda durable: fake)
    done = _Done()
    network.produce_async(
        "t", {0: [NewRecord(b"a", timestamp=0)], 1: [NewRecord(b"b", timestamp=0)]}, done
    )
    assert done.wait_for(2, 5.0)
    assert network._reports is not None and not network._reports._calls  # none can come again
    answered = [cp for _, results in done.calls for cp in results]
    assert sorted(answered) == [0, 1]
    got = {cp: r for _, results in done.calls for cp, r in results.items()}
    assert got[0].offsets == (0,)
    assert isinstance(got[1], NetworkError) and "refused" in str(got[1])


SLOW = 2


class FailsForGood(OneDeadLeader):
    """Answers partition 0 at once and SLOW only when flushed (a request the broker answers
    late); once ``fail`` is set, its next poll with nothing to answer raises librdkafka's
    fatal error (an idempotent producer whose sequence the log lost), and it takes no more
    records. DEAD's request is dropped unreported then, or with ``hangs`` never answered."""

    def __init__(self, *, hangs: bool = False) -> None:
        super().__init__()
        self.fail = threading.Event()
        self.failed = False
        self.hangs = hangs

    def produce(self, topic, value=None, key=None, partition=0, on_delivery=None, **kw) -> None:
        if self.failed:
            raise KafkaException(KafkaError(KafkaError._FATAL))
        super().produce(topic, value, key, partition, on_delivery)

    def poll(self, timeout: float = 0.0) -> int:
        served = self._serve(held=(DEAD, SLOW))
        if served or self.failed or not self.fail.is_set():
            if not served and timeout:
                threading.Event().wait(min(timeout, 0.01))
            return served
        self.failed = True
        if not self.hangs:
            with self._lock:
                self._pending = [(p, cb) for p, cb in self._pending if p != DEAD]
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True))

    def flush(self, timeout: float = -1) -> int:
        self._serve()
        with self._lock:
            left = len(self._pending)
        if left:
            threading.Event().wait(min(timeout, 0.05))
        return left

    def purge(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self._pending = []


def _failing_producers(*, hangs: bool) -> tuple[list[OneDeadLeader], Any]:
    """A stand-in for ``NetworkCluster._producer``: a FailsForGood first, then good ones."""
    made: list[OneDeadLeader] = []

    def producer(durable: bool) -> OneDeadLeader:
        made.append(FailsForGood(hangs=hangs) if not made else OneDeadLeader())
        return made[-1]

    return made, producer


def _errors(caplog, text: str) -> list[Any]:
    return [r for r in caplog.records if text in r.getMessage() and r.levelname == "ERROR"]


def test_a_producer_failed_for_good_is_replaced_and_its_writes_answered_once(
    network, monkeypatch, caplog
) -> None:
    """librdkafka's fatal error: the write in flight is answered once per partition (the
    partition reported before it, and the one reported while its requests are waited for,
    with their offsets; the other failed), and the next durable write goes through a new
    producer."""
    # partition 0's report is held back for its call's others while the error comes
    monkeypatch.setattr(reports, "_GATHER", 1.0)
    made, producer = _failing_producers(hangs=False)
    monkeypatch.setattr(network, "_producer", producer)
    done = _Done()
    network.produce_async(
        "t", {p: [NewRecord(b"%d" % p, timestamp=0)] for p in (0, DEAD, SLOW)}, done
    )
    made[0].fail.set()
    assert done.wait_for(3, 2.0), done.calls  # (not at the write's deadline: 3 s + grace)
    answered = [cp for _, results in done.calls for cp in results]
    assert sorted(answered) == [0, DEAD, SLOW]
    got = {cp: r for _, results in done.calls for cp, r in results.items()}
    assert got[0].offsets == (0,) and got[SLOW].offsets == (1,)
    assert isinstance(got[DEAD], NetworkError) and "failed for good" in str(got[DEAD])
    result = network.produce("t", 0, [NewRecord(b"c", timestamp=0)], durable=True)
    assert result.offsets == (0,) and len(made) == 2
    assert len(_errors(caplog, "failed for good")) == 1


def test_a_failed_producer_is_replaced_once_its_requests_are_answered_or_timed_out(
    broker, monkeypatch, caplog
) -> None:
    """While the failed producer's requests are waited for, what they answer is passed on
    as it comes and new writes fail at once; a request never answered holds the new
    producer back until librdkafka's delivery timeout and the grace are over."""
    monkeypatch.setattr(reports, "_GRACE", 0.3)
    network = NetworkCluster(broker.bootstrap, timeout=1.0)
    try:
        made, producer = _failing_producers(hangs=True)
        monkeypatch.setattr(network, "_producer", producer)
        first, late = _Done(), _Done()
        network.produce_async("t", {0: [NewRecord(b"a", timestamp=0)], DEAD: [NewRecord(b"b", timestamp=0)]}, first)  # fmt: skip
        network.produce_async("t", {SLOW: [NewRecord(b"c", timestamp=0)]}, late)
        assert first.wait_for(1, 2.0)  # partition 0, alone
        made[0].fail.set()
        failed_at = time.time()
        assert late.wait_for(1, 0.8), "a report of the failed producer waited for the others"
        assert late.calls[0][1][SLOW].offsets == (1,)
        with pytest.raises(NetworkError, match="failed for good"):
            network.produce_async("t", {0: [NewRecord(b"d", timestamp=0)]}, _Done())
        assert first.wait_for(2, 5.0)
        _, dead = first.calls[-1]
        assert list(dead) == [DEAD] and isinstance(dead[DEAD], NetworkError)
        ends = time.monotonic() + 5.0  # the retirement's end: its one error line
        while not _errors(caplog, "failed for good"):
            assert time.monotonic() < ends, "the failed producer was never retired"
            time.sleep(0.01)
        (ended,) = _errors(caplog, "failed for good")
        assert ended.created - failed_at >= 1.0  # (librdkafka's delivery timeout: 1 s here)
        assert [r for r in caplog.records if "still unanswered" in r.getMessage()]
        result = network.produce("t", 0, [NewRecord(b"e", timestamp=0)], durable=True)
        assert result.offsets == (0,) and len(made) == 2
    finally:
        network.close()


def test_a_producer_that_fails_for_good_again_soon_is_not_remade_at_once(
    network, monkeypatch, caplog
) -> None:
    """A fatal error that comes back (a missing permission, say) does not make a producer
    per write: the first failed one is replaced at once, the next only after
    ``_REMAKE_AFTER`` (its writes meanwhile fail with a clear error)."""
    made: list[FailsForGood] = []

    def producer(durable: bool) -> FailsForGood:
        made.append(FailsForGood())
        made[-1].fail.set()
        return made[-1]

    monkeypatch.setattr(network, "_producer", producer)
    for expected in (1, 2):
        done = _Done()
        network.produce_async("t", {DEAD: [NewRecord(b"x", timestamp=0)]}, done)
        assert done.wait_for(1, 2.0) and len(made) == expected
        ends = time.monotonic() + 5.0
        while len(_errors(caplog, "failed for good")) < expected:
            assert time.monotonic() < ends, "not retired"
            time.sleep(0.01)
    with pytest.raises(NetworkError, match="failed for good again"):
        network.produce_async("t", {0: [NewRecord(b"y", timestamp=0)]}, _Done())
    assert len(made) == 2
    monkeypatch.setattr(cluster_module, "_REMAKE_AFTER", 0.0)
    network.produce_async("t", {0: [NewRecord(b"z", timestamp=0)]}, _Done())
    assert len(made) == 3
