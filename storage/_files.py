"""Small files the storage keeps beside its segments (checkpoints), written so that a crash
leaves the old content or the new, never a torn file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["copy_durably", "fsync_dir", "replace_durably"]


def fsync_dir(path: Path) -> None:
    """Make a file creation, rename or deletion in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a temporary file beside it, fsynced, renamed over it, and
    the directory fsynced, so the new content is on disk when this returns. (A leftover
    ``.tmp`` file is removed when the partition's log is next opened.)"""
    _durably(path, lambda fd: _write_all(fd, data))


def copy_durably(src: int, start: int, end: int, path: Path) -> None:
    """Copy bytes ``[start, end)`` of the open file ``src`` to a new file ``path``, as
    :func:`replace_durably` writes (whole or not at all, on disk when this returns), in
    pieces: what is copied may be a segment's size."""

    def copy(fd: int) -> None:
        pos = start
        while pos < end:
            chunk = os.pread(src, min(_COPY_CHUNK, end - pos), pos)
            if not chunk:
                raise OSError(f"{path}: the source ended at byte {pos}, before {end}")
            _write_all(fd, chunk)
            pos += len(chunk)

    _durably(path, copy)


def _durably(path: Path, write: Callable[[int], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_COPY_CHUNK = 1 << 20
