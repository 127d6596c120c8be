"""Smoke test of bench/rebalance.py in its quickest form (figures are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# in .ci/run's second stage (-m long): a bench's smoke run, kept out of the README's run
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_quick_rebalance_bench_prints_both_strategies() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "rebalance.py"),
            "--quick",
            "--members",
            "2",
            "--partitions",
            "4",
            "--rounds",
            "1",
            "--hb",
            "0.5",
            "--timeout",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "2 members x 4 partitions" in out, out
    join = next(line for line in out.splitlines() if line.startswith("join -> balanced p50"))
    # "balanced" first (a time), then "none" (never balanced after a join)
    assert re.search(r"p99 s\s+\d+\.\d+ /\s+\d+\.\d+\s+not balanced in 5 s$", join), join
    assert re.search(r"none: after a join \(not balanced in 5 s\): m00=4 m01=0", out), out
    assert re.search(r"repeated per move, join\s+0\.00 \(0/\d+\)", out), out


def test_processes_with_each_cap_in_the_same_run() -> None:
    """--protocol-versions: each cap's cell runs on member processes, its members started
    with that ``--protocol-version``, and the medians per cap are printed."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "rebalance.py"),
            "--processes",
            "--members",
            "2",
            "--partitions",
            "4",
            "--rounds",
            "1",
            "--hb",
            "0.5",
            "--timeout",
            "10",
            "--strategies",
            "balanced",
            "--protocol-versions",
            "6,7",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for cap in (6, 7):
        assert re.search(rf"^balanced \(cap {cap}\): join -> balanced \d+\.\d+ s", out, re.M), out
        assert re.search(
            rf"^balanced cap {cap}: join -> balanced median \d+\.\d+ s \(n=1, ", out, re.M
        ), out
