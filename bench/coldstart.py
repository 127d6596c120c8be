"""Cold start of a new member vs history length, with and without snapshots (figures only).

Synthesizes the coordination log of one group of ``--partitions`` data partitions (16
members heartbeating, positions advancing, now and then a lost race) into an embedded
cluster's ``__marshal`` (8 partitions, LogAppendTime from an injected clock), growing it
to each of ``--sizes`` records. While writing, it plays the members' snapshot publisher:
one WorldState per coordination partition replays every batch, and at each snapshot point
(every ``--snapshot-records`` records of a partition) the world is published to
``__marshal_snapshots``, exactly as a Marshaler does (logmarshal.coordlog). Nothing is
truncated while growing, so both cold starts can be measured on the same log.

At each size it measures, side by side in the same run:
- ``apply_many`` alone: the fold over records already in memory (the baseline for the tail);
- a new Marshaler with ``restore_snapshots=False``: the whole history replayed
  (fetch -> decode -> apply), and its rate as a fraction of ``apply_many``'s;
- a new Marshaler restoring the newest snapshot and replaying the tail;
- ``__marshal`` bytes on disk, and what truncation keeps (the segments at or after the
  bound ``coordlog.truncation_bounds`` gives), i.e. the steady-state size with snapshots.
At the end it really truncates and starts one more member on the truncated log.

    python bench/coldstart.py [--sizes 1000000,10000000,30000000] [--partitions 2000]
                              [--snapshot-records 25000] [--keep DIR] [--network]

``--network`` also serves the final directory with a broker and times the cold start of a
Marshaler over the Kafka protocol (NetworkCluster), with and without snapshots.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logmarshal import EmbeddedCluster, Marshaler, NewRecord, coordlog
from logmarshal.coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.marshaler import DEFAULT_SNAPSHOT_RECORDS
from rationalizer import (
    ClaimingPartition,
    Heartbeat,
    WorldState,
    coordination_partition,
    encode,
)

log = logging.getLogger("bench.coldstart")

N_COORD = 8
HB_MS = 5000
GROUP = "g"
TOPIC = "events"
CLIENTS = 16
_I64 = struct.Struct(">q")


class History:
    """The synthetic history, grown in steps; also the members' snapshot publisher."""

    def __init__(
        self, cluster: EmbeddedCluster, clock: list[int], partitions: int, every: int, seed: int
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.every = every
        self.rng = random.Random(seed)
        self.now = 1_700_000_000_000
        cluster.create_topic(COORDINATION_TOPIC, N_COORD, coordlog.coordination_topic_config())
        coordlog.ensure_snapshot_topic(cluster, N_COORD)
        self.parts = list(range(partitions))
        self.cp = [coordination_partition(TOPIC, p, N_COORD) for p in self.parts]
        self.inst = [f"{self.rng.getrandbits(48):012x}" for _ in range(CLIENTS)]
        self.holder = [p % CLIENTS for p in self.parts]
        # a heartbeat is its 10-byte head (version, type, last_offset) + a fixed tail
        self.tail = []
        for p in self.parts:
            c = self.holder[p]
            _key, value = encode(
                Heartbeat(
                    client_id=f"c{c}",
                    instance_id=self.inst[c],
                    group_id=GROUP,
                    topic=TOPIC,
                    partition=p,
                    last_offset=0,
                    heartbeat_interval_ms=HB_MS,
                )
            )
            self.tail.append(value[10:])
        self.keys = [f"{GROUP}/{TOPIC}/{p}".encode() for p in self.parts]
        self.position = [0] * partitions
        self.worlds = [WorldState() for _ in range(N_COORD)]
        self.written = [0] * N_COORD
        self.total = 0
        self.snapshots = 0
        # everybody claims first
        batches: list[list[tuple[bytes, bytes]]] = [[] for _ in range(N_COORD)]
        for p in self.parts:
            c = self.holder[p]
            batches[self.cp[p]].append(
                encode(
                    ClaimingPartition(
                        client_id=f"c{c}",
                        instance_id=self.inst[c],
                        group_id=GROUP,
                        topic=TOPIC,
                        partition=p,
                        heartbeat_interval_ms=HB_MS,
                    )
                )
            )
        self._write(batches)

    def _write(self, batches: list[list[tuple[bytes, bytes]]]) -> None:
        now = self.now
        self.clock[0] = now
        for cp, batch in enumerate(batches):
            if not batch:
                continue
            res = self.cluster.produce(
                COORDINATION_TOPIC,
                cp,
                [NewRecord(value=v, key=k, timestamp=now) for k, v in batch],
            )
            base = res.base_offset
            w = self.worlds[cp]
            w.apply_many((base + i, res.log_append_time, k, v) for i, (k, v) in enumerate(batch))
            before, after = base // self.every, (res.last_offset + 1) // self.every
            if after > before:  # a snapshot point inside: its writer publishes
                coordlog.publish_snapshot(self.cluster, cp, w, timestamp_ms=now)
                self.snapshots += 1
                # ... and truncates the snapshot topic as a member does (``__marshal`` is
                # kept whole here, so that the full replay can be measured too)
                _, snaps_before = coordlog.truncation_bounds(
                    cp, coordlog.read_snapshots(self.cluster, cp)
                )
                if snaps_before:
                    self.cluster.delete_records(SNAPSHOT_TOPIC, {cp: snaps_before})
            self.written[cp] += len(batch)
            self.total += len(batch)

    def grow(self, until: int) -> None:
        rng = self.rng
        per_tick = len(self.parts) // 10  # every partition beats once per 10 ticks
        cursor = 0
        while self.total < until:
            self.now += HB_MS // 10
            batches: list[list[tuple[bytes, bytes]]] = [[] for _ in range(N_COORD)]
            for _ in range(per_tick):
                p = self.parts[cursor % len(self.parts)]
                cursor += 1
                if rng.random() < 0.3:
                    self.position[p] += rng.randrange(1, 100)
                value = b"\x01\x01" + _I64.pack(self.position[p]) + self.tail[p]
                batches[self.cp[p]].append((self.keys[p], value))
            self._write(batches)


def _kept_bytes(cluster: EmbeddedCluster) -> tuple[int, int, int]:
    """``(__marshal bytes now, bytes truncation would keep, snapshot topic bytes)``."""
    total = keep = snaps = 0
    for cp in range(N_COORD):
        log_ = cluster.data_dir.partition(COORDINATION_TOPIC, cp)
        before, _ = coordlog.truncation_bounds(cp, coordlog.read_snapshots(cluster, cp))
        segs = log_._view.segments
        for i, seg in enumerate(segs):
            size = log_._view.active_size if i == len(segs) - 1 else seg.size
            total += size
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if nxt is None or nxt > before:
                keep += size
        snaps += cluster.data_dir.partition(SNAPSHOT_TOPIC, cp).size_bytes
    return total, keep, snaps


def _cold_start(cluster, restore: bool, timeout: float = 3600.0, check: bool = True) -> float:
    t0 = time.perf_counter()
    m = Marshaler(
        cluster,
        f"new-{restore}-{time.monotonic_ns()}",
        GROUP,
        HB_MS / 1000,
        coordination_partitions=N_COORD,
        snapshot_records=None,
        snapshot_interval=None,
        restore_snapshots=restore,
        fetch_max_bytes=8 << 20,
    )
    try:
        if not m.wait_caught_up(timeout):
            raise RuntimeError("the new member did not catch up")
        took = time.perf_counter() - t0
        if check:  # every partition of the group known, with its holder
            assert len(m.partitions()) == len(cluster_partitions_cache), "member disagrees"
    finally:
        m.close()
    return took


cluster_partitions_cache: list[int] = []


def _apply_many_rate(cluster: EmbeddedCluster, limit: int) -> float:
    """Records/s of ``apply_many`` alone over up to ``limit`` records already in memory."""
    cols = []
    per = limit // N_COORD
    for cp in range(N_COORD):
        got: list = []
        for chunk in coordlog.iter_columns(cluster, cp, 0, per):
            got.extend(zip(*chunk, strict=True))
        cols.append(got)
    n = sum(len(c) for c in cols)
    t0 = time.perf_counter()
    for records in cols:
        WorldState().apply_many(records)
    return n / (time.perf_counter() - t0)


def _network(path: Path, baseline: float) -> None:
    from logmarshal import connect
    from storage.broker import BrokerConfig, BrokerThread

    with (
        BrokerThread(BrokerConfig(data_dir=path, port=0)) as broker,
        connect(bootstrap=broker.bootstrap) as net,
    ):
        stored = sum(
            net.latest_offset(COORDINATION_TOPIC, cp) - net.earliest_offset(COORDINATION_TOPIC, cp)
            for cp in range(N_COORD)
        )
        full = _cold_start(net, restore=False, check=False)  # truncated: positions lost
        snap = _cold_start(net, restore=True)
        print(
            f"network (broker on 127.0.0.1, truncated log): replay of the {stored:,} stored "
            f"records {full:.2f} s ({stored / full:,.0f} records/s, "
            f"{stored / full / baseline:.2f} of apply_many); from snapshots {snap:.2f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1000000,10000000,30000000")
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--snapshot-records", type=int, default=DEFAULT_SNAPSHOT_RECORDS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    ap.add_argument("--network", action="store_true", help="also cold-start over the network")
    ap.add_argument("--baseline-records", type=int, default=1_000_000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-coldstart-"))
    work.mkdir(parents=True, exist_ok=True)
    clock = [0]
    cluster_partitions_cache[:] = range(args.partitions)
    print(
        f"python {sys.version.split()[0]}; one group of {args.partitions:,} partitions, "
        f"{N_COORD} coordination partitions, a snapshot every {args.snapshot_records:,} "
        "records of a coordination partition"
    )
    try:
        with EmbeddedCluster(
            work / "data", clock=lambda: clock[0], maintenance_interval=0
        ) as cluster:
            history = History(cluster, clock, args.partitions, args.snapshot_records, args.seed)
            print(
                f"{'records':>11} {'gen s':>7} {'apply_many/s':>13} {'full replay':>12} "
                f"{'rate/s':>9} {'ratio':>6} {'snapshot+tail':>14} "
                f"{'__marshal MB':>13} {'kept MB':>8} {'snapshots MB':>13}"
            )
            baseline = 0.0
            for size in sizes:
                t0 = time.perf_counter()
                history.grow(size)
                gen = time.perf_counter() - t0
                if not baseline:
                    baseline = _apply_many_rate(cluster, min(args.baseline_records, size))
                full = _cold_start(cluster, restore=False)
                snap = _cold_start(cluster, restore=True)
                total, keep, snaps = _kept_bytes(cluster)
                rate = history.total / full
                print(
                    f"{history.total:>11,} {gen:>7.1f} {baseline:>13,.0f} {full:>10.2f} s "
                    f"{rate:>9,.0f} {rate / baseline:>6.2f} {snap:>12.2f} s "
                    f"{total / 1e6:>13.1f} {keep / 1e6:>8.1f} {snaps / 1e6:>13.1f}",
                    flush=True,
                )
            t0 = time.perf_counter()
            for cp in range(N_COORD):
                coordlog.truncate(cluster, cp)
            cut = time.perf_counter() - t0
            total, _keep, snaps = _kept_bytes(cluster)
            after = _cold_start(cluster, restore=True)
            print(
                f"truncated in {cut:.2f} s: __marshal {total / 1e6:.1f} MB, snapshots "
                f"{snaps / 1e6:.1f} MB; a new member starts in {after:.2f} s"
            )
        if args.network:
            _network(work / "data", baseline)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
