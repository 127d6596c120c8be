"""The streams layer's three store engines (memory, SQLite, RocksDB), measured in the same run
(embedded cluster, one member):

1. the word count as an ``App`` with its counts in each engine: few keys (the four lines of
   ``bench/streams.py``, every write a cache hit) and many keys (words drawn from a large
   vocabulary: the write-behind cache is emptied when full, so reads go to the engine and
   every commit writes thousands of keys); ``--rounds`` rounds, the engines' order rotating
   each round; median wall time, records/s and CPU seconds of the process; every run's
   counts checked against the truth;
2. each engine alone, without the App: a commit cycle (puts of distinct keys, then
   ``take_dirty`` and ``checkpoint``, as a task's commit) and point reads of keys not in
   the cache;
3. restore of a store from a changelog of ``--restore`` records, from scratch, and again
   with the local file current (persistent engines only).

The fastest durable engine (of SQLite and RocksDB) by the many-keys App run is printed last:
it is the one ``StoreSpec(name, "persistent")`` should name (``stores.PERSISTENT``).

    python3 bench/stores.py [--lines 50000] [--vocabulary 200000] [--rounds 3]
                            [--ops 200000] [--restore 100000]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

# the repository first: bench/storage.py must not shadow the storage package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if sys.path[1:2] == [str(Path(__file__).resolve().parent)]:
    del sys.path[1]

from logmarshal import EmbeddedCluster
from logmarshal.streams import App, InMemoryStore, KeyValueStore, RocksDBStore, SqliteStore
from logmarshal.streams.examples import word_count
from logmarshal.streams.stores import KINDS
from logmarshal.streams.task import COMMIT_KEY, Task, changelog_topic, marker_key
from storage import NewRecord

TEXT = ["the quick brown fox", "jumps over the lazy dog", "streams of records", "a b c d e f"]
DURABLE = ("sqlite", "rocksdb")


def open_store(kind: str, name: str, directory: str) -> KeyValueStore:
    if kind == "memory":
        return InMemoryStore(name)
    path = os.path.join(directory, f"{name}.{kind}")
    return SqliteStore(name, path) if kind == "sqlite" else RocksDBStore(name, path)


def lines(n: int, vocabulary: int, seed: int = 7) -> list[str]:
    """``n`` lines: of ``TEXT`` (vocabulary 0), or of 8 words drawn from ``vocabulary``."""
    if not vocabulary:
        return [TEXT[i % len(TEXT)] for i in range(n)]
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(vocabulary)}" for _ in range(8)) for _ in range(n)]


def produce(cluster: EmbeddedCluster, topic: str, text: list[str]) -> collections.Counter:
    """Line i to partition i % 2; the true counts."""
    cluster.create_topic(topic, 2)
    now = int(time.time() * 1000)
    for p in (0, 1):
        batch = [NewRecord(text[i].encode(), timestamp=now + i) for i in range(p, len(text), 2)]
        for k in range(0, len(batch), 500):
            cluster.produce(topic, p, batch[k : k + 500])
    return collections.Counter(w for line in text for w in line.lower().split())


def app_run(
    cluster: EmbeddedCluster,
    kind: str,
    source: str,
    n: int,
    truth: collections.Counter,
    tmp: str,
    app_id: str,
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process) for a fresh App to count ``n`` lines with
    its counts in ``kind``; the counts it ends with are checked against ``truth``."""
    sink = f"{source}-counts"
    if sink not in cluster.topics():
        cluster.create_topic(sink, 2)
    app = App(
        cluster,
        app_id,
        word_count(source, sink, store_kind=kind),
        client_id="s1",
        heartbeat_interval=1.0,
        state_dir=f"{tmp}/state",
        commit_interval=0.1,
        consumer_options={"batch_size": 500},
    )
    start, start_cpu = time.perf_counter(), time.process_time()
    app.run(max_records=n)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    counts: collections.Counter = collections.Counter()
    for task in app.tasks.values():
        counts.update(task.stores["counts"].all())
    app.close()
    if counts != truth:
        raise SystemExit(
            f"{kind}: the App's counts differ from the truth "
            f"({sum(counts.values())} words against {sum(truth.values())})"
        )
    return wall, cpu


def commit_cycle(kind: str, ops: int, tmp: str, per_commit: int = 5_000) -> float:
    """Seconds for ``ops`` puts of distinct keys, committed every ``per_commit`` (flush to
    the engine, then the local checkpoint), as a task's commits write them."""
    store = open_store(kind, f"cycle-{kind}", tmp)
    start = time.perf_counter()
    for i in range(ops):
        store.put(f"k{i}", i)
        if i % per_commit == per_commit - 1:
            store.take_dirty()
            store.checkpoint(i, {"in": i + 1}, 0)
    store.take_dirty()
    store.checkpoint(ops, {"in": ops}, 0)
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def point_reads(kind: str, ops: int, tmp: str) -> float:
    """Seconds for ``ops`` reads of keys the cache does not hold (the engine's point read
    and the JSON decoding), from the store ``commit_cycle`` left."""
    store = open_store(kind, f"cycle-{kind}", tmp)
    if kind == "memory":  # nothing survives a close in memory: write it again, uncounted
        for i in range(ops):
            store.put(f"k{i}", i)
        store.take_dirty()
    rng = random.Random(3)
    keys = [f"k{rng.randrange(ops)}" for _ in range(ops)]
    start = time.perf_counter()
    total = 0
    for key in keys:
        store._reads.clear()  # a miss every time: what a key space beyond the cache sees
        total += store.get(key)
    elapsed = time.perf_counter() - start
    store.close()
    if total != sum(int(k[1:]) for k in keys):
        raise SystemExit(f"{kind}: point reads returned wrong values")
    return elapsed


