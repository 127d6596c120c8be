"""logmarshal's streams beside Kafka Streams: the same word count, on the same input, on the
same broker (a single-node Apache Kafka 4.4 started by ``logmarshal.localkafka``), in the
same run, as two programs:

- Kafka Streams, in Java (``bench/java/WordCount.java``, compiled here with ``javac``
  against the cached jars), ``processing.guarantee=exactly_once_v2``;
- logmarshal's streams ``App`` (``logmarshal.streams.examples.word_count``), whose state is
  exactly-once (changelog commits fenced by claim epochs; docs/streams.md).

Both run KIP-28's processor-API word count: per task (input partition) the words of each
line counted in a persistent store (RocksDB on both sides, each with its write cache) with a
changelog, the changed counts forwarded to a sink every second of stream time, one
processing thread, a commit every 100 ms (Kafka Streams' default under exactly-once). Each
program is a process of its own, started on a fresh application id, run until it has
processed every line and closed (its last commit), then held until its CPU time is read
from ``/proc/<pid>/stat``. Reported per program: records/s (from its first record to the
end of its close, and for the whole run from the process's start) and CPU seconds per
million records (the program's process, and the broker's, over the same span). The final
counts of both, read back from their changelogs (Kafka Streams' with
``isolation.level=read_committed``), must equal the input's, else the bench fails.

    python3 bench/streams_vs_kafka_streams.py [--lines 500000] [--rounds 3] [--partitions 2]
                                              [--with-alos]
                                              [--bootstrap HOST:PORT --broker-pid PID]

``--with-alos`` adds a third program, the same Kafka Streams word count with
``processing.guarantee=at_least_once``: what its transactions cost (a row beside, not a
baseline: its state is not exactly-once).

Needs java, javac and mvn (the jars are fetched on first use); the broker is stopped by its
pid at the end, and so is any program still running. ``--bootstrap`` and ``--broker-pid``
name a Kafka already running instead (the tests' session Kafka); topics and application ids
end in a tag of the run.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import attrs

# the repository first: bench/storage.py must not shadow the storage package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if sys.path[1:2] == [str(Path(__file__).resolve().parent)]:
    del sys.path[1]

from logmarshal import connect
from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster, fetch
from logmarshal.streams import App
from logmarshal.streams.examples import word_count
from logmarshal.streams.task import read_changelog

ROOT = Path(__file__).resolve().parent.parent
TEXT = ["the quick brown fox", "jumps over the lazy dog", "streams of records", "a b c d e f"]
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "WordCount.java"
#: seconds a program may take from its start to its close
RUN_TIMEOUT = 900.0
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat`` fields 14
    and 15; the command name, field 2, may hold spaces, so fields count from its ')')."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def compiler_cpu_seconds(pid: int) -> float:
    """CPU seconds of the JVM's JIT compiler threads (``C1 CompilerThre``, ``C2
    CompilerThre``; 0 in any other process). The JVM runs with a fixed number of them
    (``-XX:-UseDynamicNumberOfCompilerThreads``), so none exits and takes its time along."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                raw = f.read()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        name, rest = raw[raw.index("(") + 1 :].rsplit(")", 1)
        if name.startswith(("C1 CompilerThre", "C2 CompilerThre")):
            fields = rest.split()
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


@attrs.frozen
class Run:
    """One program's run: seconds from its start and from its first record to the end of
    its close; CPU seconds of its process (whole run, and from the first record on) and of
    the broker over the whole run; of the process's CPU from the first record on, what its
    JIT compiler threads spent."""

    program: str
    records: int
    whole_s: float
    steady_s: float
    cpu_s: float
    steady_cpu_s: float
    broker_cpu_s: float
    #: of ``steady_cpu_s``, the JIT compiler threads' (a JVM's; 0 for Python)
    steady_jit_s: float


