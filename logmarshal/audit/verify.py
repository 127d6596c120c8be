"""Cross-check: the audit's final positions, holders and verdict counts against a plain replay.

The reference is deliberately naive: one WorldState per coordination partition fed straight
from the log (the cluster itself when it is at hand, else the export), every record decoded
with :func:`rationalizer.decode` to learn its group. It shares nothing with the audit's
fold, export or Spark plumbing except the rationalizer, which is the point: if the audit's
bookkeeping drifted from what the rationalizer decided, this says where.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from rationalizer import DecodeError, WorldState, decode
from rationalizer._codec import envelope

from .._coordlog import records_from_cluster
from .export import ExportInfo, iter_export
from .replay import ReplayConfig, new_world

__all__ = [
    "Reference",
    "VerifyResult",
    "compare",
    "records_from_cluster",
    "records_from_export",
    "reference_replay",
]

Record = tuple[int, int, "bytes | None", "bytes | None"]
#: holder, last_offset, claimed_through, resume_offset (None: the group has no position)
Position = tuple["tuple[str, str] | None", int, int, "int | None"]


@attrs.frozen
class Reference:
    positions: dict[tuple[str, str, int], Position]
    counts: dict[tuple[str | None, str, str], int]
    records: int


@attrs.frozen
class VerifyResult:
    ok: bool
    positions: int
    verdict_records: int
    mismatches: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "positions": self.positions,
            "verdict_records": self.verdict_records,
            "mismatches": list(self.mismatches[:50]),
            "mismatch_count": len(self.mismatches),
        }


def records_from_export(info: ExportInfo) -> Iterator[tuple[int, list[Record]]]:
    current: int | None = None
    out: list[Record] = []
    for cp, batch in iter_export(info):
        if cp != current:
            if current is not None:
                yield current, out
            current, out = cp, []
        cols = batch.to_pydict()
        out.extend(
            zip(cols["offset"], cols["timestamp_ms"], cols["key"], cols["value"], strict=True)
        )
    if current is not None:
        yield current, out


def reference_replay(
    partitions: Iterable[tuple[int, list[Record]]], config: ReplayConfig
) -> Reference:
    positions: dict[tuple[str, str, int], Position] = {}
    counts: Counter[tuple[str | None, str, str]] = Counter()
    since = config.since_ms
    until = config.until_ms
    total = 0
    for cp, records in partitions:
        world = new_world(config)
        now = None
        if cp in config.genesis:  # the replay starts from the same snapshot as the audit
            covered, data = config.genesis[cp]
            world = WorldState.from_bytes(data, admin_keys=config.admin_keys)
            now = world.now
            records = [r for r in records if r[0] > covered]
        kept: list[Record] = []
        times: list[int] = []
        for rec in records:
            now = rec[1] if now is None else max(now, rec[1])
            if until is not None and now > until:
                break
            kept.append(rec)
            times.append(now)
        verdicts = world.apply_many(kept)
        total += len(kept)
        for (_off, _ts, key, value), t, v in zip(kept, times, verdicts, strict=True):
            assert v is not None
            if since is not None and t < since:
                continue
            group: str | None = None
            if key is not None and value is not None:  # (else decode refuses it too)
                try:
                    group = decode(key, value).group_id
                except DecodeError:
                    # a record of a version to come: its envelope names the group it halts
                    # (counted as no group's, --verify failed every log holding one)
                    with contextlib.suppress(DecodeError):
                        group = envelope(value)[2]
            # an accepted verdict names its effect, a rejection its reason; a MemberHeartbeat
            # (version 7) counts one per entry
            for one in v.entries or (v,):
                outcome = one.effect if one.accepted else one.reason
                assert outcome is not None
                counts[(group, "accepted" if one.accepted else "rejected", outcome.value)] += 1
        for s in world.partitions():
            positions[(s.group_id, s.topic, s.partition)] = (
                s.holder,
                s.last_offset,
                s.claimed_through,
                world.resume_offset(s.group_id, s.topic, s.partition),
            )
    return Reference(positions, dict(counts), total)


def compare(tables: dict[str, Any], reference: Reference) -> VerifyResult:
    """Differences between the audit's tables and the reference, one line each."""
    mismatches: list[str] = []
    audited: dict[tuple[str, str, int], Position] = {}
    for p in tables["positions"].to_pylist():
        holder = None if p["holder_client"] is None else (p["holder_client"], p["holder_instance"])
        k = (p["group"], p["topic"], p["partition"])
        if k in audited:
            mismatches.append(f"position {k} reported twice")
        audited[k] = (holder, p["last_offset"], p["claimed_through"], p["resume_offset"])
    for k in sorted(set(audited) | set(reference.positions)):
        a, r = audited.get(k), reference.positions.get(k)
        if a != r:
            mismatches.append(f"position {k}: audit {a} != replay {r}")
    counts: Counter[tuple[str | None, str, str]] = Counter()
    for v in tables["verdicts"].to_pylist():
        counts[(v["group"], v["outcome"], v["reason"])] += v["records"]
    for k in sorted(set(counts) | set(reference.counts), key=lambda x: (x[0] or "", x[1:])):
        if counts.get(k, 0) != reference.counts.get(k, 0):
            mismatches.append(
                f"verdicts {k}: audit {counts.get(k, 0)} != replay {reference.counts.get(k, 0)}"
            )
    return VerifyResult(
        not mismatches, len(reference.positions), sum(reference.counts.values()), tuple(mismatches)
    )
