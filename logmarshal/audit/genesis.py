"""The audit's genesis: where the replay starts when ``__marshal`` was truncated.

The export copies the snapshot topic's records next to the coordination log
(``snapshots/part-00003.bin``: the published snapshots of coordination partition 3, as
stored). The audit, which holds the admin keys, picks for each coordination partition the
newest snapshot that is valid for its configuration and whose tail the export holds
(:func:`logmarshal._coordlog.load_snapshot`, the members' own rule), and replays from there:
the snapshot is the replay's *genesis*. Partitions whose log still starts at offset 0 start
from the empty world, as before. Summary and report say which partitions started where.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Mapping
from pathlib import Path

from .._coordlog import SNAPSHOT_TOPIC, load_snapshot, read_snapshots
from ..cluster import Cluster

__all__ = ["SNAPSHOT_DIR", "choose_genesis", "export_snapshots", "read_exported_snapshots"]

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "snapshots"
_LEN = struct.Struct(">qi")  # offset, length (-1: None)

SnapshotRecords = list[tuple[int, bytes | None, bytes | None]]


def _put(out: bytearray, offset: int, b: bytes | None) -> None:
    out += _LEN.pack(offset, -1 if b is None else len(b))
    if b is not None:
        out += b


def export_snapshots(cluster: Cluster, out_dir: str | os.PathLike[str], partitions: int) -> int:
    """Copy every stored snapshot record beside an export; returns how many."""
    root = Path(out_dir) / SNAPSHOT_DIR
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob("part-*.bin"):
        stale.unlink()
    if SNAPSHOT_TOPIC not in cluster.topics():
        return 0
    n = 0
    for cp in range(partitions):
        records = read_snapshots(cluster, cp)
        if not records:
            continue
        buf = bytearray()
        for offset, key, value in records:
            _put(buf, offset, key)
            _put(buf, offset, value)
        path = root / f"part-{cp:05d}.bin"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(bytes(buf))
        tmp.replace(path)
        n += len(records)
    return n


def read_exported_snapshots(export_dir: str | os.PathLike[str]) -> dict[int, SnapshotRecords]:
    """The snapshot records of an export by coordination partition (none: ``{}``).

    A damaged file yields the records before the damage, with a warning: the audit then
    starts from an older snapshot or the log's start, never from garbage."""
    out: dict[int, SnapshotRecords] = {}
    root = Path(export_dir) / SNAPSHOT_DIR
    if not root.is_dir():
        return out
    for path in sorted(root.glob("part-*.bin")):
        try:
            cp = int(path.stem.split("-", 1)[1])
        except ValueError:
            continue
        data = path.read_bytes()
        pos = 0
        records: SnapshotRecords = []
        try:
            while pos < len(data):
                pair = []
                for _ in range(2):
                    offset, size = _LEN.unpack_from(data, pos)
                    pos += _LEN.size
                    if size < -1 or pos + max(size, 0) > len(data):
                        raise ValueError("truncated")
                    pair.append((offset, None if size < 0 else data[pos : pos + size]))
                    pos += max(size, 0)
                records.append((pair[0][0], pair[0][1], pair[1][1]))
        except (ValueError, struct.error):
            log.warning("%s is damaged after %d records; ignoring the rest", path, len(records))
        out[cp] = records
    return out


def choose_genesis(
    export_dir: str | os.PathLike[str],
    starts: Mapping[int, int],
    admin_keys: Mapping[str, bytes] | None,
) -> dict[int, tuple[int, bytes]]:
    """``{cp: (covered, world bytes)}`` for the coordination partitions whose exported log
    does not start at 0 and that have a valid snapshot reaching their exported start."""
    snapshots = read_exported_snapshots(export_dir)
    out: dict[int, tuple[int, bytes]] = {}
    for cp, start in starts.items():
        if start <= 0 or cp not in snapshots:
            continue
        restored = load_snapshot(None, cp, admin_keys, earliest=start, snapshots=snapshots[cp])
        if restored is not None:
            out[cp] = (restored.covered, restored.world.to_bytes())
    return out
