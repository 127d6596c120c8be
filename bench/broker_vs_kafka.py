"""logmarshal's broker beside Apache Kafka: one run, one machine, the same clients.

Run ``python bench/broker_vs_kafka.py [--quick]``. Figures, not pass/fail. Both brokers run
for the whole bench (each its own process, stopped by its pid at the end); every measurement
runs ``--repeat`` times on each (median shown), back to back, the order alternating so that
load from elsewhere on a shared machine hits both alike. The load average is printed at the
start and the end. On the 2-core machine a full run took 8 minutes at a load average of 4-10
and 16 at 10-30; ``--quick`` under one:

* produce throughput, 100 B and 1 KiB records, acks=1 and acks=all, uncompressed and zstd,
  with kcat (librdkafka) and with Kafka's ``kafka-producer-perf-test`` (the Java client);
* consume throughput of the acks=1 kcat topic, with kcat (assign, no group) and with
  ``kafka-consumer-perf-test`` (a classic consumer group);
* end-to-end latency p50/p99 at a fixed rate: a confluent-kafka producer stamps each record
  with ``perf_counter_ns``, an assigned consumer in the same process reads it back;
* broker CPU seconds per million records (utime+stime of the broker process from
  ``/proc/<pid>/stat``, before and after each run) and resident memory (VmRSS, VmHWM).

Records are random uppercase letters, as ``kafka-producer-perf-test`` makes them, so zstd
gets the same material from both clients. Kafka is one KRaft node from
:mod:`logmarshal.localkafka` with the heap given by ``--heap``; ``--kafka-bootstrap`` and
``--kafka-pid`` use a Kafka already running instead (the test does, with the session's).

A Java tool that fails against a broker prints its row as ``n/a (reason)``. acks=all is not
the same promise on both: logmarshal's broker fsyncs before it answers, Kafka (default
``flush.messages``) does not. ``--profile-broker FILE`` runs logmarshal's broker under
cProfile (its event loop; the worker threads that run acks=all appends are not in it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from logmarshal.localbroker import LocalBroker  # noqa: E402
from logmarshal.localkafka import KafkaCluster, harness  # noqa: E402

MB = 1_000_000
BROKERS = ("logmarshal", "kafka")
#: bytes -> uppercase letters; never a newline, so kcat's line splitting keeps sizes exact
_LETTERS = bytes(65 + i % 26 for i in range(256))
_TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak resident) of one process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def machine_memory_gib() -> float:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) / 1024 / 1024


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, 1, replication_factor=1)])[topic].result(30)


# ---------------------------------------------------------------------------- measures


@attrs.define
class Result:
    """One run on one broker: a rate and the broker's CPU, or why there is none."""

    records_s: float | None = None
    mb_s: float | None = None
    cpu_s_per_m: float | None = None
    failed: str | None = None


def measured(pid: int, n: int, size: int, run: Callable[[], float]) -> Result:
    """Runs ``run`` (which returns its records/s, or raises) and charges the broker's CPU."""
    before = cpu_seconds(pid)
    try:
        rate = run()
    except Exception as exc:  # one line for the table; the bench goes on
        return Result(
            failed=str(exc).strip().splitlines()[0][:120]
            if str(exc).strip()
            else type(exc).__name__
        )
    cpu = cpu_seconds(pid) - before
    return Result(rate, rate * size / MB, cpu / n * 1_000_000)


def median(results: list[Result]) -> Result:
    """The median rate and the median CPU of repeated runs; a failure in any run stands."""
    failed = [r.failed for r in results if r.failed is not None]
    if failed:
        return Result(failed=failed[0])
    rate = statistics.median(r.records_s for r in results)
    size = results[0].mb_s * MB / results[0].records_s
    return Result(rate, rate * size / MB, statistics.median(r.cpu_s_per_m for r in results))


def write_lines(path: Path, n: int, size: int, seed: int) -> None:
    """n records of ``size`` random uppercase letters, one a line (kcat -l)."""
    rng = random.Random(seed)
    chunk = 10_000
    with open(path, "wb") as f:
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            raw = rng.randbytes(k * size).translate(_LETTERS)
            f.write(b"".join(raw[i * size : (i + 1) * size] + b"\n" for i in range(k)))


