"""Consumer benchmarks: failover, claiming, handoff, ALO vs AMO throughput.

    python3 bench/consumer.py [--quick]

Figures, not pass/fail. Goals (ISSUE): failover <= 2·HB + 0.2 s; idle 64-partition topic
owned in <= 0.5 s greedy; handoff <= 50 ms; AMO throughput >= half of ALO at batch 500.
Everything runs on the embedded cluster in a temporary directory on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler

TOPIC = "bench"


def _wait(predicate: Callable[[], object], timeout: float) -> float:
    start = time.perf_counter()
    deadline = start + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("bench step did not finish")
        time.sleep(0.001)
    return time.perf_counter() - start


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
            cs = [Consumer(m, TOPIC, max_claims=2, greedy=True) for m in ms]
            _wait(lambda cs=cs: all(len(x.claims()) == 2 for x in cs), 10)
            time.sleep((run % 5) / 5 * hb)  # stop at different points of the heartbeat cycle
            cs[0].close(release=False)
            ms[0].close()
            cs[1]._max_claims = None  # the survivor may now take everything
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--hb", type=float, default=0.5, help="heartbeat interval (default 0.5)")
    args = parser.parse_args(argv)
    hb = args.hb
    runs = 5 if args.quick else 20
    print(f"consumer benchmarks, HB = {hb} s, embedded cluster, {runs} runs where repeated")

    times = failover(runs, hb)
    print(
        f"failover after an abrupt stop: p50 {statistics.median(times):.3f} s, "
        f"p99 {_pct(times, 0.99):.3f} s (goal <= 2·HB + 0.2 = {2 * hb + 0.2:.1f} s)"
    )
    greedy = own_idle(64, True, hb)
    print(f"own an idle 64-partition topic, greedy: {greedy:.3f} s (goal <= 0.5 s)")
    lazy = own_idle(64, False, hb)
    print(
        f"own an idle 64-partition topic, one claim per pass: {lazy:.3f} s "
        f"(passes every HB/4 ± 50%, by design)"
    )
    times = handoff(runs, hb)
    print(
        f"graceful handoff (close to successor's next message): p50 "
        f"{statistics.median(times) * 1000:.1f} ms, p99 {_pct(times, 0.99) * 1000:.1f} ms "
        f"(goal <= 50 ms)"
    )
    print("throughput, one partition, messages of 100 B:")
    rates = {}
    for batch in (1, 100, 500):
        count = 2_000 if batch == 1 else 50_000
        if args.quick:
            count //= 4
        for mode in ("alo", "amo"):
            rates[(mode, batch)] = throughput(mode, batch, count, hb)
        print(
            f"  batch {batch:>3}: ALO {rates[('alo', batch)]:>9,.0f} msg/s   "
            f"AMO {rates[('amo', batch)]:>9,.0f} msg/s   "
            f"AMO/ALO {rates[('amo', batch)] / rates[('alo', batch)]:.2f}"
        )
    print("(goal: AMO >= 0.5 x ALO at batch 500)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
