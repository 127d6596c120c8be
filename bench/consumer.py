"""Consumer benchmarks: failover, claiming, handoff, ALO vs AMO throughput; over the network.

    python3 bench/consumer.py [--quick] [--baseline-ref REF]
    python3 bench/consumer.py --network [--count N] [--baseline-ref REF]

Figures, not pass/fail. Goals (ISSUE): failover <= 2·HB + 0.2 s; idle 64-partition topic
owned in <= 0.5 s greedy; handoff <= 50 ms; AMO throughput >= half of ALO at batch 500.
Without ``--network`` everything runs on the embedded cluster in a temporary directory;
``--baseline-ref`` runs the same figures with the Consumer of that commit too, each
implementation in a fresh process, and prints them side by side.

``--network`` starts ``logmarshal broker start`` on 127.0.0.1, writes ``--count`` records of
100 B to a 4-partition topic and reads them all back, each reader in a fresh process, in
the same run: kcat, a raw confluent-kafka ``consume(500)`` loop (librdkafka's defaults, and
with exactly the librdkafka settings of the Consumer's reader,
``logmarshal.network.settings.consumer_settings``: the same fetch settings), and
logmarshal's ``Consumer`` (ALO batch 500 committing each batch or each message, AMO), each
Consumer row with its rate and p99 call latency against the raw loop's with the reader's
settings (goal, issue 34: rate >= 0.8, p99 <= 2x). With ``--kafka`` also ``raw-amo``: that
raw loop made at-most-once the way Kafka's documentation says (each batch's offsets
committed to the group coordinator, synchronously, before the batch is processed), the
AMO a confluent-kafka user writes without logmarshal; each AMO row then says its rate
against that loop's too. The rate is the read path's, from the
first records in hand to the last; each reader's start-up (the Consumer: joining and
claiming through ``__marshal``) and close are printed beside it, not counted in it (until
2026-11-30 they were, which at 1 M records weighed 0.2-1.0 s of claims and 0.5 s of close
on a Consumer read of ~0.7 s).
``--baseline-ref`` also runs the Consumer of that git commit (e.g. the one before a change)
on the same data, each of its rows right after the same row of this tree. Goal: the Consumer
>= 0.5 M msg/s over the network. ``--kafka`` runs the same readers on a single-node Apache
Kafka (started from the Maven jars, stopped by pid) instead of logmarshal's broker, after
an uncounted pass of the raw reader and one of the Consumer (Kafka's JVM compiles its read
and write paths meanwhile, and ``__marshal`` is created).
Each reader's row also counts the cyclic GC's full collections during its read, and their
time (``full GCs``): each walks every tracked object of the process, and until 2026-12-04
they were a tenth of a Consumer's CPU (docs/performance.md, History, "Garbage collection").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from _baseline import extract  # (bench/: a script's directory is on its path)

# a --network worker given --code runs another commit's logmarshal (the baseline)
sys.path.insert(
    0,
    sys.argv[sys.argv.index("--code") + 1]
    if "--code" in sys.argv
    else str(Path(__file__).resolve().parent.parent),
)

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler

TOPIC = "bench"
ROOT = Path(__file__).resolve().parent.parent


def _wait(predicate: Callable[[], object], timeout: float) -> float:
    start = time.perf_counter()
    deadline = start + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("bench step did not finish")
        time.sleep(0.001)
    return time.perf_counter() - start


def amo_bound(window: int, verdict_ms: float, partitions: int = 4) -> float:
    """The most AMO can read (msg/s over ``partitions`` read at one pace) with one
    reservation in flight a partition (``core.delivery.AtMostOnce``) and a reservation's
    verdict replayed ``verdict_ms`` after its write.

    The next reservation is written once the last one's verdict is replayed, through
    ``window`` records past what was handed out then; until its own verdict, one round trip
    R later, only what the last one reserved can be handed out: ``window - r*R`` records at
    a partition's rate r, as r*R went during the last round trip. Never waiting needs
    ``window - r*R >= r*R``: r <= window / (2R)."""
    return partitions * window / (2 * verdict_ms / 1000) if verdict_ms > 0 else float("inf")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _produce(cluster: EmbeddedCluster, partition: int, count: int) -> None:
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        cluster.produce(
            TOPIC,
            partition,
            [NewRecord(value=b"x" * 100, timestamp=int(time.time() * 1000)) for _ in range(n)],
        )


def failover(runs: int, hb: float) -> list[float]:
    """Two members on 4 partitions; one stops dead; time until the other owns all 4."""
    out = []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as d, EmbeddedCluster(d, maintenance_interval=0) as c:
            c.create_topic(TOPIC, 4)
            ms = [Marshaler(c, f"m{i}", "g", hb, fetch_wait=0.1) for i in range(2)]
            cs = [Consumer(ms[0], TOPIC, max_claims=2, greedy=True)]
            _wait(lambda cs=cs: len(cs[0].claims()) == 2, 10)
            cs.append(Consumer(ms[1], TOPIC, greedy=True))  # takes the other two, then all
            _wait(lambda cs=cs: all(len(x.claims()) == 2 for x in cs), 10)
            time.sleep((run % 5) / 5 * hb)  # stop at different points of the heartbeat cycle
            cs[0].close(release=False)
            ms[0].close()
            out.append(_wait(lambda cs=cs: len(cs[1].claims()) == 4, 10 + 4 * hb))
            cs[1].close()
            ms[1].close()
    return out


def own_idle(partitions: int, greedy: bool, hb: float) -> float:
    with tempfile.TemporaryDirectory() as d, EmbeddedCluster(d, maintenance_interval=0) as c:
        c.create_topic(TOPIC, partitions)
        m = Marshaler(c, "a", "g", hb, fetch_wait=0.1)
        assert m.wait_caught_up(5)
        start = time.perf_counter()
        consumer = Consumer(m, TOPIC, greedy=greedy)
        _wait(lambda: len(consumer.claims()) == partitions, 120)
        took = time.perf_counter() - start
        consumer.close()
        m.close()
        return took


def handoff(runs: int, hb: float) -> list[float]:
    """close() of the holder until the successor hands out the next message."""
    out = []
    with tempfile.TemporaryDirectory() as d, EmbeddedCluster(d, maintenance_interval=0) as c:
        c.create_topic(TOPIC, 1)
        _produce(c, 0, 10 * runs)
        offset = 0
        for run in range(runs):
            first_m = Marshaler(c, f"first{run}", "g", hb, fetch_wait=0.1)
            first = Consumer(first_m, TOPIC)
            _wait(lambda first=first: first.claims(), 10)
            for message in first.poll(2.0, max_records=5):
                first.commit(message)
                offset = message.offset
            successor_m = Marshaler(c, f"next{run}", "g", hb, fetch_wait=0.1)
            successor = Consumer(successor_m, TOPIC)
            time.sleep(0.1)
            got: list = []
            arrived: list[float] = []

            def wait_for_next(successor=successor, got=got, arrived=arrived) -> None:
                while not got:
                    got.extend(successor.poll(5.0, max_records=1))
                arrived.append(time.perf_counter())

            waiter = threading.Thread(target=wait_for_next)
            waiter.start()  # the successor polls all along, as a real one would
            start = time.perf_counter()
            first.close()  # returns once its fetchers have stopped; the handoff is earlier
            waiter.join(10)
            out.append(arrived[0] - start)
            assert got[0].offset == offset + 1, (got[0].offset, offset)
            successor.close()  # the next round's first member resumes after it
            first_m.close()
            successor_m.close()
    return out


def throughput(mode: str, batch: int, count: int, hb: float) -> float:
    with tempfile.TemporaryDirectory() as d, EmbeddedCluster(d, maintenance_interval=0) as c:
        c.create_topic(TOPIC, 1)
        _produce(c, 0, count)
        m = Marshaler(c, "a", "g", hb, fetch_wait=0.1)
        consumer = Consumer(m, TOPIC, mode=mode, batch_size=batch)  # type: ignore[arg-type]
        _wait(lambda: consumer.claims(), 10)
        got = 0
        start = time.perf_counter()
        while got < count:
            for message in consumer.poll(1.0):
                consumer.commit(message)
                got += 1
        rate = count / (time.perf_counter() - start)
        consumer.close()
        m.close()
        return rate


# -- over the network -----------------------------------------------------------------------

NET_PARTITIONS = 4
#: the Consumer's batch size in every network row
NET_BATCH = 500
READERS = ("kcat", "raw-default", "raw-reader", "raw-amo", "alo-batch", "alo-each", "amo")
#: readers that need Kafka's group offsets (OffsetCommit), which logmarshal's broker refuses
#: by design (a group's positions live in ``__marshal``): run with ``--kafka`` only
KAFKA_ONLY = ("raw-amo",)
#: the raw loop the Consumer rows are compared with
BASELINE = "raw-reader"


def _raw_settings(kind: str, bootstrap: str) -> dict[str, object]:
    """librdkafka's defaults (``raw-default``), or exactly what the Consumer's reader sets
    (``raw-reader``, ``raw-amo``: ``consumer_settings`` over NetworkCluster's base settings;
    ``raw-amo`` in a group of its own, whose offsets it commits)."""
    base = {"bootstrap.servers": bootstrap, "log_level": 3}
    if kind in ("raw-reader", "raw-amo"):
        from logmarshal.network.settings import consumer_settings

        group = "bench-raw" if kind == "raw-reader" else f"bench-raw-amo-{os.getpid()}"
        # (enable.auto.commit is off there: raw-amo commits each batch itself)
        return consumer_settings({**base, "log.connection.close": False}, group, committed=True)
    return {**base, "group.id": "bench-raw", "enable.auto.commit": False}


#: --primed: how long a reader waits, once it reads every partition, before the clock starts
PRIMED_WAIT = 1.0


def _worker(kind: str, bootstrap: str, count: int, primed: bool = False) -> dict[str, float]:
    """Read ``count`` records of the bench topic once; runs in a fresh process.

    The rate is the read path's: from the moment the first records are in hand to the
    moment the last are (ALO: and committed), not counting the first call's records. What
    comes before (raw: connecting and the first fetch; the Consumer: joining the group and
    claiming its partitions through ``__marshal``, coordination round trips) is ``start_s``,
    and the reader's close (the Consumer: releasing its claims, then the Marshaler's replay
    ending its long poll) is ``close_s``; both are reported beside the rate, not in it.

    ``primed``: the clock starts ``PRIMED_WAIT`` after every partition is read (raw:
    assigned; the Consumer: claimed, before its first poll), so that both start with their
    buffers full. The Consumer starts with a little more on hand (its read-ahead and its
    core's buffer: up to ~5,000 records a partition beside librdkafka's queue, which both
    have)."""
    latencies: list[float] = []
    trips: _RoundTrips | None = None  # AMO: its coordination round trips
    first = last = cpu = 0.0
    got = skipped = 0
    full = _FullCollections()
    opened = time.perf_counter()
    if kind.startswith("raw"):
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition

        # group.id: required, unused (assign() and no commits)
        raw = KafkaConsumer(_raw_settings(kind, bootstrap))
        raw.assign([TopicPartition(TOPIC, p, 0) for p in range(NET_PARTITIONS)])
        if primed:
            time.sleep(PRIMED_WAIT)
        amo = kind == "raw-amo"
        while got < count:
            t = time.perf_counter()
            n = 0
            messages = raw.consume(500, 1.0)
            if amo and messages:
                # at-most-once as Kafka's documentation has it: commit what was read, then
                # process it (a crash loses at most this batch), one commit round trip a call
                ends: dict[int, int] = {}
                for message in messages:
                    if message.error() is None:
                        ends[message.partition()] = message.offset() + 1
                if ends:
                    raw.commit(
                        offsets=[TopicPartition(TOPIC, p, o) for p, o in ends.items()],
                        asynchronous=False,
                    )
            for message in messages:
                if message.error() is None:
                    message.value()
                    n += 1
            last = time.perf_counter()
            if n and not first:
                first, cpu, skipped = last, time.process_time(), n
                full.start()
            elif first:
                latencies.append(last - t)
            got += n
        cpu = time.process_time() - cpu
        full.stop()
        closing = time.perf_counter()
        raw.close()
    else:
        import logmarshal
        from logmarshal.consumer import Consumer
        from logmarshal.marshaler import Marshaler

        cluster = logmarshal.connect(bootstrap=bootstrap)
        m = Marshaler(cluster, "bench", f"bench-{kind}-{os.getpid()}", 2.0)
        m.wait_caught_up(30)
        mode = "amo" if kind.startswith("amo") else "alo"
        window = {"max_reserved": int(kind[4:])} if kind.startswith("amo-") else {}
        trips = _RoundTrips(m) if mode == "amo" else None
        consumer = Consumer(m, TOPIC, mode=mode, batch_size=NET_BATCH, greedy=True, **window)  # type: ignore[arg-type]
        each = kind == "alo-each"
        if primed:
            deadline = time.monotonic() + 60
            while len(consumer.claims()) < NET_PARTITIONS:
                if time.monotonic() > deadline:
                    raise SystemExit(f"claimed {consumer.claims()} in 60 s")
                time.sleep(0.01)
            time.sleep(PRIMED_WAIT)
        while got < count:
            t = time.perf_counter()
            batch = consumer.poll(1.0)
            polled = time.perf_counter()
            if mode == "alo" and batch:
                if each:
                    for message in batch:
                        consumer.commit(message)
                else:
                    consumer.commit(*batch)
            last = time.perf_counter()
            if batch and not first:
                first, cpu, skipped = last, time.process_time(), len(batch)
                full.start()
            elif first:
                latencies.append(polled - t)
            got += len(batch)
        cpu = time.process_time() - cpu
        full.stop()
        closing = time.perf_counter()
        consumer.close()
        m.close()
        cluster.close()
    trip = trips.figures() if trips is not None else {}
    return {
        **trip,
        **full.figures(),
        "rate": (got - skipped) / (last - first),
        "cpu": cpu,
        "start_s": first - opened,
        "close_s": time.perf_counter() - closing,
        "p50_ms": _pct(latencies, 0.5) * 1000 if latencies else 0.0,
        "p99_ms": _pct(latencies, 0.99) * 1000 if latencies else 0.0,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


class _FullCollections:
    """The cyclic GC's full collections (generation 2) while a reader reads, from its first
    records to its last, and the time they took: each walks every tracked object of the
    process (docs/performance.md, History, "Network consumer", "Garbage collection")."""

    def __init__(self) -> None:
        self.count, self.seconds, self._began = 0, 0.0, 0.0
        self._on = False
        gc.callbacks.append(self._noted)

    def start(self) -> None:
        self._on = True

    def stop(self) -> None:
        self._on = False
        if self._noted in gc.callbacks:
            gc.callbacks.remove(self._noted)

    def _noted(self, phase: str, info: dict) -> None:
        if not self._on or info.get("generation") != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._began

    def figures(self) -> dict[str, float]:
        return {"gc2": self.count, "gc2_ms": self.seconds * 1000}


class _RoundTrips:
    """An AMO worker's coordination round trips, timed: from handing a write to
    ``__marshal`` over to its acknowledgement, and to the replay applying it (the verdict
    that lets a reserved window be handed out). Wraps the Marshaler's asynchronous write."""

    def __init__(self, marshaler: Marshaler) -> None:
        self._open: dict[tuple[int, int], tuple[float, float]] = {}
        self._lock = threading.Lock()
        self.acked: list[float] = []
        self.replayed: list[float] = []
        self.writes = 0
        write = marshaler.write_records_async

        def timed(batches, done):  # (the Marshaler's own signature)
            sent = time.perf_counter()
            self.writes += 1

            def answered(finish):
                acked = time.perf_counter()

                def landed():
                    out = finish()
                    with self._lock:
                        for cp, where in out.items():
                            for at in where if isinstance(where, list) else ():
                                self._open[(cp, at.offset)] = (sent, acked)
                    return out

                done(landed)

            return write(batches, answered)

        marshaler.write_records_async = timed  # type: ignore[method-assign]
        marshaler.add_listener(self._applied)

    def _applied(self, cp: int, applied: int) -> None:
        now = time.perf_counter()
        with self._lock:
            for key in [k for k in self._open if k[0] == cp and k[1] <= applied]:
                sent, acked = self._open.pop(key)
                self.acked.append(acked - sent)
                self.replayed.append(now - sent)

    def figures(self) -> dict[str, float]:
        with self._lock:
            return {
                "records": len(self.replayed),
                "writes": self.writes,
                "ack_ms": _pct(self.acked, 0.5) * 1000 if self.acked else 0.0,
                "verdict_ms": _pct(self.replayed, 0.5) * 1000 if self.replayed else 0.0,
            }


