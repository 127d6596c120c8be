"""Shared by the CLI tests: the CLI run in this process, and a real broker process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logmarshal.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """``main(argv)`` in this process; returns (exit status, stdout, stderr)."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse usage errors
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def run_process(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m logmarshal ARGV`` as its own process, from this tree."""
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", *argv],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


@pytest.fixture
def broker_process(tmp_path) -> Iterator[str]:
    """``logmarshal broker start`` on 127.0.0.1 (a free port) as a real process; yields its
    bootstrap HOST:PORT and stops it (SIGTERM, then SIGKILL) at the end of the test."""
    ready = tmp_path / "broker.ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "logmarshal", "--data-dir", str(tmp_path / "broker-data"),
         "broker", "start", "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)
        yield ready.read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
