"""The librdkafka warm-up (``logmarshal.network.warmup``): metadata asked at creation, and a
failure to get it changes nothing."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaException, Producer

from logmarshal.network.warmup import WARM_UP_WAIT, warm_up


class _Client:
    """Answers ``list_topics`` as told, and counts the calls and their timeouts."""

    def __init__(self, fail_after: int | None = None, error: type[Exception] = KafkaException):
        self.calls: list[float] = []
        self._fail_after = fail_after
        self._error = error

    def list_topics(self, timeout: float) -> object:
        self.calls.append(timeout)
        if self._fail_after is not None and len(self.calls) > self._fail_after:
            raise self._error("no broker")
        return object()


def test_each_request_is_made_within_the_bounded_wait() -> None:
    client = _Client()
    warm_up(client, timeout=30.0, requests=2)  # type: ignore[arg-type]
    assert client.calls == [WARM_UP_WAIT, WARM_UP_WAIT]
    short = _Client()
    warm_up(short, timeout=0.25)  # type: ignore[arg-type]
    assert short.calls == [0.25]


@pytest.mark.parametrize("error", [KafkaException, RuntimeError])
def test_a_failed_request_ends_the_warm_up_without_raising(error: type[Exception]) -> None:
    client = _Client(fail_after=0, error=error)
    warm_up(client, timeout=5.0, requests=2)  # type: ignore[arg-type]
    assert len(client.calls) == 1  # the second request is not made once the first failed


def test_other_errors_are_not_swallowed() -> None:
    client = _Client(fail_after=0, error=ValueError)
    with pytest.raises(ValueError):
        warm_up(client, timeout=5.0)  # type: ignore[arg-type]


def test_a_producer_with_no_broker_is_warmed_up_without_raising_and_still_usable() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    warm_up(producer, timeout=0.3, requests=2)  # the real client's failure: swallowed
    reports: list[object] = []
    producer.produce("t", b"x", on_delivery=lambda err, msg: reports.append(err))
    producer.purge()  # the record was queued (the client connects when it needs to)
    producer.flush(1.0)
    assert len(reports) == 1 and reports[0] is not None  # purged, reported, not lost silently
