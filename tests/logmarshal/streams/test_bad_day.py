"""A user's bad day: a record that fails half way through its writes, a changelog write that
fails, local store files damaged after a crash (and SIGKILLs at exact points of a commit),
tombstones reaching an aggregation, options that cannot work. Each loses nothing and counts
nothing twice, or says what is wrong where it is wrong."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from logmarshal import EmbeddedCluster
from logmarshal.errors import ClosedError, RecordTooLarge
from logmarshal.retry import HandlerFailed, RetryPolicy
from logmarshal.streams import (
    App,
    Processor,
    PunctuationType,
    StoreSpec,
    StreamsBuilder,
    Topology,
)
from logmarshal.streams import app as app_module
from logmarshal.streams.changelog import changelog_topic
from logmarshal.streams.serde import string_deserializer
from logmarshal.streams.task import marker_of, read_changelog
from logmarshal.streams.testing import TopologyTestDriver
from storage import NewRecord

from .conftest import PERSISTENT_KINDS
from .member import topology as word_count
from .test_app import (
    changelog_records,
    member_kills_itself,
    produce_lines,
    run_until,
    setup_topics,
    store_total,
    tables,
    task_records,
)

NOW = int(time.time() * 1000)


class CountWords(Processor):
    """Counts the words of each line; a line with the word ``bad`` raises at that word, after
    counting the words before it (and ``bad`` itself) when ``fail`` is set."""

    fail = True

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        for word in record.value.split():
            self.store.put(word, (self.store.get(word) or 0) + 1)
            if word == "bad" and CountWords.fail:
                raise ValueError("a bad word")


def words(kind: str = "memory") -> Topology:
    t = Topology().add_source("s", "in", value_deserializer=string_deserializer)
    return t.add_processor("p", CountWords, "s").add_state_store(StoreSpec("n", kind), "p")


def feed(cluster, lines: list[str]) -> None:
    if "in" not in cluster.topics():
        cluster.create_topic("in", 1)
    cluster.produce("in", 0, [NewRecord(line.encode(), timestamp=NOW) for line in lines])


def app(cluster, state_dir, client_id: str, topology: Topology, **options) -> App:
    options.setdefault("commit_interval", 60)
    return App(
        cluster,
        "bad",
        topology,
        client_id=client_id,
        heartbeat_interval=0.3,
        state_dir=state_dir,
        **options,
    )


def run_in_thread(a: App, records: int) -> None:
    t = threading.Thread(target=a.run, kwargs={"max_records": records}, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive()
    a.close()


def test_a_record_failing_half_way_commits_none_of_its_writes(cluster, tmp_path):
    """The processor counts ``a`` and ``bad`` of line 1, then raises: the app stops. Its final
    commit used to write those two counts with the positions before line 1, so the next run,
    processing line 1 again, counted them twice."""
    feed(cluster, ["a", "a bad", "b"])
    CountWords.fail = True
    first = app(cluster, tmp_path / "1", "x", words())
    with pytest.raises(HandlerFailed, match="offset 1"):
        first.run(max_records=3)
    # it holds the task still: running on would poll past its records, never processing them
    with pytest.raises(ClosedError, match="processes no more"):
        first.run(max_records=3)
    first.close()
    table, positions = read_changelog(cluster, "bad", "n", 0)
    assert (table, positions) == ({}, None)  # nothing since the last commit: there was none
    CountWords.fail = False  # the bug fixed, the app restarted
    second = app(cluster, tmp_path / "2", "y", words())
    run_in_thread(second, 3)
    assert read_changelog(cluster, "bad", "n", 0) == ({"a": 2, "bad": 1, "b": 1}, {"in": 3})


class FailingChangelogWrites:
    """The cluster as the App's tasks see it: the next ``failures`` commits to a changelog
    (writes with a store's records, not a fence alone) fail."""

    def __init__(self, cluster, failures: int = 1):
        self._cluster = cluster
        self.failures = failures

    def __getattr__(self, name):
        return getattr(self._cluster, name)

    def produce(self, topic, partition, records, **kwargs):
        commit = any(marker_of(r.key) is None for r in records)
        if topic.endswith("-changelog") and commit and self.failures:
            self.failures -= 1
            raise OSError("the broker went away")
        return self._cluster.produce(topic, partition, records, **kwargs)


@pytest.mark.parametrize("kind", ["memory", *PERSISTENT_KINDS])
def test_a_failed_changelog_write_is_never_taken_for_a_commit(cluster, tmp_path, kind):
    """A commit's changelog write fails (run raises), then close commits: it used to find the
    store clean (the failed write had taken its changed keys), write no marker and commit the
    inputs: the counts were in no changelog, and the next owner resumed past their input.
    Now the task commits nothing more after a failed changelog write (some stores may have
    the commit and others not: only a restore can tell), and the next owner processes its
    input again from the last commit."""
    feed(cluster, ["a", "a b"])
    CountWords.fail = False
    first = app(cluster, tmp_path / "1", "x", words(kind))
    first.cluster = FailingChangelogWrites(cluster)  # type: ignore[assignment]
    with pytest.raises(OSError, match="went away") as raised:
        first.run(max_records=2)  # its last commit fails
    assert "store 'n'" in "".join(getattr(raised.value, "__notes__", []))
    with pytest.raises(ClosedError, match="processes no more"):
        first.process(first.consumer.poll(0.1) or [])
    first.close()  # commits nothing of the task
    # (the failed commit's state, {"a": 2, "b": 1} at 2, is in no changelog)
    assert read_changelog(cluster, "bad", "n", 0) in (({}, None), ({"a": 1}, {"in": 1}))
    feed(cluster, ["b"])
    second = app(cluster, tmp_path / "2", "y", words(kind))
    run_in_thread(second, 3 - (read_changelog(cluster, "bad", "n", 0)[1] or {}).get("in", 0))
    assert read_changelog(cluster, "bad", "n", 0) == ({"a": 2, "b": 2}, {"in": 3})


class PartlyStoredChangelogWrites:
    """The cluster as NetworkCluster is (``produce_is_atomic`` false): the first changelog
    write with a store's records stores all of its records but the first, then raises, as
    librdkafka stores the later batches of a call whose first batch was refused (test
    ``tests/interop/test_network_cluster.py::test_a_call_refused_in_part_is_stored_in_part``).
    Every write after it fails: the writer is gone."""

    produce_is_atomic = False

    def __init__(self, cluster):
        self._cluster = cluster
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._cluster, name)

    def produce(self, topic, partition, records, **kwargs):
        commit = topic.endswith("-changelog") and any(marker_of(r.key) is None for r in records)
        if not commit and not self.calls:
            return self._cluster.produce(topic, partition, records, **kwargs)
        self.calls += 1
        if self.calls == 1 and len(records) > 1:
            self._cluster.produce(topic, partition, records[1:], **kwargs)
            raise RecordTooLarge("a batch of the call was refused")
        raise OSError("the broker went away")


