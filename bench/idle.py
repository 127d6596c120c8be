"""Idle cost of a member: CPU and threads of a Consumer holding N partitions nothing is
written to.

    python bench/idle.py [--partitions 24,256,1024] [--hb 1.0] [--seconds 10]
                         [--modes embedded,network,raw] [--baseline-ref REF]
                         [--protocol-versions 6,7]

Each figure is one member in a fresh process (so a broker's CPU is never counted): it
claims every partition of an N-partition topic, settles, then its process CPU time is
sampled over ``--seconds`` and its OS thread count read from /proc. ``network`` runs against
``logmarshal broker start`` on 127.0.0.1, started here and stopped at the end.
``--baseline-ref`` runs the same figures with the Consumer of that commit (its tree from
``git archive``, its extensions built: bench/_baseline.py) in the same run.
Mode ``raw`` is no member: a bare confluent-kafka consumer assigned the same idle partitions
with the member's reader settings, polled as that reader polls (librdkafka's own cost, the
floor under the network figures); it needs the broker, as ``network`` does.
``--protocol-versions`` runs each figure once per member's cap (``protocol_version``; cap 7
heartbeats with one MemberHeartbeat per coordination partition, cap 6 one Heartbeat per
partition: PROTOCOL.md, "Version 7"), side by side in the same run.

``--per-thread`` adds, under each figure, its CPU and wake-ups per thread (from /proc; a
thread's name with its numbers folded, librdkafka's by its own names), the records the member
wrote to ``__marshal`` a second, and at the top the CPU one thread wake-up costs on this
machine in this run (a thread woken through a socket by another, 10 ms apart): an idle
member's cost is mostly wake-ups, and their price differs from machine to machine.

Figures, not pass/fail. Goal (docs/architecture.md, "Consumer core: decisions apart from threads":
a member's cost grows with the records it handles, never with the partitions it holds
idle): at most 5% of a core at 256 idle partitions, HB 1 s (aim: 2%), and as many threads
at 1024 partitions as at 24.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _baseline import extract  # (bench/: a script's directory is on its path)

ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("bench.idle")


def _os_threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def _thread_samples() -> dict[int, tuple[str, int, int]]:
    """Per OS thread of this process: (name, CPU ticks, voluntary context switches). A
    Python thread's name is its ``threading`` name; another's (librdkafka's) its own."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[int, tuple[str, int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = f.read()
        except OSError:
            continue  # (ended meanwhile)
        found = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)
        wakes = int(found.group(1)) if found else 0
        # fields[11], fields[12]: utime, stime (stat fields 14, 15, after the name)
        out[int(tid)] = (names.get(int(tid), comm), int(fields[11]) + int(fields[12]), wakes)
    return out


def _per_thread(
    before: dict[int, tuple[str, int, int]], after: dict[int, tuple[str, int, int]], wall: float
) -> list[list]:
    """[group, % of a core, wake-ups a second, threads] per thread name with its numbers
    folded (``rdk:broker1`` and ``rdk:broker2`` are one group), busiest first."""
    tick = os.sysconf("SC_CLK_TCK")
    groups: dict[str, list] = {}
    for tid, (name, cpu, wakes) in after.items():
        _, cpu0, wakes0 = before.get(tid, (name, 0, 0))
        g = groups.setdefault(re.sub(r"\d+", "N", name), [0.0, 0.0, 0])
        g[0] += 100 * (cpu - cpu0) / tick / wall
        g[1] += (wakes - wakes0) / wall
        g[2] += 1
    rows = [[name, round(c, 2), round(w, 1), n] for name, (c, w, n) in groups.items()]
    return sorted(rows, key=lambda r: (-r[1], -r[2], r[0]))


