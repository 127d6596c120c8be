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
    app = App(
        cluster,
        "err",
        topology(),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=0.05,
        retry=RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq"),
    )
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
    app = App(
        cluster,
        "err2",
        topology(),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        retry=RetryPolicy(max_attempts=2, backoff=0),
    )
    with pytest.raises(HandlerFailed, match="offset 1"):
        app.run(max_records=3)
    app.close()
    assert CountOrFail.attempts == [1, 1]
    # nothing of the failed task since its last commit (there was none) is committed: the
    # failing record could have written part of its updates (test_bad_day.py), and the next
    # run processes "a" again from the state of the last commit
    assert read_changelog(cluster, "err2", "n", 0) == ({}, None)


class CountAndForward(CountOrFail):
    def process(self, record):
        super().process(record)
        self.context.forward(record.value, self.store.get(record.value))


class FailingSinkWrites:
    """The cluster as the App's producer sees it: writes to ``out`` fail."""

    def __init__(self, cluster):
        self._cluster = cluster

    def __getattr__(self, name):
        return getattr(self._cluster, name)

    def produce(self, topic, *args, **kwargs):
        if topic == "out":
            raise OSError("no space left for out")
        return self._cluster.produce(topic, *args, **kwargs)


def test_a_failed_sink_write_commits_nothing_after_it(cluster, tmp_path, monkeypatch):
    feed(cluster, ["a", "b"])
    cluster.create_topic("out", 1)

    def counting() -> Topology:
        t = Topology().add_source("s", "in").add_processor("p", CountAndForward, "s")
        return t.add_state_store(StoreSpec("n"), "p").add_sink("o", "out", "p")

    app = App(
        cluster,
        "sinkfail",
        counting(),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=60,
    )
    monkeypatch.setattr(app.producer, "_cluster", FailingSinkWrites(cluster))
    with pytest.raises(OSError, match="no space"):
        app.run(max_records=2)  # its last commit flushes the sink first: raised there
    app.close()  # the final commit refuses too (logged): the flush's failure was raised once
    assert read_changelog(cluster, "sinkfail", "n", 0)[0] == {}
    # the inputs were not committed either: the group's next member reads them again
    again = App(
        cluster,
        "sinkfail",
        counting(),
        client_id="y",
        heartbeat_interval=0.3,
        state_dir=tmp_path / "2",
        commit_interval=60,
    )
    t = threading.Thread(target=again.run, kwargs={"max_records": 2})
    t.start()
    t.join(20)
    again.close()
    assert read_changelog(cluster, "sinkfail", "n", 0) == ({"a": 1, "b": 1}, {"in": 2})
    assert sorted(m.value for m in cluster.fetch("out", 0, 0)) == [b"1", b"1"]
