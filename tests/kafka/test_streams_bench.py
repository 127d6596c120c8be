"""Smoke test of bench/streams_vs_kafka_streams.py on the session's Kafka, at a tiny size:
the Java word count compiles and runs under exactly_once_v2, logmarshal's App runs, and
both end with the input's exact counts (the bench exits non-zero otherwise); the table has
a row of numbers for each (never a timing assertion)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_word_count_in_kafka_streams_and_in_an_app_agree(kafka) -> None:
    if shutil.which("javac") is None:
        pytest.skip("javac is not on PATH (apt-get install openjdk-17-jdk-headless)")
    done = subprocess.run(
        [
            sys.executable,
            "bench/streams_vs_kafka_streams.py",
            "--lines",
            "3000",
            "--rounds",
            "1",
            "--bootstrap",
            kafka.bootstrap,
            "--broker-pid",
            str(kafka.nodes[0].pid),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count("counts equal the input's") == 2, done.stdout
    for program in ("Kafka Streams, exactly_once_v2", "logmarshal App, exactly-once state"):
        row = re.search(rf"^\| {program} \|(.*)\|$", done.stdout, re.MULTILINE)
        assert row, done.stdout
        cells = [c.strip() for c in row.group(1).split("|")]
        assert len(cells) == 6 and all(re.fullmatch(r"[\d,.]+", c) for c in cells), cells
