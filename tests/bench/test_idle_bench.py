"""Smoke test of bench/idle.py over logmarshal's broker: a member at each cap and the bare
librdkafka consumer (``--modes raw``) each give a figure (figures are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_network_member_at_each_cap_and_the_raw_consumer() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "idle.py"),
            "--partitions",
            "4",
            "--modes",
            "network,raw",
            "--protocol-versions",
            "6,7",
            "--seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(
        r"^this tree\s+(\d)\s+(\w+)\s+4\s+(\d+\.\d)\s+(\d+)\s+\d+\.\d$", done.stdout, re.M
    )
    # a member per cap over the network, and one raw consumer (no member: no cap of its own)
    assert sorted((cap, mode) for cap, mode, _, _ in rows) == [
        ("6", "network"),
        ("6", "raw"),
        ("7", "network"),
    ], done.stdout
    assert "failed" not in done.stdout, done.stdout
