"""Evidence, in one export, that a coordination log went back in time (PROTOCOL.md, "A
coordination log that loses records").

An export is the log as it is now, consistent in itself; what makes a rewind visible after
the fact is what was published *about* the log before it lost records: the snapshots in
``__marshal_snapshots`` (copied beside the export, :mod:`.genesis`). Two kinds of evidence:

- ``beyond_log_end``: a snapshot covers an offset at or past the current log end of its
  coordination partition: the log once held records it no longer holds. Any snapshot whose
  digest matches its world counts, whatever its key configuration (the offset is the
  evidence, not the world). The log end compared is the one read *after* the snapshots were
  copied (:attr:`.export.ExportedPartition.end_after_snapshots`), so a snapshot published
  while the export ran is never taken for one; exports made before that field existed use
  the log end read before the records.
- ``world_differs``: a snapshot covers an offset inside the exported log, but the world the
  audit replays through that offset is not the snapshot's (another SHA-256 of the canonical
  world bytes): the records at or below it were replaced, the log was rewound and regrew.
  The fold computes the digest at each such offset (:meth:`.replay.PartitionAudit`, table
  ``snapshot_checks``), only for snapshots of the audit's own key configuration whose tags
  verify with its keys (another configuration's world may differ by its verdicts alone),
  and only where the replay is complete (from offset 0 or from a genesis snapshot at or
  below the covered offset).

Pure: the snapshot records come in as lists, the findings go out as dicts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from rationalizer import PROTOCOL_VERSION
from rationalizer._snapshot import SnapshotError
from rationalizer._snapshot_record import (
    config_fingerprint,
    parse_snapshot_record,
    restore_snapshot,
)

from .._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC

__all__ = [
    "BEYOND_LOG_END",
    "WORLD_DIFFERS",
    "SnapshotCheck",
    "beyond_log_end",
    "plan_snapshot_checks",
    "rewind_findings",
]

log = logging.getLogger(__name__)

BEYOND_LOG_END = "beyond_log_end"
WORLD_DIFFERS = "world_differs"

#: what the fold checks: (covered offset, snapshot record offset, snapshot digest in hex)
SnapshotCheck = tuple[int, int, str]

SnapshotRecords = list[tuple[int, bytes | None, bytes | None]]


def plan_snapshot_checks(
    snapshots: Mapping[int, SnapshotRecords], admin_keys: Mapping[str, bytes] | None
) -> dict[int, tuple[SnapshotCheck, ...]]:
    """Per coordination partition, the snapshots the fold compares its world with, sorted by
    covered offset: those of the audit's replay configuration (its keys and this code's
    rules) that fully verify."""
    keys = dict(admin_keys or {})
    mine = config_fingerprint(keys, PROTOCOL_VERSION)
    out: dict[int, tuple[SnapshotCheck, ...]] = {}
    for cp, records in snapshots.items():
        found: set[SnapshotCheck] = set()
        for offset, key, value in records:
            try:
                snap = parse_snapshot_record(key, value)
                if snap.coord_partition != cp or snap.config != mine:
                    continue
                restore_snapshot(snap, cp, keys)
            except ValueError as exc:  # SnapshotError, or a world that does not decode
                log.debug("%s/%d@%d not compared: %s", SNAPSHOT_TOPIC, cp, offset, exc)
                continue
            found.add((snap.covered, offset, snap.digest.hex()))
        if found:
            out[cp] = tuple(sorted(found))
    return out


def beyond_log_end(
    snapshots: Mapping[int, SnapshotRecords], log_ends: Mapping[int, int]
) -> list[dict[str, Any]]:
    """Findings of kind ``beyond_log_end``: each intact snapshot whose covered offset is at
    or past the log end of its coordination partition (``log_ends``: cp -> log end)."""
    out = []
    for cp, records in sorted(snapshots.items()):
        end = log_ends.get(cp)
        if end is None:
            continue
        for offset, key, value in records:
            try:
                snap = parse_snapshot_record(key, value)
            except SnapshotError:
                continue
            if snap.coord_partition != cp or snap.covered < end:
                continue
            if hashlib.sha256(snap.world).digest() != snap.digest:
                continue  # a damaged record says nothing about the log
            out.append(
                {
                    "coord_partition": cp,
                    "kind": BEYOND_LOG_END,
                    "snapshot_offset": offset,
                    "covered_offset": snap.covered,
                    "log_end": end,
                    "fingerprint": snap.config,
                    "snapshot_digest": snap.digest.hex(),
                    "evidence": (
                        f"{SNAPSHOT_TOPIC}/{cp}@{offset} covers {COORDINATION_TOPIC}/{cp} "
                        f"through offset {snap.covered}, but the log now ends at {end}: it "
                        f"once held offsets {end}..{snap.covered} and no longer does"
                    ),
                }
            )
    return out


def rewind_findings(
    beyond: Iterable[dict[str, Any]], checks: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every finding: ``beyond`` (:func:`beyond_log_end`) and the rows of the fold's
    ``snapshot_checks`` table whose world differs, in (partition, covered, snapshot) order."""
    out = list(beyond)
    for row in checks:
        if row["result"] != WORLD_DIFFERS:
            continue
        cp, offset, covered = row["coord_partition"], row["snapshot_offset"], row["covered_offset"]
        applied = row["applied_through"]
        why = (
            "the replayed world differs"
            if applied == covered
            else f"the log has no record at that offset (the replay applied through {applied})"
        )
        out.append(
            {
                "coord_partition": cp,
                "kind": WORLD_DIFFERS,
                "snapshot_offset": offset,
                "covered_offset": covered,
                "applied_through": applied,
                "snapshot_digest": row["snapshot_digest"],
                "replay_digest": row["replay_digest"],
                "evidence": (
                    f"{SNAPSHOT_TOPIC}/{cp}@{offset} is the world of {COORDINATION_TOPIC}/{cp} "
                    f"through offset {covered}, but {why}: the records at or below "
                    f"{covered} were replaced (the log was rewound and regrew)"
                ),
            }
        )
    out.sort(key=lambda f: (f["coord_partition"], f["covered_offset"], f["snapshot_offset"],
                            f["kind"]))  # fmt: skip
    return out
