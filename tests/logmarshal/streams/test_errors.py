"""Processing errors follow the consumer's retry / dead-letter policy."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import ClassVar

import pytest

from logmarshal.errors import NetworkError
from logmarshal.retry import HandlerFailed, RetryPolicy
from logmarshal.streams import App, Processor, PunctuationType, StoreSpec, Topology
from logmarshal.streams.stores import SqliteStore
from logmarshal.streams.task import RecordNotAtomic, read_changelog
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


class WordsFailingMidLine(Processor):
    """Counts a line's words and forwards each count; a line's word "boom" raises after the
    words before it were counted, on the first ``fails`` attempts of that line."""

    fails: ClassVar[int] = 1
    attempts: ClassVar[dict[int, int]] = {}

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        tried = WordsFailingMidLine.attempts[record.offset] = (
            WordsFailingMidLine.attempts.get(record.offset, 0) + 1
        )
        for word in record.value.split():
            if word == "boom" and tried <= WordsFailingMidLine.fails:
                raise ValueError("boom")
            count = (self.store.get(word) or 0) + 1
            self.store.put(word, count)
            self.context.forward(word, count)


def run_words(cluster, tmp_path, lines, retry) -> None:
    feed(cluster, lines)
    cluster.create_topic("out", 1)
    WordsFailingMidLine.attempts = {}
    t = Topology().add_source("s", "in").add_processor("p", WordsFailingMidLine, "s")
    t = t.add_state_store(StoreSpec("n"), "p").add_sink("o", "out", "p")
    app = App(
        cluster,
        "words",
        t,
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=0.05,
        retry=retry,
    )
    thread = threading.Thread(target=app.run, kwargs={"max_records": len(lines)})
    thread.start()
    thread.join(20)
    app.close()
    assert not thread.is_alive()


def test_a_retried_line_counts_its_words_once_though_its_failed_attempt_counted_some(
    cluster, tmp_path
):
    WordsFailingMidLine.fails = 1
    run_words(cluster, tmp_path, ["a b", "a b boom c", "a"], RetryPolicy(max_attempts=2, backoff=0))
    assert WordsFailingMidLine.attempts == {0: 1, 1: 2, 2: 1}
    counts = {"a": 3, "b": 2, "boom": 1, "c": 1}
    assert read_changelog(cluster, "words", "n", 0) == (counts, {"in": 3})
    # the failed attempt's forwards ("a" 2, "b" 2) were dropped with its writes
    out = [(m.key, m.value) for m in cluster.fetch("out", 0, 0)]
    assert out == [
        (b'"a"', b"1"), (b'"b"', b"1"),
        (b'"a"', b"2"), (b'"b"', b"2"), (b'"boom"', b"1"), (b'"c"', b"1"),
        (b'"a"', b"3"),
    ]  # fmt: skip


def test_a_dead_lettered_line_leaves_no_count_and_no_output(cluster, tmp_path):
    WordsFailingMidLine.fails = 5
    run_words(
        cluster,
        tmp_path,
        ["a", "a boom", "a"],
        RetryPolicy(max_attempts=2, backoff=0, dead_letter_topic="dlq"),
    )
    assert WordsFailingMidLine.attempts == {0: 1, 1: 2, 2: 1}
    assert read_changelog(cluster, "words", "n", 0) == ({"a": 2}, {"in": 3})
    out = [(m.key, m.value) for m in cluster.fetch("out", 0, 0)]
    assert out == [(b'"a"', b"1"), (b'"a"', b"2")]
    assert [m.value for m in cluster.fetch("dlq", 0, 0)] == [b'"a boom"']


class PunctuatorFails(CountOrFail):
    processed: ClassVar[list[int]] = []

    def init(self, context):
        super().init(context)
        context.schedule(1000, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record):
        PunctuatorFails.processed.append(record.offset)
        super().process(record)

    def punctuate(self, now):
        raise RuntimeError("the punctuator failed")


def test_a_failing_stream_time_punctuator_stops_the_app_without_retrying_its_record(
    cluster, tmp_path
):
    """The punctuator, not the record that moved stream time, failed: retrying (or
    dead-lettering) that record would count it twice (or drop a record that succeeded)."""
    PunctuatorFails.processed = []
    run_until_the_punctuator_fails(
        cluster,
        tmp_path,
        PunctuatorFails,
        RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq"),
    )
    assert PunctuatorFails.processed == [0, 1]
    assert "dlq" not in cluster.topics()


def run_until_the_punctuator_fails(cluster, tmp_path, processor, retry: RetryPolicy) -> None:
    """Records "a" and "b", 5 s of stream time apart (the second makes the punctuator due),
    through ``processor`` and a store: the App's run raises the punctuator's failure."""
    now = int(time.time() * 1000)
    cluster.create_topic("in", 1)
    cluster.produce(
        "in", 0, [NewRecord(b'"a"', timestamp=now), NewRecord(b'"b"', timestamp=now + 5000)]
    )
    t = Topology().add_source("s", "in").add_processor("p", processor, "s")
    app = App(
        cluster,
        "punct",
        t.add_state_store(StoreSpec("n"), "p"),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=0.05,
        retry=retry,
    )
    with pytest.raises(RuntimeError, match="the punctuator failed"):
        app.run(max_records=2)
    app.close()


class FlakyThenPunctuator(Processor):
    """Counts records; record "b" fails its first attempt; the stream-time punctuator fails
    once."""

    tries: ClassVar[dict[int, int]] = {}
    punctuator_fails: ClassVar[int] = 1

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")
        context.schedule(1000, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record):
        n = FlakyThenPunctuator.tries[record.offset] = (
            FlakyThenPunctuator.tries.get(record.offset, 0) + 1
        )
        if record.value == "b" and n == 1:
            raise ValueError("transient")
        self.store.put(record.value, (self.store.get(record.value) or 0) + 1)

    def punctuate(self, now):
        if FlakyThenPunctuator.punctuator_fails:
            FlakyThenPunctuator.punctuator_fails -= 1
            raise RuntimeError("the punctuator failed")


@pytest.mark.parametrize("attempts,dlq", [(3, None), (2, "dlq")])
def test_a_punctuator_failing_after_a_successful_retry_is_not_the_records(
    cluster, tmp_path, attempts, dlq
):
    """Found by an attack: the retry ran the record and then the stream-time punctuator it
    made due, in one try: the punctuator's failure was taken for the record's, which was
    processed again (counted twice) or dead-lettered though its writes were kept."""
    FlakyThenPunctuator.tries = {}
    FlakyThenPunctuator.punctuator_fails = 1
    run_until_the_punctuator_fails(
        cluster,
        tmp_path,
        FlakyThenPunctuator,
        RetryPolicy(max_attempts=attempts, backoff=0, dead_letter_topic=dlq),
    )
    assert FlakyThenPunctuator.tries == {0: 1, 1: 2}
    assert "dlq" not in cluster.topics()


class ToTwoSinks(Processor):
    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        self.store.put("n", (self.store.get("n") or 0) + 1)
        if record.value != "second only":
            self.context.forward(record.key, record.value, to="o1")
        if record.value != "first only":
            self.context.forward(record.key, record.value, to="o2")


def run_two_sinks(cluster, tmp_path, values) -> tuple[App, list[BaseException]]:
    now = int(time.time() * 1000)
    cluster.create_topic("in", 1)
    cluster.create_topic("out1", 1)  # out2 is missing (a typo, deleted): its send is refused
    cluster.produce("in", 0, [NewRecord(json.dumps(v).encode(), timestamp=now) for v in values])
    t = Topology().add_source("s", "in").add_processor("p", ToTwoSinks, "s")
    t = t.add_state_store(StoreSpec("n"), "p").add_sink("o1", "out1", "p")
    app = App(
        cluster,
        "two",
        t.add_sink("o2", "out2", "p"),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=0.05,
        retry=RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq"),
    )
    raised: list[BaseException] = []
    try:
        app.run(max_records=len(values))
    except Exception as exc:
        raised.append(exc)
    app.close()
    return app, raised


def test_a_record_whose_only_sink_write_is_refused_is_dead_lettered_without_a_trace(
    cluster, tmp_path
):
    _, raised = run_two_sinks(cluster, tmp_path, ["first only", "second only", "first only"])
    assert raised == []
    assert [m.value for m in cluster.fetch("dlq", 0, 0)] == [b'"second only"']
    assert [m.value for m in cluster.fetch("out1", 0, 0)] == [b'"first only"'] * 2
    assert read_changelog(cluster, "two", "n", 0) == ({"n": 2}, {"in": 3})


def test_a_sink_write_refused_after_another_went_out_stops_the_app(cluster, tmp_path):
    """Found by an attack: the record's first write went out, its second was refused, and
    the record was retried (its first write out again each time) and dead-lettered, three
    outputs of a record that left no state. Half visible, it cannot be undone: the App
    stops, committing nothing of the task since its last commit, and says why."""
    _, raised = run_two_sinks(cluster, tmp_path, ["first only", "both"])
    (exc,) = raised
    assert isinstance(exc, RecordNotAtomic) and "sink write 2 of 2" in str(exc)
    assert "dlq" not in cluster.topics()
    assert [m.value for m in cluster.fetch("out1", 0, 0)] == [b'"first only"', b'"both"']
    assert read_changelog(cluster, "two", "n", 0)[0] in ({}, {"n": 1})  # "both" not counted


class AppendsFlaky(Processor):
    tries: ClassVar[dict[int, int]] = {}
    fail_next_put: ClassVar[bool] = False

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        n = AppendsFlaky.tries[record.offset] = AppendsFlaky.tries.get(record.offset, 0) + 1
        self.store.put("seen", [*(self.store.get("seen") or []), record.offset])
        if record.value == "flaky" and n <= 2:
            AppendsFlaky.fail_next_put = n == 2  # this attempt's undo meets a full disk
            raise ValueError("transient")


def test_an_undo_that_fails_stops_the_app_rather_than_retrying_on_half_undone_stores(
    cluster, tmp_path, monkeypatch
):
    """Found by an attack: an undo that raised (a full disk) was taken for the attempt's
    failure, and the next attempt ran on the failed one's writes (counted twice)."""
    put = SqliteStore._put

    def put_or_disk_full(self, key, value):
        if AppendsFlaky.fail_next_put:
            AppendsFlaky.fail_next_put = False
            raise sqlite3.OperationalError("database or disk is full")
        return put(self, key, value)

    monkeypatch.setattr(SqliteStore, "_put", put_or_disk_full)
    now = int(time.time() * 1000)
    cluster.create_topic("in", 1)
    cluster.produce(
        "in", 0, [NewRecord(b'"ok"', timestamp=now), NewRecord(b'"flaky"', timestamp=now)]
    )
    AppendsFlaky.tries = {}
    t = Topology().add_source("s", "in").add_processor("p", AppendsFlaky, "s")
    app = App(
        cluster,
        "undo",
        t.add_state_store(StoreSpec("n", "sqlite"), "p"),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        commit_interval=60,
        retry=RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq"),
    )
    with pytest.raises(RecordNotAtomic, match="undoing a failed record"):
        app.run(max_records=2)
    app.close()
    assert AppendsFlaky.tries == {0: 1, 1: 2}
    assert read_changelog(cluster, "undo", "n", 0) == ({}, None)  # nothing committed


