"""Smoke test of bench/producer.py in a small form (figures are never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_small_producer_bench_prints_every_row() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "producer.py"), "--records", "3000", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.split("median of 1 round(s)", 1)[1]
    for row in (
        "network raw confluent-kafka",
        "network Producer.send",
        "network Producer.send_nowait",
        "embedded cluster.produce (batches of 1,000)",
        "embedded Producer.send",
        "embedded Producer.send_nowait",
    ):
        assert row in table, done.stdout
