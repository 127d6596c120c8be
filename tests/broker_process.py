"""A real ``logmarshal broker start`` process for tests that need one: on 127.0.0.1, a free
port, its own data directory; always stopped (SIGTERM, then SIGKILL) when the test ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def broker_process(
    workdir: Path, start_timeout: float = 30.0, data_dir: Path | None = None
) -> Iterator[str]:
    """Starts the broker serving ``data_dir`` (default: a new one under ``workdir``); yields
    its bootstrap HOST:PORT once its ready file names it."""
    ready = workdir / "broker.ready"
    data = workdir / "broker-data" if data_dir is None else data_dir
    proc = subprocess.Popen(
        [sys.executable, "-m", "logmarshal", "--data-dir", str(data),
         "broker", "start", "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + start_timeout
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
