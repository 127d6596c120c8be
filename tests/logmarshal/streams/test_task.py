"""Task-level state rules on an embedded cluster: changelog positions, restore, and the
guard that keeps a store restored ahead of another from counting input twice."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logmarshal import _ranges
from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.cluster import Message
from logmarshal.errors import RetriableError
from logmarshal.streams import Processor, PunctuationType, StoreSpec, Topology
from logmarshal.streams.stores import InMemoryStore, SqliteStore
from logmarshal.streams.task import Task, read_changelog

from .conftest import StateDirs

NOW = int(time.time() * 1000)


class TwoCounters(Processor):
    def init(self, context):
        super().init(context)
        self.a = context.get_state_store("a")
        self.b = context.get_state_store("b")

    def process(self, record):
        for store in (self.a, self.b):
            store.put(record.value, (store.get(record.value) or 0) + 1)


def topology(kind: str) -> Topology:
    t = Topology().add_source("s", "in").add_processor("p", TwoCounters, "s")
    return t.add_state_store(StoreSpec("a"), "p").add_state_store(StoreSpec("b", kind), "p")


def make_task(state: StateDirs, name: str) -> Task:
    """Store a in memory, store b on local disk (in each persistent engine: ``state``)."""
    topo = topology(state.kind)
    (sub,) = topo.subtopologies()
    stores = {"a": InMemoryStore("a"), "b": state.store(name, "b")}
    return Task("app", topo, sub, 0, stores, lambda *a: None, lambda _t: 1, lambda: NOW)


def msg(offset: int) -> Message:
    return Message("in", 0, offset, NOW, None, b'"x"' if offset % 3 else b'"y"')


def test_crash_between_two_stores_changelogs_counts_each_input_once(cluster, state):
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(state, "first")
    task.restore(cluster)  # nothing to restore; fences the empty changelogs
    for o in range(10):
        task.process(msg(o))
    assert task.write_changelogs(cluster) == 4  # two keys in each of two stores
    for o in range(10, 20):
        task.process(msg(o))
    # crash after store a's changelog batch, before store b's
    stores = task.stores
    task.stores = {"a": stores["a"]}
    task.write_changelogs(cluster)
    task.stores = stores
    task.close()
    assert read_changelog(cluster, "app", "a", 0) == ({"x": 13, "y": 7}, {"in": 20})
    assert read_changelog(cluster, "app", "b", 0) == ({"x": 6, "y": 4}, {"in": 10})

    again = make_task(state, "second")
    assert again.restore(cluster) == {"in": 10}  # the store furthest behind decides
    for o in range(10, 25):
        again.process(msg(o))
    again.write_changelogs(cluster)
    truth = {"x": sum(1 for o in range(25) if o % 3), "y": sum(1 for o in range(25) if not o % 3)}
    assert again.stores["a"].all() == truth  # inputs 10..19 were not counted again in a
    assert again.stores["b"].all() == truth
    assert read_changelog(cluster, "app", "a", 0) == (truth, {"in": 25})
    assert read_changelog(cluster, "app", "b", 0) == (truth, {"in": 25})
    again.close()


def test_restore_takes_the_last_record_per_key_and_deletes(cluster, state):
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(state, "first")
    task.restore(cluster)
    task.process(msg(0))
    task.write_changelogs(cluster)
    task.stores["a"].delete("y")
    task.write_changelogs(cluster)
    task.close()
    again = make_task(state, "second")
    again.restore(cluster)
    assert again.stores["a"].all() == {} and again.stores["b"].all() == {"y": 1}
    again.close()


def test_a_current_local_file_replays_only_the_changelog_tail(cluster, state):
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    first = make_task(state, "here")
    first.restore(cluster)
    for o in range(30):
        first.process(msg(o))
        first.write_changelogs(cluster)  # one key changes per input: 30 records per store
    first.process(msg(30))  # processed but never written to the changelog: must not survive
    first.close()
    # the task ran elsewhere meanwhile (another machine, empty local state) and went on
    elsewhere = make_task(state, "elsewhere")
    assert elsewhere.restore(cluster) == {"in": 30}
    assert elsewhere.restored_records == 60
    for o in range(30, 40):
        elsewhere.process(msg(o))
    elsewhere.write_changelogs(cluster)
    elsewhere.close()
    back = make_task(state, "here")
    assert back.restore(cluster) == {"in": 40}
    truth = {"x": sum(1 for o in range(40) if o % 3), "y": sum(1 for o in range(40) if not o % 3)}
    assert back.stores["b"].all() == truth and back.stores["a"].all() == truth
    # store a (memory) replays its whole changelog (30 + 2 records); store b (on disk) only
    # the 2 records written elsewhere after its local checkpoint
    assert back.restored_records == 32 + 2
    back.close()


def test_a_large_commit_spans_batches_and_a_cut_short_commit_is_not_applied(cluster, state):
    from storage import NewRecord

    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(state, "first")
    task.restore(cluster)
    big = "v" * 2000
    for i in range(700):  # 700 distinct keys of 2 kB: 1.4 MB in one commit, over 1 MiB
        task.stores["a"].put(f"k{i}", big)
    task.positions["in"] = 7
    assert task.write_changelogs(cluster) == 700
    task.close()
    table, positions = read_changelog(cluster, "app", "a", 0)
    assert len(table) == 700 and positions == {"in": 7}
    # a writer crashes in the middle of its next commit: data records, no marker
    cluster.produce(
        "app-a-changelog",
        0,
        [
            NewRecord(b"999", key=b'"k1"', timestamp=NOW),
            NewRecord(b"1", key=b'"new"', timestamp=NOW),
        ],
    )
    assert read_changelog(cluster, "app", "a", 0) == (table, {"in": 7})
    again = make_task(state, "second")
    # the commit wrote a marker to clean store b too: both stores are at the one commit
    assert again.restore(cluster) == {"in": 7}
    assert again.store_positions == {"a": {"in": 7}, "b": {"in": 7}}
    assert again.stores["a"].get("k1") == big and again.stores["a"].get("new") is None
    # its first commit rewrites the cut-short keys with their committed values (a
    # compaction could otherwise keep "999" for k1 and drop the committed record)
    again.write_changelogs(cluster)
    records = cluster.fetch("app-a-changelog", 0, cluster.latest_offset("app-a-changelog", 0) - 3)
    assert [(m.key, m.value) for m in records][-3:-1] in (
        [(b'"k1"', f'"{big}"'.encode()), (b'"new"', None)],
        [(b'"new"', None), (b'"k1"', f'"{big}"'.encode())],
    )
    assert read_changelog(cluster, "app", "a", 0) == (table, {"in": 7})
    again.close()


def test_an_answer_of_nothing_yet_is_waited_for_not_taken_for_the_changelogs_end(
    cluster, state, monkeypatch
):
    """A network read may answer "nothing yet" below the log end (a slow broker, a
    librdkafka consumer that stopped fetching: what ``fetch_drop`` answers). A restore took
    that for the changelog's end: the store came back at an older commit or empty (positions
    None), and the task went on from where its claim was, past what that state reflects.
    Now the records are waited for; records that never come are an error naming the range."""
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(state, "first")
    task.restore(cluster)
    for o in range(60):
        task.process(msg(o))
        if o % 10 == 9:
            task.write_changelogs(cluster)
    task.close()
    truth = read_changelog(cluster, "app", "a", 0)
    assert truth[1] == {"in": 60}
    changelogs = {"app-a-changelog", "app-b-changelog"}
    dropped = 0
    for seed in range(4):
        faulty = FaultyCluster(cluster, FaultPlan(fetch_drop=0.8, topics=changelogs), seed=seed)
        assert read_changelog(faulty, "app", "a", 0) == truth
        again = make_task(state, f"seed{seed}")
        assert again.restore(faulty) == {"in": 60}
        assert again.stores["a"].all() == again.stores["b"].all() == truth[0]
        again.close()
        dropped += faulty.injected()["drop"]
    assert dropped > 0  # (the faults did happen)
    monkeypatch.setattr(_ranges, "RANGE_WAIT", 0.2)
    never = FaultyCluster(cluster, FaultPlan(fetch_drop=1.0, topics=changelogs))
    with pytest.raises(RetriableError, match=r"app-a-changelog/0: no records from offset 0"):
        read_changelog(never, "app", "a", 0)


class Writer(TwoCounters):
    """Every kind of write a record can make, to both stores, and a forward to the sink;
    a record whose value is "fail" raises after all of them."""

    def process(self, record):
        for store in (self.a, self.b):
            store.put("n", (store.get("n") or 0) + 1)  # a cached scalar
            store.put("seen", [*(store.get("seen") or []), record.offset])  # written through
            store.put(["k", record.offset], 1)  # a key that did not exist
            store.delete("gone")
            store.put("n", store.get("n") + 10)  # a key written twice by one record
        self.context.forward("out", record.offset)
        if record.value == "fail":
            raise ValueError("after every write")


@pytest.mark.parametrize("atomic", [True, False])
def test_an_atomic_record_that_fails_leaves_no_store_or_sink_write_behind(cluster, state, atomic):
    """With atomic records (an App that retries or dead-letters), a failing record's store
    writes are undone and its sink writes dropped, in every engine and whatever the write
    (cached, written through, evicted by a full cache, a delete); without, they stay (what
    a retry then applies twice)."""
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    topo = Topology().add_source("s", "in").add_processor("p", Writer, "s")
    topo = topo.add_state_store(StoreSpec("a"), "p").add_state_store(
        StoreSpec("b", state.kind), "p"
    )
    topo = topo.add_sink("o", "out", "p")
    (sub,) = topo.subtopologies()
    stores = {"a": InMemoryStore("a"), "b": state.store("t", "b")}
    stores["a"]._cache_entries = 2  # store a's cache overflows within a record: evicted
    sent: list[tuple] = []
    task = Task(
        "app",
        topo,
        sub,
        0,
        stores,
        lambda *a: sent.append(a),
        lambda _t: 1,
        lambda: NOW,
        atomic_records=atomic,
    )
    task.restore(cluster)
    for store in stores.values():
        store.put("gone", "here")
    ok = Message("in", 0, 0, NOW, None, b'"ok"')
    task.process(ok)
    before = {name: store.all() for name, store in stores.items()}
    assert before["a"] == {"n": 11, "seen": [0], ("k", 0): 1}
    failures: list[int] = []
    task.process_batch(
        [Message("in", 0, 1, NOW, None, b'"fail"')], lambda m, _exc: failures.append(m.offset)
    )
    assert failures == [1]
    after = {name: store.all() for name, store in stores.items()}
    if not atomic:
        assert after["a"] == {"n": 22, "seen": [0, 1], ("k", 0): 1, ("k", 1): 1}
        assert [s[2] for s in sent] == [b"0", b"1"]
        return
    assert after == before
    assert [s[2] for s in sent] == [b"0"]
    task.process(Message("in", 0, 2, NOW, None, b'"ok"'))
    assert [s[2] for s in sent] == [b"0", b"2"]
    task.write_changelogs(cluster)
    for name in stores:
        state_, positions = read_changelog(cluster, "app", name, 0)
        assert state_ == {"n": 22, "seen": [0, 2], ("k", 0): 1, ("k", 2): 1}
        assert positions == {"in": 3}
    task.close()


def test_a_record_whose_writes_a_restored_store_drops_keeps_the_store_journaled():
    """The guard that drops a restored-ahead store's writes (by shadowing ``put``) leaves
    the store journaling after the record: undo does not stop after the first such."""
    store = InMemoryStore("a")
    store._journal_writes(True)
    store._drop_writes(True)
    store.put("x", 1)  # dropped: the store reflects this record already
    store._drop_writes(False)
    store.put("x", 2)
    store._undo_record()
    assert store.all() == {}


class Ops(Processor):
    """Applies a record's list of ``[store, op, key, value]`` (op "put" or "del") to its
    stores, then raises if the record's last element is "fail"."""

    def init(self, context):
        super().init(context)
        self.stores = {n: context.get_state_store(n) for n in ("a", "b")}

    def process(self, record):
        *ops, fate = record.value  # (the source's default deserializer: JSON)
        for name, op, key, value in ops:
            store = self.stores[name]
            if op == "put":
                store.put(_key(key), value)
            else:
                store.delete(_key(key))
            store.get(_key(key))  # a read between writes
        if fate == "fail":
            raise ValueError("after its writes")


