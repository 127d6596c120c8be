"""Producer throughput: logmarshal.Producer against the client it stands on, in the same run.

    python bench/producer.py [--records N] [--size B] [--keys K] [--rounds R]

Figures, not pass/fail. Each round runs, one after the other on the same machine:

* **network**: ``logmarshal broker start`` on 127.0.0.1 (a subprocess, started and stopped
  here; with ``--kafka`` a single-node Apache Kafka from logmarshal.localkafka instead), fed
  by a raw confluent-kafka Producer with exactly the librdkafka settings of the Producer's
  own client (``linger.ms=5``, ``acks=1``, ``batch.size``, ``murmur2_random``; no delivery
  callback, ``poll(0)`` every 10,000 records, BufferError answered by a short poll), by the
  same raw loop with a Python ``on_delivery`` per record that keeps errors (what a raw user
  who wants failures reported writes), and by ``logmarshal.Producer`` over a
  ``NetworkCluster`` (its defaults: ``linger_ms=5``, acks=1), with ``send`` (a result per
  record) and with ``send_nowait`` (none; a failure raised by the next flush);
* **embedded**: ``EmbeddedCluster.produce`` of the same records in batches of 1,000 (each
  batch to the next partition, NewRecords built in the loop, as a caller would), and
  ``logmarshal.Producer`` on the embedded cluster (``send``, ``send_nowait``).

Every record is keyed (``--keys`` distinct keys, cycling; 0 = every key new) with a
``--size``-byte value; the topic has ``--partitions`` partitions, a fresh one per run. The
table gives the median over rounds of msg/s (until flush returned and every record is in the
log), the median of the per-round ratios of the Producer to the client it stands on (a ratio
within a round compares runs seconds apart), the sending thread's CPU per send
(``time.thread_time``, so other processes on a shared machine count less), the whole
process's CPU per record (librdkafka's threads, the Producer's sender) and the latency
of one send() call, p50/p99, sampled on every 100th send. On a shared machine quote the
ratios, which are measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from logmarshal import EmbeddedCluster, NewRecord, Producer  # noqa: E402

SAMPLE_EVERY = 100
NET_RAW = "network raw confluent-kafka"
NET_RAW_CB = "network raw, on_delivery per record"
NET_SEND = "network Producer.send"
NET_NOWAIT = "network Producer.send_nowait"
EMB_BASE = "embedded cluster.produce (batches of 1,000)"
EMB_SEND = "embedded Producer.send"
EMB_NOWAIT = "embedded Producer.send_nowait"


class Run:
    """One measured run: msg/s, CPU µs per send (sending thread; whole process, librdkafka's
    and the sender's threads included), sampled send latencies (ns)."""

    def __init__(
        self, n: int, seconds: float, cpu: float, process_cpu: float, samples: list[int]
    ) -> None:
        self.rate = n / seconds
        self.cpu_us = cpu / n * 1e6
        self.process_us = process_cpu / n * 1e6
        self.samples = samples


def _pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1000


def _measure(n: int, send: Callable[[int], object], finish: Callable[[], None]) -> Run:
    """Time ``send(i)`` for every i, sampling one call in SAMPLE_EVERY, then ``finish()``."""
    samples: list[int] = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    process0 = time.process_time()
    cpu0 = time.thread_time()
    for i in range(n):
        if i % SAMPLE_EVERY:
            send(i)
        else:
            t0 = clock()
            send(i)
            samples.append(clock() - t0)
    cpu = time.thread_time() - cpu0
    finish()
    return Run(n, time.perf_counter() - start, cpu, time.process_time() - process0, samples)


def raw_settings(bootstrap: str) -> dict[str, object]:
    """The librdkafka settings of ``logmarshal.Producer(NetworkCluster(bootstrap))``'s own
    client (its defaults: acks=1, linger 5 ms, batch.size 1,000,000, murmur2_random), built
    the way NetworkCluster.client_producer builds them."""
    from logmarshal.network.settings import client_producer_settings

    return client_producer_settings(
        {"bootstrap.servers": bootstrap, "log.connection.close": False, "log_level": 3},
        {
            "acks": "1",
            "enable.idempotence": False,
            "linger.ms": 5.0,
            "batch.size": 1_000_000,
            "partitioner": "murmur2_random",
        },
    )


def raw_confluent(
    bootstrap: str, topic: str, keys: list[bytes], value: bytes, callback: bool = False
) -> Run:
    """A raw confluent-kafka loop; ``callback``: with a Python delivery callback per record
    that keeps failures (checked after flush: none is expected)."""
    from confluent_kafka import Producer as KafkaProducer

    client = KafkaProducer(raw_settings(bootstrap))
    produce, poll = client.produce, client.poll
    errors: list[object] = []

    def on_delivery(error: object, message: object) -> None:
        if error is not None:
            errors.append(error)

    def send(i: int) -> None:
        while True:
            try:
                produce(topic, value, keys[i])
                break
            except BufferError:
                poll(0.01)
        if i % 10_000 == 0:
            poll(0)

    def send_reported(i: int) -> None:
        while True:
            try:
                produce(topic, value, keys[i], on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
        if i % 1_000 == 0:
            poll(0)

    def finish() -> None:
        if client.flush(60):
            raise RuntimeError("raw producer: records left after 60 s")
        if errors:
            raise RuntimeError(f"raw producer: {len(errors)} records failed: {errors[0]}")

    return _measure(len(keys), send_reported if callback else send, finish)


def producer_run(
    cluster: object, topic: str, keys: list[bytes], value: bytes, nowait: bool = False
) -> Run:
    producer = Producer(cluster)  # type: ignore[arg-type]
    send_one = producer.send_nowait if nowait else producer.send

    def send(i: int) -> None:
        send_one(topic, value, key=keys[i])

    try:
        return _measure(len(keys), send, producer.flush)
    finally:
        producer.close()


def cluster_produce(
    cluster: EmbeddedCluster, topic: str, keys: list[bytes], value: bytes, partitions: int
) -> Run:
    n = len(keys)
    start = time.perf_counter()
    process0 = time.process_time()
    cpu0 = time.thread_time()
    samples = []
    for b, first in enumerate(range(0, n, 1000)):
        now = time.time_ns() // 1_000_000
        records = [NewRecord(value, k, timestamp=now) for k in keys[first : first + 1000]]
        t0 = time.perf_counter_ns()
        cluster.produce(topic, b % partitions, records)
        samples.append((time.perf_counter_ns() - t0) // len(records))
    cpu = time.thread_time() - cpu0
    return Run(n, time.perf_counter() - start, cpu, time.process_time() - process0, samples)


def _fast_built() -> bool:
    """Whether the Producer's optional C helpers were built: without them the figures are
    the Python fallback's (``python setup.py build_ext --inplace`` builds them)."""
    try:
        import logmarshal._fastproduce  # noqa: F401
    except ImportError:
        return False
    return True


def _stored(cluster: object, topic: str, partitions: int) -> int:
    return sum(cluster.latest_offset(topic, p) for p in range(partitions))  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (0: all new)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-network", action="store_true")
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="the network rows on a single-node Apache Kafka (logmarshal.localkafka) instead "
        "of logmarshal's broker",
    )
    args = parser.parse_args()

    n = args.records
    value = b"v" * args.size
    distinct = args.keys if args.keys > 0 else n
    keys = [b"key-%08d" % (i % distinct) for i in range(n)]
    runs: dict[str, list[Run]] = {}

    def note(name: str, run: Run) -> None:
        runs.setdefault(name, []).append(run)
        print(
            f"  {name:<44} {run.rate:>11,.0f} msg/s  {run.cpu_us:6.2f} us/send  "
            f"{run.process_us:6.2f} us/record process cpu",
            flush=True,
        )

    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        network = None
        if not args.skip_network:
            from logmarshal.network import NetworkCluster

            if args.kafka:
                from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster

                broker = KafkaCluster(Path(tmp) / "kafka", heap="1g").start()
                print(f"Apache Kafka {KAFKA_VERSION}, one KRaft node, at {broker.bootstrap}")
            else:
                from logmarshal.localbroker import LocalBroker

                broker = LocalBroker(Path(tmp) / "broker", inherit_stderr=True).start()
                print(f"logmarshal's broker at {broker.bootstrap}")
            network = NetworkCluster(broker.bootstrap)
        embedded = None
        if not args.skip_embedded:
            embedded = EmbeddedCluster(Path(tmp) / "embedded", maintenance_interval=0)
        try:
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}", flush=True)
                if network is not None:
                    net_order = (NET_SEND, NET_NOWAIT)[:: 1 if r % 2 == 0 else -1]
                    for name in (NET_RAW, NET_RAW_CB, *net_order):
                        topic = f"{name.split()[-1]}-{r}"
                        network.create_topic(topic, args.partitions)
                        if name in (NET_RAW, NET_RAW_CB):
                            result = raw_confluent(
                                broker.bootstrap,  # type: ignore[union-attr]
                                topic,
                                keys,
                                value,
                                callback=name == NET_RAW_CB,
                            )
                        else:
                            result = producer_run(network, topic, keys, value, name == NET_NOWAIT)
                        stored = _stored(network, topic, args.partitions)
                        if stored != n:
                            raise RuntimeError(f"{name}: {stored} of {n} records stored")
                        note(name, result)
                if embedded is not None:
                    topic = f"produce-{r}"
                    embedded.create_topic(topic, args.partitions)
                    note(EMB_BASE, cluster_produce(embedded, topic, keys, value, args.partitions))
                    # alternate which Producer variant runs first (the data directory grows)
                    for name in (EMB_SEND, EMB_NOWAIT)[:: 1 if r % 2 == 0 else -1]:
                        topic = f"{name.split()[-1]}-{r}"
                        embedded.create_topic(topic, args.partitions)
                        result = producer_run(embedded, topic, keys, value, name == EMB_NOWAIT)
                        if _stored(embedded, topic, args.partitions) != n:
                            raise RuntimeError(f"{name}: records missing")
                        note(name, result)
        finally:
            if network is not None:
                network.close()
            if broker is not None:
                broker.stop()
            if embedded is not None:
                embedded.close()

    print()
    print(
        f"{n:,} keyed records ({distinct:,} distinct keys) x {args.size} B, "
        f"{args.partitions} partitions, network rows on "
        f"{'Apache Kafka' if args.kafka else 'logmarshal broker'}, "
        f"load average {os.getloadavg()[0]:.2f}, "
        f"logmarshal._fastproduce {'built' if _fast_built() else 'NOT built (Python fallback)'}, "
        f"median of {args.rounds} round(s)"
    )
    header = (
        f"{'':<44} {'msg/s':>11} {'ratio':>6} {'us/send':>8} {'us/rec':>7} "
        f"{'p50 us':>7} {'p99 us':>7}"
    )
    print(header)
    print("-" * len(header))
    pairs = [
        (NET_RAW, None),
        (NET_RAW_CB, NET_RAW),
        (NET_SEND, NET_RAW),
        (NET_NOWAIT, NET_RAW),
        (EMB_BASE, None),
        (EMB_SEND, EMB_BASE),
        (EMB_NOWAIT, EMB_BASE),
    ]
    for name, base in pairs:
        if name not in runs:
            continue
        rate = statistics.median(r.rate for r in runs[name])
        ratio = ""
        if base is not None:  # per round (the two ran seconds apart), then the median
            per_round = [a.rate / b.rate for a, b in zip(runs[name], runs[base], strict=True)]
            ratio = f"{statistics.median(per_round):.2f}"
        cpu = statistics.median(r.cpu_us for r in runs[name])
        process = statistics.median(r.process_us for r in runs[name])
        samples = [s for r in runs[name] for s in r.samples]
        print(
            f"{name:<44} {rate:>11,.0f} {ratio:>6} {cpu:>8.2f} {process:>7.2f} "
            f"{_pct(samples, 0.5):>7.2f} {_pct(samples, 0.99):>7.2f}"
        )
    print(
        "(us/send: CPU of the sending thread per record; us/rec: CPU of the whole process per "
        "record, until flush returned; cluster.produce's p50/p99 are per record of a "
        "1,000-record call)"
    )


if __name__ == "__main__":
    main()
