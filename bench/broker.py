"""Broker throughput: produce and consume through the broker with confluent-kafka.

Run ``python bench/broker.py [--quick]``. Figures, not pass/fail. In the same run:

* the broker (a subprocess, so it has its own core) fed by a confluent-kafka Producer
  (acks=1, and acks=all = flushed to disk before each answer) and drained by an assign-only
  Consumer, for 100 B and 1 KiB values;
* the raw storage path (PartitionLog append of pre-encoded batches / read), the ceiling;
* with ``--validation``: produce throughput with record-level validation on and off
  (kcat as the client, two brokers taking turns), and the storage append path alone;
* Redis Streams on loopback (Debian's redis-server, no persistence): XADD pipelined 1,000 at a
  time, and XREADGROUP COUNT 1000 - the baseline a user would otherwise pick. Skipped, saying
  so, when redis-server is not installed.

The Redis client is a minimal RESP client written here (pipelining over one socket) so that
the baseline is not slowed down by a client library the broker side does not pay for either.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logmarshal._ports import free_port
from logmarshal.localbroker import LocalBroker
from storage import DataDir, NewRecord, encode_batch

MB = 1_000_000


def _rate(n: int, size: int, seconds: float) -> tuple[float, float]:
    return n / seconds, n * size / seconds / MB


def _row(name: str, n: int, size: int, seconds: float) -> tuple[str, float, float]:
    msgs, mbs = _rate(n, size, seconds)
    print(f"  {name:<44} {msgs:>12,.0f} msg/s {mbs:>9.1f} MB/s")
    return name, msgs, mbs


def bench_broker(bootstrap: str, n: int, size: int, acks: str, topic: str) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor=1)])[topic].result(10)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    value = b"x" * size
    produce = producer.produce
    start = time.perf_counter()
    for _ in range(n):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value, partition=0)
    producer.flush(120)
    produce_s = time.perf_counter() - start

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            # librdkafka's default fetch sizes: larger partition fetches (16 MB) measured
            # 6x slower here, in the client.
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < n:
        # consume() returns early only when the count is reached: never ask for more than is left
        got += len(consumer.consume(min(n - got, 50_000), 5.0))
    consume_s = time.perf_counter() - start
    consumer.close()
    return produce_s, consume_s


# ---------------------------------------------------------------------------------- storage


def bench_storage(n: int, size: int) -> tuple[float, float]:
    batch_records = min(5000, 1_000_000 // (size + 20))
    value = b"x" * size
    batch = encode_batch([NewRecord(value, timestamp=int(time.time() * 1000))] * batch_records)
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp, DataDir(tmp) as d:
        d.create_topic("s", 1)
        plog = d.partition("s", 0)
        start = time.perf_counter()
        for _ in range(n // batch_records):
            plog.append(batch)
        append_s = time.perf_counter() - start
        start = time.perf_counter()
        offset, total = 0, 0
        end = plog.log_end_offset
        while offset < end:
            data = plog.read(offset, 16 * MB).data
            # walk batch headers only: a broker serves bytes, it never decodes records
            pos = 0
            while pos < len(data):
                length = int.from_bytes(data[pos + 8 : pos + 12], "big")
                last = int.from_bytes(data[pos + 23 : pos + 27], "big")
                offset = int.from_bytes(data[pos : pos + 8], "big") + last + 1
                total += last + 1
                pos += length + 12
        read_s = time.perf_counter() - start
    return append_s, read_s


# ---------------------------------------------------------------------------------- redis


class Resp:
    """Just enough RESP2 to pipeline commands and count replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    @staticmethod
    def command(*parts: bytes) -> bytes:
        out = [b"*%d\r\n" % len(parts)]
        for p in parts:
            out.append(b"$%d\r\n%s\r\n" % (len(p), p))
        return b"".join(out)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 20)
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exactly(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected RESP {line!r}")


def bench_redis(n: int, size: int) -> tuple[float, float] | None:
    server = shutil.which("redis-server")
    if server is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client = Resp(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        value = b"x" * size
        chunk = 1000
        xadd = Resp.command(b"XADD", b"s", b"*", b"v", value) * chunk
        start = time.perf_counter()
        for _ in range(n // chunk):
            client.sock.sendall(xadd)
            for _ in range(chunk):
                client.reply()
        produce_s = time.perf_counter() - start
        client.sock.sendall(Resp.command(b"XGROUP", b"CREATE", b"s", b"g", b"0"))
        client.reply()
        read = Resp.command(
            b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"1000", b"STREAMS", b"s", b">"
        )
        got = 0
        start = time.perf_counter()
        while got < n:
            client.sock.sendall(read)
            streams = client.reply()
            got += len(streams[0][1])
        consume_s = time.perf_counter() - start
        return produce_s, consume_s
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------------------------- main


# ------------------------------------------------------------------- record validation


def _kcat_produce(kcat: str, bootstrap: str, topic: str, lines: str, codec: str) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor=1)])[topic].result(10)
    start = time.perf_counter()
    subprocess.run(
        [
            kcat,
            "-b",
            bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-l",
            lines,
            "-z",
            codec,
            "-X",
            "linger.ms=5",
            "-X",
            "batch.num.messages=10000",
            "-X",
            "queue.buffering.max.messages=1000000",
        ],
        check=True,
        timeout=600,
    )
    return time.perf_counter() - start


