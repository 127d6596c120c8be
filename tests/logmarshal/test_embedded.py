from __future__ import annotations

import gc
import re
import sys
import threading
import time

import pytest

from logmarshal import Cluster, EmbeddedCluster, NewRecord, connect, embedded
from logmarshal.errors import (
    ClosedError,
    DataDirLocked,
    InvalidTopicName,
    OffsetOutOfRange,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from tests.collections_seen import collections_seen


def records(*values: bytes, timestamp: int = 1000) -> list[NewRecord]:
    return [NewRecord(value=v, timestamp=timestamp + i) for i, v in enumerate(values)]


def test_embedded_cluster_is_a_cluster(cluster) -> None:
    assert isinstance(cluster, Cluster)


def test_produce_and_fetch_round_trip(cluster) -> None:
    cluster.create_topic("t", 2)
    first = cluster.produce("t", 1, records(b"a", b"b", b"c"))
    second = cluster.produce("t", 1, records(b"d"))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 3)
    assert [m.value for m in cluster.fetch("t", 1, 0)] == [b"a", b"b", b"c", b"d"]
    # from the middle of a batch: records before the asked offset are not returned
    assert [m.offset for m in cluster.fetch("t", 1, 1)] == [1, 2, 3]
    assert cluster.fetch("t", 1, 4) == []
    assert (cluster.earliest_offset("t", 1), cluster.latest_offset("t", 1)) == (0, 4)
    assert cluster.latest_offset("t", 0) == 0


def test_fetch_builds_the_same_messages_in_c_and_in_python(cluster, monkeypatch) -> None:
    """``_fastconsume.from_records`` (the C path) gives what the Python fallback gives: every
    field, from the middle of a batch, keys and headers, and its Messages are out of the
    cyclic GC's sight (a Message of str, int, bytes and tuples of those cannot be in a
    cycle)."""
    if embedded._from_records is None:
        pytest.skip("logmarshal._fastconsume was not built (no C compiler at install)")
    cluster.create_topic("t", 1)
    cluster.produce(
        "t",
        0,
        [
            NewRecord(value=b"a", key=b"k", timestamp=5, headers=(("h", b"1"), ("e", None))),
            NewRecord(value=None, key=None, timestamp=6),
            NewRecord(value=b"c", timestamp=7),
        ],
    )
    cluster.produce("t", 0, records(b"d", b"e"))
    in_c = {start: cluster.fetch("t", 0, start) for start in range(6)}
    monkeypatch.setattr(embedded, "_from_records", None)
    in_python = {start: cluster.fetch("t", 0, start) for start in range(6)}
    assert in_c == in_python
    assert [tuple(m) for m in in_c[0][:2]] == [
        ("t", 0, 0, 5, b"k", b"a", (("h", b"1"), ("e", None))),
        ("t", 0, 1, 6, None, None, ()),
    ]
    assert [m.offset for m in in_c[1]] == [1, 2, 3, 4]
    assert in_c[5] == []
    assert not any(gc.is_tracked(m) for m in in_c[0])
    assert all(gc.is_tracked(m) for m in in_python[0])


@pytest.mark.parametrize("collecting", [True, False])
def test_no_collection_sees_an_embedded_fetch_half_converted(collecting: bool) -> None:
    """``from_records`` empties the Records it converted before a collection can run, and
    leaves the collector's state as it was: a collection that ran mid-conversion found the
    Records and the new Messages alive and promoted them (a tenth of an embedded Consumer's
    time went to collections)."""
    if embedded._from_records is None:
        pytest.skip("logmarshal._fastconsume was not built (no C compiler at install)")
    from logmarshal.cluster import Message
    from storage._records import Record

    decoded = [Record(offset=i, timestamp=i, key=None, value=b"v", headers=()) for i in range(40)]
    with collections_seen(decoded, collecting) as seen:
        out = embedded._from_records(Message, "t", 0, decoded, 10)
        after = gc.isenabled()
        probe = [[] for _ in range(3)]  # (allocations: a collection runs now, if enabled)
    assert after is collecting
    assert decoded == [] and [m.offset for m in out] == list(range(10, 40)) and probe
    if collecting and sys.version_info < (3, 12):  # (from 3.12 one runs at the next bytecode)
        assert seen  # collections ran: after the conversion, never during it
    assert not [n for n in seen if n], "a collection ran while the fetch was half converted"
    with pytest.raises(AttributeError):  # not Records: an error, the list left as it was
        bad = [object()]
        embedded._from_records(Message, "t", 0, bad, 0)
    assert len(bad) == 1

    class Emptying:  # an attribute read that empties the list: read no further, no crash
        def __getattr__(self, name: str) -> int:
            emptied.clear()
            return 0

    emptied = [Emptying(), Emptying()]
    assert [tuple(m) for m in embedded._from_records(Message, "t", 0, emptied, 0)] == [
        ("t", 0, 0, 0, 0, 0, 0)
    ]