def check_stored(bootstrap: str, topic: str, n: int) -> None:
    """The run counts only if the broker holds all ``n`` records (a client may give up)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "log_level": 4})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    if high != n:
        raise RuntimeError(f"{topic} holds {high} of the {n} records produced")


def kcat_produce(bootstrap: str, topic: str, lines: Path, n: int, acks: str, codec: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-l", str(lines), "-z", codec,
         "-X", f"acks={acks}", "-X", "linger.ms=5", "-X", "batch.num.messages=10000",
         "-X", "queue.buffering.max.messages=1000000"],
        check=True, timeout=600, capture_output=True,
    )  # fmt: skip
    rate = n / (time.perf_counter() - start)
    check_stored(bootstrap, topic, n)
    return rate


def kcat_consume(bootstrap: str, topic: str, n: int, out: Path) -> float:
    start = time.perf_counter()
    with open(out, "wb") as f:
        subprocess.run(
            ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
             "-c", str(n), "-e", "-q", "-f", "%o\n"],
            check=True, timeout=600, stdout=f, stderr=subprocess.PIPE,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    with open(out, "rb") as f:
        offsets = f.read().split()
    if len(offsets) != n or int(offsets[-1]) != n - 1:
        raise RuntimeError(f"kcat read {len(offsets)} of {n} records")
    return n / seconds


def java_tool(jars: Path, tool: str, *args: str, heap: str) -> str:
    """One of Kafka's tools from the jars, full JIT (the harness's ``java()`` stops at C1)."""
    cmd = ["java", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:-UsePerfData", "-Dlog4j2.level=WARN",
           "-cp", harness.classpath(jars), harness.tools()[tool], *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if "Exception" in ln
                 or "rror" in ln] or (done.stderr + done.stdout).splitlines()[-1:]  # fmt: skip
        # one line for a table cell: the exception's class without its package
        first = (
            re.sub(r"\b(?:[a-z]\w*\.)+(?=[A-Z]\w*(?:Exception|Error))", "", lines[0])
            if lines
            else ""
        )
        raise RuntimeError(first or f"exit {done.returncode}")
    return done.stdout


def java_produce(jars: Path, bootstrap: str, topic: str, n: int, size: int, acks: str,
                 codec: str, heap: str) -> float:  # fmt: skip
    out = java_tool(
        jars,
        "kafka-producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        str(size),
        "--throughput",
        "-1",
        "--command-property",
        f"bootstrap.servers={bootstrap}",
        f"acks={acks}",
        f"compression.type={codec}",
        "linger.ms=5",
        "batch.size=1000000",
        heap=heap,
    )
    # every 5 s it prints a progress line of the same shape; the final one has percentiles
    match = re.search(r"^(\d+) records sent, ([\d.]+) records/sec .* 50th", out, re.M)
    if match is None or int(match.group(1)) != n:
        raise RuntimeError(
            "kafka-producer-perf-test printed no final line: "
            + (out.strip().splitlines() or ["(nothing)"])[-1][:80]
        )
    check_stored(bootstrap, topic, n)
    return float(match.group(2))


def java_consume(jars: Path, bootstrap: str, topic: str, n: int, heap: str) -> float:
    """fetch.nMsg.sec: the rate after the group join (rebalance.time.ms is left out)."""
    out = java_tool(
        jars,
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--timeout",
        "60000",
        heap=heap,
    )
    lines = [ln for ln in out.splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values, strict=False))
    if int(float(row["data.consumed.in.nMsg"])) < n:
        raise RuntimeError(f"kafka-consumer-perf-test read {row['data.consumed.in.nMsg']} of {n}")
    return float(row["fetch.nMsg.sec"])


def latency(bootstrap: str, topic: str, rate: int, seconds: float, warmup: float,
            size: int = 100) -> tuple[float, float, int]:  # fmt: skip
    """p50 and p99 (ms) from produce() to the consumer's hand, at ``rate`` records/s.

    One producer (linger.ms=0, acks=1) and one assigned consumer (librdkafka's fetch
    defaults) in this process; each record carries its send time (perf_counter_ns).
    Timing starts once a first record went through; records sent in the first ``warmup``
    seconds after it are left out too."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    total = int(rate * seconds)
    seen: list[int] = []
    lat_ns: list[int] = []
    done = threading.Event()

    primed = threading.Event()

    def read() -> None:
        while len(seen) < total and not done.is_set():
            # poll, not consume(n): consume(n) waits for n records or its timeout
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                now = time.perf_counter_ns()
                index, sent = struct.unpack_from(">qq", msg.value())
                if index < 0:
                    primed.set()
                    continue
                seen.append(index)
                lat_ns.append(now - sent)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1"})
    pad = b"x" * (size - 16)
    # a first record both ends have seen: the clock starts once the consumer fetches at the
    # log end (a new topic's metadata and the first fetch are no part of either broker's p99)
    producer.produce(topic, struct.pack(">qq", -1, 0) + pad, partition=0)
    producer.flush(30)
    if not primed.wait(30):
        done.set()
        raise RuntimeError("the consumer did not see a first record in 30 s")
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        producer.produce(topic, struct.pack(">qq", i, time.perf_counter_ns()) + pad, partition=0)
        producer.poll(0)
    producer.flush(30)
    reader.join(30)
    done.set()
    consumer.close()
    skip = int(rate * warmup)
    kept = sorted(ns for i, ns in zip(seen, lat_ns, strict=True) if i >= skip)
    if len(seen) < total or not kept:
        raise RuntimeError(f"the consumer saw {len(seen)} of {total} records")
    p50 = kept[len(kept) // 2] / 1e6
    p99 = kept[min(len(kept) - 1, int(len(kept) * 0.99))] / 1e6
    return p50, p99, len(kept)


# ---------------------------------------------------------------------------- the table


def _fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def throughput_row(label: str, res: dict[str, Result]) -> str:
    cells = []
    for name in BROKERS:
        r = res[name]
        if r.failed is not None:
            cells.append(f"n/a ({r.failed})")
        else:
            cells.append(f"{_fmt(r.records_s)} rec/s, {_fmt(r.mb_s, 1)} MB/s, "
                         f"{_fmt(r.cpu_s_per_m, 2)} CPU-s/M")  # fmt: skip
    lm, kf = res["logmarshal"], res["kafka"]
    return (f"| {label} | {cells[0]} | {cells[1]} | {_ratio(lm.records_s, kf.records_s)} | "
            f"{_ratio(lm.cpu_s_per_m, kf.cpu_s_per_m)} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a fifth of the records, one run each, 3 s latency"
    )
    parser.add_argument("--count", type=int, help="records of 100 B per run (1 KiB: a fifth)")
    parser.add_argument(
        "--repeat", type=int, help="runs per row and broker, median shown (default 3; --quick 1)"
    )
    parser.add_argument("--sizes", default="100,1024", help="record sizes, comma-separated")
    parser.add_argument("--codecs", default="none,zstd")
    parser.add_argument("--acks", default="1,all")
    parser.add_argument(
        "--tools", default="kcat,java", help="kcat, java, both, or none (latency and memory only)"
    )
    parser.add_argument("--rate", type=int, default=1000, help="latency run: records/s")
    parser.add_argument(
        "--latency-seconds", type=float, help="latency: seconds a round (--repeat rounds)"
    )
    parser.add_argument("--heap", default="1g", help="Kafka's JVM heap (-Xms = -Xmx)")
    parser.add_argument("--tool-heap", default="1g", help="heap of the Java perf tools")
    parser.add_argument(
        "--profile-broker",
        metavar="FILE",
        help="run logmarshal's broker under cProfile (its main thread: the "
        "event loop), stats written to FILE when it stops",
    )
    parser.add_argument("--kafka-bootstrap", help="use this running Kafka (with --kafka-pid)")
    parser.add_argument("--kafka-pid", type=int, help="the running Kafka broker's pid")
    args = parser.parse_args(argv)
    n100 = args.count or (100_000 if args.quick else 500_000)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    sizes = [int(s) for s in args.sizes.split(",")]
    codecs = args.codecs.split(",")
    acks_list = args.acks.split(",")
    tools = args.tools.split(",")
    lat_s = args.latency_seconds or (3.0 if args.quick else 5.0)
    if shutil.which("kcat") is None and "kcat" in tools:
        print("kcat is not installed (apt-get install kcat)", file=sys.stderr)
        return 2
    if bool(args.kafka_bootstrap) != bool(args.kafka_pid):
        parser.error("--kafka-bootstrap and --kafka-pid go together")

    start_load = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-vs-kafka-") as tmp_s:
        tmp = Path(tmp_s)
        cluster = None
        lm = None
        try:
            jars = harness.fetch()
            if args.kafka_bootstrap:
                kafka_bootstrap, kafka_pid = args.kafka_bootstrap, args.kafka_pid
                heap_note = "heap: not started by this run"
            else:
                cluster = KafkaCluster(tmp / "kafka", nodes=1, heap=args.heap, log_level="WARN")
                cluster.start()
                kafka_bootstrap, kafka_pid = cluster.bootstrap, cluster.nodes[0].pid
                heap_note = f"heap -Xms{args.heap} -Xmx{args.heap}, G1"
            profile = ["-m", "cProfile", "-o", args.profile_broker] if args.profile_broker else []
            lm = LocalBroker(tmp / "logmarshal", python_args=profile).start()
            return run(args, tmp, jars, lm, kafka_bootstrap, kafka_pid, heap_note, n100, sizes,
                       codecs, acks_list, tools, lat_s, start_load)  # fmt: skip
        finally:
            if lm is not None:
                lm.stop()
            if cluster is not None:
                cluster.stop()


def run(args: argparse.Namespace, tmp: Path, jars: Path, lm: LocalBroker,
        kafka_bootstrap: str, kafka_pid: int, heap_note: str, n100: int, sizes: list[int],
        codecs: list[str], acks_list: list[str], tools: list[str], lat_s: float,
        start_load: str) -> int:  # fmt: skip
    brokers = {"logmarshal": (lm.bootstrap, lm.pid), "kafka": (kafka_bootstrap, kafka_pid)}
    idle_mem = {name: memory_kib(pid) for name, (_, pid) in brokers.items()}
    print(f"bench/broker_vs_kafka.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"python {sys.version.split()[0]}  cores {os.cpu_count()}  "
          f"Apache Kafka {harness.KAFKA_VERSION} (1 KRaft node, {heap_note})")  # fmt: skip
    print(f"load average at start: {start_load}; memory {machine_memory_gib():.0f} GiB")
    print(f"per run: {n100:,} records of 100 B, {max(1, n100 // 5):,} of larger sizes; rows show "
          f"the median of {args.repeat} run(s) on each broker; MB/s counts record values")  # fmt: skip
    print(
        "acks=all: logmarshal's broker answers after fsync; Kafka (one node, default "
        "flush settings) once the records are in its page cache"
    )
    print(f"logmarshal's broker pid {lm.pid} at {lm.bootstrap}; Kafka pid {kafka_pid} at "
          f"{kafka_bootstrap}; Java tools: -Xmx{args.tool_heap}, G1, full JIT")  # fmt: skip
    rows: list[str] = []
    flip = [False]

    def both(label: str, n: int, size: int, job: Callable[[str, str], float]) -> None:
        """``--repeat`` measurements on each broker, back to back, the order alternating;
        the row shows the medians."""
        runs: dict[str, list[Result]] = {name: [] for name in BROKERS}
        for _ in range(args.repeat):
            order = BROKERS[::-1] if flip[0] else BROKERS
            flip[0] = not flip[0]
            for name in order:
                bootstrap, pid = brokers[name]
                runs[name].append(measured(pid, n, size, lambda b=bootstrap, nm=name: job(b, nm)))
        rows.append(throughput_row(label, {name: median(rs) for name, rs in runs.items()}))
        print(rows[-1], flush=True)

    seq = [0]

    def topic(prefix: str) -> str:
        seq[0] += 1
        return f"{prefix}-{seq[0]}"

    # warm-up, not counted: Kafka's JIT, both brokers' first segment and page cache
    warm_n = min(n100, 50_000)
    write_lines(tmp / "warm", warm_n, 100, seed=0)
    for bootstrap, _ in brokers.values():
        t = topic("warm")
        create_topic(bootstrap, t)
        kcat_produce(bootstrap, t, tmp / "warm", warm_n, "1", "none")
        kcat_consume(bootstrap, t, warm_n, tmp / "offsets")
        if "java" in tools:
            with contextlib.suppress(Exception):  # a failure shows in its own rows
                java_produce(jars, bootstrap, t, warm_n, 100, "1", "none", args.tool_heap)
    print(f"warm-up done: {warm_n:,} records through each broker, kcat and Java")

    consume_topics: dict[tuple[int, str], dict[str, str]] = {}
    for size in sizes:
        n = n100 if size <= 100 else max(1, n100 // 5)
        lines = tmp / f"lines-{size}"
        write_lines(lines, n, size, seed=size)
        for codec in codecs:
            for acks in acks_list:
                if "kcat" in tools:
                    names: dict[str, str] = {}

                    def kprod(b: str, nm: str, acks=acks, codec=codec, n=n, lines=lines,
                              names=names, size=size) -> float:  # fmt: skip
                        names[nm] = topic(f"k{size}-{codec}-{acks}")
                        create_topic(b, names[nm])
                        return kcat_produce(b, names[nm], lines, n, acks, codec)

                    both(f"produce {size} B, acks={acks}, {codec}: kcat", n, size, kprod)
                    if acks == acks_list[0]:
                        consume_topics[(size, codec)] = names
                if "java" in tools:

                    def jprod(b: str, nm: str, acks=acks, codec=codec, n=n, size=size) -> float:
                        t = topic(f"j{size}-{codec}-{acks}")
                        create_topic(b, t)
                        return java_produce(jars, b, t, n, size, acks, codec, args.tool_heap)

                    both(f"produce {size} B, acks={acks}, {codec}: kafka-producer-perf-test",
                         n, size, jprod)  # fmt: skip
            names = consume_topics.get((size, codec))
            if names is None:
                continue
            out = tmp / "offsets"
            if "kcat" in tools:
                both(f"consume {size} B, {codec}: kcat", n, size,
                     lambda b, nm, names=names, n=n, out=out: kcat_consume(b, names[nm], n, out))  # fmt: skip
            if "java" in tools:
                both(f"consume {size} B, {codec}: kafka-consumer-perf-test", n, size,
                     lambda b, nm, names=names, n=n: java_consume(jars, b, names[nm], n,
                                                                  args.tool_heap))  # fmt: skip

    # --repeat rounds per broker, alternating: one stall of a loaded machine lands in one
    # round of one broker, and the row shows the median round (and the range)
    lat: dict[str, list[tuple[float, float, int]] | str] = {name: [] for name in BROKERS}
    for _ in range(args.repeat):
        for name in BROKERS[::-1] if flip[0] else BROKERS:
            if isinstance(lat[name], str):
                continue
            try:
                lat[name].append(
                    latency(brokers[name][0], topic("lat"), args.rate, lat_s, min(1.0, lat_s / 3))
                )
            except Exception as exc:
                lat[name] = str(exc).splitlines()[0][:120]
        flip[0] = not flip[0]
    end_mem = {name: memory_kib(pid) for name, (_, pid) in brokers.items()}
    end_load = load_average()

    print()
    print(f"load average at start: {start_load}; at end: {end_load}")
    print(
        f"| row | logmarshal's broker | Apache Kafka {harness.KAFKA_VERSION} | "
        "ratio records/s | ratio CPU |"
    )
    print("| --- | --- | --- | ---: | ---: |")
    for row in rows:
        print(row)
    for i, pct in ((0, "p50"), (1, "p99")):
        cells, medians = [], []
        for name in BROKERS:
            v = lat[name]
            if isinstance(v, str):
                cells.append(f"n/a ({v})")
                continue
            values = [r[i] for r in v]
            medians.append(statistics.median(values))
            spread = f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""
            cells.append(f"{medians[-1]:.2f} ms{spread}")
        ratio = _ratio(*medians) if len(medians) == 2 else "-"
        print(f"| end-to-end latency {pct}, {args.rate} rec/s of 100 B, {lat_s:g} s a round "
              f"| {cells[0]} | {cells[1]} | {ratio} | |")  # fmt: skip
    for label, mem, key in (("resident memory idle, after start (VmRSS)", idle_mem, "VmRSS"),
                            ("resident memory at end (VmRSS)", end_mem, "VmRSS"),
                            ("peak resident memory (VmHWM)", end_mem, "VmHWM")):  # fmt: skip
        a, b = mem["logmarshal"][key] / 1024, mem["kafka"][key] / 1024
        print(f"| {label} | {a:,.0f} MiB | {b:,.0f} MiB | {_ratio(a, b)} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
