"""Smoke test of bench/idle.py over logmarshal's broker: a member at each cap and the bare
librdkafka consumer (``--modes raw``) each give a figure, with the figures per thread
(``--per-thread``; figures are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# in .ci/run's second stage (-m long): a bench's smoke run, kept out of the README's run
pytestmark = [pytest.mark.slow, pytest.mark.long]


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
            "--per-thread",
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
    # --per-thread: the price of a wake-up here; under each member the records it wrote to
    # __marshal (an idle member heartbeats: some) and a line per thread group, its replay
    # thread and its writer among them
    assert re.search(r"^one thread wake-up here: \d+ us of CPU", done.stdout, re.M), done.stdout
    written = re.findall(r"__marshal records written: (\d+\.\d)/s", done.stdout)
    assert len(written) == 2 and all(float(w) > 0 for w in written), done.stdout
    groups = re.findall(r"^\s+\d+\.\d\d %\s+\d+\.\d wake-ups/s\s+x\d+\s+(\S+)$", done.stdout, re.M)
    assert any(g.startswith("logmarshal-tail:") for g in groups), done.stdout
    assert any(":write:" in g for g in groups), done.stdout
    assert any(g.startswith("rdk:") for g in groups), done.stdout
