"""Cold start of a new member vs history length, with and without snapshots (figures only).

Synthesizes the coordination log of one group of ``--partitions`` data partitions (16
members heartbeating, positions advancing, now and then a lost race) into an embedded
cluster's ``__marshal`` (8 partitions, LogAppendTime from an injected clock), growing it
to each of ``--sizes`` records. While writing, it plays the members' snapshot publisher:
one WorldState per coordination partition replays every batch, and at each snapshot point
(every ``--snapshot-records`` records of a partition) the world is published to
``__marshal_snapshots``, exactly as a Marshaler does (logmarshal._coordlog). Nothing is
truncated while growing, so both cold starts can be measured on the same log.

At each size it measures, side by side in the same run:
- ``apply_many`` alone (the baseline for the tail): a fresh ``WorldState`` per coordination
  partition fed the first ``--baseline-records`` records as ``(offset, timestamp, key,
  value)`` tuples already read and decoded into memory. That is the rationalizer's own work
  (its codec, which runs inside ``apply_many``, and the fold), without storage reads or
  record-batch decoding;
- the catch-up (tail) path: a new Marshaler with ``restore_snapshots=False`` replaying the
  whole history (its threads read ``__marshal``, decode the record batches, apply), timed
  from construction until ``wait_caught_up``, and its rate as a fraction of
  ``apply_many``'s; once with the C batch decoder (``storage._fastrecords``) and once with
  the Python one it falls back to (``--python-decoder-too``);
- a new Marshaler restoring the newest snapshot and replaying the tail;
- ``__marshal`` bytes on disk, and what truncation keeps (the segments at or after the
  bound ``coordlog.truncation_bounds`` gives), i.e. the steady-state size with snapshots.
At the end it really truncates and starts one more member on the truncated log.

    python bench/coldstart.py [--sizes 1000000,10000000,30000000] [--partitions 2000]
                              [--snapshot-records 25000] [--keep DIR] [--network]
                              [--one-record-batches] [--repeat 3] [--python-decoder-too]

Rates are the median of ``--repeat`` runs (this machine is shared: single runs vary).
``--one-record-batches`` stores every record as its own batch, as Marshalers write them
(the default stores one batch per coordination partition per tick, about 25 records).

``--network`` then serves the whole history with ``logmarshal broker start`` (another
process) and times the catch-up of a Marshaler over the Kafka protocol (NetworkCluster,
librdkafka) against the same ``apply_many`` rate, and its cold start from snapshots.

``--kafka`` does the same on a single-node Apache Kafka (``logmarshal.localkafka``, heap 1g,
stopped by pid at the end; ``--sizes`` defaults to 1,000,000 then). Kafka stamps
LogAppendTime itself, so the history cannot keep its injected timestamps: its ``__marshal``
records (key, value, in order, per coordination partition) are copied into Kafka's
``__marshal`` (created by ``coordlog.ensure_coordination_topic``) through
``NetworkCluster.produce`` (acks=all, idempotent, large calls), then Kafka's ``__marshal`` is
replayed once with a WorldState per coordination partition, read as a Marshaler reads it
(``coordlog.iter_columns``), and a snapshot is published at the same points as the publisher
above did (the same helper). On Kafka, in the same run: ``apply_many`` over Kafka's records
(with Kafka's timestamps), a new Marshaler's full catch-up and its cold start from snapshots,
each alternating with the baseline; both cold-started members' worlds must equal the one-pass
replay's, byte for byte. The stored batches on Kafka are the copy's as librdkafka batched
them (up to 10,000 records by default), not the synthesized ticks' (~25) nor a Marshaler's
(one record)."""

from __future__ import annotations

import argparse
import bisect
import logging
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage._records
from logmarshal import EmbeddedCluster, Marshaler, NewRecord
from logmarshal import _coordlog as coordlog
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.marshaler import DEFAULT_SNAPSHOT_RECORDS
from rationalizer import (
    ClaimingPartition,
    Heartbeat,
    WorldState,
    coordination_partition,
    encode,
)
from storage import TimestampType, encode_batch