def restore_time(
    cluster: EmbeddedCluster, kind: str, size: int, tmp: str, again: bool = False
) -> float:
    """Seconds to restore a store of ``kind`` from a changelog of ``size`` records (¼
    distinct keys); ``again``: the same local file, current with the changelog."""
    app_id = f"restore-{kind}-{size}"
    topic = changelog_topic(app_id, "counts")
    if topic not in cluster.topics():
        cluster.create_topic(topic, 1)
        now = int(time.time() * 1000)
        keys = max(1, size // 4)
        for k in range(0, size, 1000):
            cluster.produce(
                topic,
                0,
                [
                    NewRecord(str(i).encode(), key=f'"k{i % keys}"'.encode(), timestamp=now)
                    for i in range(k, min(size, k + 1000))
                ],
            )
        cluster.produce(
            topic, 0, [NewRecord(b'{"lines":1}', key=marker_key(COMMIT_KEY, -1), timestamp=now)]
        )
    topo = word_count()
    (sub,) = topo.subtopologies()
    store = open_store(kind, f"restore-{size}", tmp)
    task = Task(
        app_id,
        topo,
        sub,
        0,
        {"counts": store},
        lambda *a: None,
        lambda _t: 1,
        lambda: int(time.time() * 1000),
    )
    start = time.perf_counter()
    task.restore(cluster)
    elapsed = time.perf_counter() - start
    if len(store.all()) != max(1, size // 4):
        raise SystemExit(f"{kind}: the restored store has the wrong number of keys")
    task.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument(
        "--vocabulary", type=int, default=200_000, help="distinct words of the many-keys run"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--restore", type=int, default=100_000)
    args = parser.parse_args()
    print(
        f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} cores)"
    )
    many: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedCluster(f"{tmp}/data", maintenance_interval=0) as cluster,
    ):
        for label, vocabulary in (("few keys", 0), ("many keys", args.vocabulary)):
            source = "few" if not vocabulary else "many"
            truth = produce(cluster, source, lines(args.lines, vocabulary))
            runs: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
            for r in range(args.rounds):
                # the order rotates: on a shared machine the load drifts, and a fixed order
                # would hand one engine the same share of the drift every round
                for kind in KINDS[r % 3 :] + KINDS[: r % 3]:
                    runs[kind].append(
                        app_run(
                            cluster, kind, source, args.lines, truth, tmp, f"wc-{source}-{kind}-{r}"
                        )
                    )
            print(
                f"App word count, {args.lines} lines, {label} ({len(truth)} distinct words, "
                f"{sum(truth.values())} words), median of {args.rounds} rounds:"
            )
            print(f"  {'store':<8} {'wall s':>8} {'records/s':>10} {'CPU s':>7}   rounds (wall s)")
            for kind in KINDS:
                wall = statistics.median(w for w, _ in runs[kind])
                cpu = statistics.median(c for _, c in runs[kind])
                each = " ".join(f"{w:.2f}" for w, _ in runs[kind])
                print(f"  {kind:<8} {wall:8.3f} {args.lines / wall:10,.0f} {cpu:7.3f}   {each}")
                if vocabulary:
                    many[kind] = wall
        print(
            f"each engine alone: {args.ops} puts of distinct keys committed every 5000; "
            f"{args.ops} point reads missing the cache:"
        )
        print(
            f"  {'store':<8} {'commit cycle s':>15} {'puts/s':>10} {'reads s':>8} {'reads/s':>10}"
        )
        for kind in KINDS:
            cycle = commit_cycle(kind, args.ops, tmp)
            reads = point_reads(kind, args.ops, tmp)
            print(
                f"  {kind:<8} {cycle:15.3f} {args.ops / cycle:10,.0f} {reads:8.3f} "
                f"{args.ops / reads:10,.0f}"
            )
        print(f"restore from a changelog of {args.restore} records ({args.restore // 4} keys):")
        print(f"  {'store':<8} {'from scratch s':>15} {'local file current s':>21}")
        for kind in KINDS:
            scratch = restore_time(cluster, kind, args.restore, f"{tmp}/restore-{kind}")
            current = (
                ""
                if kind == "memory"
                else "{:21.4f}".format(
                    restore_time(cluster, kind, args.restore, f"{tmp}/restore-{kind}", again=True)
                )
            )
            print(f"  {kind:<8} {scratch:15.3f} {current:>21}")
    fastest = min(DURABLE, key=many.__getitem__)
    print(
        f"fastest durable store (App word count, many keys, median wall time): {fastest} "
        f"({many[fastest]:.3f} s against "
        + ", ".join(f"{k} {many[k]:.3f} s" for k in DURABLE if k != fastest)
        + ")"
    )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
