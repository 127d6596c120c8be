"""Every store of a task restored to one commit, under the schedules an attack on it found
(2026-12-06): a stale owner's commit landing between a restore and its fences, with the
restorer dying among them; a task set up again under the same claim; a commit call that
failed part way; a local checkpoint at a fence whose writer had keys to rewrite. Three
stores whose values depend on each other (b counts, a sums b's running counts, c sums a's),
in three engines; each test fails without its fix."""

from __future__ import annotations

import contextlib
import json
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logmarshal import EmbeddedCluster
from logmarshal.cluster import Message
from logmarshal.streams import Processor, StoreSpec, Topology
from logmarshal.streams.changelog import changelog_topic
from logmarshal.streams.task import Fenced, Task, read_changelog
from logmarshal.streams.task_restore import read_changelogs

from .conftest import open_store
from .test_fence import Compacted

NOW = int(time.time() * 1000)
KEYS = ("p", "q", "r")
KINDS = {"a": "sqlite", "b": "memory", "c": "rocksdb"}


def key_at(offset: int) -> str:
    return KEYS[(offset * 7 + offset // 3) % len(KEYS)]


class Dependent(Processor):
    """b counts per key, a sums b's running counts (it reads b), c sums a's (it reads a)."""

    def init(self, context) -> None:
        super().init(context)
        self.a, self.b, self.c = (context.get_state_store(n) for n in "abc")

    def process(self, record) -> None:
        k = record.value
        self.b.put(k, (self.b.get(k) or 0) + 1)
        self.a.put(k, (self.a.get(k) or 0) + self.b.get(k))
        self.c.put("t", (self.c.get("t") or 0) + self.a.get(k))


def reference(stop: int) -> dict[str, dict]:
    a: dict = {}
    b: dict = {}
    c: dict = {}
    for o in range(stop):
        k = key_at(o)
        b[k] = b.get(k, 0) + 1
        a[k] = a.get(k, 0) + b[k]
        c["t"] = c.get("t", 0) + a[k]
    return {"a": a, "b": b, "c": c}


def make_task(root, where: str, epoch: int) -> Task:
    topology = Topology().add_source("s", "in").add_processor("p", Dependent, "s")
    for name, kind in KINDS.items():
        topology.add_state_store(StoreSpec(name, kind), "p")
    (sub,) = topology.subtopologies()
    (root / where).mkdir(parents=True, exist_ok=True)
    stores = {name: open_store(kind, name, root / where) for name, kind in KINDS.items()}
    return Task(
        "app", topology, sub, 0, stores, lambda *a: None, lambda _t: 1, lambda: NOW, epoch=epoch
    )


def feed(task: Task, start: int, stop: int) -> None:
    for o in range(start, stop):
        task.process(Message("in", 0, o, NOW, None, json.dumps(key_at(o)).encode()))


def state_of(task: Task) -> dict[str, dict]:
    return {
        name: {json.loads(k) if isinstance(k, bytes) else k: v for k, v in s.all().items()}
        for name, s in task.stores.items()
    }


class _Crash(BaseException):
    """The process dies here."""


def dying_at(task: Task, call: int, before=None) -> None:
    """The task's ``call``-th changelog write from now (0-based) dies before it is made;
    ``before(i)`` runs before each write."""
    real = Task._append.__get__(task)
    count = [0]

    def append(cluster, name, records, durable):
        i = count[0]
        count[0] += 1
        if before is not None:
            before(i)
        if i == call:
            raise _Crash
        return real(cluster, name, records, durable)

    task._append = append  # type: ignore[method-assign]


def successor_is_exact(cluster, root, epoch: int) -> None:
    """A new owner restores every store to one commit, equal to the input below it, and
    ends exact after processing on."""
    task = make_task(root, f"m{epoch}", epoch)
    at = task.restore(cluster).get("in", 0)
    assert len({json.dumps(p, sort_keys=True) for p in task.store_positions.values()}) == 1
    assert state_of(task) == reference(at)
    feed(task, at, 20)
    task.write_changelogs(cluster)
    assert state_of(task) == reference(20)
    task.close()


@pytest.fixture
def cluster(tmp_path):
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as opened:
        for name in KINDS:
            opened.create_topic(changelog_topic("app", name), 1)
        yield opened


def test_a_stale_commit_before_the_fences_of_a_restorer_that_dies_among_them(cluster, tmp_path):
    """Owner 1 stalls; owner 2 restores; owner 1 wakes and commits to every store; owner 2
    fences store a (its fence, based before that commit, invalidates it there) and dies.
    The commit was valid in b and c and not in a: the next owner resumed a at 5, b and c at
    10 (c 233 where 224 at 20). A restorer's fences not in every store are read as absent."""
    first = make_task(tmp_path, "m1", 1)
    first.restore(cluster)
    feed(first, 0, 5)
    first.write_changelogs(cluster)
    feed(first, 5, 10)  # and stalls
    second = make_task(tmp_path, "m2", 2)

    def wakes(i: int) -> None:
        if i == 0:  # (owner 2 has restored every store; its first fence is next)
            first.write_changelogs(cluster)

    dying_at(second, 1, before=wakes)
    with pytest.raises(_Crash):
        second.restore(cluster)
    second.close()
    first.close()
    successor_is_exact(cluster, tmp_path, 3)


def test_a_task_set_up_again_under_its_claim_counts_its_commits_on(cluster, tmp_path):
    """A task set up again under the same claim (after a damaged store) counted its commit
    calls from 1 again: its first commit, cut short after store a, looked older than the
    first task's last, so b and c were taken back and a kept (c 243 where 224)."""
    first = make_task(tmp_path, "m1", 4)
    first.restore(cluster)
    feed(first, 0, 5)
    first.write_changelogs(cluster)
    feed(first, 5, 8)
    first.write_changelogs(cluster)
    first.close()
    again = make_task(tmp_path, "m1-again", 4)
    assert again.restore(cluster) == {"in": 8}
    feed(again, 8, 12)
    dying_at(again, 1)  # (after store a's commit)
    with pytest.raises(_Crash):
        again.write_changelogs(cluster)
    again.close()
    successor_is_exact(cluster, tmp_path, 5)


def test_a_commit_that_failed_part_way_is_followed_by_no_other(cluster, tmp_path):
    """A commit call that raised after some stores' markers (a produce timed out with its
    records stored, maybe) cannot tell the next call which commit every store has: taking a
    store back from the next one's crash went two commits back (a at 4, b and c at 8). The
    task commits nothing more until it is set up again (a restore)."""
    task = make_task(tmp_path, "m1", 1)
    task.restore(cluster)
    feed(task, 0, 4)
    task.write_changelogs(cluster)
    feed(task, 4, 8)
    real = Task._append.__get__(task)

    def timed_out(cluster, name, records, durable):
        out = real(cluster, name, records, durable)
        if name == "c":
            raise TimeoutError("the produce timed out (its records were stored)")
        return out

    task._append = timed_out  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        task.write_changelogs(cluster)
    feed(task, 8, 12)
    with pytest.raises(RuntimeError, match="set the task up again"):
        task.write_changelogs(cluster)
    task.close()
    successor_is_exact(cluster, tmp_path, 2)


@pytest.mark.parametrize("kind", ["sqlite", "rocksdb"])
def test_a_local_checkpoint_at_a_fence_with_keys_to_rewrite_is_not_reused(tmp_path, kind):
    """A stale commit's record is its key's last; the owner that found it (to rewrite at its
    first commit) fenced, checkpointed its files there, and died first. The next owner on
    its machine replayed only the changelog after that checkpoint, never saw the key, and
    did not rewrite it: a compacted changelog lost the key ({'y': 2} where {'x': 3, 'y': 2};
    the same before the one-commit change)."""

    class Count(Processor):
        def init(self, context) -> None:
            super().init(context)
            self.n = context.get_state_store("n")

        def process(self, record) -> None:
            self.n.put(record.value, (self.n.get(record.value) or 0) + 1)

    def counting(where: str, epoch: int) -> Task:
        topology = Topology().add_source("s", "in").add_processor("p", Count, "s")
        topology.add_state_store(StoreSpec("n", kind), "p")
        (sub,) = topology.subtopologies()
        (tmp_path / where).mkdir(parents=True, exist_ok=True)
        store = open_store(kind, "n", tmp_path / where)
        return Task(
            "app", topology, sub, 0, {"n": store}, lambda *a: None, lambda _t: 1, lambda: NOW,
            epoch=epoch,
        )  # fmt: skip

    def feed_key(task: Task, start: int, stop: int, key: str) -> None:
        for o in range(start, stop):
            task.process(Message("in", 0, o, NOW, None, json.dumps(key).encode()))

    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic("app-n-changelog", 1)
        stale = counting("m1", 1)
        stale.restore(cluster)
        feed_key(stale, 0, 3, "x")
        stale.write_changelogs(cluster)
        fencer = counting("m2", 2)
        fencer.restore(cluster)
        feed_key(stale, 3, 4, "x")
        with pytest.raises(Fenced):
            stale.write_changelogs(cluster)  # its x=4 lands after the fence
        stale.close()
        fencer.close()  # dies before it commits
        found = counting("m3", 3)
        found.restore(cluster)
        assert set(found.stores["n"].dirty) == {b'"x"'}  # to rewrite at its first commit
        found.close()  # dies after its fence (its files checkpointed there)
        last = counting("m3", 4)  # on that machine
        at = last.restore(cluster).get("in", 0)
        feed_key(last, at, at + 2, "y")
        last.write_changelogs(cluster)
        last.close()
        whole = read_changelog(cluster, "app", "n", 0)
        assert whole == ({"x": 3, "y": 2}, {"in": 5})
        assert read_changelog(Compacted(cluster), "app", "n", 0) == whole


# -- random histories ------------------------------------------------------------------------

_STEP = st.tuples(
    st.sampled_from(["commit", "crash", "failed", "takeover", "stale", "again"]),
    st.integers(0, 4),  # records processed first
    st.integers(0, 7),  # the changelog write (or fence) a crash comes at
    st.integers(0, 3),  # a choice: reuse a dead owner's files, which zombie, how to take over
)


def _history(tmp_path, steps) -> None:
    """Drive owners through ``steps``; after every restore the stores are at one commit
    equal to the input below it, and at the end a compacted changelog restores the same as
    the whole one, which is the input below the last owner's positions."""
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        for name in KINDS:
            cluster.create_topic(changelog_topic("app", name), 1)
        dead: list[str] = []
        made = [0]

        def new_owner(epoch: int, choice: int) -> tuple[Task, str]:
            if dead and choice % 2:
                where = dead.pop(choice % len(dead))  # (its files, as the last owner left them)
            else:
                made[0] += 1
                where = f"m{made[0]}"
            return make_task(tmp_path, where, epoch), where

        def restored(task: Task, resume: dict) -> None:
            assert len({json.dumps(p, sort_keys=True) for p in task.store_positions.values()}) <= 1
            assert state_of(task) == reference(resume.get("in", 0))

        epoch = 1
        owner: Task | None
        owner, where = new_owner(epoch, 0)
        restored(owner, owner.restore(cluster))
        zombies: list[Task] = []
        for act, n, k, choice in steps:
            if owner is not None and act in ("commit", "crash", "failed"):
                at = owner.positions.get("in", 0)
                feed(owner, at, at + n)
                if act == "commit":
                    owner.write_changelogs(cluster)
                    continue
                dying_at(owner, k)
                try:
                    owner.write_changelogs(cluster)
                except _Crash:
                    # (a failed commit: the App stops processing the task; a restart takes
                    # it over, as after a crash)
                    owner.close()
                    dead.append(where)
                    owner = None
                else:
                    owner.__dict__.pop("_append")
            elif act == "stale" and zombies:
                zombie = zombies[choice % len(zombies)]
                at = zombie.positions.get("in", 0)
                feed(zombie, at, at + n)
                with contextlib.suppress(Fenced, RuntimeError):
                    zombie.write_changelogs(cluster)
            elif act == "again" and owner is not None:  # set up again under the same claim
                owner.close()
                dead.append(where)
                owner, where = new_owner(epoch, choice)
                restored(owner, owner.restore(cluster))
            elif act == "takeover":
                if owner is not None:
                    zombies.append(owner)
                epoch += 1
                owner, where = new_owner(epoch, choice)
                last = zombies[-1] if zombies else None

                def wakes(i: int, last=last, n=n, choice=choice) -> None:
                    if last is not None and choice >= 2 and i == 0:
                        at = last.positions.get("in", 0)
                        feed(last, at, at + max(n, 1))
                        with contextlib.suppress(Fenced, RuntimeError):
                            last.write_changelogs(cluster)

                dying_at(owner, k % 3 if choice % 2 else 99, before=wakes)
                try:
                    resume = owner.restore(cluster)
                except _Crash:  # (among its fences)
                    owner.close()
                    dead.append(where)
                    owner = None
                    continue
                owner.__dict__.pop("_append")
                restored(owner, resume)
        if owner is not None:
            zombies.append(owner)
        final = make_task(tmp_path, "final", epoch + 100)
        at = final.restore(cluster).get("in", 0)
        restored(final, {"in": at})
        end = max([at] + [z.positions.get("in", 0) for z in zombies]) + 3
        feed(final, at, end)
        final.write_changelogs(cluster)
        assert state_of(final) == reference(end)
        for task in [*zombies, final]:
            task.close()
        whole = read_changelogs(cluster, "app", list(KINDS), 0)
        assert read_changelogs(Compacted(cluster), "app", list(KINDS), 0) == whole
        assert {
            name: {json.loads(k) if isinstance(k, bytes) else k: v for k, v in table.items()}
            for name, (table, _) in whole.items()
        } == reference(end)


@settings(
    max_examples=int(os.environ.get("LM_HISTORIES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_STEP, min_size=3, max_size=16))
def test_random_histories_leave_every_store_at_one_commit(tmp_path_factory, steps):
    _history(tmp_path_factory.mktemp("history"), steps)
