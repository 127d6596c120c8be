"""Streams figures, each beside its baseline from the same run (embedded cluster):

1. word count through an App (topology, memory store with changelog, sinks, commits) vs a
   hand-written Consumer poll loop counting the same lines into a dict (same data, same
   consumer settings, same run; ``--rounds`` rounds of each, alternating which goes
   first): both times, records/s, and the overhead ratio of the streams layer (median App
   time / median loop time), for the whole run and from the first record on (wall clock,
   the process's CPU time, and the CPU time of the thread that polls and processes: the
   steadiest, and the streams layer's own overhead); and the same over two co-partitioned
   topics, where each task is partition p of both (one claim, a position vector in its
   heartbeats), vs the loop reading both topics as four partitions;
2. the word count App with retries (``RetryPolicy(max_attempts=3)``: each record atomic,
   its store writes journaled to be undone if it fails) beside the default App (one
   attempt), alternating, CPU time of the processing thread: what atomic records cost;
3. restore time of a store vs its changelog size (in-memory and sqlite).

    python3 bench/streams.py [--lines 20000] [--rounds 5] [--sizes 1000,10000,50000]
                             [--profile 25]

``--profile N`` also runs one more App under cProfile (from its first record on) and prints
its N most expensive functions (own time): where the streams layer's per-record time goes.

A 20 000-line run is mostly the claim (~0.1 s); ``--lines 100000`` gives steadier figures
for the steady-state ratio on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

# the repository first: bench/storage.py must not shadow the storage package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if sys.path[1:2] == [str(Path(__file__).resolve().parent)]:
    del sys.path[1]

from logmarshal import Consumer, EmbeddedCluster, Marshaler
from logmarshal.retry import RetryPolicy
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
        t.add_source(
            topic,
            topic,
            value_deserializer=string_deserializer,
            key_deserializer=string_deserializer,
        )
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
            cluster.produce(topic, p, batch[k : k + 500])
    return truth


#: (whole run, from the first record on, CPU seconds of the process from the first record
#: on, CPU seconds of the processing thread from the first record on): the first includes
#: claiming the partitions (and, for the App, creating and restoring its tasks), a fixed
#: cost that is most of a short run; the third counts every thread (the consumer's fetch
#: and claim threads and the embedded cluster's too, on both sides alike, so it varies with
#: when a claim or a full garbage collection lands in the window); the last is the thread
#: that polls and processes (the App's ``run``, the loop's own): what the streams layer adds
#: to, with the consumer's background threads left out; then the process's CPU seconds of
#: the whole run: the consumer fetches a partition in a few large reads (~17 000 records
#: each here), and how many of them land after the first record varies from round to
#: round, so only the whole run counts the same work on both sides
Timing = tuple[float, float, float, float, float]


def streams_time(
    cluster: EmbeddedCluster,
    n: int,
    tmp: str,
    app_id: str,
    two: bool = False,
    profile: cProfile.Profile | None = None,
    retry: RetryPolicy | None = None,
) -> Timing:
    """Seconds for a fresh App (no state yet) to process ``n`` records: its first record
    (claim, restore), then the others (under ``profile`` if given)."""
    topology = two_topic_word_count() if two else word_count()
    app = App(
        cluster,
        app_id,
        topology,
        client_id="s1",
        heartbeat_interval=1.0,
        state_dir=f"{tmp}/state",
        commit_interval=0.1,
        consumer_options={"batch_size": 500},
        retry=retry,
    )
    start = time.perf_counter()
    start_cpu = time.process_time()
    app.run(max_records=1)
    first = time.perf_counter()
    first_cpu = time.process_time()
    first_thread = time.thread_time()
    if profile is not None:
        profile.enable()
    app.run(max_records=n - 1)
    end = time.perf_counter()
    cpu = time.process_time() - first_cpu
    thread = time.thread_time() - first_thread
    if profile is not None:
        profile.disable()
    whole_cpu = time.process_time() - start_cpu
    app.close()
    return end - start, end - first, cpu, thread, whole_cpu


def poll_loop_time(cluster: EmbeddedCluster, n: int, group: str, two: bool = False) -> Timing:
    """Seconds for a hand-written Consumer loop of a fresh group to count ``n`` records."""
    marshaler = Marshaler(cluster, "p1", group, 1.0)
    counts: dict[tuple[int, str], int] = {}
    done = 0
    first = None
    first_cpu = time.process_time()
    first_thread = time.thread_time()
    topics = ["lines", "lines2"] if two else ["lines"]
    with Consumer(marshaler, topics, mode="alo", batch_size=500) as consumer:
        start = time.perf_counter()
        start_cpu = time.process_time()
        while done < n:
            batch = consumer.poll(0.1)
            if first is None and batch:
                first = time.perf_counter()
                first_cpu = time.process_time()
                first_thread = time.thread_time()
            for m in batch:
                for word in m.value.decode().lower().split():
                    counts[(m.partition, word)] = counts.get((m.partition, word), 0) + 1
            # the idiomatic ALO loop: a polled batch committed in one call (as the App
            # commits its tasks' inputs), not a call per message
            consumer.commit(*batch)
            done += len(batch)
        end = time.perf_counter()
        cpu = time.process_time() - first_cpu
        thread = time.thread_time() - first_thread
        whole_cpu = time.process_time() - start_cpu
    marshaler.close()
    return end - start, end - (first or start), cpu, thread, whole_cpu


def compare(cluster: EmbeddedCluster, n: int, tmp: str, rounds: int, two: bool) -> None:
    """Alternate loop and App runs over the same records; print both and the ratios."""
    tag = "2" if two else ""
    loops, apps = [], []
    for r in range(rounds):
        # which side runs first alternates: on a shared machine the load drifts, and a
        # fixed order would hand one side the same share of the drift every round
        if r % 2:
            apps.append(streams_time(cluster, n, tmp, f"bench-wc{tag}-{r}", two))
        loops.append(poll_loop_time(cluster, n, f"bench-loop{tag}-{r}", two))
        if not r % 2:
            apps.append(streams_time(cluster, n, tmp, f"bench-wc{tag}-{r}", two))
    for i, what in enumerate(
        (
            "whole run (claim, restore, all records)",
            "from the first record on (steady state)",
            "CPU time of the process, from the first record on",
            "CPU time of the processing thread, from the first record on",
            "CPU time of the process, whole run",
        )
    ):
        loop = statistics.median(t[i] for t in loops)
        app = statistics.median(t[i] for t in apps)
        each = " ".join(f"{a[i] / b[i]:.2f}" for a, b in zip(apps, loops, strict=True))
        print(f"  {what}:")
        print(
            f"    hand-written poll loop (Consumer, dict): {loop:7.3f} s {n / loop:>9,.0f} "
            "records/s"
        )
        print(
            f"    streams App (store, changelog, sinks):   {app:7.3f} s {n / app:>9,.0f} records/s"
        )
        print(f"    overhead ratio (App time / loop time):   {app / loop:7.2f}x  (rounds: {each})")


def atomic_cost(cluster: EmbeddedCluster, n: int, tmp: str, rounds: int) -> None:
    """The App with retries (each record atomic: its store writes journaled, undone if it
    fails) beside the default App (one attempt), alternating; processing-thread CPU."""
    plain, atomic = [], []
    retry = RetryPolicy(max_attempts=3)
    for r in range(rounds):
        first, second = (plain, atomic) if r % 2 else (atomic, plain)
        first.append(
            streams_time(cluster, n, tmp, f"bench-at{r}a", retry=retry if first is atomic else None)
        )
        second.append(
            streams_time(
                cluster, n, tmp, f"bench-at{r}b", retry=retry if second is atomic else None
            )
        )
    base = statistics.median(t[3] for t in plain)
    journaled = statistics.median(t[3] for t in atomic)
    each = " ".join(f"{a[3] / b[3]:.2f}" for a, b in zip(atomic, plain, strict=True))
    print(f"    default App (one attempt):               {base:7.3f} s {n / base:>9,.0f} records/s")
    print(
        f"    App with retries (atomic records):       {journaled:7.3f} s "
        f"{n / journaled:>9,.0f} records/s"
    )
    print(
        f"    ratio (retries / default):               {journaled / base:7.2f}x  (rounds: {each})"
    )


def restore_time(
    cluster: EmbeddedCluster, size: int, kind: str, tmp: str, again: bool = False
) -> float:
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
    return _restore(cluster, app_id, kind, tmp)


def _restore(cluster: EmbeddedCluster, app_id: str, kind: str, tmp: str) -> float:
    now = int(time.time() * 1000)
    topo = word_count()
    (sub,) = topo.subtopologies()
    store = (
        InMemoryStore("counts")
        if kind == "memory"
        else SqliteStore("counts", f"{tmp}/{app_id}.sqlite")
    )
    task = Task(app_id, topo, sub, 0, {"counts": store}, lambda *a: None, lambda _t: 1, lambda: now)
    start = time.perf_counter()
    task.restore(cluster)
    elapsed = time.perf_counter() - start
    task.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="profile one more App run; print its N costliest functions",
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedCluster(f"{tmp}/data", maintenance_interval=0) as cluster,
    ):
        produce(cluster, args.lines)
        print(
            f"word count over {args.lines} lines, 2 partitions, one member "
            "(median time of each side):"
        )
        compare(cluster, args.lines, tmp, args.rounds, two=False)
        produce(cluster, args.lines, "lines2")
        print(
            f"the same over two co-partitioned topics ({2 * args.lines} lines; a task is "
            "partition p of both; the loop reads 4 partitions):"
        )
        compare(cluster, 2 * args.lines, tmp, args.rounds, two=True)
        print(
            "word count with retries, each record atomic (CPU time of the processing thread, "
            "from the first record on):"
        )
        atomic_cost(cluster, args.lines, tmp, args.rounds)
        print("restore time vs changelog size (records; 1/4 distinct keys):")
        print(f"  {'records':>8} {'memory s':>9} {'sqlite s':>9} {'sqlite, file current s':>23}")
        for size in (int(s) for s in args.sizes.split(",")):
            mem = restore_time(cluster, size, "memory", tmp)
            sql = restore_time(cluster, size, "sqlite", tmp)
            reuse = restore_time(cluster, size, "sqlite", tmp, again=True)
            print(f"  {size:>8} {mem:>9.3f} {sql:>9.3f} {reuse:>23.4f}")
        if args.profile:
            profile = cProfile.Profile()
            streams_time(cluster, args.lines, tmp, "bench-wc-profiled", profile=profile)
            print(
                f"one App under cProfile, {args.lines} lines from the first record on "
                "(the processing thread; own time):"
            )
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
