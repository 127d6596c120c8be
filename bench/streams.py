"""Streams figures, each beside its baseline from the same run (embedded cluster):

1. word count records/s through an App (topology, store, changelog, commits) vs a
   hand-written Consumer poll loop counting the same lines into a dict (same data, same
   machine, same run): the overhead ratio of the streams layer; and the same over two
   co-partitioned topics, where each task is partition p of both (one claim, a position
   vector in its heartbeats), vs the loop reading both topics as four partitions;
2. restore time of a store vs its changelog size (in-memory and sqlite).

    python3 bench/streams.py [--lines 20000] [--sizes 1000,10000,50000]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

# the repository first: bench/storage.py must not shadow the storage package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if sys.path[1:2] == [str(Path(__file__).resolve().parent)]:
    del sys.path[1]

from logmarshal import Consumer, EmbeddedCluster, Marshaler
from logmarshal.streams import App, InMemoryStore, SqliteStore, StoreSpec, Topology
from logmarshal.streams.examples import WordCountProcessor, word_count
from logmarshal.streams.serde import string_deserializer, string_serializer
from logmarshal.streams.task import COMMIT_KEY, Task, changelog_topic, marker_key
from storage import NewRecord

TEXT = ["the quick brown fox", "jumps over the lazy dog", "streams of records", "a b c d e f"]


def two_topic_word_count() -> Topology:
    """The word count over ``lines`` and ``lines2``: one task per partition of both."""
    t = Topology()
    for topic in ("lines", "lines2"):
        t.add_source(topic, topic, value_deserializer=string_deserializer,
                     key_deserializer=string_deserializer)
    t.add_processor("count", WordCountProcessor, ["lines", "lines2"])
    t.add_state_store(StoreSpec("counts", "memory"), "count")
    return t.add_sink("out", "word-counts", "count", key_serializer=string_serializer)


def produce(cluster: EmbeddedCluster, n: int, topic: str = "lines") -> collections.Counter:
    cluster.create_topic(topic, 2)
    if topic == "lines":
        cluster.create_topic("word-counts", 2)
    now = int(time.time() * 1000)
    truth: collections.Counter = collections.Counter()
    for p in (0, 1):
        batch = []
        for i in range(p, n, 2):
            line = TEXT[i % len(TEXT)]
            truth.update(line.split())
            batch.append(NewRecord(line.encode(), timestamp=now + i))
        for k in range(0, len(batch), 500):
            cluster.produce(topic, p, batch[k:k + 500])
    return truth


def streams_rate(cluster: EmbeddedCluster, n: int, tmp: str, two: bool = False) -> float:
    topology = two_topic_word_count() if two else word_count()
    app = App(cluster, "bench-wc2" if two else "bench-wc", topology, client_id="s1",
              heartbeat_interval=1.0,
              state_dir=f"{tmp}/state", commit_interval=0.1,
              consumer_options={"batch_size": 500})
    start = time.perf_counter()
    app.run(max_records=n)
    elapsed = time.perf_counter() - start
    app.close()
    return n / elapsed


def poll_loop_rate(cluster: EmbeddedCluster, n: int, two: bool = False) -> float:
    marshaler = Marshaler(cluster, "p1", "bench-loop2" if two else "bench-loop", 1.0)
    counts: dict[tuple[int, str], int] = {}
    done = 0
    topics = ["lines", "lines2"] if two else ["lines"]
    with Consumer(marshaler, topics, mode="alo", batch_size=500) as consumer:
        start = time.perf_counter()
        while done < n:
            for m in consumer.poll(0.1):
                for word in m.value.decode().lower().split():
                    counts[(m.partition, word)] = counts.get((m.partition, word), 0) + 1
                consumer.commit(m)
                done += 1
        elapsed = time.perf_counter() - start
    marshaler.close()
    return n / elapsed


def restore_time(cluster: EmbeddedCluster, size: int, kind: str, tmp: str,
                 again: bool = False) -> float:
    """Seconds to restore a store from a changelog of ``size`` records; ``again``: a second
    restore of the same sqlite file, current with the changelog (nothing to replay)."""
    app_id = f"restore-{kind}-{size}"
    topic = changelog_topic(app_id, "counts")
    if again:
        return _restore(cluster, app_id, kind, tmp)
    cluster.create_topic(topic, 1)
    now = int(time.time() * 1000)
    keys = max(1, size // 4)  # every key written four times: what a compaction would shrink
    for k in range(0, size, 1000):
        cluster.produce(topic, 0, [
            NewRecord(str(i).encode(), key=f'"k{i % keys}"'.encode(), timestamp=now)
            for i in range(k, min(size, k + 1000))])
    cluster.produce(topic, 0, [NewRecord(b'{"lines":1}', key=marker_key(COMMIT_KEY, -1),
                                         timestamp=now)])
    return _restore(cluster, app_id, kind, tmp)


def _restore(cluster: EmbeddedCluster, app_id: str, kind: str, tmp: str) -> float:
    now = int(time.time() * 1000)
    topo = word_count()
    (sub,) = topo.subtopologies()
    store = InMemoryStore("counts") if kind == "memory" else SqliteStore(
        "counts", f"{tmp}/{app_id}.sqlite")
    task = Task(app_id, topo, sub, 0, {"counts": store}, lambda *a: None, lambda _t: 1,
                lambda: now)
    start = time.perf_counter()
    task.restore(cluster)
    elapsed = time.perf_counter() - start
    task.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--sizes", default="1000,10000,50000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(
        f"{tmp}/data", maintenance_interval=0
    ) as cluster:
        produce(cluster, args.lines)
        loop = poll_loop_rate(cluster, args.lines)
        streams = streams_rate(cluster, args.lines, tmp)
        print(f"word count over {args.lines} lines, 2 partitions, one member (records/s):")
        print(f"  hand-written poll loop (Consumer, dict): {loop:>10,.0f}")
        print(f"  streams App (topology, store, changelog): {streams:>9,.0f}")
        print(f"  overhead ratio (loop / streams):          {loop / streams:>9.2f}x")
        produce(cluster, args.lines, "lines2")
        loop2 = poll_loop_rate(cluster, 2 * args.lines, two=True)
        streams2 = streams_rate(cluster, 2 * args.lines, tmp, two=True)
        print(f"the same over two co-partitioned topics ({2 * args.lines} lines; a task is "
              "partition p of both):")
        print(f"  hand-written poll loop (4 partitions):    {loop2:>9,.0f}")
        print(f"  streams App (2 tasks, vector heartbeats): {streams2:>9,.0f}")
        print(f"  overhead ratio (loop / streams):          {loop2 / streams2:>9.2f}x")
        print("restore time vs changelog size (records; 1/4 distinct keys):")
        print(f"  {'records':>8} {'memory s':>9} {'sqlite s':>9} {'sqlite, file current s':>23}")
        for size in (int(s) for s in args.sizes.split(",")):
            mem = restore_time(cluster, size, "memory", tmp)
            sql = restore_time(cluster, size, "sqlite", tmp)
            reuse = restore_time(cluster, size, "sqlite", tmp, again=True)
            print(f"  {size:>8} {mem:>9.3f} {sql:>9.3f} {reuse:>23.4f}")


if __name__ == "__main__":
    main()
