"""Fencing of changelog commits by claim epochs: a stalled former owner's stale commit,
written after the new owner restored (or between its restore and its fence marker), is
never restored; cut-short commits are still ignored; changelogs without epochs restore."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logmarshal.cluster import Message
from logmarshal.streams import Processor, StoreSpec, Topology
from logmarshal.streams.task import (
    COMMIT_KEY,
    EPOCH_HEADER,
    FENCE_KEY,
    Fenced,
    Task,
    marker_key,
    marker_of,
    read_changelog,
    valid_commits,
)
from storage import NewRecord

from .conftest import PERSISTENT_KINDS, StateDirs

NOW = int(time.time() * 1000)
TOPIC = "app-n-changelog"


class Count(Processor):
    def init(self, context):
        super().init(context)
        self.n = context.get_state_store("n")

    def process(self, record):
        self.n.put(record.value, (self.n.get(record.value) or 0) + 1)


def make_task(state: StateDirs, where: str, epoch: int) -> Task:
    """The task on machine ``where``, its store in ``state``'s persistent engine."""
    topo = Topology().add_source("s", "in").add_processor("p", Count, "s")
    topo.add_state_store(StoreSpec("n", state.kind), "p")
    (sub,) = topo.subtopologies()
    stores = {"n": state.store(where, "n")}
    return Task(
        "app", topo, sub, 0, stores, lambda *a: None, lambda _t: 1, lambda: NOW, epoch=epoch
    )


def feed(task: Task, start: int, stop: int) -> None:
    for o in range(start, stop):
        task.process(Message("in", 0, o, NOW, None, b'"a"'))


@pytest.fixture
def changelog(cluster):
    cluster.create_topic(TOPIC, 1)
    return cluster


def first_owner(cluster, state) -> Task:
    """Owner A, epoch 5: counts a=15 and commits, then counts one more (a=16) and stalls."""
    a = make_task(state, "machine-a", epoch=5)
    assert a.restore(cluster) == {}
    feed(a, 0, 15)
    a.write_changelogs(cluster)
    feed(a, 15, 16)
    return a


def check_fresh_restore(cluster, state, where: str) -> None:
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 20}, {"in": 20})
    c = make_task(state, where, epoch=12)
    assert c.restore(cluster) == {"in": 20}
    assert c.stores["n"].all() == {"a": 20}
    c.close()


def test_a_stale_commit_after_the_new_owner_fenced_is_not_restored(changelog, state):
    cluster = changelog
    a = first_owner(cluster, state)
    b = make_task(state, "machine-b", epoch=9)
    assert b.restore(cluster) == {"in": 15}  # and fences epoch 5 out
    feed(b, 15, 20)
    b.write_changelogs(cluster)
    # A wakes up and appends its commit (a=16 at input 16): it lands, and A then sees a
    # newer epoch's records among its own
    end = cluster.latest_offset(TOPIC, 0)
    with pytest.raises(Fenced):
        a.write_changelogs(cluster)
    assert cluster.latest_offset(TOPIC, 0) == end + 2  # the stale commit is in the log
    a.close()
    check_fresh_restore(cluster, state, "machine-c")
    # on A's machine: its file's last checkpoint is its valid commit (a=15); the tail holds
    # B's fence and commit, and the stale commit, which is not applied
    check_fresh_restore(cluster, state, "machine-a")


def test_a_stale_commit_between_the_new_owners_restore_and_fence_is_not_restored(
    changelog, state, monkeypatch
):
    cluster = changelog
    a = first_owner(cluster, state)
    b = make_task(state, "machine-b", epoch=9)
    produce = cluster.produce
    raced = []

    def racing(topic, partition, records, **kw):
        if marker_of(records[0].key) is FENCE_KEY and not raced:
            raced.append(a.write_changelogs(cluster))  # nothing of B's in the log yet
        return produce(topic, partition, records, **kw)

    monkeypatch.setattr(cluster, "produce", racing)
    assert b.restore(cluster) == {"in": 15}
    monkeypatch.setattr(cluster, "produce", produce)
    assert raced == [1]
    records = cluster.fetch(TOPIC, 0, cluster.earliest_offset(TOPIC, 0))
    assert [m.key for m in records][-3:] == [
        b'"a"',
        marker_key(COMMIT_KEY, 5),
        marker_key(FENCE_KEY, 9),
    ]
    assert b.stores["n"].all() == {"a": 15}
    assert b'"a"' in b.stores["n"].dirty  # the stale record's key is rewritten by B
    # before B commits anything, a restore already leaves the stale commit out
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 15}, {"in": 15})
    feed(b, 15, 20)
    b.write_changelogs(cluster)
    a.close()  # its local file was checkpointed at the stale commit
    check_fresh_restore(cluster, state, "machine-c")
    # A's file is ahead of the valid state: B's fence reaches back into it, full replay
    check_fresh_restore(cluster, state, "machine-a")


