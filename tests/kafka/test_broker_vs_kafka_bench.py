"""bench/broker_vs_kafka.py runs to its table with figures for both brokers: a smoke run with
tiny counts on the session's Kafka (kcat only, one size, no Java tools, so it stays cheap)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[\d,]+(?:\.\d+)?"


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_the_bench_prints_both_brokers_side_by_side(kafka) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "broker_vs_kafka.py"), "--quick",
         "--count", "2000", "--sizes", "100", "--codecs", "zstd", "--acks", "1",
         "--tools", "kcat", "--latency-seconds", "1", "--rate", "200",
         "--kafka-bootstrap", kafka.bootstrap, "--kafka-pid", str(kafka.nodes[0].pid)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "| row | logmarshal's broker | Apache Kafka 4.4.0 | ratio records/s | ratio CPU |" in out
    assert re.search(rf"load average at start: {NUMBER} .*; at end: {NUMBER}", out)
    table = out[out.index("| row |") :].splitlines()
    rate = rf"{NUMBER} rec/s, {NUMBER} MB/s, {NUMBER} CPU-s/M"
    for label in ("produce 100 B, acks=1, zstd: kcat", "consume 100 B, zstd: kcat"):
        row = next(line for line in table if line.startswith(f"| {label} |"))
        # the CPU ratio is "-" when Kafka's CPU time rounds to no clock tick (2,000 records)
        cpu = rf"(?:{NUMBER}|-)"
        assert re.fullmatch(rf"\| {label} \| {rate} \| {rate} \| {NUMBER} \| {cpu} \|", row), row
    for pct in ("p50", "p99"):
        row = next(line for line in table if f"end-to-end latency {pct}" in line)
        assert re.search(rf"\| {NUMBER} ms \| {NUMBER} ms \| {NUMBER} \|", row), row
    row = next(line for line in table if line.startswith("| peak resident memory"))
    assert re.search(rf"\| {NUMBER} MiB \| {NUMBER} MiB \| {NUMBER} \|", row), row
