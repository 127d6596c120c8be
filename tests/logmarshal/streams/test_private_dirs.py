"""Private task directories (a task whose directory another process has locked restores
into one) are swept once their process is dead, never while it lives. Until 2026-12-03 one
left by a process killed outright stayed for good. Real processes, SIGKILLed by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from logmarshal.streams.app import PRIVATE, _private_dir, _sweep_private

ROOT = Path(__file__).resolve().parents[3]

#: makes a private directory, says where, and waits to be killed
HOLDER = """
import sys, time
from logmarshal.streams.app import _private_dir
fd, path = _private_dir(sys.argv[1], "0_3")
print(path, flush=True)
time.sleep(60)
"""


def _holder(base: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(base)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the holder said nothing"
    return proc, Path(line)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_dead_process_private_directory_is_swept_a_live_one_kept(tmp_path):
    base = tmp_path / "app"
    base.mkdir()
    live, kept = _holder(base)
    dead, left = _holder(base)
    try:
        (left / "store.sqlite").write_bytes(b"x" * 100)
        _kill(dead)
        assert left.is_dir() and kept.is_dir() and PRIVATE in left.name
        _sweep_private(str(base))
        assert not left.exists(), "a dead process's private directory stayed"
        assert kept.is_dir(), "a live process's private directory was swept"
        _kill(live)
        _sweep_private(str(base))
        assert not kept.exists()
    finally:
        _kill(live)
        _kill(dead)


def test_a_private_directory_is_locked_from_the_moment_it_has_its_name(tmp_path):
    """It is made under another name and renamed once locked: a sweep never sees one of
    its name unlocked (a sweep between making and locking would delete a live one)."""
    fd, path = _private_dir(str(tmp_path), "1_0")
    try:
        assert PRIVATE in os.path.basename(path) and os.path.isdir(path)
        assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(path)]
        started = time.monotonic()
        _sweep_private(str(tmp_path))
        assert os.path.isdir(path) and time.monotonic() - started < 5
    finally:
        os.close(fd)
    _sweep_private(str(tmp_path))
    assert not os.path.exists(path)