log = logging.getLogger("bench.coldstart")

ROOT = Path(__file__).resolve().parents[1]

N_COORD = 8
HB_MS = 5000
GROUP = "g"
TOPIC = "events"
CLIENTS = 16
_I64 = struct.Struct(">q")


class History:
    """The synthetic history, grown in steps; also the members' snapshot publisher."""

    def __init__(
        self,
        cluster: EmbeddedCluster,
        clock: list[int],
        partitions: int,
        every: int,
        seed: int,
        one_record_batches: bool = False,
    ) -> None:
        self.cluster = cluster
        self.one_record_batches = one_record_batches
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
        #: per coordination partition, the offsets the published snapshots cover
        self.points: list[list[int]] = [[] for _ in range(N_COORD)]
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
            res = self._append(cp, batch, now)
            base = res.base_offset
            w = self.worlds[cp]
            w.apply_many((base + i, res.log_append_time, k, v) for i, (k, v) in enumerate(batch))
            before, after = base // self.every, (res.last_offset + 1) // self.every
            if after > before:  # a snapshot point inside: its writer publishes
                _publish(self.cluster, cp, w, now)
                self.points[cp].append(w.applied_through)
                self.snapshots += 1
            self.written[cp] += len(batch)
            self.total += len(batch)

    def _append(self, cp: int, batch: list[tuple[bytes, bytes]], now: int):
        """One batch (as ``produce`` writes), or one batch per record (as Marshalers do)."""
        records = [NewRecord(value=v, key=k, timestamp=now) for k, v in batch]
        if not self.one_record_batches:
            return self.cluster.produce(COORDINATION_TOPIC, cp, records)
        log_ = self.cluster.data_dir.partition(COORDINATION_TOPIC, cp)
        first = None
        for r in records:  # one append a batch, as each produce of a Marshaler is
            info = log_.append(encode_batch([r], timestamp_type=TimestampType.LOG_APPEND_TIME))
            first = first or info
        assert first is not None
        return attrs.evolve(first, last_offset=info.last_offset)

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


def _publish(cluster, cp: int, world: WorldState, now: int) -> None:
    """A member's snapshot at a snapshot point: published, then the snapshot topic truncated
    as a member does (``__marshal`` is kept whole here, so that the full replay can be
    measured too)."""
    coordlog.publish_snapshot(cluster, cp, world, timestamp_ms=now)
    _, snaps_before = coordlog.truncation_bounds(cp, coordlog.read_snapshots(cluster, cp))
    if snaps_before:
        cluster.delete_records(SNAPSHOT_TOPIC, {cp: snaps_before})


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


def _cold_start(
    cluster,
    restore: bool,
    timeout: float = 3600.0,
    check: bool = True,
    expect: list[bytes] | None = None,
) -> float:
    """Wall seconds from a new member's construction until it caught up; its process CPU
    seconds go to ``last_cpu`` (on the embedded cluster all of the work is in this process).
    ``expect``: the worlds (bytes) the member must hold once caught up."""
    c0 = time.process_time()
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
    )
    try:
        if not m.wait_caught_up(timeout):
            ends = [cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in range(N_COORD)]
            raise RuntimeError(
                f"the new member did not catch up in {timeout} s: replayed to "
                f"{m.replay_offsets()}, log ends {ends}"
            )
        took = time.perf_counter() - t0
        last_cpu[0] = time.process_time() - c0
        if check:  # every partition of the group known, with its holder
            assert len(m.partitions()) == len(cluster_partitions_cache), "member disagrees"
        if expect is not None:
            with m.replay_paused():
                got = [w.to_bytes() for w in m.worlds()]
            if got != expect:
                bad = [cp for cp, (a, b) in enumerate(zip(got, expect, strict=True)) if a != b]
                raise AssertionError(
                    f"a new member (restore_snapshots={restore}) holds other worlds than the "
                    f"full replay's on coordination partitions {bad}"
                )
    finally:
        m.close()
    return took


cluster_partitions_cache: list[int] = []
last_cpu = [0.0]


