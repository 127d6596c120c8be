"""A task of two stores whose commits a crash left out of step: one store's changelog got a
commit the other's did not. The successor must leave both exact, and send each count once.
Found by an attack on the DSL (2026-12-06); each test fails without its fix."""

from __future__ import annotations

import time

import pytest

from logmarshal.streams import STREAM_TIME, App, Processor, StoreSpec, StreamsBuilder, Topology
from logmarshal.streams import task as task_module
from logmarshal.streams.changelog import read_changelog
from logmarshal.streams.serde import json_deserializer
from storage import NewRecord

from .conftest import PERSISTENT_KINDS
from .member import topology as word_count
from .test_app import member_kills_itself, produce_lines, run_until, setup_topics

N = 200


class _Crash(BaseException):
    """The process dies here (nothing after it runs, as after a SIGKILL)."""


class _CountsTwiceAndTells(Processor):
    """Counts each record into c and s (equal at every step); a stream-time punctuator
    forwards the pair."""

    def init(self, context) -> None:
        super().init(context)
        self.c, self.s = context.get_state_store("c"), context.get_state_store("s")
        context.schedule(1, STREAM_TIME, self.tell)

    def tell(self, _now: int) -> None:
        self.context.forward("k", [self.c.get("k"), self.s.get("k")])

    def process(self, record) -> None:
        self.c.put(record.key, (self.c.get(record.key) or 0) + 1)
        self.s.put(record.key, (self.s.get(record.key) or 0) + 1)


def _two_stores(cluster, client: str, tmp_path, processor, *, sink: bool = False) -> App:
    """An App of one processor over stores c and s (and a sink "out" with ``sink``)."""
    t = Topology().add_source("src", "in").add_processor("p", processor, "src")
    if sink:
        t.add_sink("out", "out", "p")
    t.add_state_store(StoreSpec("c", "sqlite"), "p").add_state_store(StoreSpec("s", "sqlite"), "p")
    return App(
        cluster,
        "two",
        t,
        client_id=client,
        heartbeat_interval=0.3,
        state_dir=tmp_path / client,
        commit_interval=3600,
    )


def _punctuating(cluster, client: str, tmp_path) -> App:
    return _two_stores(cluster, client, tmp_path, _CountsTwiceAndTells, sink=True)


def _app(cluster, client: str, tmp_path, *, chained: bool = False) -> App:
    b = StreamsBuilder("two")
    grouped = b.stream("in").group_by_key()
    counts = grouped.count(StoreSpec("c", "sqlite"))
    counts.to_stream().to("out")
    if chained:  # s sums c's running counts: it reads what c computes
        counts.to_stream().group_by_key().reduce(lambda a, v: a + v, StoreSpec("s", "sqlite"))
    else:
        grouped.reduce(lambda a, v: a + v, StoreSpec("s", "sqlite"))
    return App(
        cluster,
        "two",
        b.build(),
        client_id=client,
        heartbeat_interval=0.3,
        state_dir=tmp_path / client,
        commit_interval=3600,
    )


def _produce(cluster, start: int, n: int) -> None:
    now = int(time.time() * 1000)
    cluster.produce(
        "in", 0, [NewRecord(b"1", key=b'"k"', timestamp=now + i) for i in range(start, start + n)]
    )


