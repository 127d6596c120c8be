"""The stores' write-behind cache: reads see it, the changelog gets one record per key per
commit, values cannot change behind the store's back, and bad keys fail at the write."""

from __future__ import annotations

import time

import pytest

from logmarshal.cluster import Message
from logmarshal.errors import ClosedError
from logmarshal.streams import Processor, StoreSpec, Topology
from logmarshal.streams.serde import string_deserializer
from logmarshal.streams.stores import KINDS, PERSISTENT, InMemoryStore, KeyDict
from logmarshal.streams.task import COMMIT_KEY, Task, marker_of, read_changelog

from .conftest import PERSISTENT_KINDS, open_store

NOW = int(time.time() * 1000)


@pytest.fixture(params=KINDS)
def store(request, tmp_path):
    opened = open_store(request.param, "s", tmp_path)
    yield opened
    opened.close()


def test_a_spec_names_an_engine_and_persistent_is_rocksdb():
    """ "persistent" is the fastest durable engine of bench/stores.py's run (docs/streams.md)."""
    assert StoreSpec("c", "persistent").kind == "rocksdb" == PERSISTENT
    assert [StoreSpec("c", k).kind for k in KINDS] == ["memory", "sqlite", "rocksdb"]
    with pytest.raises(ValueError, match="store kind"):
        StoreSpec("c", "leveldb")


def test_reads_see_unflushed_writes_and_a_flush_encodes_each_key_once(store):
    for n in range(5):
        store.put("k", n)
    store.put(["w", 60_000], 1.5)
    store.put("gone", True)
    store.delete("gone")
    assert store.get("k") == 4 and store.get(["w", 60_000]) == 1.5 and store.get("gone") is None
    assert store._get(b'"k"') is None  # not in the engine yet: only the commit writes it
    assert store.take_dirty() == {b'"k"': b"4", b'["w",60000]': b"1.5", b'"gone"': None}
    assert store._get(b'"k"') == b"4"
    assert store.take_dirty() == {}
    assert store.all() == {"k": 4, ("w", 60_000): 1.5}


def test_a_mutable_value_is_serialized_at_the_write(store):
    value = {"n": [1]}
    store.put("k", value)
    value["n"].append(2)  # a processor mutating what it wrote must not change the store
    got = store.get("k")
    assert got == {"n": [1]}
    got["n"].append(3)  # nor mutating what it read
    assert store.get("k") == {"n": [1]}
    store.put("k", 7)  # a cached write after a written-through one wins
    assert store.take_dirty() == {b'"k"': b"7"}
    store.put("k", [1])  # and a written-through one after a cached one
    assert store.get("k") == [1] and store.take_dirty() == {b'"k"': b"[1]"}


def test_a_key_has_one_cache_entry_whatever_its_type(store):
    class Name(str):
        pass

    store.put("a", 1)
    store.put(Name("a"), 2)
    assert store.get("a") == 2 and store.take_dirty() == {b'"a"': b"2"}
    store.put(1, "int")
    store.put(1.0, "float")  # equal in Python, not in JSON: two keys, as in the engine
    assert store.get(1) == "int" and store.get(1.0) == "float"
    assert store.take_dirty() == {b"1": b'"int"', b"1.0": b'"float"'}


def test_bad_keys_and_values_fail_at_the_write_and_lose_nothing(store):
    store.put("ok", 1)
    with pytest.raises(UnicodeEncodeError):
        store.put("\ud800", 1)  # a lone surrogate has no UTF-8 form
    with pytest.raises(UnicodeEncodeError):
        store.put("k", "\ud800")
    with pytest.raises(ValueError):
        store.put(None, 1)
    with pytest.raises(ValueError):
        store.put("k", 10**5000)  # more digits than Python prints
    assert store.take_dirty() == {b'"ok"': b"1"}


def test_ints_on_both_sides_of_the_small_int_check_are_kept_exactly(store):
    values = [0x3FFFFFFF, -0x3FFFFFFF, 0x40000000, -0x40000000, 2**1023, -(2**1023), 2**1024, True]
    for i, v in enumerate(values):
        store.put(f"k{i}", v)
    assert [store.get(f"k{i}") for i in range(len(values))] == values
    dirty = store.take_dirty()
    assert dirty[b'"k6"'] == str(2**1024).encode() and dirty[b'"k7"'] == b"true"
    assert store.all() == {f"k{i}": v for i, v in enumerate(values)}


