"""``summary.json``: the audit's answers in one small document, computed from its tables.

Computed by the driver from the written tables (never from executor state), so it says
exactly what the Parquet says, whichever engine wrote it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from .engine import AuditResult, load_tables
from .export import ExportInfo
from .genesis import read_exported_snapshots
from .replay import ReplayConfig
from .rewind import beyond_log_end, rewind_findings

__all__ = ["SUMMARY_FILE", "build_summary", "write_summary"]

SUMMARY_FILE = "summary.json"


def _quantiles(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def q(p: float) -> int:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"count": len(ordered), "p50": q(0.5), "p95": q(0.95), "max": ordered[-1]}


def build_summary(
    tables: dict[str, Any],
    info: ExportInfo,
    config: ReplayConfig,
    result: AuditResult,
    *,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    own = tables["ownership"].to_pylist()
    fail = tables["failovers"].to_pylist()
    verd = tables["verdicts"].to_pylist()
    viol = tables["violations"].to_pylist()
    gaps = tables["heartbeat_gaps"].to_pylist()
    pos = tables["positions"].to_pylist()
    coord = tables["coordination"].to_pylist()
    moves = tables["moves"].to_pylist() if "moves" in tables else []
    members = tables["membership"].to_pylist() if "membership" in tables else []

    by_reason: Counter[str] = Counter()
    accepted = rejected = 0
    for v in verd:
        by_reason[f"{v['outcome']}:{v['reason']}"] += v["records"]
        if v["outcome"] == "accepted":
            accepted += v["records"]
        else:
            rejected += v["records"]

    groups = _groups(pos, own, fail, viol, verd, members, moves)

    checks = tables["snapshot_checks"].to_pylist() if "snapshot_checks" in tables else []
    ends = {
        p.partition: p.latest if p.end_after_snapshots is None else p.end_after_snapshots
        for p in info.partitions
    }
    rewinds = rewind_findings(beyond_log_end(read_exported_snapshots(info.path), ends), checks)

    ratios = [g["gap_over_hb"] for g in gaps if g["gap_over_hb"] is not None]
    offenders = Counter((v["client_id"] or "(undecodable)", v["kind"]) for v in viol)
    return {
        "source": info.source,
        "export": info.path,
        "exported_at_ms": info.exported_at_ms,
        "truncated_history": info.truncated,
        # coordination partition -> offset covered by the snapshot its replay started from
        "snapshot_genesis": {str(cp): g[0] for cp, g in sorted(config.genesis.items())},
        # evidence in this export that the coordination log went back in time (.rewind)
        "rewinds": rewinds,
        "snapshot_checks": {
            "compared": len(checks),
            "by_result": dict(Counter(c["result"] for c in checks)),
        },
        "window": {"since_ms": config.since_ms, "until_ms": config.until_ms},
        "engine": result.engine,
        "records": result.records,
        "records_replayed": sum(c["records"] for c in coord),
        "audit_seconds": round(result.seconds, 3),
        "log_time": {
            "first_ms": min((c["first_ms"] for c in coord), default=None),
            "last_ms": max((c["last_ms"] for c in coord), default=None),
        },
        "verdicts": {"accepted": accepted, "rejected": rejected, "by_reason": dict(by_reason)},
        "groups": groups,
        "ownership": {
            "claims": len(own),
            "by_end_reason": dict(Counter(o["end_reason"] for o in own)),
        },
        "failovers": {
            "by_cause": dict(Counter(f["cause"] for f in fail)),
            "gap_ms": _quantiles([f["gap_ms"] for f in fail]),
            "gap_ms_by_cause": {
                cause: _quantiles([f["gap_ms"] for f in fail if f["cause"] == cause])
                for cause in sorted({f["cause"] for f in fail})
            },
        },
        "membership": {
            "changes": len(members),
            "by_event": dict(Counter(e["event"] for e in members)),
        },
        "moves": {
            "count": len(moves),
            "by_kind": dict(Counter(m["cause_kind"] for m in moves)),
            "by_cause": dict(Counter(m["cause"] for m in moves)),
        },
        "violations": {
            "count": len(viol),
            "by_kind": dict(Counter(v["kind"] for v in viol)),
            "top_clients": [
                {"client_id": c, "kind": k, "records": n} for (c, k), n in offenders.most_common(10)
            ],
        },
        "heartbeat_gaps": {
            "claims": len(gaps),
            "over_hb": sum(r >= 1 for r in ratios),
            "over_2hb": sum(r > 2 for r in ratios),
            "max_gap_over_hb": max(ratios, default=None),
        },
        "positions": {
            "partitions": len(pos),
            "held": sum(p["holder_client"] is not None for p in pos),
            "stale_holders": sum(p["freshness"] == "stale" for p in pos),
            "lag": sum(max(0, p["lag"] or 0) for p in pos),
            "beyond_log_end": sum((p["lag"] or 0) < 0 for p in pos),
        },
        "tables": dict(result.rows),
        **(extra or {}),
    }


def _groups(
    pos: list[dict[str, Any]],
    own: list[dict[str, Any]],
    fail: list[dict[str, Any]],
    viol: list[dict[str, Any]],
    verd: list[dict[str, Any]],
    members: list[dict[str, Any]],
    moves: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each group's counts over the tables' rows (rows of no decodable group count under
    ``(undecodable)``)."""
    groups: dict[str, dict[str, Any]] = {}

    def group(name: str | None) -> dict[str, Any]:
        return groups.setdefault(
            name or "(undecodable)",
            {
                "partitions": 0,
                "held": 0,
                "claims": 0,
                "failovers": Counter(),
                "violations": Counter(),
                "accepted": 0,
                "rejected": 0,
                "lag": 0,
                "membership": Counter(),
                "moves": Counter(),
                # client -> {"took": {cause_kind: n}, "gave_up": {cause_kind: n}}
                "moves_by_member": {},
            },
        )

    for p in pos:
        g = group(p["group"])
        g["partitions"] += 1
        g["held"] += p["holder_client"] is not None
        g["lag"] += max(0, p["lag"] or 0)
    for o in own:
        group(o["group"])["claims"] += 1
    for f in fail:
        group(f["group"])["failovers"][f["cause"]] += 1
    for v in viol:
        group(v["group"])["violations"][v["kind"]] += 1
    for v in verd:
        group(v["group"])[v["outcome"]] += v["records"]
    for e in members:
        group(e["group"])["membership"][e["event"]] += 1
    for m in moves:
        g = group(m["group"])
        g["moves"][m["cause"]] += 1
        per = g["moves_by_member"].setdefault(m["client_id"], {"took": {}, "gave_up": {}})
        side = per[m["action"]]
        side[m["cause_kind"]] = side.get(m["cause_kind"], 0) + 1
    for g in groups.values():
        g["failovers"] = dict(g["failovers"])
        g["violations"] = dict(g["violations"])
        g["membership"] = dict(g["membership"])
        g["moves"] = dict(g["moves"])
    return groups


def write_summary(
    out_dir: str | os.PathLike[str],
    info: ExportInfo,
    config: ReplayConfig,
    result: AuditResult,
    *,
    extra: dict[str, Any] | None = None,
    tables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Compute the summary from the written tables and store it as ``summary.json``."""
    summary = build_summary(
        tables if tables is not None else load_tables(out_dir), info, config, result, extra=extra
    )
    path = Path(out_dir) / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return summary
