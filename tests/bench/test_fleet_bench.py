"""Smoke test of bench/fleet.py at a tiny size: the table's shape, and that every phase
converged (a number of HB, never a timing assertion)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_fleet_converges_in_every_phase() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.fleet", "--sizes", "3x12", "--max-wall-s", "120"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 3 x 12 |")]
    assert len(rows) == 1, done.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == 12, cells
    start, join, crash, grow = cells[1:5]
    # the claims written until the start converged: each of the 12 at least once, and far
    # fewer than every member bidding for every partition (3 x 12)
    m = re.fullmatch(r"\d+\.\d HB \(([\d,]+)\)", start)
    assert m and 12 <= int(m.group(1).replace(",", "")) < 36, start
    for cell in (join, crash, grow):
        assert re.fullmatch(r"\d+\.\d HB \(\d+ moved\)", cell), cell
    # a crashed member's partitions lapse only 2·HB after its last heartbeat
    assert float(crash.split()[0]) >= 2.0, crash
    # records/s, heartbeats / announcements per HB, µs per record: numbers, not dashes
    assert re.fullmatch(r"[\d,]+", cells[5]), cells[5]
    # heartbeat records per HB / coordination partitions; version 7 names the partitions its
    # MemberHeartbeats carried
    assert re.fullmatch(r"[\d,]+( \([\d,]+ partitions\))? / [\d,]+", cells[6]), cells[6]
    assert float(cells[7].split()[0]) > 0, cells[7]
    assert "stopped" not in done.stdout, done.stdout
