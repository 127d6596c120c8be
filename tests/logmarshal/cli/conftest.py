"""Shared by the CLI tests: the CLI run in this process, and a real broker process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logmarshal.localbroker import LocalBroker
from tests.cli_runner import Cli, in_process_cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli(capsys, monkeypatch) -> Cli:
    """``main(argv)`` in this process (tests/cli_runner.py); returns (exit status, stdout,
    stderr)."""
    return in_process_cli(capsys, monkeypatch)


def run_process(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m logmarshal ARGV`` as its own process, from this tree."""
    return subprocess.run(
        [sys.executable, "-m", "logmarshal", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def broker_process(tmp_path) -> Iterator[str]:
    """``logmarshal broker start`` on 127.0.0.1 (a free port) as a real process; yields its
    bootstrap HOST:PORT and stops it (SIGTERM, then SIGKILL) at the end of the test."""
    with LocalBroker(tmp_path) as broker:
        yield broker.bootstrap
