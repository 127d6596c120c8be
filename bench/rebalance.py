"""Rebalance: time from a join (and from a crash) to balanced, and messages repeated per move.

    python3 bench/rebalance.py [--quick] [--hb 1.0] [--rounds 2] [--members 2,8,32]
                               [--partitions 24,256] [--rate 2] [--timeout S]
                               [--coordination-partitions 8] [--fetch-wait 0.5]
                               [--strategies balanced,none] [--none-not-greedy] [--profile]
    python3 bench/rebalance.py --processes --members 16 --partitions 24   # one process each
    python3 bench/rebalance.py --processes --members 32 --partitions 256 \
        --strategies balanced --protocol-versions 6,7      # each cap in the same run

Rebalancing (docs/rebalancing.md), figures only (timings are never pass/fail). Real Consumers (ALO, the
handler commits each message after handling it) run in threads of this process, each with
its own Marshaler and fault wrapper on one embedded cluster (scenarios.stages.thread_stage
ThreadMember), under a continuous light load of ``--rate`` messages per second into every
partition. For each cell (n members over P partitions) and each strategy, ``"balanced"``
and ``"none"`` (greedy, so that it owns everything at all: one claim per pass would need
P/4 s) side by side in the same run, each on a fresh cluster:

- start n-1 members and wait until they own every partition (and, for "balanced", are
  balanced);
- each round: (a) a new member joins: the time from its construction until the group is
  balanced, i.e. every one of the n members owns floor(P/n) or ceil(P/n) partitions per
  the log (the replay of an observer Marshaler); (b) one member holding partitions is
  crashed (its connection is killed: no more writes, nothing released, mid-batch work is
  never committed): the time until the n-1 survivors own every partition, and until they
  are balanced. Under "none" a join is never balanced: the table says "not balanced in
  T s" and shows the distribution;
- messages repeated per move: offsets handed out a second time (by anyone) after the
  change, divided by the partitions that changed holder. Graceful moves (a join) should
  repeat nothing; a crash repeats what the dead member handled since its last heartbeat
  (up to about ``rate · HB`` per partition).

Also printed: CPU use of the whole process (% of one core) in steady state and over the
cell, and the calls and CPU time of the target computation (MemberCore.target, and the
assignment.target it calls when the key changed). ``--profile`` runs the largest cell of
"balanced" only under cProfile in every thread and prints the top functions.

Goal: balanced within 2·HB + 0.5 s after a join at HB 1 s, 32 members x 256
partitions (Kafka's new protocol is quoted at ~5 s for 10 consumers over 900 partitions).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import logging
import math
import os
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.core import assignment
from logmarshal.core.member import MemberCore
from logmarshal.marshaler import Marshaler
from scenarios.stages.thread_stage import ThreadMember

TOPIC = "bench"
GROUP = "bench"
STRATEGIES = ("balanced", "none")


# -- the target computation, counted ----------------------------------------------------------


class TargetMeter:
    """Counts calls and per-thread CPU time of MemberCore.target and assignment.target."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = Counter()
        self.cpu = Counter()
        self._installed: list[tuple[Any, str, Any]] = []

    def _wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)
        meter = self

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time() - t
                with meter.lock:
                    meter.calls[label] += 1
                    meter.cpu[label] += spent

        setattr(owner, name, wrapped)
        self._installed.append((owner, name, original))

    def install(self) -> None:
        self._wrap(MemberCore, "target", "MemberCore.target")
        self._wrap(assignment, "target", "assignment.target")

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._installed):
            setattr(owner, name, original)
        self._installed.clear()

    def snapshot(self) -> tuple[Counter, Counter]:
        with self.lock:
            return Counter(self.calls), Counter(self.cpu)


METER = TargetMeter()