def test_a_full_cache_writes_through_and_the_commit_still_logs_every_key(tmp_path):
    store = InMemoryStore("s")
    store._cache_entries = 3
    for i in range(10):
        store.put(f"k{i}", i)
        assert store.get(f"k{i}") == i
    assert len(store._writes) <= 3 and store._get(b'"k0"') == b"0"
    assert store.take_dirty() == {f'"k{i}"'.encode(): str(i).encode() for i in range(10)}


def test_a_spec_refuses_a_logged_that_is_no_bool():
    """``StoreSpec("s", logged="no")`` was taken, and meant logged (a non-empty str)."""
    with pytest.raises(TypeError, match="'logged' must be <class 'bool'>"):
        StoreSpec("s", logged="no")


def test_a_closed_store_refuses_use_and_closes_once(store):
    """Found by an attack on the API: a second close raised the engine's error
    (sqlite3.ProgrammingError, rocksdict's DbClosedError), and a SqliteStore answered
    ``get`` from its cache after close and took ``put``. Its engine's methods (``all``,
    ``checkpoint``, ``restore``, ``local_checkpoint``, ``clear``) said a closed SQLite
    file was damaged, marking the store so (another attack, 2026-12-06)."""
    store.put("a", 1)
    store.flush()
    store.checkpoint(0, {}, 0)
    store.close()
    store.close()
    for use in (
        lambda: store.get("a"),
        lambda: store.put("a", 2),
        lambda: store.put("b", [1]),
        store.all,
        lambda: store.checkpoint(1, {}, 1),
        lambda: store.restore(b'"a"', b"2"),
        store.local_checkpoint,
        store.clear,
    ):
        with pytest.raises(ClosedError, match="is closed"):
            use()
    assert store.damaged is None


def test_a_key_that_is_a_json_object_comes_back_from_all(store):
    """``put({"user": "ann"}, 1)`` worked, and ``all()`` then raised "unhashable type:
    'dict'" (and so did read_changelog and the test driver's store, for a DSL
    ``group_by`` to a dict). An attack on the stores, 2026-12-06."""
    store.put({"user": "ann", "page": "home"}, 1)
    store.put([{"a": [1, 2]}, 0], 2)  # (a windowed key of one)
    got = store.all()
    assert got == {KeyDict({"page": "home", "user": "ann"}): 1, (KeyDict({"a": (1, 2)}), 0): 2}
    first = next(k for k in got if isinstance(k, dict))
    assert first == {"user": "ann", "page": "home"}  # (equal to the dict put)
    assert store.get(dict(first)) == 1
    with pytest.raises(TypeError, match="does not change"):
        first["user"] = "bob"
    import copy
    import pickle

    assert copy.deepcopy(got) == got and pickle.loads(pickle.dumps(got)) == got


def test_a_spec_refuses_an_unlogged_store():
    """``logged=False`` was taken and ignored: the store's changelog was made and written
    all the same (an attack, 2026-12-06). Every store is logged."""
    with pytest.raises(ValueError, match="logged=False is not supported"):
        StoreSpec("s", "rocksdb", logged=False)
    assert StoreSpec("s").logged is True


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_closing_drops_writes_not_committed(tmp_path, kind):
    store = open_store(kind, "s", tmp_path)
    store.put("kept", 1)
    store.take_dirty()
    store.checkpoint(0, {"in": 1}, 0)
    store.put("lost", 2)  # cached only
    store.put("lost too", [2])  # written through to the open transaction
    store.put("kept", 5)
    store.take_dirty()  # flushed to the engine, never checkpointed
    store.close()
    again = open_store(kind, "s", tmp_path)
    assert again.all() == {"kept": 1}
    assert again.local_checkpoint() == (0, {"in": 1}, 0)
    again.close()


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_checkpoint_keeps_the_writes_and_clear_forgets_them(tmp_path, kind):
    """What a checkpoint covers survives a reopen with the offset it matches; clear drops
    the entries and the checkpoint at once (a crash after it restores from the start)."""
    store = open_store(kind, "s", tmp_path)
    assert store.local_checkpoint() is None
    store.put("a", 1)
    store.put(["w", 0], {"n": 2})
    store.delete("gone")
    store.take_dirty()
    store.checkpoint(7, {"in": 3}, 2)
    store.close()
    again = open_store(kind, "s", tmp_path)
    assert again.all() == {"a": 1, ("w", 0): {"n": 2}}
    assert again.get("a") == 1 and again.local_checkpoint() == (7, {"in": 3}, 2)
    again.delete("a")
    again.take_dirty()
    again.checkpoint(8, {"in": 4}, 2)
    assert again.all() == {("w", 0): {"n": 2}} and again._get(b'"a"') is None
    again.clear()
    assert again.all() == {} and again.local_checkpoint() is None
    again.close()
    last = open_store(kind, "s", tmp_path)
    assert last.all() == {} and last.local_checkpoint() is None
    last.close()


