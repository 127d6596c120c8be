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
``git archive``, this tree's built extensions copied in) in the same run.
Mode ``raw`` is no member: a bare confluent-kafka consumer assigned the same idle partitions
with the member's reader settings, polled as that reader polls (librdkafka's own cost, the
floor under the network figures); it needs the broker, as ``network`` does.
``--protocol-versions`` runs each figure once per member's cap (``protocol_version``; cap 7
heartbeats with one MemberHeartbeat per coordination partition, cap 6 one Heartbeat per
partition: PROTOCOL.md, "Version 7"), side by side in the same run.

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
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("bench.idle")


def _os_threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def worker(
    mode: str,
    partitions: int,
    hb: float,
    seconds: float,
    bootstrap: str | None,
    protocol_version: int | None = None,
) -> dict:
    """One member holding ``partitions`` idle partitions; runs in a fresh process (mode
    ``raw``: :func:`raw_worker` instead)."""
    if mode == "raw":
        assert bootstrap is not None
        return raw_worker(partitions, seconds, bootstrap)
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
    cpu0, wall0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    cpu1, wall1 = time.process_time(), time.monotonic()
    threads = _os_threads()
    held = len(consumer.claims())
    consumer.close()
    marshaler.close()
    cluster.close()
    if data is not None:
        shutil.rmtree(data, ignore_errors=True)
    return {
        "cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0),
        "threads": threads,
        "claimed_s": claimed,
        "held": held,
    }


def raw_worker(partitions: int, seconds: float, bootstrap: str) -> dict:
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
    cpu0, wall0 = time.process_time(), time.monotonic()
    poll_until(wall0 + seconds)
    cpu1, wall1 = time.process_time(), time.monotonic()
    threads = _os_threads()
    consumer.close()
    return {
        "cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0),
        "threads": threads,
        "claimed_s": 0.0,
        "held": partitions,
    }


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
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _extract(ref: str) -> Path:
    """The tree of commit ``ref`` in a temporary directory, with this tree's built
    extensions (they are not in git)."""
    target = Path(tempfile.mkdtemp(prefix="bench-idle-baseline-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    for so in ROOT.rglob("*.so"):  # every built extension (storage, rationalizer, logmarshal)
        rel = so.relative_to(ROOT)
        if (target / rel.parent).is_dir():
            shutil.copy(so, target / rel)
    return target


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
    parser.add_argument(
        "--protocol-versions", help="comma-separated members' caps, each measured (default: newest)"
    )
    args = parser.parse_args(argv)
    caps: list[int | None] = (
        [int(v) for v in args.protocol_versions.split(",")] if args.protocol_versions else [None]
    )
    if args.worker:
        sys.path.insert(0, args.code)
        mode, n = args.worker
        print(json.dumps(worker(mode, int(n), args.hb, args.seconds, args.bootstrap, caps[0])))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    codes = [("this tree", ROOT)]
    baseline = _extract(args.baseline_ref) if args.baseline_ref else None
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