@pytest.mark.parametrize("kind", ["memory", *PERSISTENT_KINDS])
def test_a_commit_stored_in_part_is_not_applied_by_a_restore(cluster, tmp_path, kind):
    """The commit marker came in one call with the commit's records: over the network a call
    stored in part (its first batch refused) stored the marker, and a restore applied the
    commit without the missing records, at the commit's positions: the next owner lost the
    count of "a" (it resumed past the lines that made it). Now the marker is written alone,
    after its records' call succeeded."""
    feed(cluster, ["a", "a b"])
    CountWords.fail = False
    first = app(cluster, tmp_path / "1", "x", words(kind))
    first.cluster = PartlyStoredChangelogWrites(cluster)  # type: ignore[assignment]
    with pytest.raises(RecordTooLarge):
        first.run(max_records=2)  # its commit is stored in part, then the writer is gone
    with contextlib.suppress(Exception):
        first.close()
    assert read_changelog(cluster, "bad", "n", 0) == ({}, None)  # no commit is complete
    feed(cluster, ["b"])
    second = app(cluster, tmp_path / "2", "y", words(kind))
    run_in_thread(second, 3)
    assert read_changelog(cluster, "bad", "n", 0) == ({"a": 2, "b": 2}, {"in": 3})


def damage(kind: str, path: Path) -> None:
    """Overwrite the start of a store's local files: a RocksDB's CURRENT; a SQLite file's
    first pages and its WAL's (whose pages, after a SIGKILL, may hold the whole database)."""
    targets = [path / "CURRENT"] if kind == "rocksdb" else [path, Path(f"{path}-wal")]
    for target in targets:
        with open(target, "r+b" if target.exists() else "wb") as f:
            f.write(b"not a store " * 1000)


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_damaged_local_files_are_rebuilt_from_the_changelog(cluster, tmp_path, kind):
    """A store file that cannot be opened made every set-up of its task fail (the app
    stopped, and again at each restart): it is deleted and the store restored."""
    feed(cluster, ["a", "a b"])
    CountWords.fail = False
    first = app(cluster, tmp_path, "x", words(kind))
    run_in_thread(first, 2)
    damage(kind, tmp_path / "bad" / "0_0" / f"n.{kind}")
    feed(cluster, ["b"])
    again = app(cluster, tmp_path, "y", words(kind))  # the same machine, the same files
    run_in_thread(again, 1)
    assert read_changelog(cluster, "bad", "n", 0) == ({"a": 2, "b": 2}, {"in": 3})


