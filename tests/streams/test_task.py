"""Task-level state rules on an embedded cluster: changelog positions, restore, and the
guard that keeps a store restored ahead of another from counting input twice."""

from __future__ import annotations

import time

from logmarshal.cluster import Message
from logmarshal.streams import Processor, SqliteStore, StoreSpec, Topology
from logmarshal.streams.stores import InMemoryStore
from logmarshal.streams.task import Task, read_changelog

NOW = int(time.time() * 1000)


class TwoCounters(Processor):
    def init(self, context):
        super().init(context)
        self.a = context.get_state_store("a")
        self.b = context.get_state_store("b")

    def process(self, record):
        for store in (self.a, self.b):
            store.put(record.value, (store.get(record.value) or 0) + 1)


def topology() -> Topology:
    t = Topology().add_source("s", "in").add_processor("p", TwoCounters, "s")
    return t.add_state_store(StoreSpec("a"), "p").add_state_store(StoreSpec("b", "sqlite"), "p")


def make_task(tmp_path, name: str) -> Task:
    topo = topology()
    (sub,) = topo.subtopologies()
    stores = {"a": InMemoryStore("a"), "b": SqliteStore("b", tmp_path / name / "b.sqlite")}
    return Task("app", topo, sub, 0, stores, lambda *a: None, lambda _t: 1, lambda: NOW)


def msg(offset: int) -> Message:
    return Message("in", 0, offset, NOW, None, b'"x"' if offset % 3 else b'"y"')


def test_crash_between_two_stores_changelogs_counts_each_input_once(cluster, tmp_path):
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(tmp_path, "first")
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

    again = make_task(tmp_path, "second")
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


def test_restore_takes_the_last_record_per_key_and_deletes(cluster, tmp_path):
    cluster.create_topic("app-a-changelog", 1)
    cluster.create_topic("app-b-changelog", 1)
    task = make_task(tmp_path, "first")
    task.process(msg(0))
    task.write_changelogs(cluster)
    task.stores["a"].delete("y")
    task.write_changelogs(cluster)
    task.close()
    again = make_task(tmp_path, "second")
    again.restore(cluster)
    assert again.stores["a"].all() == {} and again.stores["b"].all() == {"y": 1}
    again.close()
