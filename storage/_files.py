"""Small files the storage keeps beside its segments (checkpoints), written so that a crash
leaves the old content or the new, never a torn file."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["replace_durably"]


def replace_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a temporary file beside it, fsynced, renamed over it, and
    the directory fsynced, so the new content is on disk when this returns. (A leftover
    ``.tmp`` file is removed when the partition's log is next opened.)"""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