def damage_in_the_middle(kind: str, path: Path) -> None:
    """Overwrite a page in the middle of a store's data (SQLite's file, RocksDB's largest
    table file): the files open, their checkpoint reads, and only a read of a key stored
    there finds the damage."""
    if kind == "rocksdb":
        path = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(b"\xa5" * 4096)


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_store_found_damaged_in_use_is_restored_and_its_record_not_dead_lettered(
    cluster, tmp_path, kind, caplog
):
    """Damage that opening a store does not see (a page in the middle of its file) was met by
    a ``get``: the engine's error was the record's, so a retry policy retried it and then
    dead-lettered it and every other record that read such a key (their input left the
    state), and without one the app stopped at each restart on the same record. Now the
    running app drops the task, restores it from the changelog (commits were made before the
    damage was met) and processes again from where the restored state ends."""
    keys = [f"k{i:05d}" for i in range(20_000)]
    feed(cluster, keys)
    CountWords.fail = False
    retry = RetryPolicy(max_attempts=3, backoff=0, dead_letter_topic="dlq")
    first = app(cluster, tmp_path, "x", words(kind), retry=retry)
    run_in_thread(first, len(keys))
    damage_in_the_middle(kind, tmp_path / "bad" / "0_0" / f"n.{kind}")
    feed(cluster, keys)
    # the same machine, the same files; commits every 50 ms, so some land before the damage
    again = app(cluster, tmp_path, "y", words(kind), retry=retry, commit_interval=0.05)
    run_until(again, lambda: ends_with_marker(cluster, "bad", "n", {"in": 40_000}))
    restored = [r for r in caplog.records if "restoring it from its changelogs" in r.message]
    assert len(restored) == 1 and "are damaged" in restored[0].message
    assert "dlq" not in cluster.topics()
    assert read_changelog(cluster, "bad", "n", 0) == (dict.fromkeys(keys, 2), {"in": 40_000})
    assert (tmp_path / "bad" / "0_0" / f"n.{kind}").exists()  # made again, by the restore


def ends_with_marker(cluster, app_id: str, store: str, positions: dict[str, int]) -> bool:
    """The store's changelog restores to ``positions``; read in full only once its last record
    says so (a full read of 40,000 records at every poll made the test's time)."""
    topic = changelog_topic(app_id, store)
    end = cluster.latest_offset(topic, 0)
    last = cluster.fetch(topic, 0, end - 1) if end else []
    if not last or last[-1].value is None or json.loads(last[-1].value) != positions:
        return False
    return read_changelog(cluster, app_id, store, 0)[1] == positions


