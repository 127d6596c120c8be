"""``logmarshal demo``: the main job a newcomer runs first, on the embedded cluster.

It creates a topic, produces a keyed stream through the batching producer, reads every
partition back and checks that nothing was lost, repeated or reordered, printing what happens.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from typing import Any

from ..cluster import Cluster
from ..connect import connect
from ..partitioners import Murmur2Partitioner
from ..producer import Producer
from .argtypes import positive
from .context import Context
from .output import emit, print_table

__all__ = ["register", "run_demo"]

DEMO_TOPIC = "demo-events"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the demo on an embedded cluster (a fresh temporary directory by default)",
        description=(
            f"Create topic {DEMO_TOPIC!r}, produce keyed records, read them back and tally. "
            f"With --data-dir the directory is kept and {DEMO_TOPIC!r} in it is recreated."
        ),
    )
    demo.add_argument("--records", type=positive, default=10_000, help="default: 10000")
    demo.add_argument("--partitions", type=positive, default=4, help="default: 4")
    demo.add_argument("--keys", type=positive, default=50, help="distinct keys (default: 50)")
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    if args.data_dir is None:
        with tempfile.TemporaryDirectory(prefix="logmarshal-demo-") as tmp:
            return _run_in(tmp, args, ctx, kept=False)
    return _run_in(args.data_dir, args, ctx, kept=True)


def _run_in(data_dir: str, args: argparse.Namespace, ctx: Context, kept: bool) -> int:
    say = (lambda _text: None) if ctx.as_json else print
    say(f"embedded cluster in {data_dir}" + ("" if kept else " (temporary)"))
    cluster = connect(data_dir)
    try:
        tally = run_demo(cluster, args.records, args.partitions, args.keys, say)
    finally:
        cluster.close()
    if ctx.as_json:
        emit(True, tally)
    else:
        print_table(tally["partitions"], ["partition", "records", "end_offset"])
    return 0 if tally["lost"] == 0 and tally["repeated"] == 0 and tally["misplaced"] == 0 else 1


def run_demo(
    cluster: Cluster, n_records: int, n_partitions: int, n_keys: int, say: Any = print
) -> dict[str, Any]:
    """Produce ``n_records`` keyed records, read them back, and return the tally."""
    if DEMO_TOPIC in cluster.topics():
        cluster.delete_topic(DEMO_TOPIC)
    cluster.create_topic(DEMO_TOPIC, n_partitions)
    say(f"created topic {DEMO_TOPIC!r} with {n_partitions} partitions")

    started = time.perf_counter()
    with Producer(cluster, linger_ms=2) as producer:
        futures = [
            producer.send(DEMO_TOPIC, f"event-{i}".encode(), key=f"user-{i % n_keys}".encode())
            for i in range(n_records)
        ]
    produce_s = time.perf_counter() - started
    say(f"produced {n_records} records in {produce_s:.2f} s ({n_records / produce_s:,.0f} msg/s)")

    started = time.perf_counter()
    seen: Counter[int] = Counter()
    misplaced = 0
    rows = []
    expected = Murmur2Partitioner()
    for partition in range(n_partitions):
        offset = cluster.earliest_offset(DEMO_TOPIC, partition)
        end = cluster.latest_offset(DEMO_TOPIC, partition)
        count = 0
        while offset < end:
            for message in cluster.fetch(DEMO_TOPIC, partition, offset):
                seen[int(message.value.removeprefix(b"event-"))] += 1  # type: ignore[union-attr]
                if expected(message.key, n_partitions) != partition:
                    misplaced += 1
                offset = message.offset + 1
                count += 1
        rows.append({"partition": partition, "records": count, "end_offset": end})
    read_s = time.perf_counter() - started
    say(f"read them back in {read_s:.2f} s ({n_records / read_s:,.0f} msg/s)")

    acknowledged = {i for i, f in enumerate(futures) if f.exception() is None}
    tally = {
        "produced": n_records,
        "acknowledged": len(acknowledged),
        "read": sum(seen.values()),
        "lost": len(acknowledged - set(seen)),
        "repeated": sum(c - 1 for c in seen.values() if c > 1),
        "misplaced": misplaced,
        "partitions": rows,
    }
    say(
        "tally: {produced} produced, {read} read, {lost} lost, {repeated} repeated, "
        "{misplaced} on the wrong partition".format(**tally)
    )
    return tally
