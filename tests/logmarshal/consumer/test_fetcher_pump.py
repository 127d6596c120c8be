"""The caller's thread drives the member's reader while records flow (``MemberFetcher.pump``,
docs/performance.md "Network consumer, issue 34 item 5"): the same pass as the fetch
thread's, so drops and look-ups are honoured alike; the thread parks while the caller's
passes find records, and takes over again when one finds nothing or a look-up waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from logmarshal.cluster import Message, Read
from logmarshal.consumer import fetcher as fetcher_module
from logmarshal.consumer.fetcher import MemberFetcher
from logmarshal.core import Bounds, Event, Fetch, Fetched, LookUp

Key = tuple[str, int]


class _Reader:
    """A PartitionReader whose records the test puts in place; it notes which thread
    polled it and waits (like the network reader) until woken or timed out."""

    caller_pumps = True

    def __init__(self) -> None:
        self.records: dict[Key, list[Message]] = {}
        self.wanted: dict[Key, int] = {}
        self.dropped: list[Key] = []
        self.pollers: list[str] = []
        self._cond = threading.Condition()
        self._woken = False

    def want(self, topic: str, partition: int, offset: int) -> None:
        self.wanted[(topic, partition)] = offset

    def drop(self, topic: str, partition: int) -> None:
        self.wanted.pop((topic, partition), None)
        self.dropped.append((topic, partition))

    def bounds(self, keys: Sequence[Key]) -> dict[Key, tuple[int, int] | Exception]:
        return {key: (0, 10) for key in keys}

    def poll(self, timeout: float) -> list[Read]:
        self.pollers.append(threading.current_thread().name)
        deadline = time.monotonic() + timeout
        while True:
            out = []
            for key, offset in list(self.wanted.items()):
                records = self.records.pop(key, None)
                if records:
                    del self.wanted[key]
                    out.append(Read(key[0], key[1], offset, records))
            with self._cond:
                woken, self._woken = self._woken, False
                remaining = deadline - time.monotonic()
                if out or woken or remaining <= 0:
                    return out
                self._cond.wait(remaining)

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def close(self) -> None:
        pass


class _Cluster:
    def __init__(self, reader: _Reader) -> None:
        self.reader = reader

    def open_reader(self, *, max_bytes: int) -> _Reader:
        return self.reader


class _Answers:
    """Events answered, each with the name of the thread that answered it."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Event]] = []
        self._cond = threading.Condition()

    def __call__(self, events: Sequence[Event]) -> None:
        with self._cond:
            self.got.extend((threading.current_thread().name, e) for e in events)
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5.0) -> list[tuple[str, Event]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= n, timeout), self.got
            return list(self.got)


def _records(partition: int, offsets: range) -> list[Message]:
    return [Message("t", partition, o, 0, None, b"v", ()) for o in offsets]


@pytest.fixture
def parts(monkeypatch) -> Iterator[tuple[_Reader, _Answers, MemberFetcher]]:
    # the thread stays parked 5 s after a caller's pass that answered: a test that sees it
    # act sooner saw it take over for another reason (a look-up, a pass that found nothing)
    monkeypatch.setattr(fetcher_module, "CALLER_HOLD", 5.0)
    reader, answers = _Reader(), _Answers()
    fetcher = MemberFetcher(
        _Cluster(reader), answers, max_bytes=1 << 20, max_wait=0.2, name="fetch"
    )
    try:
        yield reader, answers, fetcher
    finally:
        fetcher.stop()
        fetcher.thread.join(5)


def _pump_until_answered(fetcher: MemberFetcher, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not fetcher.pump(0.5):
        assert time.monotonic() < deadline, "the caller's pass never answered"


def test_records_are_answered_on_the_callers_thread_and_the_thread_parks(parts) -> None:
    reader, answers, fetcher = parts
    assert fetcher.pumps
    fetcher.request(Fetch(1, "t", 0, 0))
    reader.records[("t", 0)] = _records(0, range(3))
    _pump_until_answered(fetcher)
    caller = threading.current_thread().name
    assert answers.wait_for(1) == [(caller, Fetched(1, "t", 0, _records(0, range(3))))]

    # the caller drives: the fetch thread polls the reader no more while it is hot
    polled_by_thread = reader.pollers.count("fetch")
    for token, first in ((2, 3), (3, 6)):
        fetcher.request(Fetch(token, "t", 0, first))
        reader.records[("t", 0)] = _records(0, range(first, first + 3))
        assert fetcher.pump(0.5)
    got = answers.wait_for(3)
    assert [(who, e.token) for who, e in got] == [(caller, 1), (caller, 2), (caller, 3)]
    assert reader.pollers.count("fetch") == polled_by_thread


def test_a_pass_that_finds_nothing_hands_the_waiting_back_to_the_thread(parts) -> None:
    reader, answers, fetcher = parts
    fetcher.request(Fetch(1, "t", 0, 0))
    reader.records[("t", 0)] = _records(0, range(1))
    _pump_until_answered(fetcher)
    fetcher.request(Fetch(2, "t", 0, 1))
    assert not fetcher.pump(0.5)  # nothing on hand: the thread waits for records again
    reader.records[("t", 0)] = _records(0, range(1, 2))
    reader.wake()
    got = answers.wait_for(2, timeout=2.0)  # well inside the 5 s hold
    assert got[1] == ("fetch", Fetched(2, "t", 0, _records(0, range(1, 2))))


def test_look_ups_are_left_to_the_fetch_thread(parts) -> None:
    reader, answers, fetcher = parts
    fetcher.request(Fetch(1, "t", 0, 0))
    reader.records[("t", 0)] = _records(0, range(1))
    _pump_until_answered(fetcher)
    fetcher.request(LookUp(2, "t", 1))  # while the caller drives
    got = answers.wait_for(2, timeout=2.0)
    assert got[1] == ("fetch", Bounds(2, "t", 1, 0, 10))


def test_a_dropped_partition_is_not_answered_by_the_callers_pass(parts) -> None:
    reader, answers, fetcher = parts
    fetcher.request(Fetch(1, "t", 0, 0))
    reader.records[("t", 0)] = _records(0, range(1))
    _pump_until_answered(fetcher)
    fetcher.request(Fetch(2, "t", 0, 1))  # wanted, nothing of it on hand yet
    fetcher.request(Fetch(3, "t", 1, 0))
    reader.records[("t", 1)] = _records(1, range(1))
    _pump_until_answered(fetcher)
    fetcher.drop([("t", 0)])  # a revoke: partition 0's want (token 2) is forgotten
    reader.records[("t", 0)] = _records(0, range(1, 4))
    fetcher.request(Fetch(4, "t", 1, 1))
    reader.records[("t", 1)] = _records(1, range(1, 2))
    _pump_until_answered(fetcher)
    caller = threading.current_thread().name
    got = answers.wait_for(3)
    assert [(who, e.token, e.partition) for who, e in got] == [
        (caller, 1, 0),
        (caller, 3, 1),
        (caller, 4, 1),
    ]
    assert reader.dropped == [("t", 0)]
    assert ("t", 0) not in reader.wanted