def bench_validation(n: int, rounds: int) -> None:
    """Produce throughput with record validation on and off, kcat as the client, same run.

    Two brokers (one started with --no-record-validation) take turns, ``rounds`` times each;
    the median is printed. Then the storage path alone (PartitionLog.append of 100-record
    batches), where the validation's share is not diluted by the network.
    """
    import statistics

    from storage import PartitionLog, TopicConfig

    kcat = shutil.which("kcat")
    size = 100
    print(f"\nrecord validation: {n:,} records of {size} B, median of {rounds}")
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        if kcat is None:
            print("  kcat runs skipped: kcat is not installed (apt-get install kcat)")
        else:
            lines = os.path.join(tmp, "lines")
            with open(lines, "w") as f:
                for i in range(n):
                    f.write(f"{i:0{size - 1}d}\n")
            # the broker's stderr stays on this terminal
            on = LocalBroker(os.path.join(tmp, "on"), inherit_stderr=True).start()
            off = LocalBroker(
                os.path.join(tmp, "off"), args=["--no-record-validation"], inherit_stderr=True
            ).start()
            try:
                for codec in ("none", "zstd"):
                    times: dict[str, list[float]] = {"on": [], "off": []}
                    for r in range(rounds):
                        for name, broker in (("off", off), ("on", on)):
                            topic = f"v-{codec}-{r}"
                            times[name].append(
                                _kcat_produce(kcat, broker.bootstrap, topic, lines, codec)
                            )
                    for name in ("off", "on"):
                        label = f"kcat produce, codec {codec}, validation {name}"
                        _row(label, n, size, statistics.median(times[name]))
            finally:
                on.stop()
                off.stop()
        per_batch = 100
        batches = [
            encode_batch(
                [NewRecord(b"x" * size, key=b"k%d" % i, timestamp=1) for i in range(per_batch)]
            )
        ] * (n // per_batch)
        # off and on take turns, as the brokers do: load from elsewhere hits both alike
        appends: dict[bool, list[float]] = {False: [], True: []}
        for r in range(rounds):
            for validate in (False, True):
                plog = PartitionLog(
                    os.path.join(tmp, f"s-{validate}-{r}"),
                    TopicConfig(),
                    lambda: 0,
                    validate_records=validate,
                )
                start = time.perf_counter()
                for b in batches:
                    plog.append(b)
                appends[validate].append(time.perf_counter() - start)
                plog.close()
        for validate in (False, True):
            _row(
                f"storage append, {per_batch}-record batches, validation {'on' if validate else 'off'}",
                len(batches) * per_batch,
                size,
                statistics.median(appends[validate]),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records (smoke run)")
    parser.add_argument(
        "--validation",
        action="store_true",
        help="only measure record validation's cost (kcat produce, validation on vs off)",
    )
    args = parser.parse_args()
    if args.validation:
        from storage._validation import FAST_WALK

        print(
            f"bench/broker.py --validation  python {sys.version.split()[0]}  cores {os.cpu_count()}"
            f"  record walk: {'C (storage._fastrecords)' if FAST_WALK else 'Python'}"
        )
        bench_validation(200_000 if args.quick else 2_000_000, 3 if args.quick else 5)
        return
    sizes = {100: 2_000_000, 1024: 500_000}
    if args.quick:
        sizes = {100: 200_000, 1024: 50_000}
    print(f"bench/broker.py  python {sys.version.split()[0]}  cores {os.cpu_count()}")
    results: dict[tuple[int, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        broker = LocalBroker(tmp, inherit_stderr=True).start()  # its stderr on this terminal
        try:
            for size, n in sizes.items():
                print(f"\n{n:,} records of {size} B")
                for acks in ("1", "all"):
                    produce_s, consume_s = bench_broker(
                        broker.bootstrap, n, size, acks, f"b{size}-{acks}"
                    )
                    _, p, _ = _row(f"broker produce (confluent, acks={acks})", n, size, produce_s)
                    _, c, _ = _row(
                        f"broker consume (confluent, acks={acks} data)", n, size, consume_s
                    )
                    results[(size, f"produce-{acks}")] = p
                    results[(size, f"consume-{acks}")] = c
                append_s, read_s = bench_storage(n, size)
                _row("raw storage append (PartitionLog, 1 MB batches)", n, size, append_s)
                _row("raw storage read (PartitionLog, batch walk)", n, size, read_s)
                redis = bench_redis(n, size)
                if redis is None:
                    print(
                        "  redis baseline skipped: redis-server is not installed "
                        "(apt-get install redis-server)"
                    )
                    continue
                _, rp, _ = _row("redis streams XADD (pipelined 1000)", n, size, redis[0])
                _, rc, _ = _row("redis streams XREADGROUP (COUNT 1000)", n, size, redis[1])
                print(
                    f"  ratio broker/redis: produce {results[(size, 'produce-1')] / rp:.2f}x "
                    f"(acks=all {results[(size, 'produce-all')] / rp:.2f}x), "
                    f"consume {results[(size, 'consume-1')] / rc:.2f}x"
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