class _Restarting:
    """A cluster whose produce to the dead-letter topic fails ``failures`` times first (a
    broker restarting), as NetworkError."""

    def __init__(self, inner, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def produce(self, topic, *args, **kwargs):
        if topic == "dlq" and self.failures:
            self.failures -= 1
            raise NetworkError("no acknowledgement within 30 s")
        return self.inner.produce(topic, *args, **kwargs)


def test_a_dead_letter_write_that_fails_for_a_while_is_retried(cluster, tmp_path):
    """It stopped the app with the NetworkError (a helper's attack, 2026-12-06)."""
    feed(cluster, ["a", "bad", "b"])
    CountOrFail.attempts = []
    restarting = _Restarting(cluster, 2)
    app = App(
        restarting,
        "err3",
        topology(),
        client_id="x",
        heartbeat_interval=0.3,
        state_dir=tmp_path,
        retry=RetryPolicy(max_attempts=1, backoff=0, dead_letter_topic="dlq"),
    )
    try:
        assert app.run(max_records=3) == 3
    finally:
        app.close()
    assert restarting.failures == 0
    assert [m.value for m in cluster.fetch("dlq", 0, 0)] == [b'"bad"']
    assert read_changelog(cluster, "err3", "n", 0) == ({"a": 1, "b": 1}, {"in": 3})
