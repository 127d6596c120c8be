"""A scenario member in its own process: a consumer over the broker that records every
message it hands out, or a producer that records every acknowledged write.

    python -m scenarios.member consume --bootstrap H:P --client-id c0 --mode alo \
        --hb 0.5 --report c0.log [--start-file F] [--greedy] [--max-claims N] [--wake-lag S]
    python -m scenarios.member produce --bootstrap H:P --partitions 4 --per-partition 300 \
        --report producer.log [--start-file F]

The report is a text file of one event per line, flushed and fsynced after every batch, so
that whatever a SIGKILLed member handed out (AMO: recorded at hand-out time, before the
"handling") or a producer had acknowledged is known up to its death:

- ``I <instance_id> <time>``  the Marshaler is up (consume)
- ``H <partition> <offset> <poll_started> <handed_at>``  handed out by one poll
- ``C <time> <p,p,...>``  the partitions the consumer believes it holds (every ~0.1 s)
- ``F <time>``  the consumer knows it is fenced
- ``A <partition> <offset> <value>``  acknowledged by the broker (produce, acks=all)
- ``X <time>``  clean exit (after SIGTERM: commits flushed, claims released)
- ``W <time> <stalled seconds>``  the process woke from a stall (``--wake-lag``)

Times are ``time.time()``: the orchestrator compares them with its own and with log time
(LogAppendTime, the broker's wall clock on the same machine).

``--start-file``: the process imports everything, then waits for the file before it connects,
so the orchestrator can start it ahead and time the moment it joins without paying for
Python's start-up in the measurement.

``--wake-lag S`` (test only, the zombie scenario): after a stall (SIGSTOP, as a VM pause
does) the member's ``__marshal`` fetches lag S seconds, and the answer in flight when it
stopped is dropped and fetched again. Real processes promise no order after a thaw: this
makes the one that hurts (the consumer acts before its replay catches up) the likely one.
It wraps the cluster the Marshaler reads through; the library itself is not touched.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

from logmarshal import NewRecord
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.cluster import Columns, Message
from logmarshal.consumer import Consumer
from logmarshal.marshaler import DEFAULT_SNAPSHOT_RECORDS, Marshaler
from logmarshal.network import NetworkCluster
from rationalizer import PROTOCOL_VERSION

T = TypeVar("T")

GROUP = "scenario"
TOPIC = "events"


class _Report:
    """Append-only event file; each ``flush`` reaches the disk before it returns."""

    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, lines: list[str], sync: bool = True) -> None:
        with self._lock:
            self._file.write("".join(line + "\n" for line in lines))
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


class _WakeLag:
    """Notices a stall of this whole process (a gap in the monotonic clock between two
    beats, which a SIGSTOP leaves behind) and then holds ``__marshal`` fetches for ``lag``
    seconds. A beat thread keeps the gap short while the process runs; whichever thread
    runs first after a stall (the beat thread or a fetch returning) sees the gap."""

    #: a gap longer than this is a stall, not a busy machine (the scenarios stall > 2·HB)
    STALL = 0.4

    def __init__(self, lag: float, report: _Report, stop: threading.Event) -> None:
        self._lag = lag
        self._report = report
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._until = 0.0
        threading.Thread(
            target=self._beat_forever, args=(stop,), name="wake-lag", daemon=True
        ).start()

    def _beat_forever(self, stop: threading.Event) -> None:
        while not stop.wait(0.01):
            self.beat()

    def beat(self) -> float:
        """Note that the process runs; returns the monotonic time until which ``__marshal``
        fetches are held."""
        with self._lock:
            now = time.monotonic()
            gap = now - self._last
            self._last = now
            if gap > self.STALL:
                self._until = now + self._lag
                woke = True
            else:
                woke = False
            until = self._until
        if woke:
            self._report.write([f"W {time.time():.6f} {gap:.3f}"], sync=False)
        return until

    def hold(self) -> bool:
        """Wait out the lag if one is on; True if it waited."""
        wait = self.beat() - time.monotonic()
        if wait <= 0:
            return False
        time.sleep(wait)
        return True


class _LaggingCluster:
    """The member's cluster, with its ``__marshal`` fetches held by a :class:`_WakeLag`
    after a stall; an answer that arrives during the lag is dropped and fetched again (as
    after a VM pause, when the connection's answer in flight is lost). Everything else goes
    straight through."""

    def __init__(self, inner: NetworkCluster, lag: _WakeLag) -> None:
        self._inner = inner
        self._lag = lag

    def _held(self, topic: str, call: Callable[[], T]) -> T:
        if topic != COORDINATION_TOPIC:
            return call()
        self._lag.hold()
        answer = call()
        if self._lag.hold():
            answer = call()
        return answer

    def fetch(self, topic: str, partition: int, offset: int, **kw: Any) -> list[Message]:
        return self._held(topic, lambda: self._inner.fetch(topic, partition, offset, **kw))

    def fetch_columns(self, topic: str, partition: int, offset: int, **kw: Any) -> Columns:
        return self._held(topic, lambda: self._inner.fetch_columns(topic, partition, offset, **kw))

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        # spelled out: from Python 3.12 a runtime Protocol check does not see __getattr__
        return self._inner.delete_records(topic, before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _wait_start(path: str | None, stop: threading.Event) -> None:
    """Say we are imported (``PATH.ready``), then wait for ``PATH``."""
    if path is not None:
        with open(path + ".ready", "w"):
            pass
    while path is not None and not os.path.exists(path) and not stop.is_set():
        time.sleep(0.005)


def _consume(args: argparse.Namespace, report: _Report, stop: threading.Event) -> int:
    cluster = NetworkCluster(args.bootstrap, timeout=args.timeout)
    replay_cluster: Any = cluster
    if args.wake_lag:
        replay_cluster = _LaggingCluster(cluster, _WakeLag(args.wake_lag, report, stop))
    marshaler = Marshaler(
        replay_cluster,
        args.client_id,
        args.group,
        args.hb,
        fetch_wait=0.1,
        fetch_linger=args.fetch_linger,
        coordination_partitions=args.coordination_partitions,
        snapshot_records=args.snapshot_records or DEFAULT_SNAPSHOT_RECORDS,
    )
    consumer = Consumer(
        marshaler,
        args.topic,
        mode=args.mode,
        batch_size=args.batch_size,
        fetch_wait=0.1,
        greedy=args.greedy,
        max_claims=args.max_claims,
        rebalance=args.rebalance,
        rng=random.Random(f"{args.client_id}/{marshaler.instance_id}"),
        protocol_version=args.protocol_version,
    )
    report.write([f"I {marshaler.instance_id} {time.time():.6f}"])

    def watch() -> None:
        """Report the consumer's own view of its claims, and its fencing, as they change."""
        last: str | None = None
        fenced = False
        while not stop.wait(0.1):
            claims = ",".join(str(p) for _, p in consumer.claims())
            lines = []
            if claims != last:
                lines.append(f"C {time.time():.6f} {claims}")
                last = claims
            if consumer.fenced and not fenced:
                fenced = True
                lines.append(f"F {time.time():.6f}")
            if lines:
                report.write(lines, sync=False)

    watcher = threading.Thread(target=watch, name="scenario-watch", daemon=True)
    watcher.start()
    while not stop.is_set():
        started = time.time()
        batch = consumer.poll(0.1)
        if not batch:
            continue
        handed = time.time()
        # "handling" is recording; it reaches the disk before the ALO commit
        report.write([f"H {m.partition} {m.offset} {started:.6f} {handed:.6f}" for m in batch])
        for message in batch:
            consumer.commit(message)
    consumer.close()  # commits are flushed and every claim released
    marshaler.close()
    cluster.close()
    watcher.join(1)
    claims = ",".join(str(p) for _, p in consumer.claims())
    report.write([f"C {time.time():.6f} {claims}", f"X {time.time():.6f}"])
    return 0


def _produce(args: argparse.Namespace, report: _Report, stop: threading.Event) -> int:
    """Write ``per_partition`` records to every partition in small batches, acks=all, each
    value ``p:seq``; log every acknowledged offset with its value. A failed write (broker
    down) is retried with the same values: the retry may duplicate records the broker
    stored without answering, which the scenario allows (it checks acknowledged ones)."""
    cluster = NetworkCluster(args.bootstrap, timeout=args.timeout)
    rng = random.Random(args.seed)
    sent = dict.fromkeys(range(args.partitions), 0)
    pause = args.seconds / max(1, args.per_partition / args.batch)
    while not stop.is_set() and any(n < args.per_partition for n in sent.values()):
        for p in range(args.partitions):
            if stop.is_set() or sent[p] >= args.per_partition:
                continue
            n = min(args.batch, args.per_partition - sent[p], rng.randint(1, args.batch))
            values = [f"{p}:{sent[p] + i}".encode() for i in range(n)]
            records = [NewRecord(value=v, timestamp=int(time.time() * 1000)) for v in values]
            try:
                result = cluster.produce(args.topic, p, records, durable=True)
            except Exception as exc:
                logging.getLogger("scenarios.member").info("produce failed (%s); retrying", exc)
                time.sleep(0.1)
                continue
            if result.last_offset - result.base_offset + 1 != n:
                report.write([f"E {p} {result.base_offset} {result.last_offset} {n}"])
                continue
            report.write(
                [f"A {p} {result.base_offset + i} {v.decode()}" for i, v in enumerate(values)]
            )
            sent[p] += n
        time.sleep(pause)
    cluster.close()
    report.write([f"X {time.time():.6f}"])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.member")
    parser.add_argument("role", choices=["consume", "produce"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--start-file")
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--client-id", default="c0")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--group", default=GROUP)
    parser.add_argument("--mode", choices=["alo", "amo"], default="alo")
    parser.add_argument("--hb", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--max-claims", type=int)
    parser.add_argument("--rebalance", choices=["balanced", "none"], default="balanced")
    parser.add_argument("--coordination-partitions", type=int, default=8)
    parser.add_argument(
        "--fetch-linger",
        type=float,
        help="the replay's wait after an answer with records (Marshaler's "
        "fetch_linger; default its own)",
    )
    parser.add_argument("--snapshot-records", type=int, help="publish snapshots this often")
    parser.add_argument(
        "--protocol-version",
        type=int,
        default=PROTOCOL_VERSION,
        help="the newest protocol version whose records it writes (a cap)",
    )
    parser.add_argument(
        "--wake-lag", type=float, help="test only: __marshal fetches lag this long after a stall"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-partition", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.ERROR, logging.WARNING, logging.INFO][min(args.verbose, 2)],
        format=f"%(asctime)s {args.role}:{args.client_id} %(threadName)s %(levelname)s "
        "%(name)s: %(message)s",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _wait_start(args.start_file, stop)
    report = _Report(args.report)
    try:
        run = _consume if args.role == "consume" else _produce
        return run(args, report, stop)
    finally:
        report.close()


if __name__ == "__main__":
    sys.exit(main())