def _apply_many_rate(cluster: EmbeddedCluster, limit: int) -> float:
    """Records/s of ``apply_many`` alone over up to ``limit`` records already in memory.

    The tuples are what the catch-up path hands ``apply_many``: read with the same decoder,
    so the same objects (a repeated key is one bytes object in both)."""
    cols = []
    per = limit // N_COORD
    for cp in range(N_COORD):
        got: list = []
        for chunk in coordlog.iter_columns(cluster, cp, 0, per):
            got.extend(zip(*chunk, strict=True))
        cols.append(got)
    n = sum(len(c) for c in cols)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for records in cols:
        WorldState().apply_many(records)
    took = time.perf_counter() - t0
    last_cpu[0] = time.process_time() - c0
    return n / took


def _median(runs: list[float]) -> float:
    return statistics.median(runs)


def _catch_up(cluster, python_decoder: bool = False) -> float:
    """Seconds of a new member's full replay (no snapshots)."""
    saved = storage._records._fast
    if python_decoder:
        storage._records._fast = None  # decode_columns falls back to its Python reference
    try:
        return _cold_start(cluster, restore=False)
    finally:
        storage._records._fast = saved


def _network(path: Path, baseline: float, repeat: int) -> None:
    """Serve ``path`` with ``logmarshal broker start`` (its own process) and time the
    catch-up of a Marshaler over the Kafka protocol (NetworkCluster, librdkafka)."""
    from logmarshal import connect
    from logmarshal.localbroker import LocalBroker

    with (
        tempfile.TemporaryDirectory(prefix="bench-coldstart-broker-") as work,
        LocalBroker(work, data_dir=path) as broker,
        connect(bootstrap=broker.bootstrap) as net,
    ):
        stored = sum(
            net.latest_offset(COORDINATION_TOPIC, cp) - net.earliest_offset(COORDINATION_TOPIC, cp)
            for cp in range(N_COORD)
        )
        runs = [_cold_start(net, restore=False, timeout=600) for _ in range(repeat)]
        full = _median(runs)
        snap = _cold_start(net, restore=True, timeout=600)
    print(
        f"network (logmarshal broker start on 127.0.0.1): catch-up over the "
        f"{stored:,} stored records {full:.2f} s, {stored / full:,.0f} records/s against "
        f"apply_many's {baseline:,.0f}: ratio {stored / full / baseline:.2f}; "
        f"from snapshots {snap:.2f} s"
    )


#: records a ``NetworkCluster.produce`` call copies into Kafka (librdkafka batches them)
COPY_CHUNK = 50_000


def _copy_to(src: EmbeddedCluster, dst) -> int:
    """Copy every ``__marshal`` record of ``src`` (key, value, in order) into ``dst``'s
    ``__marshal`` partition by partition, with acks=all; the number copied. ``dst`` stamps
    its own LogAppendTime."""
    copied = 0
    for cp in range(N_COORD):
        end = src.latest_offset(COORDINATION_TOPIC, cp)
        start = dst.latest_offset(COORDINATION_TOPIC, cp)
        if start != 0:
            raise RuntimeError(f"Kafka's {COORDINATION_TOPIC}/{cp} is not empty (ends at {start})")
        pending: list[NewRecord] = []
        for _offsets, stamps, keys, values in coordlog.iter_columns(src, cp, 0, end):
            pending.extend(
                NewRecord(value=v, key=k, timestamp=t)
                for t, k, v in zip(stamps, keys, values, strict=True)
            )
            while len(pending) >= COPY_CHUNK:
                dst.produce(COORDINATION_TOPIC, cp, pending[:COPY_CHUNK], durable=True)
                del pending[:COPY_CHUNK]
        if pending:
            dst.produce(COORDINATION_TOPIC, cp, pending, durable=True)
        got = dst.latest_offset(COORDINATION_TOPIC, cp)
        if got != end:
            raise RuntimeError(f"copied {COORDINATION_TOPIC}/{cp} ends at {got}, not {end}")
        copied += end
    return copied