class Counter(Processor):
    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        if record.value == "bad":
            raise ValueError("bad record")
        self.store.put(record.value, (self.store.get(record.value) or 0) + 1)


def counter_task() -> Task:
    topo = Topology().add_source("s", "in").add_processor("p", Counter, "s")
    topo.add_state_store(StoreSpec("n"), "p")
    (sub,) = topo.subtopologies()
    return Task(
        "app", topo, sub, 0, {"n": InMemoryStore("n")}, lambda *a: None, lambda _t: 1, lambda: NOW
    )


def messages(values: list[str]) -> list[Message]:
    return [Message("in", 0, o, NOW + o, None, f'"{v}"'.encode()) for o, v in enumerate(values)]


def test_a_commit_logs_one_record_per_key_with_its_last_value(cluster):
    cluster.create_topic("app-n-changelog", 1)
    task = counter_task()
    task.restore(cluster)
    task.process_batch(messages(["a", "b", "a", "a", "b", "c"]))
    start = cluster.latest_offset("app-n-changelog", 0)
    assert task.write_changelogs(cluster) == 3
    records = cluster.fetch("app-n-changelog", 0, start)
    data = sorted((m.key, m.value) for m in records if marker_of(m.key) is None)
    assert data == [(b'"a"', b"3"), (b'"b"', b"2"), (b'"c"', b"1")]
    assert marker_of(records[-1].key) is COMMIT_KEY
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 3, "b": 2, "c": 1}, {"in": 6})
    task.close()


def test_a_batch_hands_a_failing_record_to_on_error_and_goes_on():
    task = counter_task()
    failed = []
    task.process_batch(messages(["a", "bad", "a"]), lambda m, exc: failed.append((m.offset, exc)))
    assert [(o, str(e)) for o, e in failed] == [(1, "bad record")]
    assert task.stores["n"].all() == {"a": 2} and task.positions == {"in": 3}
    again = counter_task()
    with pytest.raises(ValueError):  # without on_error: raised, the records before it done
        again.process_batch(messages(["a", "bad", "a"]))
    assert again.stores["n"].all() == {"a": 1} and again.positions == {"in": 1}


def test_reading_every_entry_changes_nothing(store):
    """all() may run beside the processing thread (tests and tools watch running Apps): it
    must not flush, or a processor's get racing the flush reads an older value."""
    store.put("a", 1)
    store.put("b", 2)
    store.take_dirty()
    store.put("a", 3)
    store.delete("b")
    store.put(["w", 0], 4)
    cached = (dict(store._writes), dict(store._reads))
    assert store.all() == {"a": 3, ("w", 0): 4}
    assert (dict(store._writes), dict(store._reads)) == cached
    assert store._get(b'"a"') == b"1" and store._get(b'"b"') == b"2"  # nothing flushed
    assert store.take_dirty() == {b'"a"': b"3", b'"b"': None, b'["w",0]': b"4"}
    assert store.all() == {"a": 3, ("w", 0): 4}


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_thread_reading_every_entry_loses_no_update_of_the_processor(tmp_path, kind):
    """The race all() had when it flushed: a watcher thread (as the App tests' probes) beside
    a processor counting and committing. Reads change nothing, so every count is exact."""
    import threading

    store = open_store(kind, "s", tmp_path)
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            store.all()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        words = ["alpha", "beta", "gamma", "delta", "eps"]
        for i in range(20_000):
            word = words[i % 5]
            store.put(word, (store.get(word) or 0) + 1)
            if i % 500 == 0:
                store.take_dirty()
                store.checkpoint(i, {"in": i + 1}, 0)
    finally:
        stop.set()
        watcher.join()
    assert {w: store.get(w) for w in words} == dict.fromkeys(words, 4_000)
    store.close()


def test_dropped_writes_leave_the_store_and_its_changelog_unchanged(store):
    """A task drops the writes of an input record a store already reflects by switching
    ``put`` and ``delete`` off on the store itself (processors hold the store, no wrapper)."""
    store.put("a", 1)
    store._drop_writes(True)
    store.put("a", 2)
    store.put("b", 1)
    store.delete("a")
    assert store.get("a") == 1 and store.get("b") is None
    store._drop_writes(False)
    store.put("b", 3)
    assert store.take_dirty() == {b'"a"': b"1", b'"b"': b"3"}