def test_a_commit_cut_short_is_still_ignored(changelog, state):
    cluster = changelog
    a = first_owner(cluster, state)
    a.close()
    b = make_task(state, "machine-b", epoch=9)
    assert b.restore(cluster) == {"in": 15}
    feed(b, 15, 20)
    # B crashes in the middle of its commit: data records, no marker
    epoch = ((EPOCH_HEADER, b"9"),)
    cluster.produce(
        TOPIC,
        0,
        [
            NewRecord(b"20", key=b'"a"', headers=epoch, timestamp=NOW),
            NewRecord(b"1", key=b'"z"', headers=epoch, timestamp=NOW),
        ],
    )
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 15}, {"in": 15})
    c = make_task(state, "machine-c", epoch=12)
    assert c.restore(cluster) == {"in": 15}
    assert c.stores["n"].all() == {"a": 15}
    assert set(c.stores["n"].dirty) == {b'"a"', b'"z"'}  # rewritten by its next commit
    c.write_changelogs(cluster)
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 15}, {"in": 15})
    c.close()


def test_a_changelog_without_epochs_restores_and_is_fenced_afterwards(changelog, state):
    cluster = changelog
    cluster.produce(
        TOPIC,
        0,
        [
            NewRecord(b"3", key=b'"a"', timestamp=NOW),
            NewRecord(b'{"in": 3}', key=COMMIT_KEY, timestamp=NOW),
            NewRecord(b"4", key=b'"a"', timestamp=NOW),  # a commit cut short
        ],
    )
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 3}, {"in": 3})
    b = make_task(state, "machine-b", epoch=7)
    assert b.restore(cluster) == {"in": 3}
    feed(b, 3, 5)
    b.write_changelogs(cluster)
    b.close()
    # a member of the version before epochs, still running, appends a commit: fenced
    cluster.produce(
        TOPIC,
        0,
        [
            NewRecord(b"9", key=b'"a"', timestamp=NOW),
            NewRecord(b'{"in": 9}', key=COMMIT_KEY, timestamp=NOW),
        ],
    )
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 5}, {"in": 5})


def test_validity_rules():
    # A(5) commits at 10; B(9) restores up to 12 and fences at 14; A's commit at 13 is in
    # between (invalid, rule b), at 20 after the fence (invalid, rule a); B's at 16 valid
    commits = [(10, 5, {}), (13, 5, {}), (16, 9, {}), (20, 5, {})]
    assert valid_commits(commits, [(2, 5, 0), (14, 9, 12)]) == {10, 16}
    # no epochs at all (records written before them): every commit
    assert valid_commits([(1, -1, {}), (3, -1, {})], []) == {1, 3}
    # a stale fence (Y, epoch 4, landing after B's fence of epoch 9) changes nothing: Z's
    # commit at 5 (epoch 3) was in B's restored state
    assert valid_commits([(5, 3, {}), (12, 9, {})], [(0, 3, 0), (10, 9, 8), (11, 4, 2)]) == {5, 12}
    # had Y's fence landed before B's it would count (B's restore must then redo: see
    # Task.restore), invalidating Z's commit
    assert valid_commits([(5, 3, {}), (12, 9, {})], [(0, 3, 0), (9, 4, 2), (10, 9, 8)]) == {12}
    # a local checkpoint's epoch fences lower epochs in the tail
    assert valid_commits([(30, 5, {}), (31, 9, {})], [], seed=9) == {31}