def _process(app: App, upto: int) -> None:
    """Poll and process until the task's input position reaches ``upto``."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(t.positions.get("in", 0) >= upto for t in app.tasks.values()):
            return
        for m in app.consumer.poll(0.1):
            app.process(m)
    raise AssertionError(f"the input was not processed up to {upto}")


def _dies_at_the_marker_of_s(app: App, monkeypatch, kind: bytes, act) -> None:
    """``act()`` dies once store c's changelog has its ``kind`` marker (``b"commit"`` or
    ``b"fence"``) and store s's has not; the app's claims lapse (nobody releases them)."""
    append = task_module.Task._append

    def dying(self, cluster, name, records, durable):
        if name == "s" and any(r.key and kind in r.key for r in records):
            raise _Crash
        return append(self, cluster, name, records, durable)

    monkeypatch.setattr(task_module.Task, "_append", dying)
    with pytest.raises(_Crash):
        act()
    monkeypatch.setattr(task_module.Task, "_append", append)
    app.consumer.close(release=False)
    app.producer.close()
    app.marshaler.close()


def _crash_at_the_commit_of_s(app: App, monkeypatch) -> None:
    """Commit, dying once store c's changelog has its commit and store s's has not."""
    _dies_at_the_marker_of_s(app, monkeypatch, b"commit", app.commit)


def _dies_among_its_fences(b: App, monkeypatch) -> None:
    """``b`` takes the task over, fences store c and dies before fencing s."""

    def polls() -> None:  # (the restore runs in a poll, as the task is assigned)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            b.consumer.poll(0.1)

    _dies_at_the_marker_of_s(b, monkeypatch, b"fence", polls)


def _crash_at_the_second_commit(a: App, monkeypatch) -> None:
    """``a`` (its input empty) processes 100 records and commits, then 100 more, and dies
    in its second commit once store c's changelog has it and store s's has not."""
    cluster = a.cluster
    _produce(cluster, 0, 100)
    _process(a, 100)
    a.commit()
    _produce(cluster, 100, 100)
    _process(a, N)
    _crash_at_the_commit_of_s(a, monkeypatch)


def _successor_finishes(cluster, tmp_path, *, chained: bool = False, client: str = "b") -> None:
    b = _app(cluster, client, tmp_path, chained=chained)

    run_until(b, lambda: any(t.positions.get("in", 0) >= N for t in list(b.tasks.values())))


def _out(cluster) -> list[int]:
    values, offset = [], 0
    while batch := cluster.fetch("out", 0, offset):
        values += [json_deserializer(m.value) for m in batch]
        offset = batch[-1].offset + 1
    return values


@pytest.fixture
def topics(cluster):
    cluster.create_topic("in", 1)
    cluster.create_topic("out", 1)
    return cluster


def test_a_store_with_no_commit_is_not_resumed_past_by_one_with_one(topics, tmp_path, monkeypatch):
    """Killed at the task's first commit between the two changelogs: the successor resumed
    where store c's commit ended, and store s never saw the first 100 records (100, not
    200)."""
    cluster = topics
    _produce(cluster, 0, 100)
    a = _app(cluster, "a", tmp_path)
    _process(a, 100)
    _crash_at_the_commit_of_s(a, monkeypatch)
    _produce(cluster, 100, N - 100)
    _successor_finishes(cluster, tmp_path)
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": N}


def test_a_record_a_store_counted_before_the_crash_is_not_sent_again_overshot(
    topics, tmp_path, monkeypatch
):
    """Killed at the second commit between the two changelogs: the successor replays what
    store c counted for store s, and forwarded c's count of it again, computed from a store
    that had counted it already: 101 records of the value 201 instead of 101..200."""
    cluster = topics
    _crash_at_the_second_commit(_app(cluster, "a", tmp_path), monkeypatch)
    _successor_finishes(cluster, tmp_path)
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert _out(cluster) == list(range(1, N + 1))  # each count once, none overshot


def test_a_store_computed_from_one_that_is_ahead_is_exact_after_the_crash(
    topics, tmp_path, monkeypatch
):
    """Store s sums store c's running counts. Killed between c's and s's second commit,
    the successor replays for s what c already counted: c's writes are dropped, but c's
    count is read as it is after the crash (200), not as it was (101..200), and s sums
    that (an attack on the fixes above, 2026-12-06; the same before them)."""
    cluster = topics
    _crash_at_the_second_commit(_app(cluster, "a", tmp_path, chained=True), monkeypatch)
    _successor_finishes(cluster, tmp_path, chained=True)
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": N * (N + 1) // 2}
    assert _out(cluster) == list(range(1, N + 1))  # c's counts, each once


def test_a_restart_on_its_own_files_takes_the_store_ahead_back_too(topics, tmp_path, monkeypatch):
    """As above, the crashed member restarting on its own SQLite files: store c's local
    checkpoint is at the commit s lacks, so c is rebuilt from its changelog to the commit
    before it instead of reusing the file."""
    cluster = topics
    a = _app(cluster, "a", tmp_path, chained=True)
    _crash_at_the_second_commit(a, monkeypatch)
    a._drop(list(a.tasks))  # (its files closed, as the process's death closes them)
    _successor_finishes(cluster, tmp_path, chained=True, client="a")
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": N * (N + 1) // 2}


def test_a_successor_that_dies_among_its_fences_leaves_the_next_one_exact(
    topics, tmp_path, monkeypatch
):
    """The successor takes store c back, fences it, and dies before fencing s: c is judged
    (its fence's verdict ends before the commit taken back), s is not. The next restore
    must not take c's verdict for s's being complete, nor s for c's: it finds the same."""
    cluster = topics
    _crash_at_the_second_commit(_app(cluster, "a", tmp_path, chained=True), monkeypatch)
    _dies_among_its_fences(_app(cluster, "b", tmp_path, chained=True), monkeypatch)
    _successor_finishes(cluster, tmp_path, chained=True, client="c")
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": N * (N + 1) // 2}


class _MarksWhenCountReaches(Processor):
    """Counts records into c; store s keeps the offset of the first record at which the
    count reached 141 (and of the very first record): s reads what c computes, and is
    written far less often than c."""

    def init(self, context) -> None:
        super().init(context)
        self.c, self.s = context.get_state_store("c"), context.get_state_store("s")

    def process(self, record) -> None:
        n = (self.c.get(record.key) or 0) + 1
        self.c.put(record.key, n)
        if n == 1:
            self.s.put("first", record.offset)
        if n == 141 and self.s.get("at") is None:
            self.s.put("at", record.offset)


def test_a_store_clean_in_the_last_commit_is_at_that_commit_too(topics, tmp_path):
    """No crash inside a commit: s was written in the first commit only, and the member
    died after its second. s's last marker was the first commit's, so the successor
    replayed the input between the two with c ahead, read c's count after the crash for
    every record (141 at once), and s took the first replayed record for the one at which
    the count reached 141 (100 where 140). Every commit now ends every store's changelog."""
    cluster = topics

    def app(client: str) -> App:
        return _two_stores(cluster, client, tmp_path, _MarksWhenCountReaches)

    a = app("a")
    _produce(cluster, 0, 100)
    _process(a, 100)
    a.commit()
    _produce(cluster, 100, 40)
    _process(a, 140)
    a.commit()  # c only is dirty
    a.consumer.close(release=False)  # dies: the claims lapse
    a.producer.close()
    a.marshaler.close()
    _produce(cluster, 140, N - 140)
    b = app("b")
    run_until(b, lambda: any(t.positions.get("in", 0) >= N for t in list(b.tasks.values())))
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": N}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"first": 0, "at": 140}


def test_a_punctuator_fired_by_a_replayed_record_sends_no_mix_of_two_states(
    topics, tmp_path, monkeypatch
):
    """A stream-time punctuator run during the replay after a crash between c's and s's
    changelog writes forwarded [c, s] with c as after the crash and s as before: 48 of 348
    pairs unequal in the attack's run (2026-12-06). Fired by a replayed record, it is
    guarded as that record: what it sent went out before."""
    cluster = topics
    _crash_at_the_second_commit(_punctuating(cluster, "a", tmp_path), monkeypatch)
    b = _punctuating(cluster, "b", tmp_path)
    run_until(b, lambda: any(t.positions.get("in", 0) >= N for t in list(b.tasks.values())))
    told = _out(cluster)
    assert told and all(c == s for c, s in told), [p for p in told if p[0] != p[1]][:5]
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": N}


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["another", "same"])
@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_member_sigkilled_between_its_stores_markers_leaves_exact_sums(tmp_path, kind, machine):
    """A real process: a word count whose second store adds up the running counts (it reads
    the first) SIGKILLs itself once the counts store's marker of its 9th commit is written
    and the sums store's is not. The successor, on another machine or on the killed member's
    own files, ends with the exact counts and sums."""
    from logmarshal import EmbeddedCluster

    data = tmp_path / "data"
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        setup_topics(cluster)
        truth = produce_lines(cluster, 0, 3000)
    log = member_kills_itself(
        data,
        tmp_path / "s1",
        tmp_path / "member.out",
        LM_STORE_KIND=kind,
        LM_CHAINED="1",
        LM_KILL_AT="between-stores",
    )
    assert "killing between-stores" in log, log[-2000:]

    def table(cluster, store: str) -> dict:
        return {p: read_changelog(cluster, "wc", store, p) for p in (0, 1)}

    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        counts, sums = table(cluster, "counts"), table(cluster, "sums")
        # the kill left some task's stores out of step
        assert any(counts[p][1] != sums[p][1] for p in (0, 1)), (counts, sums)
        b = App(
            cluster,
            "wc",
            word_count(kind=kind, chained=True),
            client_id="m2",
            heartbeat_interval=0.3,
            commit_interval=0.05,
            state_dir=tmp_path / ("s1" if machine == "same" else "s2"),
        )
        total = sum(sum(c.values()) for c in truth.values())

        def done() -> bool:
            tasks = list(b.tasks.values())
            held = sum(sum(t.stores["counts"].all().values()) for t in tasks)
            return held >= total and len(tasks) == 2

        run_until(b, done, timeout=60)
        for p in (0, 1):
            assert read_changelog(cluster, "wc", "counts", p)[0] == dict(truth[p])
            assert read_changelog(cluster, "wc", "sums", p)[0] == {
                w: c * (c + 1) // 2 for w, c in truth[p].items()
            }


