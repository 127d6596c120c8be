"""Shared by the CLI tests: the CLI run in this process, and a real broker process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logmarshal.cli.main import main
from tests.broker_process import broker_process as start_broker

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
    with start_broker(tmp_path) as bootstrap:
        yield bootstrap