def _run_reader(
    kind: str, bootstrap: str, count: int, code: Path | None = None, primed: bool = False
) -> dict:
    if kind == "kcat":
        argv = ["kcat", "-b", bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q"]
        start = time.perf_counter()
        out = subprocess.run([*argv, "-f", "%o\n"], capture_output=True, timeout=600)
        elapsed = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        return {"rate": out.stdout.count(b"\n") / elapsed, "rss_mb": rss}
    argv = [sys.executable, __file__, "--network-worker", kind, bootstrap, str(count)]
    if primed:
        argv.append("primed")
    if code is not None:
        argv += ["--code", str(code)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def _broker(kind: str, data: str) -> Iterator[str]:
    """logmarshal's broker (``kind == "logmarshal"``) or a single-node Apache Kafka
    (``"kafka"``, from the Maven jars), on 127.0.0.1; yields its bootstrap, stops it by pid."""
    if kind == "kafka":
        from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster

        with KafkaCluster(Path(data) / "kafka", heap="1g") as kafka:
            print(f"Apache Kafka {KAFKA_VERSION}, one KRaft node, at {kafka.bootstrap}")
            yield kafka.bootstrap
        return
    from logmarshal.localbroker import LocalBroker

    with LocalBroker(Path(data) / "broker") as broker:
        print(broker.first_line())  # listening on 127.0.0.1:PORT
        yield broker.bootstrap


def network(
    count: int,
    baseline_ref: str | None,
    on: str = "logmarshal",
    primed: bool = False,
    amo_windows: tuple[int, ...] = (),
) -> None:
    from confluent_kafka import Producer

    import logmarshal
    from logmarshal.core.options import DEFAULT_RESERVED_BATCHES

    data = tempfile.mkdtemp(prefix="bench-net-")
    baseline: Path | None = None
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, data, ignore_errors=True)
        bootstrap = stack.enter_context(_broker(on, data))
        if baseline_ref:
            baseline = extract(baseline_ref, "consumer")
            stack.callback(shutil.rmtree, baseline, ignore_errors=True)
        with logmarshal.connect(bootstrap=bootstrap) as cluster:
            cluster.create_topic(TOPIC, NET_PARTITIONS)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 20,
                "batch.num.messages": 10_000,
                "log_level": 3,
            }
        )
        value = b"x" * 100
        for i in range(count):
            while True:
                try:
                    producer.produce(TOPIC, value, partition=i % NET_PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush()
        del producer  # closed here: not retrying its connection once the broker stops below
        print(
            f"{count:,} records of 100 B in {NET_PARTITIONS} partitions; each reader reads "
            "them all in a fresh process (poll/consume call latency; peak RSS)"
        )
        if on == "kafka":
            # Kafka's JVM compiles its read and write paths while the first readers run,
            # and the first Consumer also has __marshal created: a raw pass and a Consumer
            # pass, not counted, first, so that rows run early are not slower for it
            _run_reader("raw-reader", bootstrap, count)
            _run_reader("alo-batch", bootstrap, count)
        # each baseline row right after its own, so that drift (a JVM warming up, other
        # work on a shared machine) weighs on both alike
        rows: list[tuple[str, Path | None]] = []
        for kind in READERS:
            rows.append((kind, None))
            if baseline is not None and kind in ("alo-batch", "alo-each", "amo"):
                rows.append((kind, baseline))
            if kind == "amo":
                rows.extend((f"amo-{window}", None) for window in amo_windows)
        base: dict | None = None
        amo_base: dict | None = None  # raw-amo's (with --kafka): Kafka's own at-most-once loop
        for kind, code in rows:
            if kind == "kcat" and shutil.which("kcat") is None:
                print(f"  {'kcat':<28} not installed")
                continue
            if kind in KAFKA_ONLY and on != "kafka":
                print(
                    f"  {kind:<28} with --kafka only: logmarshal's broker refuses OffsetCommit "
                    "(a group's positions live in __marshal)"
                )
                continue
            r = _run_reader(kind, bootstrap, count, code, primed)
            if kind == BASELINE:
                base = r
            elif kind == "raw-amo":
                amo_base = r
            label = kind if code is None else f"{kind} @ {baseline_ref}"
            extra = (
                f"  cpu {r['cpu']:5.2f} s  call p50 {r['p50_ms']:6.2f} ms  "
                f"p99 {r['p99_ms']:6.2f} ms  start {r['start_s']:5.2f} s  "
                f"close {r['close_s']:5.2f} s  full GCs {r['gc2']:2.0f} "
                f"({r['gc2_ms']:4.0f} ms)"
                if "cpu" in r
                else ""
            )
            if base is not None and (kind == "raw-amo" or not kind.startswith(("raw", "kcat"))):
                extra += (
                    f"  = {r['rate'] / base['rate']:.2f}x rate, "
                    f"{r['p99_ms'] / base['p99_ms']:.1f}x p99 of {BASELINE}"
                )
            if amo_base is not None and kind.startswith("amo"):
                extra += f"; {r['rate'] / amo_base['rate']:.2f}x rate of raw-amo"
            print(f"  {label:<28} {r['rate']:>11,.0f} msg/s  rss {r['rss_mb']:6.0f} MB{extra}")
            if "verdict_ms" in r:
                window = (
                    int(kind[4:])
                    if kind.startswith("amo-")
                    else DEFAULT_RESERVED_BATCHES * NET_BATCH
                )
                print(
                    f"  {'':<28} {r['records']:,} coordination records in {r['writes']:,} "
                    f"writes, {count / max(r['records'], 1):,.0f} records handed out each; "
                    f"p50 acknowledged {r['ack_ms']:.1f} ms, verdict replayed "
                    f"{r['verdict_ms']:.1f} ms after the write; "
                    f"bound {amo_bound(window, r['verdict_ms'], NET_PARTITIONS):,.0f} msg/s "
                    f"({r['rate'] / amo_bound(window, r['verdict_ms'], NET_PARTITIONS):.2f} of it)"
                )
        print(
            "(rate, cpu and full GCs (the cyclic GC's full collections and their time): "
            "from the first records in hand to the last, ALO: committed; "
            "start: from the reader's creation to its first records (the Consumer: joining "
            "and claiming through __marshal); close: the reader's close; "
            "alo-*/amo: logmarshal Consumer, batch 500; raw: confluent-kafka consume(500), "
            "raw-reader with the Consumer's reader's librdkafka settings "
            "(logmarshal.network.settings.consumer_settings); raw-amo: the same loop "
            "at most once as Kafka's documentation has it, each batch's offsets committed "
            "(synchronously, to Kafka's group coordinator) before it is processed, at most "
            "a batch lost to a crash; goal: >= 0.8x rate, "
            "<= 2x p99 of raw-reader; amo-N: AMO with max_reserved N (default: 4 batches, "
            "2,000), at most N records of a partition lost to a crash; bound: what one "
            "reservation in flight a partition allows at that verdict time (amo_bound)"
            + (
                f"; primed: each clock started {PRIMED_WAIT:g} s after every partition was "
                "assigned (raw) or claimed (Consumer))"
                if primed
                else ")"
            )
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--network-worker"]:
        print(json.dumps(_worker(argv[1], argv[2], int(argv[3]), "primed" in argv[4:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--hb", type=float, default=0.5, help="heartbeat interval (default 0.5)")
    parser.add_argument(
        "--network",
        action="store_true",
        help="read over the network: Consumer vs kcat vs raw confluent-kafka",
    )
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="with --network: on a single-node Apache Kafka (logmarshal.localkafka) "
        "instead of logmarshal's broker",
    )
    parser.add_argument(
        "--count", type=int, default=1_000_000, help="records for --network (default 1,000,000)"
    )
    parser.add_argument(
        "--baseline-ref", help="also run this commit's Consumer, side by side in the same run"
    )
    parser.add_argument(
        "--primed",
        action="store_true",
        help="with --network: each reader's clock starts once it reads every partition "
        f"(the Consumer: has claimed them) and {PRIMED_WAIT:g} s more, buffers full",
    )
    parser.add_argument(
        "--amo-windows",
        default="",
        help="with --network: more AMO rows, one per max_reserved in this comma-separated "
        "list (e.g. 4000,8000): the rate a larger loss bound buys",
    )
    parser.add_argument("--embedded-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.network:
        try:
            windows = tuple(int(w) for w in args.amo_windows.split(",") if w.strip())
        except ValueError:
            parser.error(f"--amo-windows takes whole numbers, got {args.amo_windows!r}")
        if any(w < 1 for w in windows):
            parser.error("--amo-windows: each max_reserved must be at least 1")
        on = "kafka" if args.kafka else "logmarshal"
        network(args.count, args.baseline_ref, on, args.primed, windows)
        return 0
    if args.embedded_worker:
        print(json.dumps(embedded_figures(args.hb, args.quick)))
        return 0
    codes: list[tuple[str, Path | None]] = [("this commit", None)]
    baseline: Path | None = None
    if args.baseline_ref:
        baseline = extract(args.baseline_ref, "consumer")
        codes.append((f"@ {args.baseline_ref}", baseline))
    runs = 5 if args.quick else 20
    print(
        f"consumer benchmarks, HB = {args.hb} s, embedded cluster, {runs} runs where repeated; "
        "each column measured in a fresh process, one after the other"
    )
    try:
        figures = [_embedded_run(code, args.hb, args.quick) for _, code in codes]
    finally:
        if baseline is not None:
            shutil.rmtree(baseline, ignore_errors=True)
    _print_embedded([label for label, _ in codes], figures, args.hb)
    return 0


def embedded_figures(hb: float, quick: bool) -> dict[str, float]:
    """Every embedded figure of one Consumer implementation, in this process."""
    runs = 5 if quick else 20
    out: dict[str, float] = {}
    times = failover(runs, hb)
    out["failover p50 s"] = statistics.median(times)
    out["failover p99 s"] = _pct(times, 0.99)
    out["own 64 idle, greedy s"] = own_idle(64, True, hb)
    out["own 64 idle, one per pass s"] = own_idle(64, False, hb)
    times = handoff(runs, hb)
    out["handoff p50 ms"] = statistics.median(times) * 1000
    out["handoff p99 ms"] = _pct(times, 0.99) * 1000
    for batch in (1, 100, 500):
        count = 2_000 if batch == 1 else 50_000
        if quick:
            count //= 4
        for mode in ("alo", "amo"):
            out[f"{mode.upper()} batch {batch} msg/s"] = throughput(mode, batch, count, hb)
    return out


def _embedded_run(code: Path | None, hb: float, quick: bool) -> dict[str, float]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--embedded-worker", "--hb", str(hb)]
    if quick:
        argv.append("--quick")
    if code is not None:
        argv += ["--code", str(code)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_embedded(labels: list[str], figures: list[dict[str, float]], hb: float) -> None:
    width = max(len(k) for k in figures[0]) + 2
    print("".ljust(width) + "".join(f"{label:>16}" for label in labels))
    for key in figures[0]:
        cells = "".join(
            f"{f.get(key, float('nan')):>16,.3f}"
            if key.endswith(" s") or key.endswith(" ms")
            else f"{f.get(key, float('nan')):>16,.0f}"
            for f in figures
        )
        print(key.ljust(width) + cells)
    print(
        f"goals: failover <= 2·HB + 0.2 = {2 * hb + 0.2:.1f} s; own 64 idle greedy <= 0.5 s; "
        "handoff <= 50 ms; AMO >= 0.5 x ALO at batch 500"
    )


if __name__ == "__main__":
    sys.exit(main())