def test_a_fence_landing_between_our_restore_and_our_fence_restores_again(
    changelog, state, monkeypatch
):
    cluster = changelog
    a = first_owner(cluster, state)
    a.close()
    b = make_task(state, "machine-b", epoch=9)
    produce = cluster.produce
    calls = []

    def racing(topic, partition, records, **kw):
        if marker_of(records[0].key) is FENCE_KEY and not calls:
            # a stalled owner of epoch 7 fences (its restore read up to offset 0) just now
            calls.append(
                produce(
                    topic,
                    partition,
                    [
                        NewRecord(
                            json.dumps({"epoch": 7, "base": 0}).encode(),
                            key=FENCE_KEY,
                            headers=((EPOCH_HEADER, b"7"),),
                            timestamp=NOW,
                        )
                    ],
                )
            )
        return produce(topic, partition, records, **kw)

    monkeypatch.setattr(cluster, "produce", racing)
    # epoch 7's fence (base 0, before B's) invalidates A's commit: B must see that
    assert b.restore(cluster) == {}
    assert b.stores["n"].all() == {}
    monkeypatch.setattr(cluster, "produce", produce)
    b.close()
    assert read_changelog(cluster, "app", "n", 0) == ({}, None)


def test_a_record_of_a_newer_epoch_before_our_fence_means_we_are_fenced(
    changelog, state, monkeypatch
):
    cluster = changelog
    first_owner(cluster, state).close()
    old = make_task(state, "machine-b", epoch=6)
    new = make_task(state, "machine-c", epoch=9)
    produce = cluster.produce

    def racing(topic, partition, records, **kw):
        if marker_of(records[0].key) is FENCE_KEY and records[0].headers[0][1] == b"6":
            monkeypatch.setattr(cluster, "produce", produce)
            new.restore(cluster)  # the newer owner restores and fences first
        return produce(topic, partition, records, **kw)

    monkeypatch.setattr(cluster, "produce", racing)
    with pytest.raises(Fenced):
        old.restore(cluster)
    old.close()
    feed(new, 15, 20)
    new.write_changelogs(cluster)
    new.close()
    assert read_changelog(cluster, "app", "n", 0) == ({"a": 20}, {"in": 20})


def test_app_commit_drops_a_task_whose_claim_epoch_changed(cluster, tmp_path):
    from logmarshal.streams import App

    from .member import topology as word_count
    from .test_app import produce_lines, setup_topics

    setup_topics(cluster)
    produce_lines(cluster, 0, 200)
    app = App(
        cluster,
        "wc",
        word_count(),
        client_id="a",
        heartbeat_interval=0.3,
        state_dir=tmp_path / "a",
        commit_interval=3600,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            len(app.tasks) == 2 and all(t.stores["counts"].dirty for t in app.tasks.values())
        ):
            for m in app.consumer.poll(0.1):
                app.process(m)
        assert len(app.tasks) == 2
        for (topic, p), task in app.tasks.items():
            assert task.epoch == app.consumer.epoch(topic, p) and task.epoch >= 0
        ends = [cluster.latest_offset("wc-counts-changelog", p) for p in (0, 1)]
        held = app.consumer.epoch
        # partition 0 was lost and won again meanwhile: a new claim, a new epoch
        app.consumer.epoch = lambda t, p: held(t, p) + (p == 0)
        app.commit()
        assert list(app.tasks) == [("wc.task.0", 1)]
        assert cluster.latest_offset("wc-counts-changelog", 0) == ends[0]  # nothing written
        assert cluster.latest_offset("wc-counts-changelog", 1) > ends[1]
        app.consumer.epoch = lambda t, p: None  # not held at all any more
        app.commit()
        assert app.tasks == {}
    finally:
        app.close()


# -- compaction: the changelog keeps the latest record per key -------------------------------


class Compacted:
    """A cluster as a restore sees a changelog after the cleaner compacted all of it: the
    latest record of every key survives, at its offset (the worst case: Kafka's cleaner only
    ever removes what this removes). Writes go to the real log."""

    def __init__(self, cluster) -> None:
        self._cluster = cluster

    def __getattr__(self, name):
        return getattr(self._cluster, name)

    def fetch(self, topic, partition, offset, *args, **kw):
        records, at = [], self._cluster.earliest_offset(topic, partition)
        while batch := self._cluster.fetch(topic, partition, at):
            records.extend(batch)
            at = batch[-1].offset + 1
        last = {m.key: m.offset for m in records if m.key is not None}
        return [
            m for m in records if m.offset >= offset and (m.key is None or last[m.key] == m.offset)
        ]


VALUES = [b'"a"', b'"b"', b'"c"', b'"d"']