def run_program(name: str, cmd: list[str], records: int, broker_pid: int, workdir: Path) -> Run:
    """Start ``cmd``, follow its ``first`` and ``done`` lines, read its CPU time before it
    exits (it waits for its stdin to close), and stop it by its pid if anything fails."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / "program.log", "wb")  # noqa: SIM115
    broker_start = cpu_seconds(broker_pid)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    first = first_cpu = first_jit = None
    try:
        assert proc.stdout is not None and proc.stdin is not None
        while True:
            line = proc.stdout.readline().decode().strip()
            if not line:
                raise SystemExit(
                    f"{name} exited ({proc.wait(30)}) before it was done:\n"
                    + (workdir / "program.log").read_text(errors="replace")[-3000:]
                )
            if line.startswith("first"):
                first, first_cpu = time.monotonic(), cpu_seconds(proc.pid)
                first_jit = compiler_cpu_seconds(proc.pid)
            elif line.startswith("done"):
                done, done_cpu = time.monotonic(), cpu_seconds(proc.pid)
                done_jit = compiler_cpu_seconds(proc.pid)
                broker_cpu = cpu_seconds(broker_pid) - broker_start
                break
            elif line.startswith("failed"):
                raise SystemExit(f"{name}: {line}")
            if time.monotonic() - start > RUN_TIMEOUT:
                raise SystemExit(f"{name} did not finish in {RUN_TIMEOUT:.0f} s")
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()
    if first is None or first_cpu is None or first_jit is None:
        raise SystemExit(f"{name} was done without a first record")
    return Run(
        name,
        records,
        done - start,
        done - first,
        done_cpu,
        done_cpu - first_cpu,
        broker_cpu,
        done_jit - first_jit,
    )


# -- the logmarshal side: a program of its own ---------------------------------------------


def member(
    bootstrap: str, app_id: str, source: str, sink: str, state_dir: str, records: int
) -> None:
    """logmarshal's word count App until ``records`` lines are processed and it is closed."""
    cluster = connect(bootstrap=bootstrap)
    app = App(
        cluster,
        app_id,
        word_count(source, sink, store_kind="persistent"),
        client_id=f"{app_id}-1",
        heartbeat_interval=1.0,
        state_dir=state_dir,
        commit_interval=0.1,
        consumer_options={"batch_size": 500},
    )
    app.run(max_records=1)
    print(f"first {time.time() * 1000:.0f}", flush=True)
    app.run(max_records=records - 1)
    app.close()
    print(f"done {time.time() * 1000:.0f}", flush=True)
    sys.stdin.read()  # held until the bench has read our CPU time
    cluster.close()


# -- input, programs and their counts ----------------------------------------------------


def produce(bootstrap: str, topic: str, lines: int, partitions: int) -> collections.Counter:
    """``lines`` lines of ``TEXT`` into ``topic``, line i to partition i % partitions; the
    true counts."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "acks": "all",
        }
    )
    truth: collections.Counter = collections.Counter()
    for i in range(lines):
        line = TEXT[i % len(TEXT)]
        truth.update(line.split())
        while True:
            try:
                producer.produce(topic, line.encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit("the input was not all acknowledged")
    return truth


def kafka_streams_counts(bootstrap: str, topic: str, partitions: int) -> collections.Counter:
    """Kafka Streams' final counts: the last committed record per key of each partition of
    its changelog (String keys, Long values), summed over partitions (one task each)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    last: dict[tuple[int, str], int] = {}
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
            for m in consumer.consume(1000, 0.5):
                if m.error() is None and m.value() is not None:
                    last[(m.partition(), m.key().decode())] = int.from_bytes(
                        m.value(), "big", signed=True
                    )
        else:
            raise SystemExit(f"{topic} could not be read to its end")
    finally:
        consumer.close()
    counts: collections.Counter = collections.Counter()
    for (_p, word), n in last.items():
        counts[word] += n
    return counts


def transactions_logged(bootstrap: str) -> bool:
    """Has the broker a transaction log (exactly_once_v2 runs on transactions)? An internal
    topic, which ``Cluster.topics`` does not list: asked of Kafka's metadata directly."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return "__transaction_state" in admin.list_topics(timeout=10).topics


def logmarshal_counts(bootstrap: str, app_id: str, partitions: int) -> collections.Counter:
    """The App's final counts: what its changelog partitions restore to, summed."""
    counts: collections.Counter = collections.Counter()
    with connect(bootstrap=bootstrap) as cluster:
        for p in range(partitions):
            counts.update(read_changelog(cluster, app_id, "counts", p)[0])
    return counts