def test_a_damaged_file_met_after_a_stores_marker_ends_the_apps_commits(
    topics, tmp_path, monkeypatch
):
    """Store c's local checkpoint finds its file damaged right after c's marker of the
    second commit was written, s's not: the App set the task up again under the same claim,
    took c back (right), and went on; that take-back of its own epoch's commit was recorded
    nowhere, so when its next commit died between the two markers, the successor took c back
    only to the re-setup's fence and counted the first take-back's commit again (c 400 and
    s 65150 where 300 and 45150; an attack, 2026-12-06). Such a commit failed part way: the
    App commits nothing more of the task, and a restart restores it."""
    from logmarshal.errors import ClosedError
    from logmarshal.streams import stores as stores_module

    cluster = topics
    a = _app(cluster, "a", tmp_path, chained=True)
    _produce(cluster, 0, 100)
    _process(a, 100)
    a.commit()
    _produce(cluster, 100, 100)
    _process(a, N)
    checkpoint = stores_module.SqliteStore.checkpoint

    def damaged(self, offset, positions, epoch=None):
        if self.name == "c" and positions and positions.get("in") == N:
            raise stores_module.StoreDamaged(self.name, self._path, RuntimeError("malformed"))
        return checkpoint(self, offset, positions, epoch)

    monkeypatch.setattr(stores_module.SqliteStore, "checkpoint", damaged)
    with pytest.raises(stores_module.StoreDamaged):
        a.commit()
    monkeypatch.setattr(stores_module.SqliteStore, "checkpoint", checkpoint)
    with pytest.raises(ClosedError, match="processes no more"):
        a.process([])
    a.consumer.close(release=False)
    a.producer.close()
    a.marshaler.close()
    _produce(cluster, N, 100)
    b = _app(cluster, "b", tmp_path, chained=True)
    run_until(b, lambda: any(t.positions.get("in", 0) >= N + 100 for t in list(b.tasks.values())))
    n = N + 100
    assert read_changelog(cluster, "two", "c", 0)[0] == {"k": n}
    assert read_changelog(cluster, "two", "s", 0)[0] == {"k": n * (n + 1) // 2}


def test_a_store_ahead_is_not_taken_back_once_the_cleaner_passed_its_commit(
    tmp_path, monkeypatch, caplog
):
    """A crash between c's and s's markers of the second commit; the task stays down longer
    than the changelogs' min.compaction.lag.ms (the records carry times 2 h old), a successor
    dies among its fences, and the broker's cleaner runs: it removed c's records of the
    first commit that the second superseded, and a take-back of c lost them (every count 0
    where 2; an attack, 2026-12-06). The store ahead stays ahead, as before take-backs, and
    a warning says so: c is exact."""
    from logmarshal import EmbeddedCluster
    from logmarshal.streams.app import CHANGELOG_CONFIG
    from logmarshal.streams.task_restore import read_changelogs

    keys, old = 30, 2 * 3600 * 1000
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic("in", 1)
        cluster.create_topic("out", 1)
        for store in ("c", "s"):
            config = dict(CHANGELOG_CONFIG) | {"segment.bytes": "1024"}
            cluster.create_topic(f"two-{store}-changelog", 1, config)

        def produce(start: int) -> None:
            now = int(time.time() * 1000) - old
            records = [
                NewRecord(b"1", key=f'"k{i % keys}"'.encode(), timestamp=now + i)
                for i in range(start, start + keys)
            ]
            cluster.produce("in", 0, records)

        a = _app(cluster, "a", tmp_path, chained=True)
        a._now_ms = lambda: round(a.marshaler.clock.time() * 1000) - old  # type: ignore[method-assign]
        produce(0)
        _process(a, keys)
        a.commit()
        produce(keys)
        _process(a, 2 * keys)
        _crash_at_the_commit_of_s(a, monkeypatch)
        _dies_among_its_fences(_app(cluster, "b", tmp_path, chained=True), monkeypatch)
        assert cluster.data_dir.clean()  # (it removed records)
        with caplog.at_level("WARNING", logger="logmarshal.streams.task_restore"):
            tables = read_changelogs(cluster, "two", ["c", "s"], 0)
        assert tables["c"][0] == {f"k{i}": 2 for i in range(keys)}
        assert any("compacted away" in r.getMessage() for r in caplog.records)