def _key(key):
    return key if isinstance(key, str) else tuple(key)


_values = st.one_of(
    st.integers(-3, 3),
    st.sampled_from(["x", "é", ""]),
    st.lists(st.integers(0, 2), max_size=2),  # written through, not cached
    st.none(),
)
_keys = st.one_of(
    st.sampled_from(["k", "l", "m"]), st.lists(st.sampled_from(["w", "v"]), min_size=1, max_size=2)
)
_op = st.tuples(st.sampled_from("ab"), st.sampled_from(["put", "del"]), _keys, _values)
_records = st.lists(
    st.tuples(st.lists(_op, max_size=5), st.sampled_from(["ok", "ok", "fail"])), max_size=12
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=_records, cache=st.integers(1, 4))
def test_atomic_records_keep_exactly_the_writes_of_the_records_that_succeeded(
    tmp_path_factory, records, cache
):
    """Any mix of cached and written-through values, deletes, tuple keys, keys written twice
    in a record and caches small enough to be evicted mid-record, over a memory and a SQLite
    store: the stores, and what the next commit would log, equal the writes of the records
    that succeeded, applied in order."""
    topo = Topology().add_source("s", "in").add_processor("p", Ops, "s")
    topo = topo.add_state_store(StoreSpec("a"), "p").add_state_store(StoreSpec("b", "sqlite"), "p")
    (sub,) = topo.subtopologies()
    stores = {"a": InMemoryStore("a"), "b": SqliteStore("b", tmp_path_factory.mktemp("s") / "b")}
    for store in stores.values():
        store._cache_entries = cache
    task = Task(
        "app",
        topo,
        sub,
        0,
        stores,
        lambda *a: None,
        lambda _t: 1,
        lambda: NOW,
        atomic_records=True,
    )
    model: dict[str, dict] = {"a": {}, "b": {}}
    failed = []
    for offset, (ops, fate) in enumerate(records):
        value = json.dumps([*([n, op, k, v] for n, op, k, v in ops), fate]).encode()
        task.process_batch(
            [Message("in", 0, offset, NOW, None, value)], lambda m, _e: failed.append(m.offset)
        )
        if fate == "ok":
            for name, op, key, v in ops:
                k = _key(key)
                if op == "put" and v is not None:
                    model[name][k] = v
                else:
                    model[name].pop(k, None)
    assert failed == [o for o, (_, fate) in enumerate(records) if fate == "fail"]
    for name, store in stores.items():
        assert store.all() == model[name]
        logged = {
            _hashable_key(json.loads(k)): json.loads(v)
            for k, v in store.take_dirty().items()
            if v is not None
        }
        assert logged == model[name]
    task.close()