def test_processors_get_the_store_itself_and_a_custom_key_deserializer_sees_null_keys():
    """serde's deserializers are not called for a None key (each returns None); any other
    deserializer still is."""
    seen = []

    class P(Processor):
        def init(self, context):
            super().init(context)
            seen.append(context.get_state_store("n"))

        def process(self, record):
            seen.append(record.key)

    topo = (
        Topology()
        .add_source("s", "in", key_deserializer=lambda b: b"none" if b is None else b)
        .add_processor("p", P, "s")
    )
    topo.add_state_store(StoreSpec("n"), "p")
    (sub,) = topo.subtopologies()
    n = InMemoryStore("n")
    task = Task("app", topo, sub, 0, {"n": n}, lambda *a: None, lambda _t: 1, lambda: NOW)
    task.process_batch([Message("in", 0, 0, NOW, None, b"1"), Message("in", 0, 1, NOW, b"k", b"2")])
    assert seen == [n, b"none", b"k"]


def test_a_value_string_deserializer_rejects_bad_utf8_per_record():
    """A string source's values are decoded inline (no call per record): a value that is not
    UTF-8 still fails alone, as string_deserializer would, and the batch goes on."""
    seen, failed = [], []

    class P(Processor):
        def process(self, record):
            seen.append(record.value)

    topo = Topology().add_source("s", "in", value_deserializer=string_deserializer)
    topo.add_processor("p", P, "s")
    (sub,) = topo.subtopologies()
    task = Task("app", topo, sub, 0, {}, lambda *a: None, lambda _t: 1, lambda: NOW)
    task.process_batch(
        [
            Message("in", 0, o, NOW, None, v)
            for o, v in enumerate([b"a", b"\xff", None, "é".encode()])
        ],
        lambda m, exc: failed.append((m.offset, type(exc))),
    )
    assert seen == ["a", None, "é"] and failed == [(1, UnicodeDecodeError)]
    assert task.positions == {"in": 4}


def test_only_sqlites_own_damage_errors_mark_a_store_damaged():
    """SQLite's errors of a file's content are DatabaseError itself; its kinds are not (a
    value too big for SQLite, DataError, was taken for damage: the files deleted, the store
    restored, the record processed again, failing again, for good)."""
    import sqlite3

    from logmarshal.streams.stores import _damaged

    for damage in ("file is not a database", "database disk image is malformed"):
        assert _damaged(sqlite3.DatabaseError(damage), in_use=True)
    for kind in (sqlite3.DataError, sqlite3.IntegrityError, sqlite3.OperationalError):
        assert not _damaged(kind("string or blob too big"), in_use=True)
    assert not _damaged(sqlite3.ProgrammingError("Cannot operate on a closed database."))


def test_local_files_that_cannot_be_opened_are_named_and_left_alone(tmp_path) -> None:
    """A file where a RocksDB directory goes raised a bare ``Exception("File exists (os
    error 17)")`` naming no store and no path, and a SQLite file of another schema failed
    with "no such column: v". Both are StoreUnavailable now, naming the store and the path,
    and the files are kept: they are not damage, which is deleted and restored."""
    from logmarshal.streams.stores import StoreUnavailable
    from logmarshal.streams.stores import open_store as open_local

    in_the_way = tmp_path / "counts.rocksdb"
    in_the_way.write_bytes(b"not a directory")
    with pytest.raises(StoreUnavailable, match=f"store 'counts': .*at {in_the_way} "):
        open_local("rocksdb", "counts", in_the_way)
    assert in_the_way.read_bytes() == b"not a directory"

    import sqlite3

    other = tmp_path / "counts.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE kv (key TEXT, value TEXT)")
        db.execute("INSERT INTO kv VALUES ('a', 'b')")
    with pytest.raises(StoreUnavailable, match=r"table kv has columns \['key', 'value'\]"):
        open_local("sqlite", "counts", other)
    with sqlite3.connect(other) as db:
        assert db.execute("SELECT * FROM kv").fetchall() == [("a", "b")]


def test_keys_equal_in_python_and_distinct_in_the_store_are_not_merged(store) -> None:
    """``all()`` built a dict of the decoded keys, and 1, 1.0 and True (distinct keys in the
    store: ``1``, ``1.0``, ``true``) became one entry with one of the values: a count read
    back by the test driver or ``read_changelog`` was wrong. ``items()`` keeps each; ``all()``
    refuses to merge them (an attack on the DSL, 2026-12-06)."""
    store.put(1, "int")
    store.put(True, "bool")
    store.put(1.0, "float")
    assert sorted(map(repr, store.items())) == ["(1, 'int')", "(1.0, 'float')", "(True, 'bool')"]
    with pytest.raises(ValueError, match="equal in Python"):
        store.all()
    store.delete(True)
    store.delete(1.0)
    assert store.all() == {1: "int"} and store.items() == [(1, "int")]
