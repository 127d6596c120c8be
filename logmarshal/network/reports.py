"""The durable producer's delivery reports, served by one thread of their own.

librdkafka runs a delivery report in whichever thread polls the producer. When every writer
polled for its own reports, one writer's poll ran another's, which then waited for the next
event or its own timeout: waits had to be short (spinning under load) or long (a late
answer), and a member paid a thread and several polls per coordination partition per write.
Here one thread polls, only while records are in flight, and nothing else polls this
producer: a report is served as it arrives, and the partitions of a call whose reports came
in one poll are answered together (a heartbeat pass's records, one per coordination
partition, then cost one answer). A partition whose broker is away holds up only its own
answer: librdkafka reports each record once, at the latest after ``delivery.timeout.ms``.
The records of a partition land in the order handed over; their answers may reach ``done``
out of that order across calls (one call waiting to gather its partitions while a later one
of a single partition is answered): callers match answers by call, not by order.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from storage import NewRecord

from ..cluster import ProduceResult
from ..errors import ClosedError, NetworkError
from .error_map import _raise_from
from .produce import produce_one, produce_result

__all__ = ["DeliveryReports", "Done"]

log = logging.getLogger(__name__)

#: what a call's ``done`` is given: partitions answered together, each with where its
#: records landed or the error it alone met
Done = Callable[[dict[int, ProduceResult | Exception]], None]

#: how long one poll waits while records are in flight (a report ends it at once). Below
#: 200 ms: confluent-kafka >= 2.13 polls a producer in 200 ms chunks and, when given more,
#: waits out every chunk even after a report was served (confluent-kafka-python#2215)
_POLL = 0.1
#: a call's partitions answered are held back this long for its others (a heartbeat pass's
#: records, one per coordination partition, are reported one partition at a time, in one
#: poll or a few in a row): one answer instead of one each, while a partition whose broker
#: is away delays the others' answers by no more than this
_GATHER = 0.002
#: a call unanswered this long after librdkafka's own delivery timeout fails (librdkafka
#: reports every record by then; this only bounds a report that never comes)
_GRACE = 5.0


def _error(exc: KafkaException) -> KafkaError | None:
    """The KafkaError confluent-kafka raised ``exc`` with, if any."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _fatal(exc: KafkaException) -> bool:
    """librdkafka's fatal error: its producer takes no writes any more."""
    error = _error(exc)
    return error is not None and (error.fatal() or error.code() == KafkaError._FATAL)


class _Call:
    """One :meth:`DeliveryReports.submit`: its partitions' reports as they arrive."""

    __slots__ = (
        "counts",
        "deadline",
        "done",
        "gather_until",
        "ready",
        "reports",
        "topic",
        "unanswered",
    )

    def __init__(self, topic: str, counts: dict[int, int], done: Done, deadline: float) -> None:
        self.topic = topic
        self.counts = counts
        self.done = done
        self.deadline = deadline
        #: partition -> record index -> (error, offset, (timestamp type, timestamp))
        self.reports: dict[int, dict[int, tuple[KafkaError | None, int, tuple[int, int]]]] = {
            cp: {} for cp in counts
        }
        self.unanswered = set(counts)
        #: answered partitions not yet passed to ``done`` (held back until ``gather_until``)
        self.ready: dict[int, ProduceResult | Exception] = {}
        self.gather_until = 0.0


