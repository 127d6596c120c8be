"""Audit benchmark (figures, not pass/fail): export, Spark on local[2], in-process replay.

Synthesizes a valid coordination log of ``--records`` records into an embedded cluster's
``__marshal`` (LogAppendTime, log clock injected): a fleet of groups heartbeating thousands
of partitions, with lost races, AMO ClaimingMessages, clean releases and re-claims, holders
that go silent and are taken over when stale, restarts that fence the old instance (which
then writes once more), rare group resets and some junk. Every message is encoded with the
rationalizer's codec; the rationalizer alone decides each verdict.

Then it times: the export to Parquet, the Spark audit (local[2]; session start reported
apart), the in-process audit (same fold, one process) and, as its reference, the
rationalizer's replay alone over the same records (WorldState.apply_many over the exported
columns held in memory as Python lists, one coordination partition at a time), and
optionally the naive reference replay of ``--verify``. ``--profile`` runs the in-process
audit once more under cProfile and prints where its time goes.

Then, unless ``--skip-cluster``, it starts a Spark standalone cluster (master + worker on
127.0.0.1, from pyspark's scripts) and times ``spark-submit logmarshal/audit/job.py`` on it,
the path a user takes on a real cluster. A sampler reads every Spark-related process's
resident memory (driver JVM, executor JVM, Python workers, this driver) each 0.2 s and prints
each role's peak per phase.

    python bench/audit.py [--records 1000000,10000000] [--keep DIR [--reuse]] [--skip-spark]
                          [--skip-cluster] [--verify] [--profile] [--repeat N]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination, iter_export
from logmarshal.audit.replay import new_world
from logmarshal.marshaler import COORDINATION_TOPIC, coordination_topic_config
from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    ReleaseGroup,
    ReleasingPartition,
    coordination_partition,
    encode,
)

log = logging.getLogger("bench.audit")


def _role(cmdline: bytes, me: int, pid: int) -> str | None:
    """Which part of a Spark run a process is, from its command line."""
    if pid == me:
        return "this process"
    if b"CoarseGrainedExecutorBackend" in cmdline:
        return "executor JVM"
    if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
        return "python workers"
    if b"SparkSubmit" in cmdline or (b"java" in cmdline and b"pyspark-shell" in cmdline):
        return "driver JVM"
    if b"job.py" in cmdline and b"python" in cmdline:
        return "python driver"
    return None


class MemorySampler:
    """Peak resident memory (MiB) per role, summed over that role's processes, per phase,
    and the CPU seconds each role used in the phase. Only this process and its descendants
    count: the machine is shared, and other people's Spark processes look like ours."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self._start: dict[int, float] = {}  # pid -> CPU seconds when the phase began
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds last seen)
        self._first = True
        self._tick = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        me = os.getpid()
        parent: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            parent[int(name)] = int(fields[1])
            cpu[int(name)] = (int(fields[11]) + int(fields[12])) / self._tick
        now: dict[str, float] = {}
        for pid in parent:
            ancestor = pid
            while ancestor not in (me, 0, 1) and ancestor in parent:
                ancestor = parent[ancestor]
            if ancestor != me:
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            role = _role(cmdline, me, pid)
            if role is None:
                continue
            if self._first:
                self._start[pid] = cpu[pid]
            self._cpu[pid] = (role, cpu[pid])
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    now[role] = now.get(role, 0.0) + int(line.split()[1]) / 1024
        self._first = False
        for role, mib in now.items():
            self.peaks[role] = max(self.peaks.get(role, 0.0), mib)

    def __enter__(self) -> MemorySampler:
        def run() -> None:
            while not self._stop.wait(self.interval):
                self._sample()

        self._sample()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per role in the phase (a process that ended between two samples
        counts up to its last sample: a lower bound)."""
        out: dict[str, float] = {}
        for pid, (role, seconds) in self._cpu.items():
            out[role] = out.get(role, 0.0) + seconds - self._start.get(pid, 0.0)
        return out

    def line(self) -> str:
        order = ("this process", "python driver", "driver JVM", "executor JVM", "python workers")
        cpu = self.cpu_seconds()
        return ", ".join(f"{r} {self.peaks[r]:,.0f}" for r in order if r in self.peaks) + (
            "; CPU s: "
            + ", ".join(f"{r} {cpu[r]:.1f}" for r in order if r in cpu)
            + f" (total {sum(cpu.values()):.1f})"
        )


HB_MS = 3000
N_COORD = 8
GROUPS = ("billing", "search", "audit", "email")
TOPICS = ("orders", "payments", "clicks")
CLIENTS = 16
TICK_MS = 100


class Encoder:
    """``encode`` with a cache: positions advance slowly, so most records repeat exactly."""

    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[bytes, bytes]] = {}

    def __call__(self, kind: type, client: str, inst: str, g: str, t: str, p: int, n: int = 0):
        """Encode one record; ``n`` is the position (a ClaimingPartition's: its version)."""
        k = (kind, client, inst, g, t, p, n)
        hit = self._cache.get(k)
        if hit is None:
            ids = {"client_id": client, "instance_id": inst, "group_id": g}
            if kind is ClaimingPartition:
                msg = kind(**ids, topic=t, partition=p, heartbeat_interval_ms=HB_MS, version=n)
            elif kind is Heartbeat:
                msg = kind(**ids, topic=t, partition=p, last_offset=n, heartbeat_interval_ms=HB_MS)
            elif kind is ReleasingPartition:
                msg = kind(**ids, topic=t, partition=p, last_offset=n)
            else:
                msg = kind(**ids, topic=t, partition=p, proposed_last_offset=n)
            if len(self._cache) > 1_000_000:
                self._cache.clear()
            hit = self._cache[k] = encode(msg)
        return hit


class _Log:
    """One tick's batches per coordination partition, and the offset each record will get
    (the synthesized topic starts empty, so a record's offset is known when it is put)."""

    def __init__(self, mix: dict[str, int]) -> None:
        self.base = [0] * N_COORD
        self.batches: list[list[NewRecord]] = [[] for _ in range(N_COORD)]
        self.mix = mix
        self.now = 0

    def put(self, cp: int, key: bytes, value: bytes, kind: str) -> int:
        batch = self.batches[cp]
        batch.append(NewRecord(value=value, key=key, timestamp=self.now))
        self.mix[kind] = self.mix.get(kind, 0) + 1
        return self.base[cp] + len(batch) - 1

    def produce(self, cluster: EmbeddedCluster) -> int:
        written = 0
        for cp, batch in enumerate(self.batches):
            if batch:
                cluster.produce(COORDINATION_TOPIC, cp, batch)
                self.base[cp] += len(batch)
                written += len(batch)
                self.batches[cp] = []
        return written


Holder = tuple[str, str]


class _PartitionWriter:
    """What members capped at 6 and below write: version 1 claims, releases and one
    Heartbeat per held partition (a restart takeover is the new instance's Heartbeat)."""

    def __init__(self, log: _Log, enc: Encoder) -> None:
        self.log, self.enc = log, enc

    def claim(self, cp: int, h: Holder, g: str, t: str, p: int, kind: str, wins: bool) -> None:
        self.log.put(cp, *self.enc(ClaimingPartition, *h, g, t, p, 1), kind)

    def beat(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int, kind: str) -> None:
        self.log.put(cp, *self.enc(Heartbeat, *h, g, t, p, pos), kind)

    confirm = beat

    def takeover(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int) -> Any:
        self.log.put(cp, *self.enc(Heartbeat, *h, g, t, p, pos), "restart")
        return None

    def zombie(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int, tenure: Any) -> None:
        self.log.put(cp, *self.enc(Heartbeat, *h, g, t, p, pos), "zombie")

    def release(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int) -> None:
        self.log.put(cp, *self.enc(ReleasingPartition, *h, g, t, p, pos), "release")

    def drop(self, gtp: tuple) -> None:
        """The synthesized holder stopped writing for ``gtp`` (it died, or a reset)."""

    def end_pass(self, holder: dict, position: dict) -> None:
        """A heartbeat pass ends (every HB/3): nothing is queued here."""


class _MemberWriter(_PartitionWriter):
    """What members of cap 7 write (PROTOCOL.md, "Version 7"): version 6 claims whose offset
    names the tenure, releases naming it, and per heartbeat pass one MemberHeartbeat per
    member and coordination partition with an entry per held partition there. The AMO
    confirmation, a restart takeover and a fenced instance's last word are one-entry
    MemberHeartbeats written at once. An entry of a newer instance of the holder's client is
    the restart takeover of the tenure it names, so the tenure then takes that record's
    offset."""

    def __init__(self, log: _Log, enc: Encoder) -> None:
        super().__init__(log, enc)
        self.tenure: dict[tuple, int] = {}
        self.in_log: dict[tuple, Holder] = {}  # the holder the log has for each partition
        self.pending: dict[tuple, tuple[int, Holder]] = {}

    def _member_beat(self, cp: int, h: Holder, g: str, entries: list, kind: str) -> int:
        entries.sort(key=lambda e: (e[0].encode(), e[1]))
        msg = MemberHeartbeat(
            client_id=h[0],
            instance_id=h[1],
            group_id=g,
            heartbeat_interval_ms=HB_MS,
            entries=tuple(entries),
        )
        offset = self.log.put(cp, *encode(msg), kind)
        for t, p, _tenure, _pos in entries:
            gtp = (g, t, p)
            if self.in_log.get(gtp) != h:  # a restart takeover: the record names the tenure
                self.in_log[gtp] = h
                self.tenure[gtp] = offset
        return offset

    def claim(self, cp: int, h: Holder, g: str, t: str, p: int, kind: str, wins: bool) -> None:
        offset = self.log.put(cp, *self.enc(ClaimingPartition, *h, g, t, p, 6), kind)
        if wins:
            self.tenure[(g, t, p)], self.in_log[(g, t, p)] = offset, h

    def beat(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int, kind: str) -> None:
        self.pending[(g, t, p)] = (cp, h)

    def confirm(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int, kind: str) -> None:
        self._member_beat(cp, h, g, [(t, p, self.tenure[(g, t, p)], pos)], kind)

    def takeover(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int) -> Any:
        old = self.tenure[(g, t, p)]
        self.pending.pop((g, t, p), None)
        self._member_beat(cp, h, g, [(t, p, old, pos)], "restart")
        return old

    def zombie(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int, tenure: Any) -> None:
        entry = (t, p, tenure, pos)
        msg = MemberHeartbeat(
            client_id=h[0],
            instance_id=h[1],
            group_id=g,
            heartbeat_interval_ms=HB_MS,
            entries=(entry,),
        )
        self.log.put(cp, *encode(msg), "zombie")

    def release(self, cp: int, h: Holder, g: str, t: str, p: int, pos: int) -> None:
        gtp = (g, t, p)
        self.pending.pop(gtp, None)
        msg = ReleasingPartition(
            client_id=h[0],
            instance_id=h[1],
            group_id=g,
            topic=t,
            partition=p,
            last_offset=pos,
            tenure=self.tenure[gtp],
        )
        self.log.put(cp, *encode(msg), "release")

    def drop(self, gtp: tuple) -> None:
        self.pending.pop(gtp, None)

    def end_pass(self, holder: dict, position: dict) -> None:
        records: dict[tuple[int, Holder, str], list] = {}
        for gtp, (cp, _h) in self.pending.items():
            g, t, p = gtp
            h = holder[gtp]  # a restart since the beat was queued: the new instance writes it
            records.setdefault((cp, h, g), []).append((t, p, self.tenure[gtp], position[gtp]))
        self.pending.clear()
        for (cp, h, g), entries in records.items():
            self._member_beat(cp, h, g, entries, "member_heartbeat")
            self.log.mix["entries"] = self.log.mix.get("entries", 0) + len(entries)


def synthesize(
    cluster: EmbeddedCluster, clock: list[int], records: int, seed: int, *, members: bool = True
) -> dict:
    """Write about ``records`` coordination records; returns the event mix. ``members``:
    what cap 7 writes (MemberHeartbeats, tenures named); else what cap 6 and below write
    (one version 1 Heartbeat per held partition)."""
    rng = random.Random(seed)
    enc = Encoder()
    cluster.create_topic(COORDINATION_TOPIC, N_COORD, coordination_topic_config())
    parts_per_topic = 100
    partitions = [(g, t, p) for g in GROUPS for t in TOPICS for p in range(parts_per_topic)]
    for t in TOPICS:
        cluster.create_topic(t, parts_per_topic)
    coord = {(t, p): coordination_partition(t, p, N_COORD) for _g, t, p in partitions}
    instance = {(g, c): f"{rng.getrandbits(48):012x}" for g in GROUPS for c in range(CLIENTS)}
    holder: dict[tuple, Holder | None] = dict.fromkeys(partitions)
    position = dict.fromkeys(partitions, 0)
    silent_until = dict.fromkeys(partitions, 0)
    zombies: list[tuple] = []
    mix: dict[str, int] = {}
    log = _Log(mix)
    out = (_MemberWriter if members else _PartitionWriter)(log, enc)
    total = 0
    now = 1_700_000_000_000
    per_tick = max(1, len(partitions) * TICK_MS // (HB_MS // 3))  # each beats ~every HB/3
    ticks_per_pass = max(1, HB_MS // 3 // TICK_MS)
    cursor = tick = 0
    while total < records:
        now += TICK_MS
        tick += 1
        log.now = now
        for _ in range(per_tick):
            gtp = partitions[cursor % len(partitions)]
            cursor += 1
            g, t, p = gtp
            cp = coord[(t, p)]
            if now < silent_until[gtp]:
                continue
            h = holder[gtp]
            if h is None:
                c = rng.randrange(CLIENTS)
                h = holder[gtp] = (f"{g}-c{c}", instance[(g, c)])
                out.claim(cp, h, g, t, p, "claim", wins=True)
                continue
            r = rng.random()
            if rng.random() < 0.1:  # most beats of a quiet partition repeat its position
                position[gtp] += rng.randrange(1, 50)
            pos = position[gtp]
            if r < 0.002:  # the holder dies: silence, then a stale takeover
                silent_until[gtp] = now + int(2.3 * HB_MS)
                holder[gtp] = None
                out.drop(gtp)
            elif r < 0.004:  # clean release; re-claimed on the next turn
                out.release(cp, h, g, t, p, pos)
                holder[gtp] = None
            elif r < 0.0045:  # restart: a new instance takes its fresh claims back
                c = int(h[0].rsplit("-c", 1)[1])
                new = f"{rng.getrandbits(48):012x}"
                instance[(g, c)] = new
                for other in partitions:
                    if holder[other] == h:
                        holder[other] = (h[0], new)
                tenure = out.takeover(cp, (h[0], new), g, t, p, pos)
                zombies.append((cp, h, g, t, p, pos, tenure))
            elif r < 0.05:  # a lost race, then the holder's heartbeat
                c = rng.randrange(CLIENTS)
                out.claim(cp, (f"{g}-c{c}", instance[(g, c)]), g, t, p, "race", wins=False)
                out.beat(cp, h, g, t, p, pos, "heartbeat")
            elif r < 0.07:  # AMO: the reservation, and its confirmation right behind it
                position[gtp] += 10
                log.put(cp, *enc(ClaimingMessages, *h, g, t, p, pos + 10), "claim_messages")
                out.confirm(cp, h, g, t, p, pos + 10, "heartbeat")
            elif r < 0.0702:  # junk, half of it version-shaped: byte 0 of a version to
                # come then (6..15) but no envelope, skipped and counted (PROTOCOL.md
                # "Version 6")
                junk = bytes(rng.getrandbits(8) for _ in range(12))
                if rng.random() < 0.5:
                    junk = bytes((rng.randrange(6, 16),)) + junk[1:]
                log.put(cp, b"junk", junk, "junk")
            elif r < 0.07021:  # an admin resets a group (written to every partition)
                key, value = encode(
                    ReleaseGroup(
                        client_id="admin", instance_id="a1", group_id=g, msg_expire_time=now + 2000
                    )
                )
                for c2 in range(N_COORD):
                    log.put(c2, key, value, "release_group")
                for other in partitions:  # re-claimed once the voided leases ran out
                    if other[0] == g:  # (version 5 keeps them, PROTOCOL.md rule 2)
                        holder[other] = None
                        silent_until[other] = now + 2 * HB_MS + 500
                        out.drop(other)
            else:
                out.beat(cp, h, g, t, p, pos, "heartbeat")
        while zombies and rng.random() < 0.5:  # fenced instances write once more
            out.zombie(*zombies.pop())
        if tick % ticks_per_pass == 0:
            out.end_pass(holder, position)
        clock[0] = now
        total += log.produce(cluster)
    return {"partitions": len(partitions), "mix": mix, "records": total}


def _same(a_dir: Path, b_dir: Path) -> bool:
    a, b = load_tables(a_dir), load_tables(b_dir)
    return all(
        sorted(map(repr, a[k].to_pylist())) == sorted(map(repr, b[k].to_pylist())) for k in a
    )


def _fold_only(spark: Any, info: Any, config: Any, *, shuffle: bool) -> float:
    """Seconds to read the export and fold it on Spark (no table writes): this layout's
    one task per file against the previous repartition-and-sort, in the same session."""
    import functools

    from pyspark.sql import types
    from pyspark.sql.types import StructType

    from logmarshal.audit.job import _executor_fold, _union_struct, whole_file_splits

    t0 = time.perf_counter()
    with whole_file_splits(spark):
        records = spark.read.parquet(info.coordination_path)
        if shuffle:
            records = records.repartition(len(info.partitions), "coord_partition")
            records = records.sortWithinPartitions("coord_partition", "offset")
        struct: StructType = _union_struct(types)
        records.mapInArrow(functools.partial(_executor_fold, config=config), struct).count()
    return time.perf_counter() - t0


def _with_this_checkout(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this checkout first on PYTHONPATH: spark-submit's driver runs job.py from
    its own directory, so it would import an installed logmarshal (another checkout's) and
    ship that to the executors; the bench measures this one."""
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _world_only(info: Any, config: Any, *, shared_keys: bool = False) -> tuple[float, float]:
    """Seconds ``WorldState.apply_many`` takes over the export's records, one coordination
    partition at a time (its columns converted to Python lists first, not timed). With
    ``shared_keys`` equal keys are one object, as the audit's fold passes them (their hash
    is computed once): the rationalizer's own best rate on these records. Returns wall and
    CPU seconds."""
    names = ("offset", "timestamp_ms", "key", "value")
    total = [0.0, 0.0]
    current: int | None = None
    recs: list = []
    distinct: dict = {}

    def apply() -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        new_world(config).apply_many(recs)
        total[0] += time.perf_counter() - t0
        total[1] += time.process_time() - c0

    for cp, batch in iter_export(info):
        if cp != current and recs:
            apply()
            recs = []
        current = cp
        columns = [batch.column(c).to_pylist() for c in names]
        if shared_keys:
            columns[2] = [distinct.setdefault(k, k) for k in columns[2]]
        recs.extend(zip(*columns, strict=True))
    if recs:
        apply()
    return total[0], total[1]


def _profile(info: Any, config: Any, out: Path, top: int = 18) -> None:
    """The in-process audit under cProfile: where its time goes, by own and by total time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    run_inprocess(info, out, config)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def bench_one(records: int, args: argparse.Namespace, work: Path) -> None:
    """Synthesize ``records`` coordination records and time every audit path over them."""
    from logmarshal.audit.export import read_export_info

    if args.reuse and (work / "export" / "export.json").exists():
        info = read_export_info(work / "export")
        print(f"\n== {info.records:,} coordination records, reused from {work / 'export'}")
        _bench_export(info, info.records, records, args, work)
        return
    for old in ("data", "export"):
        shutil.rmtree(work / old, ignore_errors=True)
    clock = [0]
    t0 = time.perf_counter()
    with EmbeddedCluster(work / "data", clock=lambda: clock[0], maintenance_interval=0) as cluster:
        made = synthesize(cluster, clock, records, args.seed, members=args.heartbeats == "member")
        n = made["records"]
        print(
            f"\n== {n:,} coordination records ({made['partitions']:,} partitions, {N_COORD} "
            f"coordination partitions, {args.heartbeats} heartbeats), synthesized in "
            f"{time.perf_counter() - t0:.1f}s; "
            f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
        )
        mix = made["mix"]
        print(
            "  mix: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1]))
        )
        t0 = time.perf_counter()
        info = export_coordination(cluster, work / "export")
        t_export = time.perf_counter() - t0
    print(f"export to Parquet       : {t_export:7.2f}s  {n / t_export:>12,.0f} records/s")
    _bench_export(info, n, records, args, work)


def _bench_export(info: Any, n: int, records: int, args: argparse.Namespace, work: Path) -> None:
    """Time every audit path over an export of ``n`` records."""
    config = replay_config_for(info)

    runs = max(1, args.repeat)
    with MemorySampler() as mem:
        t_local = c_local = float("inf")
        for _ in range(runs):
            t0, c0 = time.perf_counter(), time.process_time()
            local = run_inprocess(info, work / "out-local", config)
            t_local = min(t_local, time.perf_counter() - t0)
            c_local = min(c_local, time.process_time() - c0)
    best = f" (best of {runs})" if runs > 1 else ""
    print(
        f"in-process audit        : {t_local:7.2f}s  {n / t_local:>12,.0f} records/s"
        f"  (CPU {c_local:.2f}s){best}"
    )
    print(f"  peak MiB: {mem.line()}")
    # the rationalizer alone over the same records, in the same run: the audit's reference
    world = [_world_only(info, config) for _ in range(runs)]
    shared = [_world_only(info, config, shared_keys=True) for _ in range(runs)]
    t_world, c_world = min(w for w, _ in world), min(c for _, c in world)
    t_shared, c_shared = min(w for w, _ in shared), min(c for _, c in shared)
    print(
        f"  WorldState.apply_many  : {t_world:7.2f}s  {n / t_world:>12,.0f} records/s"
        f"  (CPU {c_world:.2f}s; {t_world / n * 1e6:.2f} us/record){best}"
    )
    print(
        f"  ... equal keys shared  : {t_shared:7.2f}s  {n / t_shared:>12,.0f} records/s"
        f"  (CPU {c_shared:.2f}s; {t_shared / n * 1e6:.2f} us/record){best}"
    )
    print(
        f"  in-process rate / apply_many rate: {t_world / t_local:.2f} wall,"
        f" {c_world / c_local:.2f} CPU ({t_shared / t_local:.2f} / {c_shared / c_local:.2f}"
        " against shared keys; goal >= 0.5)"
    )
    if args.profile:
        _profile(info, config, work / "out-profile")

    if not args.skip_spark:
        from logmarshal.audit.job import run_spark, spark_session

        conf = {}
        if args.driver_java_options is not None:
            conf["spark.driver.extraJavaOptions"] = args.driver_java_options
        with MemorySampler() as mem:
            t0 = time.perf_counter()
            spark = spark_session(args.master, conf=conf)
            t_session = time.perf_counter() - t0
            try:
                t0 = time.perf_counter()
                run_spark(spark, info, work / "out-spark", config)
                t_spark = time.perf_counter() - t0
            except BaseException:
                spark.stop()
                raise
        try:
            with MemorySampler() as fold_mem:
                t_fold = _fold_only(spark, info, config, shuffle=False)
            t_shuffled = _fold_only(spark, info, config, shuffle=True)
        finally:
            spark.stop()
        print(f"spark session start     : {t_session:7.2f}s")
        print(f"spark audit ({args.master}) : {t_spark:7.2f}s  {n / t_spark:>12,.0f} records/s")
        print(
            f"  peak MiB: {mem.line()} (session start and audit; local mode: this process is the"
            " driver, executors run inside the driver JVM)"
        )
        print(f"  tables == in-process tables: {_same(work / 'out-local', work / 'out-spark')}")
        print(
            f"  the fold alone, one task per file          : {t_fold:6.2f}s  {n / t_fold:>10,.0f} records/s"
        )
        print(f"    peak MiB: {fold_mem.line()}")
        print(
            f"  the fold alone, repartition + sort (before): {t_shuffled:6.2f}s"
            f"  {n / t_shuffled:>10,.0f} records/s"
        )

    if not args.skip_cluster:
        from logmarshal.audit import job
        from logmarshal.audit.standalone import spark_bin, spark_env, standalone_cluster

        t0 = time.perf_counter()
        with standalone_cluster(work / "standalone", cores=2, memory="2g") as master:
            t_up = time.perf_counter() - t0
            with MemorySampler() as mem:
                t0 = time.perf_counter()
                subprocess.run(
                    [
                        spark_bin("spark-submit"),
                        "--master",
                        master,
                        "--conf",
                        "spark.executor.memory=2g",
                        "--conf",
                        "spark.ui.enabled=false",
                        job.__file__,
                        "--input",
                        info.path,
                        "--out",
                        str(work / "out-cluster"),
                        "--no-report",
                    ],
                    env=_with_this_checkout(spark_env(work / "standalone" / "logs")),
                    check=True,
                    capture_output=True,
                )
                t_submit = time.perf_counter() - t0
        print(f"standalone cluster up   : {t_up:7.2f}s  (master + worker JVMs on 127.0.0.1)")
        print(
            f"spark-submit to cluster : {t_submit:7.2f}s  {n / t_submit:>12,.0f} records/s"
            "  (includes the driver's JVM and session start)"
        )
        print(f"  peak MiB: {mem.line()}")
        print(f"  tables == in-process tables: {_same(work / 'out-local', work / 'out-cluster')}")

    if args.verify:
        from logmarshal.audit.verify import compare, records_from_export, reference_replay

        t0 = time.perf_counter()
        ref = reference_replay(records_from_export(info), config)
        t_ref = time.perf_counter() - t0
        result = compare(load_tables(work / "out-local"), ref)
        print(
            f"naive reference replay  : {t_ref:7.2f}s  {n / t_ref:>12,.0f} records/s"
            f"  (cross-check ok: {result.ok})"
        )
    print(f"tables: {local.rows}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--records",
        default="1000000",
        help="comma-separated sizes, each benchmarked in turn (e.g. 1000000,10000000)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--heartbeats",
        choices=("member", "partition"),
        default="member",
        help="member: what members of cap 7 (the default) write, one MemberHeartbeat per member"
        " and coordination partition per pass, tenures named; partition: what cap 6 and below"
        " write, one version 1 Heartbeat per held partition (the figures before version 7)",
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--skip-cluster", action="store_true", help="no standalone-cluster run")
    ap.add_argument("--verify", action="store_true", help="also time the naive reference replay")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: audit the export already in DIR/<records> instead of a new log",
    )
    ap.add_argument(
        "--driver-java-options",
        default=None,
        help="the local[N] driver JVM's options instead of job.BASE_CONF's (e.g. without "
        "-XX:TieredStopAtLevel=1, which starts faster and runs slower)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the in-process audit and apply_many this many times each; best of each",
    )
    ap.add_argument(
        "--profile", action="store_true", help="also run the in-process audit under cProfile"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(s.replace("_", "")) for s in args.records.split(",") if s.strip()]

    for size in sizes:
        work = Path(args.keep or tempfile.mkdtemp(prefix="bench-audit-")) / str(size)
        if work.exists() and not args.reuse:
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        try:
            bench_one(size, args, work)
        finally:
            if not args.keep:
                shutil.rmtree(work.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
