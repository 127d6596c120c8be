"""Cost of the broker's idempotence checks: confluent-kafka produce with idempotence off and on.

Same broker process, same run, one partition per case, acks=all (idempotence requires it),
100 B records. The "off" row is the baseline; "on" adds InitProducerId, sequence checks and
the per-partition producer state. Figures, not pass/fail: run ``python3 bench/idempotence.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logmarshal.localbroker import LocalBroker


def produce(bootstrap: str, topic: str, n: int, size: int, idempotent: bool) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor=1)])[topic].result(10)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": idempotent,
        }
    )
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        try:
            producer.produce(topic, value, partition=0)
        except BufferError:
            producer.poll(0.01)
            producer.produce(topic, value, partition=0)
    if producer.flush(120):
        raise RuntimeError("not everything was delivered")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    size = 100
    print(
        f"bench/idempotence.py  python {sys.version.split()[0]}  cores {os.cpu_count()}  "
        f"{args.records:,} records of {size} B, acks=all"
    )
    with tempfile.TemporaryDirectory(prefix="bench-idem-") as tmp:
        broker = LocalBroker(tmp, inherit_stderr=True).start()  # its stderr on this terminal
        bootstrap = broker.bootstrap
        try:
            for r in range(args.rounds):  # interleaved, so drift hits both alike
                for idem in (False, True):
                    s = produce(bootstrap, f"t{r}-{int(idem)}", args.records, size, idem)
                    label = "on " if idem else "off"
                    print(
                        f"  round {r}  idempotence {label}: {args.records / s / 1e6:6.3f} M msg/s"
                        f"  ({s:.2f} s)"
                    )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