def test_an_offset_that_is_not_an_int_is_refused(cluster, monkeypatch) -> None:
    """The C path and the Python one alike: a float is not read as an offset."""
    cluster.create_topic("t", 1)
    cluster.produce("t", 0, records(b"a", b"b"))
    for c_path in (embedded._from_records, None):
        monkeypatch.setattr(embedded, "_from_records", c_path)
        with pytest.raises(TypeError, match="an offset is an int"):
            cluster.fetch("t", 0, 1.0)


def test_fetch_long_polls_until_data_arrives(cluster) -> None:
    cluster.create_topic("t", 1)
    timer = threading.Timer(0.2, lambda: cluster.produce("t", 0, records(b"late")))
    timer.start()
    try:
        started = time.monotonic()
        got = cluster.fetch("t", 0, 0, max_wait=10)
        waited = time.monotonic() - started
    finally:
        timer.join()
    assert [m.value for m in got] == [b"late"]
    assert waited < 9, "woken by the append, not by the timeout"


def test_fetch_with_nothing_new_returns_empty_after_the_wait(cluster) -> None:
    cluster.create_topic("t", 1)
    assert cluster.fetch("t", 0, 0, max_wait=0.05) == []


def test_out_of_range_and_bad_arguments(cluster) -> None:
    cluster.create_topic("t", 1)
    cluster.produce("t", 0, records(b"a"))
    with pytest.raises(OffsetOutOfRange) as info:
        cluster.fetch("t", 0, 5)
    assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 1)
    with pytest.raises(ValueError, match="never negative"):
        cluster.fetch("t", 0, -1)
    with pytest.raises(UnknownTopic):
        cluster.fetch("nope", 0, 0)
    with pytest.raises(UnknownPartition):
        cluster.produce("t", 1, records(b"a"))
    with pytest.raises(ValueError, match="at least one record"):
        cluster.produce("t", 0, [])
    with pytest.raises(TopicExists):
        cluster.create_topic("t", 1)
    with pytest.raises(InvalidTopicName):
        cluster.create_topic("bad/name", 1)


def test_topics_describe_delete_and_grow(cluster) -> None:
    cluster.create_topic("a", 1, {"retention.ms": "60000"})
    cluster.create_topic("b", 2)
    assert cluster.topics() == ["a", "b"]
    description = cluster.describe_topic("a")
    assert description.config["retention.ms"] == "60000"
    grown = cluster.add_partitions("b", 4)
    assert grown.partitions == 4 and cluster.partitions("b") == 4
    assert [o.partition for o in grown.offsets] == [0, 1, 2, 3]
    cluster.delete_topic("a")
    assert cluster.topics() == ["b"]


def test_offset_for_time(cluster) -> None:
    cluster.create_topic("t", 1)
    cluster.produce("t", 0, records(b"a", b"b", timestamp=1000))
    cluster.produce("t", 0, records(b"c", timestamp=5000))
    assert cluster.offset_for_time("t", 0, 0) == 0
    assert cluster.offset_for_time("t", 0, 1001) == 1
    assert cluster.offset_for_time("t", 0, 4000) == 2
    assert cluster.offset_for_time("t", 0, 6000) is None


def test_data_survives_reopening(tmp_path) -> None:
    with connect(tmp_path) as cluster:
        cluster.create_topic("t", 1)
        cluster.produce("t", 0, records(b"kept"), durable=True)
    with connect(tmp_path) as cluster:
        assert [m.value for m in cluster.fetch("t", 0, 0)] == [b"kept"]


def test_a_second_opener_is_refused(tmp_path) -> None:
    with (
        EmbeddedCluster(tmp_path, maintenance_interval=0),
        pytest.raises(DataDirLocked, match=re.escape(str(tmp_path))),
    ):
        EmbeddedCluster(tmp_path, maintenance_interval=0)


def test_closed_cluster_refuses_use(tmp_path) -> None:
    cluster = EmbeddedCluster(tmp_path)
    cluster.close()
    cluster.close()
    with pytest.raises(ClosedError):
        cluster.topics()
    with EmbeddedCluster(tmp_path, maintenance_interval=0):  # the lock was released
        pass


def test_connect_refuses_two_targets(tmp_path) -> None:
    with pytest.raises(ValueError, match="either"):
        connect(tmp_path, bootstrap="127.0.0.1:9092")