def _replay_and_publish(cluster, points: list[list[int]]) -> tuple[list[bytes], int]:
    """Replay ``cluster``'s whole ``__marshal`` once, a WorldState per coordination
    partition, and publish a snapshot (as the History's publisher does) each time the replay
    reaches one of ``points[cp]``; the worlds at the end (bytes) and the snapshots published."""
    worlds: list[bytes] = []
    published = 0
    for cp in range(N_COORD):
        end = cluster.latest_offset(COORDINATION_TOPIC, cp)
        w = WorldState()
        todo = sorted(p for p in points[cp] if p < end)
        i = 0
        for cols in coordlog.iter_columns(cluster, cp, 0, end):
            offsets, stamps = cols[0], cols[1]
            records = list(zip(*cols, strict=True))
            lo = 0
            while i < len(todo) and todo[i] <= offsets[-1]:
                hi = bisect.bisect_right(offsets, todo[i])
                w.apply_many(records[lo:hi])
                assert w.applied_through == todo[i], (cp, w.applied_through, todo[i])
                _publish(cluster, cp, w, stamps[hi - 1])
                published += 1
                lo, i = hi, i + 1
            w.apply_many(records[lo:])
        if i != len(todo):
            raise RuntimeError(f"{COORDINATION_TOPIC}/{cp}: snapshot points {todo[i:]} not reached")
        worlds.append(w.to_bytes())
    return worlds, published


