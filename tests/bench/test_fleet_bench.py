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
    assert len(cells) == 13, cells
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
    # per pass: heartbeat records of a pass of the fleet (the most one member wrote into one
    # coordination partition) / members x coordination partitions (held in); passes per HB
    m = re.fullmatch(r"([\d,]+) \((\d+)\) / ([\d,]+) \(([\d,]+)\); (\d+\.\d+)", cells[7])
    assert m, cells[7]
    assert int(m.group(3).replace(",", "")) == 3 * 8, cells[7]
    # a member heartbeats every 0.325-0.65 HB (1.5 to 3 passes per HB); the tick that sends
    # a due heartbeat comes a little late, never early
    assert 1.0 < float(m.group(5)) <= 3.1, cells[7]
    assert float(cells[8].split()[0]) > 0, cells[8]
    assert "stopped" not in done.stdout, done.stdout


def test_synthesized_log_models_both_caps() -> None:
    """The synthesized steady state (sizes past --simulate-up-to): capped at 6 a pass writes
    a Heartbeat per held partition, capped at 7 one MemberHeartbeat per member and
    coordination partition it holds in, carrying every held partition (the bench replays
    the whole log and stops if any record is rejected)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fleet",
            "--sizes",
            "5x40",
            "--protocol-versions",
            "6,7",
            "--simulate-up-to",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for line in done.stdout.splitlines():
        if line.startswith("| 5 x 40 ("):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    assert set(rows) == {"5 x 40 (6)", "5 x 40 (7)"}, done.stdout
    pattern = r"([\d,]+) \((\d+)\) / ([\d,]+) \(([\d,]+)\); (\d+\.\d+)"
    six = re.fullmatch(pattern, rows["5 x 40 (6)"][7])
    seven = re.fullmatch(pattern, rows["5 x 40 (7)"][7])
    assert six and seven, (rows["5 x 40 (6)"][7], rows["5 x 40 (7)"][7])
    assert int(six.group(1)) == 40  # every held partition, once per pass
    assert int(seven.group(2)) == 1  # one record per member and coordination partition
    assert seven.group(1) == seven.group(4)  # = members x the CPs they hold in
    assert int(seven.group(1)) < 40
    # and the MemberHeartbeats carry every partition as often as cap 6's Heartbeats
    beats6 = re.fullmatch(r"([\d,]+) / [\d,]+", rows["5 x 40 (6)"][6])
    beats7 = re.fullmatch(r"[\d,]+ \(([\d,]+) partitions\) / [\d,]+", rows["5 x 40 (7)"][6])
    assert beats6 and beats7 and beats6.group(1) == beats7.group(1), done.stdout
    assert "(synthesized log)" in rows["5 x 40 (7)"][5]