# -- one cell ---------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Load:
    """One record into every partition each 1/rate s, in a thread, until stopped."""

    def __init__(self, cluster: EmbeddedCluster, partitions: int, rate: float) -> None:
        self._cluster = cluster
        self._partitions = partitions
        self._interval = 1.0 / rate
        self._stop = threading.Event()
        self.produced = 0
        self._thread = threading.Thread(target=self._run, name="bench-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            now_ms = int(time.time() * 1000)
            for p in range(self._partitions):
                self._cluster.produce(TOPIC, p, [NewRecord(value=b"x" * 100, timestamp=now_ms)])
            self.produced += self._partitions
            next_at += self._interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Cell:
    """n members over P partitions with one strategy, on a fresh embedded cluster."""

    def __init__(self, args: argparse.Namespace, members: int, partitions: int, strategy: str):
        self.args = args
        self.n = members
        self.partitions = partitions
        self.strategy = strategy
        self.hb = args.hb
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-rebalance-")
        self.cluster = EmbeddedCluster(self._tmp.name, maintenance_interval=0)
        self.cluster.create_topic(TOPIC, partitions)
        self.observer = Marshaler(
            self.cluster,
            "observer",
            GROUP,
            self.hb,
            fetch_wait=0.1,
            coordination_partitions=args.coordination_partitions,
        )
        self.live: list[ThreadMember] = []
        self.dead: list[ThreadMember] = []
        self._count = 0
        self._seen: set[tuple[int, int]] = set()
        self._cursor: dict[int, int] = {}
        self.rng = random.Random(f"{members}/{partitions}/{strategy}")
        self.load: Load | None = None
        self._closers: list[threading.Thread] = []

    # -- members

    def start(self) -> ThreadMember:
        name = f"m{self._count:02d}"
        self._count += 1
        member = ThreadMember(
            self.cluster,
            name,
            GROUP,
            self.hb,
            topic=TOPIC,
            plan=None,
            seed=1,
            mode="alo",
            rebalance=self.strategy,
            # "none" takes one partition per claim pass (HB/4) unless greedy: a lone member
            # would need P/4 s to own P partitions
            greedy=self.strategy == "none" and self.args.none_greedy,
            fetch_wait=self.args.fetch_wait,
            marshaler_options={"coordination_partitions": self.args.coordination_partitions},
        )
        self.live.append(member)
        return member

    def crash(self, member: ThreadMember) -> None:
        member.kill()
        self.live.remove(member)
        self.dead.append(member)

    def close_later(self, member: ThreadMember) -> None:
        """Stop a killed member's threads (off the clock)."""

        def close() -> None:
            with contextlib.suppress(Exception):
                member.close(release=False)

        t = threading.Thread(target=close, daemon=True)
        t.start()
        self._closers.append(t)

    # -- views

    def holders(self) -> dict[int, tuple[str, str] | None]:
        return {p: self.observer.holder(TOPIC, p) for p in range(self.partitions)}

    def counts(self) -> tuple[dict[str, int], int]:
        """Partitions per live member (by name), and how many no live member holds."""
        names = {m.identity: m.client_id for m in self.live}
        counts = {m.client_id: 0 for m in self.live}
        orphans = 0
        for h in self.holders().values():
            name = names.get(h) if h is not None else None
            if name is None:
                orphans += 1
            else:
                counts[name] += 1
        return counts, orphans

    def owned(self) -> bool:
        return self.counts()[1] == 0

    def balanced(self) -> bool:
        counts, orphans = self.counts()
        n, p = len(self.live), self.partitions
        return orphans == 0 and all(p // n <= c <= -(-p // n) for c in counts.values())

    def distribution(self, joiner: str | None = None) -> str:
        counts, orphans = self.counts()
        tail = f" unowned={orphans}" if orphans else ""
        if len(counts) <= 8:
            return " ".join(f"{k}={v}" for k, v in counts.items()) + tail
        others = [v for k, v in counts.items() if k != joiner]
        head = f"joiner={counts[joiner]} " if joiner in counts else ""
        return f"{head}others {min(others)}..{max(others)}{tail}"

    def wait(self, predicate: Callable[[], bool], timeout: float) -> float | None:
        """Seconds until ``predicate`` holds (polled every 10 ms), None after ``timeout``."""
        start = time.perf_counter()
        while True:
            if predicate():
                return time.perf_counter() - start
            if time.perf_counter() - start > timeout:
                return None
            time.sleep(0.01)

    # -- repeats

    def new_repeats(self) -> int:
        """Offsets handed out since the last call that had been handed out before."""
        repeats = 0
        for member in self.live + self.dead:
            handed = member.handed()
            start = self._cursor.get(id(member), 0)
            for h in handed[start:]:
                key = (h.partition, h.offset)
                if key in self._seen:
                    repeats += 1
                else:
                    self._seen.add(key)
            self._cursor[id(member)] = len(handed)
        return repeats

    def close(self) -> None:
        if self.load is not None:
            self.load.stop()
        # every member closes at once (one after the other takes seconds each)
        for member in self.live:
            self._closers.append(threading.Thread(target=member.close, daemon=True))
            self._closers[-1].start()
        for member in self.dead:
            self.close_later(member)
        for t in self._closers:
            t.join(30)
        self.observer.close()
        self.cluster.close()
        self._tmp.cleanup()


def run_cell(args: argparse.Namespace, n: int, partitions: int, strategy: str) -> dict[str, Any]:
    """Every figure of one cell and one strategy."""
    hb, timeout = args.hb, args.timeout
    out: dict[str, Any] = {
        "join": [],
        "join_not": [],
        "crash_owned": [],
        "crash_bal": [],
        "crash_not": [],
        "join_repeats": 0,
        "join_moved": 0,
        "crash_repeats": 0,
        "crash_moved": 0,
        "notes": [],
    }
    wall0, cpu0 = time.perf_counter(), time.process_time()
    calls0, tcpu0 = METER.snapshot()
    cell = Cell(args, n, partitions, strategy)
    try:
        cell.load = Load(cell.cluster, partitions, args.rate)
        for _ in range(n - 1):
            cell.start()
        setup_wait = 30 + 4 * hb + partitions / (n - 1) * hb / 4 * 2
        took = cell.wait(cell.owned, setup_wait)
        if took is None:
            out["notes"].append(
                f"setup: {n - 1} members did not own all in {setup_wait:.0f} s: "
                f"{cell.distribution()}"
            )
            return out
        if strategy == "balanced" and cell.wait(cell.balanced, timeout) is None:
            out["notes"].append(f"setup: {n - 1} members not balanced: {cell.distribution()}")
        out["setup_s"] = time.perf_counter() - wall0
        # steady state: nothing changes for a few heartbeats
        time.sleep(hb)
        w, c = time.perf_counter(), time.process_time()
        time.sleep(args.steady)
        out["steady_cpu"] = (time.process_time() - c) / (time.perf_counter() - w)
        cell.new_repeats()
        for _ in range(args.rounds):
            # (a) a join
            before = cell.holders()
            t0 = time.perf_counter()
            joiner = cell.start()
            took = cell.wait(cell.balanced, timeout)
            if took is None:
                out["join_not"].append(cell.distribution(joiner.client_id))
            else:
                out["join"].append(took)
            after = cell.holders()
            moved = sum(1 for p in after if after[p] != before[p])
            # let the moved partitions' new holders start handing out before the next change
            time.sleep(max(0.0, args.settle - (time.perf_counter() - t0 - (took or timeout))))
            out["join_repeats"] += cell.new_repeats()
            out["join_moved"] += moved
            # (b) a crash of a member that holds partitions
            holders = cell.holders()
            held = Counter(holders.values())
            victims = [m for m in cell.live if held.get(m.identity)]
            victim = cell.rng.choice(victims)
            victim_parts = [p for p, h in holders.items() if h == victim.identity]
            cell.crash(victim)
            t0 = time.perf_counter()
            owned = cell.wait(cell.owned, timeout + 2 * hb)
            bal = cell.wait(cell.balanced, max(0.0, timeout + 2 * hb - (owned or 0)))
            if owned is None:
                out["notes"].append(f"crash: survivors did not own all: {cell.distribution()}")
            else:
                out["crash_owned"].append(owned)
            if bal is None:
                out["crash_not"].append(cell.distribution())
            else:
                out["crash_bal"].append(owned + bal if owned is not None else bal)
            time.sleep(args.settle)
            out["crash_repeats"] += cell.new_repeats()
            after = cell.holders()
            out["crash_moved"] += sum(1 for p in victim_parts if after[p] != victim.identity)
            cell.close_later(victim)
    finally:
        cell.close()
        elapsed = time.perf_counter() - wall0
        out["wall_s"] = elapsed
        out["cpu"] = (time.process_time() - cpu0) / elapsed
        calls, tcpu = METER.snapshot()
        out["target_calls"] = calls["MemberCore.target"] - calls0["MemberCore.target"]
        out["target_cpu"] = tcpu["MemberCore.target"] - tcpu0["MemberCore.target"]
        out["compute_calls"] = calls["assignment.target"] - calls0["assignment.target"]
        out["compute_cpu"] = tcpu["assignment.target"] - tcpu0["assignment.target"]
    return out


# -- printing ---------------------------------------------------------------------------------


def _times(values: list[float], nots: list[str], timeout: float) -> str:
    if not values:
        return f"not balanced in {timeout:g} s" if nots else "-"
    text = f"{statistics.median(values):5.2f} / {_pct(values, 0.99):5.2f}"
    if nots:
        text += f" ({len(nots)} not in {timeout:g} s)"
    return text


def _per_move(repeats: int, moved: int) -> str:
    return f"{repeats / moved:.2f} ({repeats}/{moved})" if moved else f"- ({repeats}/0)"


def print_cell(n: int, partitions: int, figures: dict[str, dict[str, Any]], args) -> None:
    print(f"\n{n} members x {partitions} partitions (rounds: {args.rounds})")
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("join -> balanced p50 / p99 s", lambda f: _times(f["join"], f["join_not"], args.timeout)),
        ("crash -> all owned p50 / p99 s", lambda f: _times(f["crash_owned"], [], args.timeout)),
        (
            "crash -> balanced p50 / p99 s",
            lambda f: _times(f["crash_bal"], f["crash_not"], args.timeout + 2 * args.hb),
        ),
        ("repeated per move, join", lambda f: _per_move(f["join_repeats"], f["join_moved"])),
        ("repeated per move, crash", lambda f: _per_move(f["crash_repeats"], f["crash_moved"])),
        ("setup: n-1 own all s", lambda f: f"{f['setup_s']:.1f}" if "setup_s" in f else "-"),
        (
            "cpu steady / whole cell %",
            lambda f: f"{100 * f.get('steady_cpu', math.nan):.0f} / {100 * f['cpu']:.0f}",
        ),
        (
            "MemberCore.target calls/s, cpu %",
            lambda f: (
                f"{f['target_calls'] / f['wall_s']:,.0f}/s, {100 * f['target_cpu'] / f['wall_s']:.0f}"
            ),
        ),
        (
            "assignment.target calls, cpu %",
            lambda f: f"{f['compute_calls']:,}, {100 * f['compute_cpu'] / f['wall_s']:.1f}",
        ),
    ]
    width = max(len(label) for label, _ in rows) + 2
    col = 34
    print("".ljust(width) + "".join(f"{s:>{col}}" for s in figures))
    for label, cell in rows:
        print(label.ljust(width) + "".join(f"{cell(f):>{col}}" for f in figures.values()))
    for strategy, f in figures.items():
        if f["join_not"]:
            print(
                f"  {strategy}: after a join (not balanced in {args.timeout:g} s): "
                f"{f['join_not'][0]}"
            )
        if f["crash_not"]:
            print(f"  {strategy}: after a crash (not balanced): {f['crash_not'][0]}")
        for note in f["notes"]:
            print(f"  {strategy}: {note}")
        if f.get("steady_cpu", 0.0) > 0.9:
            print(
                f"  {strategy}: CPU-bound already in steady state ({100 * f['steady_cpu']:.0f}%"
                " of a core, i.e. the GIL is saturated): replays and announcements lag, so "
                "these figures measure this machine more than the protocol"
            )


def profile(args: argparse.Namespace, n: int, partitions: int) -> None:
    """Run one "balanced" cell with every thread under cProfile; print the top functions."""
    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        p = cProfile.Profile(time.thread_time)  # CPU, not time spent waiting for the GIL
        profiles.append(p)
        p.enable()
        try:
            original(self)
        finally:
            p.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    try:
        figures = run_cell(args, n, partitions, "balanced")
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    time.sleep(1)
    stream = io.StringIO()
    stats = pstats.Stats(stream=stream)
    for p in profiles:
        with contextlib.suppress(TypeError):
            stats.add(p)
    print(
        f"\ncProfile (thread CPU time) of every thread, {n} members x {partitions} partitions, balanced "
        f"({figures['wall_s']:.0f} s wall, cpu {100 * figures['cpu']:.0f}% under the profiler)"
    )
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(r"assignment|member\.py.*(target|_rebalance|_act)")
    print(stream.getvalue())


def run_processes(
    args: argparse.Namespace,
    n: int,
    partitions: int,
    strategy: str,
    cap: int | None = None,
    times: dict[str, list[float]] | None = None,
) -> str:
    """The same join and crash with one process per member over logmarshal's broker on
    127.0.0.1 (``scenarios.process_harness``): no GIL shared by the members. A join is timed
    from the joiner's first announcement in the log (a process's imports and start-up replay
    are not the protocol's latency) and, in brackets, from its start. ``cap``: every
    member's ``protocol_version`` (None: the newest). ``times`` collects the seconds of each
    "join" and "crash" that balanced."""
    times = {} if times is None else times
    label = strategy if cap is None else f"{strategy} (cap {cap})"
    from scenarios.common import GROUP, OnKafka
    from scenarios.process_harness import procs
    from scenarios.stages.base import members_in_log

    out: list[str] = []
    kafka = OnKafka() if args.kafka else None
    with procs("bench-rebalance", 0, mode="alo", hb=args.hb, partitions=partitions,
               kafka=kafka) as p:  # fmt: skip
        p.connect()
        p.produce(5)
        stream = p.producer(per_partition=10**6, seconds=10**6 / max(args.rate, 0.1))
        opts: dict[str, Any] = {"rebalance": strategy}
        if strategy == "none" and args.none_greedy:
            opts["greedy"] = True
        if args.fetch_linger is not None:
            opts["fetch_linger"] = args.fetch_linger
        if cap is not None:
            opts["protocol_version"] = cap
        members = p.members_together([f"m{i:02d}" for i in range(n - 1)], **opts)

        def fair(group: list[Any]) -> bool:
            ids = {m.identity for m in group}
            counts = Counter(p.holders().values())
            lo, hi = partitions // len(group), -(-partitions // len(group))
            return set(counts) <= ids and all(lo <= counts[i] <= hi for i in ids)

        ok = p.wait_until(lambda: all(h is not None for h in p.holders().values()), 60)
        if ok and strategy != "none":
            ok = p.wait_until(lambda: fair(members), 60)
        if not ok:
            counts = Counter(p.holders().values())
            seen = len(members_in_log(p.observer, GROUP))
            stream.kill()
            return (
                f"{label}: setup did not settle in 60 s: {seen} members in the log, "
                f"holdings {sorted(counts.values())}, unheld {counts.get(None, 0)}, "
                f"load average {os.getloadavg()[0]:.1f}"
            )
        for r in range(args.rounds):
            started = time.monotonic()
            joiner = p.member(f"j{r}", **opts)
            members.append(joiner)
            p.wait_until(lambda j=joiner: j.client_id in members_in_log(p.observer, GROUP), 30)
            announced = time.monotonic()
            balanced = p.wait_until(lambda: fair(members), args.timeout)
            done = time.monotonic()
            if balanced:
                times.setdefault("join", []).append(done - announced)
                out.append(
                    f"{label}: join -> balanced {done - announced:.2f} s "
                    f"(from the process start {done - started:.2f} s)"
                )
            else:
                counts = Counter(p.holders().values())
                out.append(
                    f"{label}: join -> not balanced in {args.timeout:g} s (joiner holds "
                    f"{counts[joiner.identity]})"
                )
            if strategy == "none":
                continue
            victim = max(
                members, key=lambda m: sum(1 for h in p.holders().values() if h == m.identity)
            )
            killed = time.monotonic()
            victim.kill()
            members.remove(victim)
            balanced = p.wait_until(lambda: fair(members), args.timeout + 2 * args.hb)
            took = time.monotonic() - killed
            if balanced:
                times.setdefault("crash", []).append(took)
            out.append(
                f"{label}: crash -> balanced {took:.2f} s"
                if balanced
                else f"{label}: crash -> not balanced in {took:.2f} s"
            )
        stream.kill()
    return "\n".join(out)


def medians(strategy: str, times: dict[int | None, dict[str, list[float]]]) -> str:
    """Per cap: the median seconds (and how many) of the joins and crashes that balanced."""
    lines = []
    for cap, got in times.items():
        cells = []
        for what in ("join", "crash"):
            xs = got.get(what, [])
            cells.append(
                f"{what} -> balanced median {statistics.median(xs):.2f} s "
                f"(n={len(xs)}, {min(xs):.2f}-{max(xs):.2f})"
                if xs
                else f"{what}: none balanced"
            )
        lines.append(f"{strategy} cap {cap}: " + "; ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="one round, shorter waits (sizes as given)"
    )
    parser.add_argument("--hb", type=float, default=1.0, help="heartbeat interval (default 1)")
    parser.add_argument("--members", default="2,8,32", help="member counts after a join")
    parser.add_argument("--partitions", default="24,256", help="partition counts")
    parser.add_argument(
        "--rounds", type=int, default=None, help="joins and crashes per cell (default 2; --quick 1)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=2.0,
        help="messages per second into every partition (default 2)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="how long to wait for balance (default 4·HB + 2 s)",
    )
    parser.add_argument(
        "--fetch-linger",
        type=float,
        help="with --processes: the members' replay linger (Marshaler "
        "fetch_linger; default its own)",
    )
    parser.add_argument(
        "--coordination-partitions",
        type=int,
        default=8,
        help="coordination partitions of every Marshaler (default 8)",
    )
    parser.add_argument(
        "--fetch-wait",
        type=float,
        default=0.5,
        help="the Consumers' fetch_wait: each held partition's fetcher wakes "
        "this often when idle (default 0.5)",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--none-not-greedy",
        dest="none_greedy",
        action="store_false",
        help='"none" claims one partition per pass (default: greedy)',
    )
    parser.add_argument(
        "--processes",
        action="store_true",
        help="one process per member over logmarshal's broker instead of "
        "threads (joins and crashes timed on real processes)",
    )
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="with --processes: over a single-node Apache Kafka "
        "(logmarshal.localkafka, stopped by pid) instead of logmarshal's broker",
    )
    parser.add_argument(
        "--protocol-versions",
        help="with --processes: comma-separated members' caps (protocol_version), each cell "
        "run once per cap in the order given, in the same run (repeat one for ABBA order, "
        "e.g. 6,7,7,6), medians per cap printed (default: the newest)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile the largest cell ('balanced') instead"
    )
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.timeout is None:
        args.timeout = 2 * args.hb + 2 if args.quick else 4 * args.hb + 2
    args.steady = args.hb if args.quick else 3 * args.hb
    args.settle = args.hb + 0.5
    members = [int(x) for x in args.members.split(",")]
    partitions = [int(x) for x in args.partitions.split(",")]
    strategies = args.strategies.split(",")
    logging.basicConfig(level=logging.CRITICAL)  # killed members log their failing calls
    if args.profile:
        profile(args, max(members), max(partitions))
        return 0
    caps: list[int | None] = (
        [int(v) for v in args.protocol_versions.split(",")] if args.protocol_versions else [None]
    )
    if args.protocol_versions and not args.processes:
        parser.error("--protocol-versions needs --processes")
    if args.processes:
        where = "Apache Kafka (one KRaft node)" if args.kafka else "logmarshal's broker"
        print(
            f"rebalance benchmark on processes: HB = {args.hb} s, one process per member, "
            f"{where} on 127.0.0.1, {args.rate:g} msg/s per partition"
        )
        for n in members:
            for p in partitions:
                print(f"\n{n} members x {p} partitions (rounds: {args.rounds})")
                for strategy in strategies:
                    times: dict[int | None, dict[str, list[float]]] = {}
                    for cap in caps:
                        print(run_processes(args, n, p, strategy, cap, times.setdefault(cap, {})))
                        sys.stdout.flush()
                    if len(times) > 1:
                        print(medians(strategy, times))
        return 0
    print(
        f"rebalance benchmark: HB = {args.hb} s, {args.rate:g} msg/s into every partition, "
        f"coordination_partitions = {args.coordination_partitions}, embedded cluster, members "
        'in threads of one process, ALO committing after each message; "none" is '
        f"{'greedy' if args.none_greedy else 'one claim per pass'}; fetch_wait = "
        f"{args.fetch_wait:g} s\n"
        "join -> balanced: from a new member's construction until each of the n members owns "
        "floor(P/n) or ceil(P/n) per the log;\ncrash -> all owned / balanced: from killing a "
        "holder until the n-1 survivors own every partition / are balanced;\n"
        "repeated per move: offsets handed out again after the change / partitions that "
        "changed holder;\ncpu: process CPU in % of one core (2 cores = 200 %); steady: no "
        f"change for {args.steady:g} s. Goal: join -> balanced <= 2·HB + 0.5 = "
        f"{2 * args.hb + 0.5:g} s at 32 x 256. Figures, not pass/fail."
    )
    METER.install()
    started = time.perf_counter()
    try:
        for n in members:
            for p in partitions:
                figures = {s: run_cell(args, n, p, s) for s in strategies}
                print_cell(n, p, figures, args)
                sys.stdout.flush()
    finally:
        METER.uninstall()
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