def _kafka(
    src: EmbeddedCluster,
    history: History,
    work: Path,
    baseline_records: int,
    repeat: int,
    embedded: tuple[float, float, float],
) -> None:
    """The whole history on a single-node Apache Kafka: copied, replayed once with snapshots
    published, then the two cold starts and ``apply_many`` timed there (module docstring)."""
    from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster
    from logmarshal.network import NetworkCluster

    with (
        KafkaCluster(work / "kafka", heap="1g") as kafka,
        NetworkCluster(kafka.bootstrap, timeout=120.0) as net,
    ):
        coordlog.ensure_coordination_topic(net, N_COORD)
        coordlog.ensure_snapshot_topic(net, N_COORD)
        t0 = time.perf_counter()
        copied = _copy_to(src, net)
        copy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        reference, published = _replay_and_publish(net, history.points)
        replay_s = time.perf_counter() - t0
        limit = min(baseline_records, copied)
        rates, fulls, snaps = [], [], []
        for _ in range(repeat):  # alternating, so all three see the same load
            rates.append(_apply_many_rate(net, limit))
            fulls.append(_cold_start(net, restore=False, timeout=600, expect=reference))
            snaps.append(_cold_start(net, restore=True, timeout=600, expect=reference))
    baseline, full, snap = _median(rates), _median(fulls), _median(snaps)
    e_base, e_full, e_snap = embedded
    print(
        f"Apache Kafka {KAFKA_VERSION} (one KRaft node, heap 1g, 127.0.0.1): copied "
        f"{copied:,} records in {copy_s:.1f} s, replayed them once and published "
        f"{published} snapshots in {replay_s:.1f} s; apply_many over Kafka's records "
        f"{baseline:,.0f}/s; catch-up {full:.2f} s, {copied / full:,.0f} records/s, ratio "
        f"{copied / full / baseline:.2f}; snapshot+tail {snap:.2f} s; both worlds equal the "
        f"full replay's. Embedded, same run: apply_many {e_base:,.0f}/s, catch-up "
        f"{e_full:.2f} s ({copied / e_full:,.0f} records/s, ratio "
        f"{copied / e_full / e_base:.2f}), snapshot+tail {e_snap:.2f} s",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes", help="history lengths (default 1000000,10000000,30000000; 1000000 with --kafka)"
    )
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--snapshot-records", type=int, default=DEFAULT_SNAPSHOT_RECORDS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    ap.add_argument("--network", action="store_true", help="also cold-start over the network")
    ap.add_argument(
        "--kafka",
        action="store_true",
        help="also cold-start on a single-node Apache Kafka (logmarshal.localkafka)",
    )
    ap.add_argument("--baseline-records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per rate (median)")
    ap.add_argument(
        "--one-record-batches", action="store_true", help="store each record as its own batch"
    )
    ap.add_argument(
        "--python-decoder-too",
        action="store_true",
        help="also time the catch-up with the Python batch decoder (the fallback)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.sizes is None:
        args.sizes = "1000000" if args.kafka else "1000000,10000000,30000000"
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-coldstart-"))
    work.mkdir(parents=True, exist_ok=True)
    clock = [0]
    cluster_partitions_cache[:] = range(args.partitions)
    print(
        f"python {sys.version.split()[0]}; one group of {args.partitions:,} partitions, "
        f"{N_COORD} coordination partitions, a snapshot every {args.snapshot_records:,} "
        f"records of a coordination partition; "
        f"{'one record' if args.one_record_batches else 'one tick of a partition'} a batch; "
        f"C batch decoder {'built' if storage._records.FAST_DECODER else 'NOT built'}; "
        f"median of {args.repeat}"
    )
    print(
        "apply_many/s: the rationalizer alone over decoded (offset, timestamp, key, value) "
        f"tuples in memory (the first {args.baseline_records:,} records); catch-up: a new "
        "member replaying everything (read, batch decode, apply); ratio = catch-up/apply_many "
        "in wall time, cpu ratio: the same in CPU seconds of this process (less sensitive to "
        "other jobs on the machine)"
    )
    try:
        with EmbeddedCluster(
            work / "data", clock=lambda: clock[0], maintenance_interval=0
        ) as cluster:
            history = History(
                cluster,
                clock,
                args.partitions,
                args.snapshot_records,
                args.seed,
                args.one_record_batches,
            )
            python_head = (
                f" {'py catch-up/s':>14} {'py ratio':>8}" if args.python_decoder_too else ""
            )
            print(
                f"{'records':>11} {'gen s':>7} {'apply_many/s':>13} {'catch-up':>10} "
                f"{'catch-up/s':>11} {'ratio':>6} {'cpu ratio':>9}{python_head} {'snapshot+tail':>14} "
                f"{'__marshal MB':>13} {'kept MB':>8} {'snapshots MB':>13}"
            )
            baseline = full = snap = 0.0
            for size in sizes:
                t0 = time.perf_counter()
                history.grow(size)
                gen = time.perf_counter() - t0
                limit = min(args.baseline_records, size)
                # baseline and catch-up alternate, so both see the same load on this machine
                rates, fulls, slows, cpu_ratios = [], [], [], []
                for _ in range(args.repeat):
                    rates.append(_apply_many_rate(cluster, limit))
                    base_cpu_rate = limit / last_cpu[0]
                    fulls.append(_catch_up(cluster))
                    cpu_ratios.append(history.total / last_cpu[0] / base_cpu_rate)
                    if args.python_decoder_too:
                        slows.append(_catch_up(cluster, python_decoder=True))
                baseline, full = _median(rates), _median(fulls)
                rate = history.total / full
                python_cols = ""
                if args.python_decoder_too:
                    slow = history.total / _median(slows)
                    python_cols = f" {slow:>14,.0f} {slow / baseline:>8.2f}"
                snap = _cold_start(cluster, restore=True)
                total, keep, snaps = _kept_bytes(cluster)
                print(
                    f"{history.total:>11,} {gen:>7.1f} {baseline:>13,.0f} {full:>8.2f} s "
                    f"{rate:>11,.0f} {rate / baseline:>6.2f} {_median(cpu_ratios):>9.2f}"
                    f"{python_cols} {snap:>12.2f} s "
                    f"{total / 1e6:>13.1f} {keep / 1e6:>8.1f} {snaps / 1e6:>13.1f}",
                    flush=True,
                )
            if args.kafka:  # the whole history, copied into Apache Kafka
                _kafka(cluster, history, work, args.baseline_records, args.repeat,
                       (baseline, full, snap))  # fmt: skip
        if args.network:  # the whole history, served by a broker process
            _network(work / "data", baseline, args.repeat)
        with EmbeddedCluster(
            work / "data", clock=lambda: clock[0], maintenance_interval=0
        ) as cluster:
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
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