def _marshal_end(cluster) -> int:
    """The sum of ``__marshal``'s partitions' ends (the records written to it so far)."""
    from logmarshal import COORDINATION_TOPIC

    n = cluster.partitions(COORDINATION_TOPIC)
    return sum(cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in range(n))


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def _sample(
    wait_until: Callable[[float], None], seconds: float, per_thread: bool
) -> tuple[dict, float]:
    """The process's CPU (% of a core) over ``seconds`` of ``wait_until(deadline)`` and, with
    ``per_thread``, each thread group's CPU and wake-ups; and the wall time it took."""
    threads0 = _thread_samples() if per_thread else {}
    cpu0, wall0 = time.process_time(), time.monotonic()
    wait_until(wall0 + seconds)
    cpu1, wall1 = time.process_time(), time.monotonic()
    sample: dict = {"cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0)}
    if per_thread:
        sample["per_thread"] = _per_thread(threads0, _thread_samples(), wall1 - wall0)
    return sample, wall1 - wall0


def wake_cost(rounds: int = 200) -> float:
    """Microseconds of this process's CPU per thread wake-up: a thread blocked on a socket
    woken by another every 10 ms (both sides: the sender's sleep and send, the receiver's
    wake-up), the unit an idle member's wake-ups are paid in on this machine."""
    import socket
    import threading

    a, b = socket.socketpair()
    try:
        reader = threading.Thread(target=lambda: [a.recv(1) for _ in range(rounds)])
        reader.start()
        cpu0 = time.process_time()
        for _ in range(rounds):
            time.sleep(0.01)
            b.send(b"x")
        reader.join()
        return 1e6 * (time.process_time() - cpu0) / rounds
    finally:
        a.close()
        b.close()


def worker(
    mode: str,
    partitions: int,
    hb: float,
    seconds: float,
    bootstrap: str | None,
    protocol_version: int | None = None,
    per_thread: bool = False,
) -> dict:
    """One member holding ``partitions`` idle partitions; runs in a fresh process (mode
    ``raw``: :func:`raw_worker` instead)."""
    if mode == "raw":
        assert bootstrap is not None
        return raw_worker(partitions, seconds, bootstrap, per_thread)
    import logmarshal
    from logmarshal.consumer import Consumer
    from logmarshal.marshaler import Marshaler

    data = None
    if mode == "embedded":
        data = tempfile.mkdtemp(prefix="bench-idle-")
        cluster = logmarshal.connect(data_dir=data)
    else:
        cluster = logmarshal.connect(bootstrap=bootstrap)
    topic = f"idle-{partitions}-{os.getpid()}"
    cluster.create_topic(topic, partitions)
    marshaler = Marshaler(cluster, "member", f"idle-{os.getpid()}", hb)
    capped = {} if protocol_version is None else {"protocol_version": protocol_version}
    consumer = Consumer(marshaler, topic, **capped)
    start = time.monotonic()
    while len(consumer.claims()) < partitions:
        if time.monotonic() - start > 300:
            raise SystemExit(f"only {len(consumer.claims())} of {partitions} claimed")
        time.sleep(0.05)
    claimed = time.monotonic() - start
    time.sleep(max(2.0, 2 * hb))  # settle: first heartbeats answered, passes in step
    written0 = _marshal_end(cluster) if per_thread else 0
    sample, wall = _sample(_sleep_until, seconds, per_thread)
    if per_thread:
        sample["marshal_records_s"] = (_marshal_end(cluster) - written0) / wall
    threads = _os_threads()
    held = len(consumer.claims())
    consumer.close()
    marshaler.close()
    cluster.close()
    if data is not None:
        shutil.rmtree(data, ignore_errors=True)
    return {**sample, "threads": threads, "claimed_s": claimed, "held": held}


def raw_worker(partitions: int, seconds: float, bootstrap: str, per_thread: bool = False) -> dict:
    """librdkafka's own idle cost, the floor of a network member's data reads: one
    confluent-kafka consumer with the member's reader settings
    (``network.settings.consumer_settings``), assigned every partition of an idle topic at
    its end, polled as the member's reader polls while nothing comes (``poll`` in slices of
    ``readers._LIBRDKAFKA_SLICE``); no logmarshal code runs while the CPU is sampled."""
    from confluent_kafka import Consumer, TopicPartition

    import logmarshal
    from logmarshal.network import readers
    from logmarshal.network.settings import consumer_settings

    cluster = logmarshal.connect(bootstrap=bootstrap)
    topic = f"idle-raw-{partitions}-{os.getpid()}"
    cluster.create_topic(topic, partitions)
    cluster.close()
    conf = consumer_settings({"bootstrap.servers": bootstrap}, f"raw-{os.getpid()}", committed=True)
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def poll_until(deadline: float) -> None:
        while time.monotonic() < deadline:
            if consumer.poll(readers._LIBRDKAFKA_SLICE) is not None:
                raise SystemExit("a record came to an idle topic")

    poll_until(time.monotonic() + 2.0)  # settle: connected, every partition fetched once
    sample, _ = _sample(poll_until, seconds, per_thread)
    threads = _os_threads()
    consumer.close()
    return {**sample, "threads": threads, "claimed_s": 0.0, "held": partitions}


def _run(
    code: Path,
    mode: str,
    n: int,
    args: argparse.Namespace,
    bootstrap: str | None,
    cap: int | None = None,
) -> dict:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        mode,
        str(n),
        "--hb",
        str(args.hb),
        "--seconds",
        str(args.seconds),
        "--code",
        str(code),
    ]
    if bootstrap:
        argv += ["--bootstrap", bootstrap]
    if cap is not None:
        argv += ["--protocol-versions", str(cap)]
    if args.per_thread:
        argv.append("--per-thread")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _start_broker():  # -> tuple[LocalBroker, str, str]; imported here, see below
    """This tree's broker in a directory of its own: (broker, bootstrap, directory). Its
    module is imported here, not at the top: a worker must import the baseline's logmarshal."""
    sys.path.insert(0, str(ROOT))
    from logmarshal.localbroker import LocalBroker

    data = tempfile.mkdtemp(prefix="bench-idle-broker-")
    broker = LocalBroker(data).start()
    return broker, broker.bootstrap, data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", default="24,256", help="comma-separated (default 24,256)")
    parser.add_argument("--hb", type=float, default=1.0, help="heartbeat interval (default 1 s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU sample (default 10 s)")
    parser.add_argument("--modes", default="embedded,network")
    parser.add_argument("--baseline-ref", help="also measure this commit's Consumer")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--worker-wake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--protocol-versions", help="comma-separated members' caps, each measured (default: newest)"
    )
    parser.add_argument(
        "--per-thread",
        action="store_true",
        help="each figure's CPU and wake-ups per thread, and the price of a wake-up here",
    )
    args = parser.parse_args(argv)
    caps: list[int | None] = (
        [int(v) for v in args.protocol_versions.split(",")] if args.protocol_versions else [None]
    )
    if args.worker:
        sys.path.insert(0, args.code)
        mode, n = args.worker
        result = worker(
            mode, int(n), args.hb, args.seconds, args.bootstrap, caps[0], args.per_thread
        )
        print(json.dumps(result))
        return 0
    if args.worker_wake:
        print(json.dumps({"wake_us": wake_cost()}))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    codes = [("this tree", ROOT)]
    baseline = extract(args.baseline_ref, "idle") if args.baseline_ref else None
    if baseline is not None:
        codes.append((f"@ {args.baseline_ref}", baseline))
    sizes = [int(x) for x in args.partitions.split(",")]
    modes = args.modes.split(",")
    broker = data = bootstrap = None
    rows = []
    try:
        if "network" in modes or "raw" in modes:
            broker, bootstrap, data = _start_broker()
        print(
            f"idle member: HB {args.hb} s, CPU over {args.seconds:g} s, each in a fresh "
            "process (the broker's CPU not counted)"
        )
        if args.per_thread:
            probe = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker-wake"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if probe.returncode == 0:
                wake = json.loads(probe.stdout.strip().splitlines()[-1])["wake_us"]
                print(f"one thread wake-up here: {wake:.0f} us of CPU (both sides, 10 ms apart)")
        print(
            f"{'code':<18} {'cap':>4} {'mode':<9} {'partitions':>10} {'% of a core':>12}"
            f" {'threads':>8} {'claimed in s':>13}"
        )
        for label, code in codes:
            for mode in modes:
                for n in sizes:
                    for cap in caps:
                        if mode == "raw" and (code != ROOT or cap != caps[0]):
                            continue  # no member: one figure, whatever the code and cap
                        where = bootstrap if mode in ("network", "raw") else None
                        r = _run(code, mode, n, args, where, cap)
                        rows.append((label, mode, n, r))
                        c = "-" if cap is None else str(cap)
                        if "error" in r:
                            print(f"{label:<18} {c:>4} {mode:<9} {n:>10} failed: {r['error']}")
                            continue
                        print(
                            f"{label:<18} {c:>4} {mode:<9} {n:>10} {r['cpu_pct']:>12.1f} "
                            f"{r['threads']:>8} {r['claimed_s']:>13.1f}",
                            flush=True,
                        )
                        if "marshal_records_s" in r:
                            print(f"    __marshal records written: {r['marshal_records_s']:.1f}/s")
                        for name, cpu, wakes, count in r.get("per_thread", []):
                            print(f"    {cpu:6.2f} %  {wakes:6.1f} wake-ups/s  x{count:<3} {name}")
    finally:
        if broker is not None:
            broker.stop()
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
        if baseline is not None:
            shutil.rmtree(baseline, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
