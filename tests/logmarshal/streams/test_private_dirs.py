"""Private task directories (a task whose directory another process has locked restores
into one) are swept once their process is dead, never while it lives. Until 2026-12-03 one
left by a process killed outright stayed for good. Real processes, SIGKILLed by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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
    """Made under another name and renamed once locked: a sweep running beside the making
    (another App's task assignment, on another thread or process) never deletes one (made
    under its own name and then locked, a sweep between the two deleted the directory its
    maker went on to use)."""
    stop = threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            _sweep_private(str(tmp_path))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    sweeper = threading.Thread(target=sweep, daemon=True)
    made: list[tuple[int, str]] = []
    try:
        sweeper.start()
        for i in range(300):
            made.append(_private_dir(str(tmp_path), f"1_{i}"))
    finally:
        stop.set()
        sweeper.join(10)
        sys.setswitchinterval(old)
        for fd, _ in made:
            os.close(fd)
    gone = [path for _, path in made if not os.path.isfile(os.path.join(path, ".lock"))]
    assert not gone, f"{len(gone)} of {len(made)} swept while their maker held them"
    assert all(PRIVATE in os.path.basename(path) for _, path in made)
    _sweep_private(str(tmp_path))  # their locks are free now
    assert not any(os.path.exists(path) for _, path in made)


#: makes a private directory's first, half-made form (before its rename), says where, and
#: waits to be killed
HALF_MAKER = """
import fcntl, os, sys, tempfile, time
from logmarshal.streams.app import _HALF_MADE
made = tempfile.mkdtemp(prefix=".0_4" + _HALF_MADE, dir=sys.argv[1])
fd = os.open(os.path.join(made, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print(made, flush=True)
time.sleep(60)
"""


def test_a_half_made_private_directory_of_a_dead_process_is_swept_once_old(tmp_path):
    """A process killed between making its private directory and renaming it left
    ``.<task>.new-*`` for good until 2026-12-04 (noted at stop 61). It goes once it is
    older than a maker takes, and its lock is free or was never made; a young one, or one
    whose maker lives, stays."""
    from logmarshal.streams.app import _HALF_MADE_AGE

    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_MAKER, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        held = Path(proc.stdout.readline().strip())
        assert held.is_dir() and held.name.startswith(".0_4.new-")
        unlocked = tmp_path / ".0_5.new-abc"  # killed before its lock file
        unlocked.mkdir()
        young = tmp_path / ".0_6.new-def"
        young.mkdir()
        old = os.stat(young).st_mtime - 2 * _HALF_MADE_AGE
        for path in (held, unlocked):
            os.utime(path, (old, old))
        _sweep_private(str(tmp_path))
        assert not unlocked.exists(), "a dead maker's half-made directory stayed"
        assert held.is_dir(), "a live maker's half-made directory was swept"
        assert young.is_dir(), "a young half-made directory was swept (its maker may be on)"
        _kill(proc)
        os.utime(held, (old, old))
        _sweep_private(str(tmp_path))
        assert not held.exists()
        assert young.is_dir()
    finally:
        _kill(proc)


def test_a_maker_stalled_past_the_sweep_makes_another(tmp_path, monkeypatch):
    """A maker stalled (SIGSTOP, swapping) longer than ``_HALF_MADE_AGE`` between making its
    directory and locking it loses it to a sweep: it makes another instead of failing the
    task's assignment with FileNotFoundError (found by a helper's review of a7ce0a1)."""
    import tempfile

    from logmarshal.streams.app import _HALF_MADE_AGE

    real = tempfile.mkdtemp
    swept: list[str] = []

    def made_then_swept(*args, **kwargs):
        made = real(*args, **kwargs)
        if not swept:  # stalled: old by the time a sweep comes, which takes it
            old = os.stat(made).st_mtime - 2 * _HALF_MADE_AGE
            os.utime(made, (old, old))
            _sweep_private(str(tmp_path))
            swept.append(made)
        return made

    monkeypatch.setattr(tempfile, "mkdtemp", made_then_swept)
    fd, private = _private_dir(str(tmp_path), "0_7")
    try:
        assert swept and not os.path.exists(swept[0])
        assert os.path.isfile(os.path.join(private, ".lock")) and PRIVATE in private
        _sweep_private(str(tmp_path))
        assert os.path.isdir(private)  # locked: kept
    finally:
        os.close(fd)
