"""Storage throughput: PartitionLog append/read versus plain sequential file I/O.

Run ``python bench/storage.py [--quick]``. Figures, not pass/fail. Batches are encoded
before the timed append loop (a broker receives encoded bytes); the cost of encoding is
printed on its own line so nobody mistakes append speed for end-to-end produce speed.
The baseline writes the very same bytes with buffered ``file.write`` (and, for the fsync
rows, ``flush`` + ``os.fsync`` after every batch); the read baseline reads the segment
file back in 1 MiB chunks. Both run against the page cache of the same temp directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import DataDir, NewRecord, TopicConfig, encode_batch

MiB = 1024 * 1024
_HEAD = struct.Struct(">qi")
_DELTA = struct.Struct(">i")
POOL = 8  # distinct pre-encoded batches cycled through


def make_pool(record_size: int, batch_size: int) -> list[bytes]:
    pool = []
    for k in range(POOL):
        value = (bytes([65 + k]) * record_size)[:record_size]
        recs = [NewRecord(value, timestamp=1_700_000_000_000 + i) for i in range(batch_size)]
        pool.append(encode_batch(recs))
    return pool


def encode_rate(record_size: int, batch_size: int = 1000, rounds: int = 3) -> float:
    """Records per second through encode_batch (NewRecord construction excluded)."""
    recs = [
        NewRecord(b"x" * record_size, timestamp=1_700_000_000_000 + i) for i in range(batch_size)
    ]
    t0 = time.perf_counter()
    for _ in range(rounds):
        encode_batch(recs)
    return rounds * batch_size / (time.perf_counter() - t0)


def bench_append(root: Path, pool: list[bytes], n: int, fsync: bool) -> tuple[float, int]:
    with DataDir(root / "dd") as dd:
        dd.create_topic("bench", 1, TopicConfig(retention_ms=-1))
        plog = dd.partition("bench", 0)
        t0 = time.perf_counter()
        for i in range(n):
            plog.append(pool[i % POOL], flush=fsync)
        elapsed = time.perf_counter() - t0
        return elapsed, plog.log_end_offset


def bench_read(root: Path) -> tuple[float, int, int]:
    """Fetch everything back in 1 MiB reads; only the read() calls are timed.

    Between reads the caller walks batch headers to find the next offset, as a consumer
    would; that walk is client work and is left out of the figure.
    """
    with DataDir(root / "dd") as dd:
        plog = dd.partition("bench", 0)
        end = plog.log_end_offset
        offset = 0
        nbytes = 0
        elapsed = 0.0
        while offset < end:
            t0 = time.perf_counter()
            data = plog.read(offset, MiB).data
            elapsed += time.perf_counter() - t0
            nbytes += len(data)
            pos = 0
            n = len(data)
            last = pos
            while pos < n:
                last = pos
                pos += _HEAD.unpack_from(data, pos)[1] + 12
            base, _ = _HEAD.unpack_from(data, last)
            offset = base + _DELTA.unpack_from(data, last + 23)[0] + 1
        return elapsed, end, nbytes


def baseline_write(root: Path, pool: list[bytes], n: int, fsync: bool) -> float:
    path = root / "baseline.bin"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for i in range(n):
            f.write(pool[i % POOL])
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    elapsed = time.perf_counter() - t0
    return elapsed


def baseline_read(root: Path) -> float:
    t0 = time.perf_counter()
    with open(root / "baseline.bin", "rb") as f:
        while f.read(MiB):
            pass
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller volumes (a smoke run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    volume = 8 * MiB if args.quick else 32 * MiB
    reps = 2 if args.quick else 3
    fsync_batches = 40 if args.quick else 150

    print("encode_batch cost (outside the timed loops):")
    for size in (100, 1024):
        print(f"  {size:>5} B records, batches of 1000: {encode_rate(size):>12,.0f} records/s")
    print()
    header = (
        f"{'rec B':>5} {'batch':>5} {'fsync':>5} {'batches':>7} | "
        f"{'append msg/s':>12} {'MB/s':>8} {'base MB/s':>9} {'ratio':>5} | "
        f"{'read msg/s':>12} {'MB/s':>8} {'base MB/s':>9} {'ratio':>5}"
    )
    print(header)
    print("-" * len(header))
    for size in (100, 1024):
        for bsize in (1, 100, 1000):
            pool = make_pool(size, bsize)
            blen = len(pool[0])
            for fsync in (False, True):
                n = max(1, volume // blen)
                if fsync:
                    n = min(n, fsync_batches)
                elif bsize == 1:
                    n = min(n, 200_000)
                t_app = t_base = t_read = t_bread = float("inf")
                for rep in range(reps):  # best of `reps`, order alternated: page-cache noise
                    with tempfile.TemporaryDirectory(prefix="lm-bench-") as tmp:
                        root = Path(tmp)
                        if rep % 2:
                            t_base = min(t_base, baseline_write(root, pool, n, fsync))
                        t, records = bench_append(root, pool, n, fsync)
                        t_app = min(t_app, t)
                        if not rep % 2:
                            t_base = min(t_base, baseline_write(root, pool, n, fsync))
                        t, _, nbytes = bench_read(root)
                        t_read = min(t_read, t)
                        t_bread = min(t_bread, baseline_read(root))
                total_mb = n * blen / 1e6
                app_mbs, base_mbs = total_mb / t_app, total_mb / t_base
                read_mbs, bread_mbs = nbytes / 1e6 / t_read, total_mb / t_bread
                print(
                    f"{size:>5} {bsize:>5} {'yes' if fsync else 'no':>5} {n:>7} | "
                    f"{records / t_app:>12,.0f} {app_mbs:>8.1f} {base_mbs:>9.1f} {app_mbs / base_mbs:>5.2f} | "
                    f"{records / t_read:>12,.0f} {read_mbs:>8.1f} {bread_mbs:>9.1f} {read_mbs / bread_mbs:>5.2f}",
                    flush=True,
                )
    print()
    print("MB/s counts whole encoded batches (61 B header + ~10 B per-record overhead included).")
    print("read = PartitionLog.read(offset, 1 MiB) calls only (page cache warm); read base =")
    print("file.read(1 MiB) of the baseline file. fsync rows: one fsync per batch on both sides.")
    print(f"Each figure is the best of {reps} runs.")


if __name__ == "__main__":
    main()