def value_at(offset: int) -> bytes:
    return VALUES[(offset * 7 + offset // 3) % len(VALUES)]


def feed_values(task: Task, start: int, stop: int) -> None:
    for o in range(start, stop):
        task.process(Message("in", 0, o, NOW, None, value_at(o)))


def truth(stop: int) -> dict:
    counts: dict = {}
    for o in range(stop):
        key = json.loads(value_at(o))
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_a_compacted_changelog_keeps_a_stale_writers_earlier_valid_commit(cluster, state):
    """A commits b=... (valid), B takes over, A (stalled) appends a stale commit of a: the
    cleaner then keeps A's stale commit marker and drops A's valid one (same epoch). B's
    fence recorded that A's commits were valid through the first: b survives the cleaner."""
    cluster.create_topic(
        TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": 1024, "min.compaction.lag.ms": 0}
    )
    a = make_task(state, "machine-a", epoch=5)
    a.restore(cluster)
    feed_values(a, 0, 12)
    a.write_changelogs(cluster)
    b = make_task(state, "machine-b", epoch=9)
    assert b.restore(cluster) == {"in": 12}
    feed_values(a, 12, 13)  # a stale update of one key, landing after B's fence
    with pytest.raises(Fenced):
        a.write_changelogs(cluster)
    a.close()
    for chunk in range(13, 60, 4):  # B commits on, rolling segments (it rewrites A's key)
        feed(b, 0, 0)
        for o in range(chunk, chunk + 4):
            b.process(Message("in", 0, o, NOW, None, b'"zz"' if o % 2 else value_at(12)))
        b.write_changelogs(cluster)
    b.close()
    before = read_changelog(cluster, "app", "n", 0)
    removed = cluster.data_dir.clean()
    assert removed > 0
    assert read_changelog(cluster, "app", "n", 0) == before
    table, positions = before
    assert positions == {"in": 61} and table["b"] == truth(12)["b"]


@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["commit", "takeover", "stale", "cut"]), st.integers(1, 5)),
        min_size=1,
        max_size=12,
    )
)
def test_restore_from_a_compacted_changelog_equals_restore_from_the_whole(
    steps, tmp_path_factory, kind
):
    """Random owners, takeovers, stale commits of fenced owners and commits cut short, then
    the next owner's restore and commit: the state restored from the fully compacted
    changelog is the one restored from the whole changelog, and it is exactly the input
    below the positions it reflects."""
    tmp = StateDirs(tmp_path_factory.mktemp("compaction"), kind)
    from logmarshal import EmbeddedCluster

    with EmbeddedCluster(tmp.root / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 1)
        epoch = 1
        owner = make_task(tmp, f"m{epoch}", epoch=epoch)
        at = owner.restore(cluster).get("in", 0)
        zombies: list[tuple[Task, int]] = []
        for kind, n in steps:
            if kind == "commit" and owner is not None:
                feed_values(owner, at, at + n)
                at += n
                owner.write_changelogs(cluster)
            elif kind == "takeover":
                if owner is not None:
                    zombies.append((owner, at))
                epoch += 1 + n
                owner = make_task(tmp, f"m{epoch}", epoch=epoch)
                at = owner.restore(cluster).get("in", 0)
            elif kind == "stale" and zombies:
                stale, its_at = zombies[n % len(zombies)]
                feed_values(stale, its_at, its_at + n)
                with contextlib.suppress(Fenced):
                    stale.write_changelogs(cluster)
            elif kind == "cut" and owner is not None:
                feed_values(owner, at, at + n)
                header = ((EPOCH_HEADER, str(epoch).encode()),)
                cluster.produce(
                    TOPIC,
                    0,
                    [
                        NewRecord(v, key=k, headers=header, timestamp=NOW)
                        for k, v in owner.stores["n"].take_dirty().items()
                    ],
                )
                owner.close()
                owner = None  # crashed mid-commit
        # the next owner restores and commits (rewriting what a stale or cut-short commit
        # left as a key's last record) before the cleaner reaches those records: that is what
        # the changelogs' min.compaction.lag.ms buys (App: CHANGELOG_CONFIG)
        last = make_task(tmp, "last", epoch=epoch + 100)
        last.restore(cluster)
        last.write_changelogs(cluster)
        for task in [t for t, _ in zombies] + [t for t in (owner, last) if t is not None]:
            task.close()
        whole = read_changelog(cluster, "app", "n", 0)
        assert read_changelog(Compacted(cluster), "app", "n", 0) == whole
        table, positions = whole
        assert {json.loads(k) if isinstance(k, bytes) else k: v for k, v in table.items()} == (
            truth((positions or {}).get("in", 0))
        )