class DeliveryReports:
    """Writes through ``producer`` that do not wait; the only poller of ``producer``."""

    def __init__(self, producer: Producer, name: str, timeout: float) -> None:
        self._producer = producer
        self._name = name
        self._timeout = timeout
        self._cond = threading.Condition()
        self._calls: list[_Call] = []
        #: (call, partition, result): answered, not yet passed to the call's ``done``
        self._finished: list[tuple[_Call, int, ProduceResult | Exception]] = []
        self._closed = False
        #: librdkafka's fatal error, once met (the thread then retires the producer)
        self._fatal: KafkaException | None = None
        self._broken = False
        self._thread: threading.Thread | None = None

    def submit(self, topic: str, batches: Mapping[int, Sequence[NewRecord]], done: Done) -> None:
        """Send each partition's records (in order; librdkafka keeps a partition's order)
        without waiting; ``done`` is called from this object's thread with the partitions
        answered together, until each partition of ``batches`` was answered once. It must
        not block (it delays every other report)."""
        if not batches or any(not records for records in batches.values()):
            raise ValueError("each partition of a write needs at least one record")
        call = _Call(
            topic,
            {cp: len(records) for cp, records in batches.items()},
            done,
            time.monotonic() + self._timeout + _GRACE,
        )
        with self._cond:
            if self._broken or self._fatal is not None:  # (its owner makes a new one)
                raise NetworkError(f"{self._name}: the producer failed for good")
            if self._closed:
                raise ClosedError(f"{self._name}: closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._calls.append(call)
            self._cond.notify()
        for cp, records in batches.items():
            failed = self._send(call, cp, records)
            if failed is not None:
                with self._cond:
                    self._finished.append((call, cp, failed))
                    self._cond.notify()

    def _send(self, call: _Call, cp: int, records: Sequence[NewRecord]) -> Exception | None:
        """Hand one partition's records to librdkafka; what went wrong, if anything (its
        reports of the records handed over are then ignored: the partition is answered)."""
        topic = call.topic
        for index, rec in enumerate(records):
            while True:
                try:
                    delivered = functools.partial(self._delivered, call, cp, index)
                    produce_one(self._producer, topic, cp, rec, delivered)
                    break
                except BufferError:  # the local queue is full: this object's thread drains it
                    if time.monotonic() >= call.deadline - _GRACE:
                        return NetworkError(
                            f"produce to {topic}/{cp}: the client's queue stayed full for "
                            f"{self._timeout} s"
                        )
                    time.sleep(0.01)
                except KafkaException as exc:
                    if _fatal(exc):  # (met here first when no poll has seen it yet)
                        with self._cond:
                            self._fatal = self._fatal or exc
                            self._cond.notify()
                    return _raise_from(exc, topic, cp)
                except Exception as exc:  # (any other refusal: still this partition's alone)
                    return NetworkError(f"produce to {topic}/{cp}: {exc!r}")
        return None

    def produce(self, topic: str, partition: int, records: Sequence[NewRecord]) -> ProduceResult:
        """:meth:`submit` one partition's records and wait for their answer."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a write's done callback must not wait for another write")
        answered = threading.Event()
        box: list[ProduceResult | Exception] = []

        def done(results: dict[int, ProduceResult | Exception]) -> None:
            box.append(results[partition])
            answered.set()

        self.submit(topic, {partition: records}, done)
        if not answered.wait(self._timeout + 2 * _GRACE):  # (the call's deadline answers first)
            raise NetworkError(f"produce to {topic}/{partition}: no answer")
        result = box[0]
        if isinstance(result, Exception):
            raise result
        return result

    def _delivered(
        self, call: _Call, cp: int, index: int, error: KafkaError | None, message: Any
    ) -> None:
        """A record's delivery report (in the polling thread)."""
        reports = call.reports[cp]
        reports[index] = (error, message.offset(), message.timestamp())
        if len(reports) == call.counts[cp]:
            result = produce_result(call.topic, cp, [reports[i] for i in range(len(reports))])
            with self._cond:
                self._finished.append((call, cp, result))

    def _run(self) -> None:
        wait = _POLL
        while True:
            with self._cond:
                while not self._calls and not self._closed and self._fatal is None:
                    self._cond.wait()
                fatal = self._fatal
                if not self._calls and fatal is None:
                    return  # closed, and nothing is in flight
            if fatal is not None:
                self._retire(fatal)
                return
            try:
                self._producer.poll(wait)
            except KafkaException as exc:
                if _fatal(exc):
                    with self._cond:
                        self._fatal = self._fatal or exc
                else:
                    log.exception("%s: serving delivery reports failed", self._name)
            except Exception:  # (a callback's error surfaces here; the thread goes on)
                log.exception("%s: serving delivery reports failed", self._name)
            wait = self._answer(time.monotonic())

    @property
    def broken(self) -> bool:
        """The producer met a fatal error and was retired: librdkafka takes no more writes
        through it (an idempotent producer whose sequence the log lost, as an unclean
        election loses acknowledged records). Its owner makes a new one
        (:class:`NetworkCluster`)."""
        return self._broken

    def _retire(self, exc: KafkaException) -> None:
        """After a fatal error: serve the producer's reports until every request it sent
        was answered (up to librdkafka's delivery timeout and a grace), so that none of its
        writes lands behind a new producer's, passing each on as it comes; answer the rest
        failed (not known to have landed); then say :attr:`broken`. Writes handed over
        meanwhile fail at once."""
        reason = exc
        deadline = time.monotonic() + self._timeout + _GRACE
        left = -1
        while left != 0 and time.monotonic() < deadline:
            try:
                left = self._producer.flush(_POLL)
            except KafkaException as again:  # (the error itself, when a write met it first)
                generic = _error(reason)
                if _fatal(again) and generic is not None and generic.code() == KafkaError._FATAL:
                    reason = again
            except Exception:  # (a report's callback; the answers below still go out)
                log.exception("%s: serving the failed producer's reports", self._name)
            self._answer(time.monotonic())
        if left != 0:
            log.warning(
                "%s: %s of the failed producer's records still unanswered after %.0f s",
                self._name,
                left if left > 0 else "some",
                self._timeout + _GRACE,
            )
        try:  # what librdkafka still holds is dropped, and with it our callbacks
            self._producer.purge()
            self._producer.poll(0)
        except Exception:
            pass  # (a fatal error raised again, or a callback's: nothing left to answer)
        with self._cond:
            self._closed = self._broken = True
            taken = self._take_calls()
        for call, cps, ready in taken:
            failed = NetworkError(f"produce to {call.topic}: the producer failed for good")
            # (a partition reported and held back for its call's others keeps its report)
            self._pass_on(call, {cp: ready.get(cp, failed) for cp in cps})
        error = _error(reason)
        log.error(
            "%s: the producer failed for good (%s); its writes in flight were answered and "
            "the next ones go through a new producer",
            self._name,
            error.str() if error is not None else reason,
        )

    def _take_calls(self) -> list[tuple[_Call, set[int], dict[int, ProduceResult | Exception]]]:
        """Take every call in flight out (under ``_cond``): each with its partitions not
        passed on yet and those of them reported but held back. Nothing more of theirs is
        passed on by the thread; the caller answers them."""
        left, self._calls = self._calls, []
        self._finished = []
        taken = [(call, call.unanswered, call.ready) for call in left]
        for call in left:
            call.unanswered, call.ready = set(), {}  # (a report that comes after is dropped)
        return taken

    def _answer(self, now: float) -> float:
        """Pass each call's partitions answered since the last time to its ``done``, in one
        piece once all are answered or their gathering time is over; fail the partitions of
        calls past their deadline. How long the next poll may wait."""
        wait = _POLL
        with self._cond:
            finished, self._finished = self._finished, []
            for call in self._calls:
                if now >= call.deadline:
                    for cp in call.unanswered:
                        error = NetworkError(f"produce to {call.topic}/{cp}: no report")
                        finished.append((call, cp, error))
            for call, cp, result in finished:
                if cp not in call.unanswered or cp in call.ready:
                    continue  # answered already (a failed send's records reported after all)
                if not call.ready:
                    call.gather_until = now + _GATHER
                call.ready[cp] = result
            due: list[tuple[_Call, dict[int, ProduceResult | Exception]]] = []
            for call in self._calls:
                if not call.ready:
                    continue
                if len(call.ready) < len(call.unanswered) and now < call.gather_until:
                    # (librdkafka waits whole milliseconds: less would be a poll that spins)
                    wait = min(wait, max(0.001, call.gather_until - now))
                    continue
                call.unanswered.difference_update(call.ready)
                due.append((call, call.ready))
                call.ready = {}
            if due:
                self._calls = [c for c in self._calls if c.unanswered]
        for call, results in due:
            self._pass_on(call, results)
        return wait

    def _pass_on(self, call: _Call, results: dict[int, ProduceResult | Exception]) -> None:
        try:
            call.done(results)
        except Exception:
            log.exception("%s: a write's done callback failed", self._name)

    def close(self, timeout: float) -> None:
        """Serve what is in flight for up to ``timeout``, then answer the rest with
        ClosedError; no more writes."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            taken = self._take_calls()
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * _POLL)  # (nothing in flight now: it ends after its last poll)
        for call, cps, _ in taken:
            closed = ClosedError(f"{self._name}: closed before the write was answered")
            self._pass_on(call, dict.fromkeys(cps, closed))
