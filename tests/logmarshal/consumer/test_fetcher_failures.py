"""A reader that fails does not stop a member's reading (``MemberFetcher``): in CI on
2026-12-06 a ListOffsets request timed out inside the network reader's poll while a Kafka
node restarted, the fetch loop stopped, and the member held three partitions for good,
handing out nothing. A failed poll, look-up or want is now retried, and what the failed
poll had taken from the reader is read again."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka.admin import OffsetSpec

from logmarshal.cluster import Message, Read
from logmarshal.consumer.fetcher import MemberFetcher
from logmarshal.core import Bounds, Event, Fetch, Fetched, LookUp
from logmarshal.errors import NetworkError
from logmarshal.network import admin_requests

Key = tuple[str, int]


def _records(offsets: range) -> list[Message]:
    return [Message("t", 0, o, 0, None, b"v", ()) for o in offsets]


class _FailingReader:
    """A PartitionReader over a log of 10 records of t/0 whose calls fail as told: ``poll``
    the first ``poll_failures`` times after taking what it would answer (the network
    reader's answers were taken when its stall check raised), ``bounds`` the first
    ``bounds_failures`` times, and its first answer to ``bounds`` leaves the key out when
    ``bounds_omit`` is set."""

    def __init__(self, *, poll_failures=0, bounds_failures=0, bounds_omit=False) -> None:
        self.poll_failures = poll_failures
        self.bounds_failures = bounds_failures
        self.bounds_omit = bounds_omit
        self.wanted: dict[Key, int] = {}
        self.wants: list[tuple[Key, int]] = []
        self._cond = threading.Condition()

    def want(self, topic: str, partition: int, offset: int) -> None:
        self.wanted[(topic, partition)] = offset
        self.wants.append(((topic, partition), offset))

    def drop(self, topic: str, partition: int) -> None:
        self.wanted.pop((topic, partition), None)

    def bounds(self, keys: Sequence[Key]) -> dict[Key, tuple[int, int] | Exception]:
        if self.bounds_failures:
            self.bounds_failures -= 1
            raise TimeoutError()
        if self.bounds_omit:
            self.bounds_omit = False
            return {}
        return {key: (0, 10) for key in keys}

    def poll(self, timeout: float) -> list[Read]:
        out = [Read(k[0], k[1], o, _records(range(o, 10))) for k, o in self.wanted.items()]
        self.wanted.clear()  # taken: a failure now loses them unless they are asked again
        if self.poll_failures and out:
            self.poll_failures -= 1
            raise TimeoutError()
        if not out:
            with self._cond:
                self._cond.wait(min(timeout, 0.05))
        return out

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def close(self) -> None:
        pass


class _Cluster:
    def __init__(self, reader: _FailingReader) -> None:
        self.reader = reader

    def open_reader(self, *, max_bytes: int) -> _FailingReader:
        return self.reader


class _Answers:
    def __init__(self) -> None:
        self.got: list[Event] = []
        self._cond = threading.Condition()

    def __call__(self, events: Sequence[Event]) -> None:
        with self._cond:
            self.got.extend(events)
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5.0) -> list[Event]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.got) >= n, timeout)
            return list(self.got)


@pytest.fixture
def start() -> Iterator:
    fetchers: list[MemberFetcher] = []

    def make(reader: _FailingReader) -> tuple[_Answers, MemberFetcher]:
        answers = _Answers()
        fetcher = MemberFetcher(
            _Cluster(reader), answers, max_bytes=1 << 20, max_wait=0.2, name="fetch"
        )
        fetchers.append(fetcher)
        return answers, fetcher

    yield make
    for fetcher in fetchers:
        fetcher.stop()
        fetcher.thread.join(5)
        assert not fetcher.thread.is_alive()


def test_a_failed_poll_is_retried_and_what_it_took_is_read_again(start) -> None:
    reader = _FailingReader(poll_failures=2)
    answers, fetcher = start(reader)
    fetcher.request(Fetch(1, "t", 0, 3))
    assert answers.wait_for(1) == [Fetched(1, "t", 0, _records(range(3, 10)))]
    assert fetcher.thread.is_alive()
    # asked of the reader again at the fetch's own offset after each failure
    assert reader.wants == [(("t", 0), 3)] * 3


def test_a_failed_look_up_is_retried(start) -> None:
    answers, fetcher = start(_FailingReader(bounds_failures=2))
    fetcher.request(LookUp(1, "t", 0))
    assert answers.wait_for(1) == [Bounds(1, "t", 0, 0, 10)]
    fetcher.request(Fetch(2, "t", 0, 8))  # and the loop still reads
    assert answers.wait_for(2)[1] == Fetched(2, "t", 0, _records(range(8, 10)))


def test_a_look_up_left_out_of_the_answer_is_asked_again(start) -> None:
    answers, fetcher = start(_FailingReader(bounds_omit=True))
    fetcher.request(LookUp(1, "t", 0))
    assert answers.wait_for(1) == [Bounds(1, "t", 0, 0, 10)]


class _Admin:
    """An AdminClient whose ListOffsets futures never resolve (a broker that does not
    answer), but for the partitions in ``answered``."""

    def __init__(self, answered: dict[int, int]) -> None:
        self.answered = answered

    def list_offsets(self, wanted, request_timeout, **_):
        out = {}
        for tp in wanted:
            future: concurrent.futures.Future = concurrent.futures.Future()
            if tp.partition in self.answered:
                future.set_result(type("Info", (), {"offset": self.answered[tp.partition]})())
            out[tp] = future
        return out


def test_a_list_offsets_answer_that_never_comes_is_a_network_error_per_partition() -> None:
    found = admin_requests.list_bounds(_Admin({0: 7}), [("t", 0), ("t", 1)], timeout=0.05)
    assert found[("t", 0)] == (7, 7)
    error = found[("t", 1)]
    assert isinstance(error, NetworkError)  # (it was the builtin TimeoutError, raised)
    assert "no answer within 0.05 s" in str(error) and "partition 1" in str(error)
    ends = admin_requests._list_offsets(_Admin({}), [("t", 2)], OffsetSpec.latest(), 0.01)
    assert isinstance(ends, dict) and isinstance(ends[("t", 2)], NetworkError)
