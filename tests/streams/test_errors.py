"""Processing errors follow the consumer's retry / dead-letter policy."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pytest

from logmarshal.retry import HandlerFailed, RetryPolicy
from logmarshal.streams import App, Processor, StoreSpec, Topology
from logmarshal.streams.task import read_changelog
from storage import NewRecord


class CountOrFail(Processor):
    attempts: ClassVar[list[int]] = []

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        if record.value == "bad":
            CountOrFail.attempts.append(record.offset)
            raise ValueError("bad record")
        self.store.put(record.value, (self.store.get(record.value) or 0) + 1)


def topology() -> Topology:
    t = Topology().add_source("s", "in").add_processor("p", CountOrFail, "s")
    return t.add_state_store(StoreSpec("n"), "p")


def feed(cluster, values):
    now = int(time.time() * 1000)
    cluster.create_topic("in", 1)
    cluster.produce("in", 0, [NewRecord(f'"{v}"'.encode(), timestamp=now) for v in values])


def test_failing_record_is_retried_then_dead_lettered(cluster, tmp_path):
    feed(cluster, ["a", "bad", "a", "b"])  # dlq does not exist: created like the source
    CountOrFail.attempts = []
    app = App(cluster, "err", topology(), client_id="x", heartbeat_interval=0.3,
              state_dir=tmp_path, commit_interval=0.05,
              retry=RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq"))
    t = threading.Thread(target=app.run, kwargs={"max_records": 4})
    t.start()
    t.join(20)
    app.close()
    assert CountOrFail.attempts == [1, 1, 1]
    (dead,) = cluster.fetch("dlq", 0, 0)
    headers = dict(dead.headers)
    assert dead.value == b'"bad"' and headers["logmarshal.error"].startswith(b"ValueError")
    assert (headers["logmarshal.topic"], headers["logmarshal.offset"]) == (b"in", b"1")
    assert read_changelog(cluster, "err", "n", 0) == ({"a": 2, "b": 1}, {"in": 4})


def test_failing_record_without_dead_letter_stops_the_app(cluster, tmp_path):
    feed(cluster, ["a", "bad", "b"])
    CountOrFail.attempts = []
    app = App(cluster, "err2", topology(), client_id="x", heartbeat_interval=0.3,
              state_dir=tmp_path, retry=RetryPolicy(max_attempts=2, backoff=0))
    with pytest.raises(HandlerFailed, match="offset 1"):
        app.run(max_records=3)
    app.close()
    assert CountOrFail.attempts == [1, 1]
    table, positions = read_changelog(cluster, "err2", "n", 0)
    assert table == {"a": 1} and positions == {"in": 1}  # the state before the failure