def _hashable_key(key):
    return tuple(key) if isinstance(key, list) else key


class Ticks(Processor):
    """Counts its records in "seen" (a record "fail" raises after that) and its
    punctuations in "ticks"."""

    kind = PunctuationType.STREAM_TIME

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("a")
        context.schedule(10, self.kind, self.tick)

    def tick(self, now):
        self.store.put("ticks", (self.store.get("ticks") or 0) + 1)

    def process(self, record):
        self.store.put("seen", (self.store.get("seen") or 0) + 1)
        if record.value == "fail":
            raise ValueError("fails")


def ticking_task(kind: PunctuationType, clock: list[int]) -> Task:
    Ticks.kind = kind
    topo = Topology().add_source("s", "in").add_processor("p", Ticks, "s")
    (sub,) = topo.add_state_store(StoreSpec("a"), "p").subtopologies()
    return Task(
        "app", topo, sub, 0, {"a": InMemoryStore("a")}, lambda *a: None, lambda _t: 1,
        lambda: clock[0], atomic_records=True,
    )  # fmt: skip


@pytest.mark.parametrize("kind", [PunctuationType.STREAM_TIME, PunctuationType.WALL_CLOCK_TIME])
def test_a_punctuators_writes_are_not_undone_by_the_next_record_that_fails(cluster, kind):
    """Found by an attack: the journal ran from one record's success to the next one's, so a
    punctuator's writes in between were undone with the failing record's, and a commit in
    between did not stop it (the changelog then logged them undone)."""
    cluster.create_topic("app-a-changelog", 1)
    clock = [NOW]
    task = ticking_task(kind, clock)
    task.restore(cluster)
    task.process(Message("in", 0, 0, NOW, None, b'"ok"'))  # stream time known
    task.process(Message("in", 0, 1, NOW + 20, None, b'"ok"'))  # a stream-time punctuation
    clock[0] = NOW + 100
    task.punctuate_wall_clock()
    task.write_changelogs(cluster)
    before = task.stores["a"].all()
    assert before == {"seen": 2, "ticks": 1}
    task.process_batch([Message("in", 0, 2, NOW + 20, None, b'"fail"')], lambda m, e: None)
    assert task.stores["a"].all() == before
    task.write_changelogs(cluster)
    assert read_changelog(cluster, "app", "a", 0)[0] == before
    task.close()