def compile_java(jars: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["javac", "-cp", f"{jars}/*", "-d", str(out), str(JAVA_SOURCE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"javac failed:\n{done.stdout}{done.stderr}")


def java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (done.stderr.splitlines() or ["?"])[0]


def machine() -> str:
    with open("/proc/meminfo") as f:
        kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return (
        f"{os.cpu_count()} cores, {kib / 2**20:.0f} GiB, Python "
        f"{platform.python_version()}, {java_version()}, Apache Kafka {KAFKA_VERSION}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--with-alos",
        action="store_true",
        help="also Kafka Streams with processing.guarantee=at_least_once",
    )
    parser.add_argument("--bootstrap", help="a Kafka already running (default: start one)")
    parser.add_argument("--broker-pid", type=int, help="that Kafka's pid (its CPU time)")
    parser.add_argument(
        "--member",
        nargs=6,
        metavar=("BOOTSTRAP", "APP_ID", "SOURCE", "SINK", "STATE_DIR", "RECORDS"),
        help=argparse.SUPPRESS,
    )  # the logmarshal program itself
    args = parser.parse_args()
    if args.member:
        *strings, records = args.member
        member(*strings, int(records))
        return
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"this bench needs {' and '.join(missing)} on PATH")
    if (args.bootstrap is None) != (args.broker_pid is None):
        raise SystemExit("--bootstrap and --broker-pid go together")
    print(f"machine: {machine()}")
    print(f"load average at the start: {load()}")
    jars = fetch()
    with tempfile.TemporaryDirectory(prefix="streams-vs-ks-") as tmp:
        work = Path(tmp)
        compile_java(jars, work / "classes")
        if args.bootstrap is not None:
            runs = measure(args, jars, work, args.bootstrap, args.broker_pid)
        else:
            kafka = KafkaCluster(work / "kafka", nodes=1)
            try:
                kafka.start()
                broker_pid = kafka.nodes[0].pid
                assert broker_pid is not None
                runs = measure(args, jars, work, kafka.bootstrap, broker_pid)
            finally:
                kafka.stop()
    report(runs, args.lines)
    print(f"load average at the end: {load()}")


def measure(
    args: argparse.Namespace, jars: Path, work: Path, bootstrap: str, broker_pid: int
) -> dict[str, list[Run]]:
    """Every round of every program on the broker at ``bootstrap``; their runs by program.
    Topics and application ids end in a tag of this run (a shared Kafka may hold others)."""
    names = {
        "ks": "Kafka Streams, exactly_once_v2",
        "lm": "logmarshal App, exactly-once state",
        "ka": "Kafka Streams, at_least_once",
    }
    sides = ("ks", "lm", "ka") if args.with_alos else ("ks", "lm")
    runs: dict[str, list[Run]] = {names[side]: [] for side in sides}
    tag = uuid.uuid4().hex[:6]
    source = f"lines-{tag}"
    with connect(bootstrap=bootstrap) as cluster:
        cluster.create_topic(source, args.partitions)
        for r in range(args.rounds):
            for side in sides:
                cluster.create_topic(f"counts-{side}-{r}-{tag}", args.partitions)
    truth = produce(bootstrap, source, args.lines, args.partitions)
    print(
        f"input: {args.lines} lines, {sum(truth.values())} words, {len(truth)} "
        f"distinct, {args.partitions} partitions; broker pid {broker_pid}"
    )
    for r in range(args.rounds):
        # the programs' order rotates: the machine's load drifts
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
            app_id = f"wc-{side}-{r}-{tag}"
            sink = f"counts-{side}-{r}-{tag}"
            name = names[side]
            if side in ("ks", "ka"):
                guarantee = "exactly_once_v2" if side == "ks" else "at_least_once"
                cmd = [
                    "java",
                    "-Xmx1g",
                    "-XX:-UseDynamicNumberOfCompilerThreads",
                    "-Dlog4j2.level=WARN",
                    "-cp",
                    f"{work / 'classes'}:{jars}/*",
                    "WordCount",
                    bootstrap,
                    app_id,
                    source,
                    sink,
                    str(work / "ks-state" / app_id),
                    str(args.lines),
                    guarantee,
                ]
                run = run_program(name, cmd, args.lines, broker_pid, work / app_id)
                counts = kafka_streams_counts(
                    bootstrap, f"{app_id}-counts-changelog", args.partitions
                )
                if side == "ks" and not transactions_logged(bootstrap):
                    raise SystemExit("Kafka Streams ran without transactions")
            else:
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--member",
                    bootstrap,
                    app_id,
                    source,
                    sink,
                    str(work / "lm-state"),
                    str(args.lines),
                ]
                run = run_program(name, cmd, args.lines, broker_pid, work / app_id)
                counts = logmarshal_counts(bootstrap, app_id, args.partitions)
            if counts != truth:
                wrong = sorted(w for w in truth.keys() | counts.keys() if counts[w] != truth[w])[:5]
                raise SystemExit(
                    f"{run.program}, round {r}: final counts differ from the "
                    f"input's, e.g. {[(w, counts[w], truth[w]) for w in wrong]}"
                )
            runs[run.program].append(run)
            print(
                f"  round {r}, {run.program}: {run.records / run.steady_s:,.0f} "
                f"records/s, {run.cpu_s:.2f} CPU s ({run.steady_cpu_s:.2f} from the first "
                f"record, {run.steady_jit_s:.2f} of it JIT), counts equal the input's "
                f"(load {load()})",
                flush=True,
            )
    return runs


def report(runs: dict[str, list[Run]], lines: int) -> None:
    """The table: medians over the rounds, per program."""
    per_m = 1e6 / lines
    print(
        f"\nword count, {lines} lines, medians of {len(next(iter(runs.values())))} rounds; "
        "final counts of every run checked:"
    )
    print(
        "| program | records/s (first record → closed) | records/s (whole run) | CPU s per "
        "M records, process (whole run) | same, from the first record | of which JIT "
        "compiler | broker CPU s per M records |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for program, each in runs.items():
        med = {
            f: statistics.median(getattr(r, f) for r in each)
            for f in (
                "steady_s",
                "whole_s",
                "cpu_s",
                "steady_cpu_s",
                "steady_jit_s",
                "broker_cpu_s",
            )
        }
        print(
            f"| {program} | {lines / med['steady_s']:,.0f} | {lines / med['whole_s']:,.0f} | "
            f"{med['cpu_s'] * per_m:.2f} | {med['steady_cpu_s'] * per_m:.2f} | "
            f"{med['steady_jit_s'] * per_m:.2f} | {med['broker_cpu_s'] * per_m:.2f} |"
        )


if __name__ == "__main__":
    main()
