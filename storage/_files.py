"""Small files the storage keeps beside its segments (checkpoints), written so that a crash
leaves the old content or the new, never a torn file."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "OFFSET_MAX",
    "copy_durably",
    "fsync_dir",
    "read_json",
    "read_regular",
    "replace_durably",
    "replace_file",
]

#: what a checkpoint or metadata file is read up to when no other limit is given
SMALL_FILE_LIMIT = 1 << 20
#: the largest offset a record batch can carry (int64)
OFFSET_MAX = (1 << 63) - 1


def read_regular(path: Path, limit: int | None = SMALL_FILE_LIMIT) -> bytes:
    """The content of a file the storage wrote, read only if it is a regular file of at most
    ``limit`` bytes (None: any size): a device, FIFO or huge file put in its place would
    never end, or fill memory. Refused with ValueError; a missing file raises
    FileNotFoundError and a directory IsADirectoryError, as ``open`` does."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if limit is not None and st.st_size > limit:
            raise ValueError(f"{path} is {st.st_size} bytes, more than {limit}")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:  # grew while read
                raise ValueError(f"{path} is more than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(path: Path, limit: int | None = SMALL_FILE_LIMIT) -> object:
    """The strict JSON content of a file the storage wrote (:func:`read_regular`). What no
    writer of ours makes is refused with ValueError, so that the caller's one handler sees
    every kind of damage: text that is not UTF-8 or not JSON, ``NaN`` or ``Infinity``, a
    number beyond a float's range (``1e400``), nesting too deep for the parser."""
    raw = read_regular(path, limit)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deep") from None


def _refuse(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond a float's range")
    return value


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
    replace_file(tmp, path)
    fsync_dir(path.parent)


def replace_file(tmp: Path, path: Path) -> None:
    """``os.replace``, whose error names the file replaced when that is the problem (a
    directory where the file belongs said "Is a directory: <tmp>": the wrong name). The
    temporary file is removed then."""
    try:
        os.replace(tmp, path)
    except IsADirectoryError:
        tmp.unlink(missing_ok=True)
        raise IsADirectoryError(
            errno.EISDIR, "a directory is where this file belongs; move it away", str(path)
        ) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_COPY_CHUNK = 1 << 20
