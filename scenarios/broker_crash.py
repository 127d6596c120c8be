"""broker-crash: a producer writes acks=all while 2 consumers consume; the broker is SIGKILLed
mid-load, a torn write is appended to a partition's last segment, and the broker restarts on
the same data and port.

Checks: every acknowledged record is still there with its content, nothing of the torn write
is served, and the consumers resume with ALO / AMO kept. Real processes only (the harness of
:mod:`scenarios.process_harness`); also ``python -m scenarios.processes broker-crash``.

    python -m scenarios.broker_crash --seed 7 [--mode alo|amo] [--data-dir D] [--kafka] [-v]
"""

from __future__ import annotations

import re
import struct
import sys
import time
from pathlib import Path

from .common import OnKafka, Report, main_on_processes, wait_until
from .process_harness import procs

__all__ = ["main", "run"]

_VALUE = re.compile(rb"^(\d+):(\d+)$")


def _segment_end(path: Path) -> tuple[int, int, bytes | None]:
    """(byte length of the complete batches, next offset after them, the last batch)."""
    data = path.read_bytes()
    pos, end_offset, last = 0, None, None
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length < 49 or pos + 12 + length > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        end_offset = base + delta + 1
        last = data[pos : pos + 12 + length]
        pos += 12 + length
    if end_offset is None:
        end_offset = int(path.stem)
    return pos, end_offset, last


def _tear(partition_dir: Path, how: str) -> tuple[int, int]:
    """Append a torn write to the newest segment: a batch cut short (``short``) or complete
    but with a flipped byte (``crc``). Returns (valid end offset, bytes appended)."""
    segment = max(partition_dir.glob("*.log"))
    size, end, last = _segment_end(segment)
    if last is None:
        return end, 0
    batch = bytearray(last)
    struct.pack_into(">q", batch, 0, end)  # as if it were the next batch
    if how == "short":
        torn = bytes(batch[: len(batch) // 2 + 7])
    else:
        batch[-1] ^= 0xFF
        torn = bytes(batch)
    with open(segment, "r+b") as f:
        f.truncate(size)  # anything unparseable already there stays out of the count
        f.seek(size)
        f.write(torn)
    return end, len(torn)


def run(
    seed: int, *, mode: str, data_dir: str | None = None, kafka: OnKafka | None = None
) -> Report:
    """On Apache Kafka (``kafka``, a node of the run's own) the same: its node is SIGKILLed
    (:meth:`KafkaCluster.kill`), the torn write appended to the same files (the same record
    batch format and directory layout), and it restarts on the same data and ports; Kafka's
    recovery of an unclean shutdown must cut the torn write off as logmarshal's does."""
    if kafka is not None and kafka.bootstrap:
        raise ValueError("broker-crash kills the broker: it needs a Kafka of its own (--kafka)")
    hb = 1.0
    partitions = 4
    with procs(
        "broker-crash",
        seed,
        mode=mode,
        hb=hb,
        partitions=partitions,
        data_dir=data_dir,
        kafka=kafka,
    ) as h:
        report = h.report
        h.connect()
        consumers = [h.member(f"c{i}") for i in range(2)]
        if not report.check("the consumers start", h.joined(consumers)):
            return report
        producer = h.producer(per_partition=300, seconds=3.0)
        kill_after = h.rng.randint(100, 500)  # acknowledged records
        wait_until(lambda: len(producer.log().acked) >= kill_after, 20, step=0.02)
        acked_before = len(producer.log().acked)
        h.crash_broker()
        killed_at = time.monotonic()
        report.figures["acknowledged before the kill"] = acked_before
        torn_partition = h.rng.randrange(partitions)
        how = h.rng.choice(["short", "crc"])
        valid_end, appended = _tear(h.partition_dir(h.topic, torn_partition), how)
        coord_torn = None
        if h.rng.random() < 0.5:
            coord_torn = h.rng.randrange(8)
            _tear(h.partition_dir("__marshal", coord_torn), h.rng.choice(["short", "crc"]))
        time.sleep(h.rng.uniform(0.0, 1.0))
        h.restart_broker()
        restarted_at = time.time()
        report.figures["broker down seconds"] = time.monotonic() - killed_at
        assert h.cluster is not None
        end_now = h.cluster.latest_offset(h.topic, torn_partition)
        report.check(
            f"the torn write ({how}, {appended} bytes on {h.topic}/{torn_partition}"
            + (f", and on __marshal/{coord_torn}" if coord_torn is not None else "")
            + ") is cut off at restart",
            end_now == valid_end,
            f"log end {end_now}, last complete batch ends at {valid_end}",
        )
        done = wait_until(lambda: producer.log().exited, 60, step=0.05)
        report.check("the producer finishes (it rides out the outage)", done)
        acked = producer.log().acked
        # read everything back and compare with what was acknowledged
        served: dict[tuple[int, int], bytes] = {}
        ends = {}
        for p in range(partitions):
            ends[p] = h.cluster.latest_offset(h.topic, p)
            offset = 0
            while offset < ends[p]:
                batch = h.cluster.fetch(h.topic, p, offset, max_wait=1.0)
                if not batch:
                    break
                for m in batch:
                    served[(p, m.offset)] = m.value or b""
                offset = batch[-1].offset + 1
        missing = [k for k in acked if k not in served]
        changed = [k for k, v in acked.items() if k in served and served[k] != v.encode()]
        report.check(
            f"every acknowledged record is there with its content ({len(acked)})",
            not missing and not changed,
            f"{len(missing)} missing, e.g. {missing[:5]}; {len(changed)} changed, e.g. {changed[:5]}",
        )
        bad = [
            k for k, v in served.items() if not _VALUE.match(v) or int(_VALUE.match(v)[1]) != k[0]
        ]
        holes = [p for p in range(partitions) if len([k for k in served if k[0] == p]) != ends[p]]
        report.check(
            "every served record is one the producer wrote, with no gaps",
            not bad and not holes,
            f"bad {bad[:5]}, gaps in {holes}",
        )
        report.figures["records stored but never acknowledged"] = len(served) - len(acked)
        h.produced = ends
        drained = wait_until(lambda: h.drained(consumers), 30)
        report.check("the consumers resume and reach the end", drained)
        report.figures["recovery seconds (kill to drained)"] = time.monotonic() - killed_at
        report.figures["first hand-out after the restart (s)"] = (
            min(
                (
                    x.handed_at
                    for m in consumers
                    for x in m.log().handed
                    if x.handed_at > restarted_at
                ),
                default=float("nan"),
            )
            - restarted_at
        )
        h.one_holder_each(consumers)
        h.delivery(consumers)
        return report


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.broker_crash --seed N [--mode alo|amo] [--data-dir D] [-v]``."""
    return main_on_processes(
        "python -m scenarios.broker_crash", argv, {"broker-crash": run}, "broker-crash"
    )


if __name__ == "__main__":
    sys.exit(main())