def test_embedded_fetch_raises_corrupt_batch_with_the_offset_to_resume(tmp_path) -> None:
    """A stored corrupt batch is an error that says where to resume."""
    from storage import CorruptBatch
    from tests.storage.corruptions import CORRUPTIONS, good

    with EmbeddedCluster(tmp_path / "c", maintenance_interval=0) as cluster:
        cluster.create_topic("t", 1)
        plog = cluster._dir.partition("t", 0)
        plog.validate_records = False
        plog.append(good(1))
        plog.append(CORRUPTIONS["header count -7"][0]())
        plog.append(good(1))
        assert [m.offset for m in cluster.fetch("t", 0, 0)] == [0]
        with pytest.raises(CorruptBatch) as info:
            cluster.fetch("t", 0, 1)
        assert info.value.next_offset == 2
        assert [m.offset for m in cluster.fetch("t", 0, 2)] == [2]


# -- several partitions in one call (the replay's one thread, a heartbeat pass's writes) -----


def test_fetch_batches_many_answers_each_partition(cluster) -> None:
    """Per partition its stored batches, or what it alone met; no wait when any has some."""
    from storage._records import decode_columns_from

    cluster.create_topic("t", 3)
    cluster.produce("t", 0, records(b"a", b"b"))
    cluster.produce("t", 2, records(b"c"))
    started = time.monotonic()
    got = cluster.fetch_batches_many("t", {0: 1, 1: 0, 2: 5}, max_wait=10)
    assert time.monotonic() - started < 5, "records were there: answered at once"
    assert decode_columns_from(got[0], 1)[3] == [b"b"]
    assert got[1] == b""
    assert isinstance(got[2], OffsetOutOfRange)  # past partition 2's end: its error only
    assert cluster.fetch_batches_many("t", {}) is None
    with pytest.raises(ValueError, match="negative"):
        cluster.fetch_batches_many("t", {0: -1})
    with pytest.raises(UnknownTopic):
        cluster.fetch_batches_many("nope", {0: 0})


def test_fetch_batches_many_waits_for_an_append_to_any(cluster) -> None:
    cluster.create_topic("t", 3)
    timer = threading.Timer(0.2, lambda: cluster.produce("t", 2, records(b"late")))
    timer.start()
    try:
        started = time.monotonic()
        got = cluster.fetch_batches_many("t", {0: 0, 1: 0, 2: 0}, max_wait=10)
        waited = time.monotonic() - started
    finally:
        timer.join()
    assert waited < 9, "woken by the append, not by the timeout"
    assert got[0] == got[1] == b""
    assert got[2]
    assert not cluster._watchers, "the wait leaves no watcher behind"
    started = time.monotonic()
    assert cluster.fetch_batches_many("t", {0: 0, 1: 0}, max_wait=0.05) == {0: b"", 1: b""}
    assert time.monotonic() - started >= 0.05


def test_fetch_batches_many_is_woken_and_closed(tmp_path) -> None:
    """A stopping replay wakes its wait (FetchWaker); a close ends it with ClosedError."""
    opened = EmbeddedCluster(tmp_path / "d", maintenance_interval=0)
    opened.create_topic("t", 2)
    answers: list[object] = []

    def fetch() -> None:
        try:
            answers.append(opened.fetch_batches_many("t", {0: 0, 1: 0}, max_wait=30))
        except Exception as exc:
            answers.append(exc)

    for end in (lambda: opened.wake_fetches("t", [1]), opened.close):
        thread = threading.Thread(target=fetch)
        thread.start()
        deadline = time.monotonic() + 10
        while len(opened._watchers) < 2:  # the fetch is in its wait
            assert time.monotonic() < deadline
            time.sleep(0.01)
        end()
        thread.join(10)
        assert not thread.is_alive()
    assert answers[0] == {0: b"", 1: b""}
    assert isinstance(answers[1], ClosedError)


def test_produce_many_appends_each_then_tells_the_readers(cluster) -> None:
    """Every partition's records land (one flush each) before a waiting reader hears of
    any: its one answer carries them all. A partition's own error is its answer alone."""
    cluster.create_topic("t", 3)
    seen: list[dict] = []
    reader = threading.Thread(
        target=lambda: seen.append(cluster.fetch_batches_many("t", {0: 0, 1: 0}, max_wait=30))
    )
    reader.start()
    deadline = time.monotonic() + 10
    while len(cluster._watchers) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    got = cluster.produce_many(
        "t", {0: records(b"a"), 1: records(b"b", b"c"), 7: records(b"x")}, durable=True
    )
    reader.join(10)
    assert (got[0].base_offset, got[1].base_offset, got[1].last_offset) == (0, 0, 1)
    assert isinstance(got[7], UnknownPartition)
    assert seen[0][0] and seen[0][1], "one answer carried both partitions' appends"
    assert [m.value for m in cluster.fetch("t", 1, 0)] == [b"b", b"c"]
    with pytest.raises(ValueError, match="at least one record"):
        cluster.produce_many("t", {0: []})
