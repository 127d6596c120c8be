"""Smoke test of bench/stores.py at a tiny size: every engine's rows are there, every App
run's counts were checked (the bench exits non-zero otherwise), and it names the fastest
durable engine (never a timing assertion)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_store_bench_measures_every_engine() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "bench/stores.py",
            "--lines",
            "2000",
            "--vocabulary",
            "3000",
            "--rounds",
            "1",
            "--ops",
            "2000",
            "--restore",
            "1000",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for kind in ("memory", "sqlite", "rocksdb"):
        rows = re.findall(rf"^  {kind} +[\d.]+ ", done.stdout, re.MULTILINE)
        assert len(rows) == 4, (kind, done.stdout)  # 2 App runs, engine alone, restore
    assert re.search(
        r"^fastest durable store .*: (sqlite|rocksdb) \(", done.stdout, re.MULTILINE
    ), done.stdout