def meet_damage(store) -> None:
    """What a SQLite store's engine call does when it reads a malformed page."""
    try:
        raise sqlite3.DatabaseError("database disk image is malformed")
    except sqlite3.DatabaseError as exc:
        store._check_damage(exc)  # raises StoreDamaged


def damage_at_call(monkeypatch, engine: type, method: str, call: int) -> dict[str, int]:
    """``engine.method``'s ``call``-th call meets damage; ``left`` counts down to it."""
    damaged = {"left": call}
    original = getattr(engine, method)

    def failing(self, *args, **kwargs):
        damaged["left"] -= 1
        if damaged["left"] == 0:
            meet_damage(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(engine, method, failing)
    return damaged


@pytest.mark.parametrize("where", ["_put_many", "checkpoint"])
@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_store_found_damaged_by_a_commit_is_restored(cluster, tmp_path, kind, where, monkeypatch):
    """Damage met by a commit stopped the app: by the flush of its writes to the local files
    (before the changelog write: what was processed since the last commit must be processed
    again), or by its local checkpoint (after it). Now the task is restored from its
    changelogs there too, and every line is counted once, even when closing the damaged
    store raises."""
    from logmarshal.streams.stores import RocksDBStore, SqliteStore

    lines = [f"a b{i % 7}" for i in range(400)]
    feed(cluster, lines[:200])
    CountWords.fail = False
    engine = SqliteStore if kind == "sqlite" else RocksDBStore
    # the first commit's flush meets the damage, or its checkpoint (the first checkpoint
    # is the restore's, at its fence)
    damaged = damage_at_call(monkeypatch, engine, where, 1 if where == "_put_many" else 2)
    close = engine.close

    def close_failing(self):  # as a damaged SQLite file's rollback may
        close(self)
        if self.damaged is not None:
            raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(engine, "close", close_failing)
    again = app(cluster, tmp_path, "x", words(kind), commit_interval=0.05)
    fed = False

    def progress() -> bool:
        nonlocal fed
        if not fed and damaged["left"] <= 0:
            feed(cluster, lines[200:])  # more input once the damage was met
            fed = True
        # and the group's position moves on (an attack found it stuck for good after damage
        # met by the checkpoint: the restored state's records were never committed)
        return (
            fed
            and read_changelog(cluster, "bad", "n", 0)[1] == {"in": 400}
            and again.consumer.position("in", 0) == 399
        )

    run_until(again, progress)
    counts = {"a": 400, **{f"b{j}": sum(1 for i in range(400) if i % 7 == j) for j in range(7)}}
    assert read_changelog(cluster, "bad", "n", 0) == (counts, {"in": 400})


class CountsAndMeetsDamage(CountWords):
    """Counts words; its wall-clock punctuator meets damage in the store once."""

    met = 0

    def init(self, context):
        super().init(context)
        context.schedule(20, PunctuationType.WALL_CLOCK_TIME, self.punctuate)

    def punctuate(self, now):
        self.store.get("a")
        if not CountsAndMeetsDamage.met:
            CountsAndMeetsDamage.met += 1
            meet_damage(self.store)


def test_a_store_found_damaged_by_a_wall_clock_punctuator_is_restored(cluster, tmp_path):
    CountWords.fail = False
    CountsAndMeetsDamage.met = 0
    feed(cluster, ["a b"] * 50)
    t = Topology().add_source("s", "in", value_deserializer=string_deserializer)
    t = t.add_processor("p", CountsAndMeetsDamage, "s").add_state_store(
        StoreSpec("n", "sqlite"), "p"
    )
    again = app(cluster, tmp_path, "x", t, commit_interval=0.05)
    fed = False

    def progress() -> bool:
        nonlocal fed
        if not fed and CountsAndMeetsDamage.met:
            feed(cluster, ["a"] * 50)
            fed = True
        return fed and read_changelog(cluster, "bad", "n", 0)[1] == {"in": 100}

    run_until(again, progress)
    assert read_changelog(cluster, "bad", "n", 0) == ({"a": 100, "b": 50}, {"in": 100})


class Appends(Processor):
    """Appends each line to the value of the key ``all``."""

    def init(self, context):
        super().init(context)
        self.store = context.get_state_store("n")

    def process(self, record):
        self.store.put("all", (self.store.get("all") or "") + record.value)


def test_a_value_over_the_changelogs_limit_is_named(cluster, tmp_path):
    """A store value larger than the changelog's max.message.bytes fails every commit (as
    Kafka Streams' thread fails on RecordTooLargeException); the error named the store
    only, not which key or how large, so the user could not tell what to change."""
    t = Topology().add_source("s", "in", value_deserializer=string_deserializer)
    t.add_processor("p", Appends, "s").add_state_store(StoreSpec("n", "memory"), "p")
    cluster.create_topic("bad-n-changelog", 1, {"cleanup.policy": "compact",
                                                 "max.message.bytes": 2000})  # fmt: skip
    feed(cluster, ["x" * 900, "y" * 900, "z" * 900])
    first = app(cluster, tmp_path, "x", t)
    with pytest.raises(RecordTooLarge) as raised:
        first.run(max_records=3)
    first.close()
    notes = "".join(getattr(raised.value, "__notes__", []))
    assert "store 'n'" in notes and "key b'\"all\"', 2702 value bytes" in notes, notes  # (JSON)
    assert "max.message.bytes" in notes
    assert read_changelog(cluster, "bad", "n", 0) == ({}, None)  # nothing half-committed


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_changelog_behind_the_local_checkpoint_is_reported(cluster, tmp_path, kind, caplog):
    """The changelog deleted and created again (or cut back by an unclean election) under a
    persistent store: the restore followed the changelog without a word, the local state
    and the counts it held gone. It still follows the changelog (the local copy cannot be
    checked against fences it no longer has; Kafka Streams wipes it too), and says so."""
    feed(cluster, ["a", "a b"])
    CountWords.fail = False
    run_in_thread(app(cluster, tmp_path, "x", words(kind)), 2)
    cluster.delete_topic("bad-n-changelog")
    cluster.create_topic("bad-n-changelog", 1, {"cleanup.policy": "compact"})
    feed(cluster, ["b"])
    with caplog.at_level("WARNING", logger="logmarshal.streams.changelog"):
        run_in_thread(app(cluster, tmp_path, "y", words(kind)), 1)
    said = [r.getMessage() for r in caplog.records if "lost records" in r.getMessage()]
    assert len(said) == 1, said
    assert "bad-n-changelog/0 ends at offset 0" in said[0] and "{'in': 2}" in said[0]
    assert read_changelog(cluster, "bad", "n", 0) == ({"b": 1}, {"in": 3})


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_changelog_written_again_past_the_local_checkpoint_is_not_put_on_it(
    cluster, tmp_path, kind
):
    """The changelog deleted while a member was stopped, then written again by a member on
    another machine until it ends past the first one's local checkpoint: the first, back on
    its old files, took them for current and replayed the new changelog's tail on them. Its
    store held counts of no changelog, and the next one of those words was counted on them
    (an attack on the restore, 2026-12-06)."""
    feed(cluster, ["s0 s1 s2 s3 s4"])
    CountWords.fail = False
    run_in_thread(app(cluster, tmp_path / "here", "x", words(kind)), 1)
    cluster.delete_topic("bad-n-changelog")
    cluster.create_topic("bad-n-changelog", 1, {"cleanup.policy": "compact"})
    feed(cluster, [" ".join(f"n{i}" for i in range(10))])
    run_in_thread(app(cluster, tmp_path / "elsewhere", "y", words(kind)), 1)
    assert cluster.latest_offset("bad-n-changelog", 0) > 7  # (past x's checkpoint)
    feed(cluster, ["fresh s0"])
    run_in_thread(app(cluster, tmp_path / "here", "x", words(kind)), 1)
    table, positions = read_changelog(cluster, "bad", "n", 0)
    assert positions == {"in": 3}
    assert table == {**{f"n{i}": 1 for i in range(10)}, "fresh": 1, "s0": 1}


@pytest.mark.slow
@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
@pytest.mark.parametrize("where", ["after-changelog", "mid-changelog"])
@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_sigkill_at_a_point_of_the_commit_leaves_exact_counts(tmp_path, kind, where, damaged):
    """A member SIGKILLs itself right after a commit's changelog records (before its local
    checkpoint and its input commit: the heartbeats lag the changelog), or between a commit's
    data records and its marker (a commit cut short); its successor runs on the same
    machine, on its files as the kill left them or damaged, and ends with the true counts."""
    data = tmp_path / "data"
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        setup_topics(cluster)
        truth = produce_lines(cluster, 0, 3000)
    total = sum(sum(c.values()) for c in truth.values())
    state = tmp_path / "s1"
    log = member_kills_itself(
        data, state, tmp_path / "member.out", LM_STORE_KIND=kind, LM_KILL_AT=where
    )
    assert f"killing {where}" in log, log[-2000:]
    if damaged:
        for part in (state / "wc").glob("0_*"):
            damage(kind, part / f"counts.{kind}")
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        partial = tables(cluster)
        assert 0 < sum(sum(c.values()) for c in partial.values()) < total
        records = {p: changelog_records(cluster, p) for p in (0, 1)}
        if where == "mid-changelog":  # some partition's changelog ends with a cut-short commit
            assert any(marker_of(r[-1].key) is None for r in records.values())
        else:  # some partition's changelog reflects input its heartbeats never carried
            beaten = {p: -1 for p in (0, 1)}
            for m in task_records(cluster):
                beaten[m.partition] = max(beaten[m.partition], dict(m.positions)["lines"])
            logged = {p: read_changelog(cluster, "wc", "counts", p)[1] or {} for p in (0, 1)}
            assert any(logged[p].get("lines", 0) > beaten[p] + 1 for p in (0, 1))
        b = App(
            cluster,
            "wc",
            word_count(kind=kind),
            client_id="m2",
            heartbeat_interval=0.3,
            commit_interval=0.05,
            state_dir=state,
        )
        run_until(b, lambda: store_total(b) >= total and len(b.tasks) == 2, timeout=60)
        assert tables(cluster) == truth


def test_aggregations_skip_tombstones():
    """As in Kafka Streams, a None value is not aggregated: count counted it, reduce called
    the reducer with it (a TypeError: the app stopped) or deleted the key."""
    counting = StreamsBuilder("t")
    counting.stream("in").group_by_key().count("c")
    reducing = StreamsBuilder("t")
    reducing.stream("in").group_by_key().reduce(lambda acc, v: acc + v, "r")
    count, reduce = TopologyTestDriver(counting.build()), TopologyTestDriver(reducing.build())
    for value in [None, 1, None, 2]:
        count.pipe("in", "k", value)
        reduce.pipe("in", "k", value)
    assert count.store("c") == {"k": 2}
    assert reduce.store("r") == {"k": 3}


def test_options_that_cannot_work_are_refused_up_front(cluster, tmp_path, monkeypatch):
    feed(cluster, ["a"])
    with pytest.raises(ValueError, match="commit_interval"):
        app(cluster, tmp_path, "x", words(), commit_interval="1")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match="state_dir"):
        app(cluster, tmp_path / "file", "x", words("sqlite"))
    with pytest.raises(ValueError, match="mode"):
        app(cluster, tmp_path, "x", words(), consumer_options={"mode": "eos"})
    # an option the consumer refuses: the App's marshaler (its threads) is closed too
    made = []
    real = app_module.Marshaler

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(app_module, "Marshaler", recording)
    with pytest.raises(TypeError, match="bogus"):
        app(cluster, tmp_path, "x", words(), consumer_options={"bogus": 1})
    assert len(made) == 1 and made[0].closed
