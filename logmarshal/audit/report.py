"""The human side of an audit: a short table for the terminal and ``report.html``.

The HTML is one self-contained file (pictures are PNGs embedded as base64) so it can be
attached to an incident review: an ownership timeline per partition (a bar per claim,
coloured per client, failovers marked by cause), the distributions of heartbeat gaps and
failover durations, and the failovers and violations themselves.
"""

from __future__ import annotations

import base64
import html
import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .deps import require

__all__ = ["REPORT_FILE", "summary_rows", "write_report"]

REPORT_FILE = "report.html"
#: The timeline shows at most this many partitions (those with the most ownership changes).
TIMELINE_PARTITIONS = 40
#: ... and at most this many claims, so a huge log still renders in seconds.
TIMELINE_CLAIMS = 20_000
TABLE_ROWS = 200

_MARKERS = {
    "stale_takeover": ("v", "tab:red"),
    "failover": ("v", "tab:red"),
    "restart": ("D", "tab:purple"),
    "released": ("o", "tab:green"),
    "handoff": ("o", "tab:green"),
    "closed": ("o", "tab:olive"),
    "rebalance": ("^", "tab:blue"),
    "group_reset": ("s", "tab:orange"),
    "admin_reset": ("s", "tab:orange"),
    "claim": (".", "tab:gray"),
}
_LABELS = {
    "stale_takeover": "failover: stale_takeover",
    "restart": "restart",
    "released": "failover: released",
    "group_reset": "failover: group_reset",
    "failover": "failover: holder stale",
    "admin_reset": "admin reset",
}


def _fmt_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per group for the terminal: what an operator asks first."""
    rows = []
    for group, g in sorted(summary["groups"].items()):
        failovers = g["failovers"]
        rows.append(
            {
                "group": group,
                "partitions": g["partitions"],
                "held": g["held"],
                "claims": g["claims"],
                "failovers": sum(failovers.values()),
                "stale": failovers.get("stale_takeover", 0),
                "restart": failovers.get("restart", 0),
                "released": failovers.get("released", 0),
                "reset": failovers.get("group_reset", 0),
                "rebalance": sum(
                    sides["took"].get("rebalance", 0)
                    for sides in g.get("moves_by_member", {}).values()
                ),
                "violations": sum(g["violations"].values()),
                "accepted": g["accepted"],
                "rejected": g["rejected"],
                "lag": g["lag"],
            }
        )
    return rows


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    require("matplotlib.pyplot").close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _timeline(
    own: list[dict], fail: list[dict], end_ms: int | None, moves: list[dict] | None = None
) -> tuple[str | None, str]:
    plt = require("matplotlib.pyplot")
    moves = moves or []
    if not own:
        return None, "no claims in the audited window"
    changes: dict[tuple, int] = {}
    for o in own:
        k = (o["group"], o["topic"], o["partition"])
        changes[k] = changes.get(k, 0) + 1
    multi_group = len({k[0] for k in changes}) > 1
    chosen = sorted(changes, key=lambda k: (-changes[k], k))[:TIMELINE_PARTITIONS]
    chosen.sort()
    row = {k: i for i, k in enumerate(chosen)}
    bars = [o for o in own if (o["group"], o["topic"], o["partition"]) in row][:TIMELINE_CLAIMS]
    start = min(o["start_ms"] for o in bars)
    stop = max([end_ms or 0, *((o["end_ms"] or o["last_seen_ms"]) for o in bars)])
    clients = sorted({o["client_id"] for o in bars})
    cmap = plt.get_cmap("tab20")
    colour = {c: cmap(i % 20) for i, c in enumerate(clients)}
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.32 * len(chosen) + 1.5)))
    for o in bars:
        k = (o["group"], o["topic"], o["partition"])
        end = o["end_ms"] if o["end_ms"] is not None else stop
        ax.broken_barh(
            [((o["start_ms"] - start) / 1000, max((end - o["start_ms"]) / 1000, 1e-3))],
            (row[k] - 0.4, 0.8),
            facecolors=colour[o["client_id"]],
            edgecolor="white",
            linewidth=0.3,
        )
    # every claim marked with the cause of the move (the moves table); without one (an old
    # output) the failovers' causes
    marks = [
        (m["time_ms"], (m["group"], m["topic"], m["partition"]), m["cause_kind"])
        for m in moves
        if m["action"] == "took"
    ] or [(f["to_start_ms"], (f["group"], f["topic"], f["partition"]), f["cause"]) for f in fail]
    for cause, (marker, c) in _MARKERS.items():
        xs = [(t - start) / 1000 for t, k, kind in marks if kind == cause and k in row]
        ys = [row[k] for t, k, kind in marks if kind == cause and k in row]
        if xs:
            ax.scatter(
                xs, ys, marker=marker, color=c, s=28, zorder=3, label=_LABELS.get(cause, cause)
            )
    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels(
        [_literal(f"{g}:{t}/{p}") if multi_group else f"{t}/{p}" for g, t, p in chosen]
    )
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds since {_fmt_time(start)} UTC")
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[c]) for c in clients[:20]]
    legend1 = ax.legend(
        handles,
        [_literal(c) for c in clients[:20]],
        title="client",
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=7,
    )
    ax.add_artist(legend1)
    if marks:
        ax.legend(loc="lower left", bbox_to_anchor=(1.01, 0), fontsize=7)
    note = (
        f"{len(chosen)} of {len(changes)} partitions (most ownership changes first)"
        if len(changes) > len(chosen)
        else f"all {len(changes)} partitions"
    )
    return _png(fig), note


def _literal(label: str) -> str:
    """A client or group id as a matplotlib label: as written (``$...$`` was drawn as
    mathtext, and an id such as ``w$\\undefined{$`` failed the whole report)."""
    return label.replace("$", r"\$")


def _histograms(gaps: list[dict], fail: list[dict]) -> str | None:
    plt = require("matplotlib.pyplot")
    ratios = [g["gap_over_hb"] for g in gaps if g["gap_over_hb"] is not None]
    durations = [f["gap_ms"] / 1000 for f in fail]
    if not ratios and not durations:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.6))
    if ratios:
        left.hist(ratios, bins=40, color="tab:blue")
        for x, label in ((1, "HB (unknown from here)"), (2, "2 HB (stale)")):
            left.axvline(x, color="tab:red", linestyle="--", linewidth=1)
            left.text(x, left.get_ylim()[1] * 0.9, " " + label, fontsize=7, color="tab:red")
    left.set_title("largest gap between a claim's accepted messages")
    left.set_xlabel("gap / holder's heartbeat interval")
    left.set_ylabel("claims")
    by_cause: dict[str, list[float]] = {}
    for f in fail:
        by_cause.setdefault(f["cause"], []).append(f["gap_ms"] / 1000)
    if durations:
        right.hist(
            list(by_cause.values()),
            bins=30,
            stacked=True,
            label=list(by_cause),
            color=[_MARKERS.get(c, ("", "tab:gray"))[1] for c in by_cause],
        )
        right.legend(fontsize=7)
    right.set_title("failover duration (previous holder's last message to new claim)")
    right.set_xlabel("seconds")
    right.set_ylabel("failovers")
    return _png(fig)


def _html_table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows[:TABLE_ROWS]:
        cells = []
        for c in columns:
            v = r.get(c)
            if c.endswith("_ms") and c not in ("gap_ms", "max_gap_ms", "hb_ms") and v is not None:
                v = _fmt_time(v)
            cells.append(f"<td>{html.escape('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f"<p>… {len(rows) - TABLE_ROWS} more in the Parquet table</p>"
        if len(rows) > TABLE_ROWS
        else ""
    )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _member_moves(summary: dict[str, Any]) -> list[dict[str, Any]]:
    def text(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "-"

    return [
        {
            "group": group,
            "client_id": client,
            "took": text(m["took"]),
            "gave_up": text(m["gave_up"]),
        }
        for group, g in sorted(summary["groups"].items())
        for client, m in sorted(g.get("moves_by_member", {}).items())
    ]


def write_report(
    out_dir: str | os.PathLike[str], tables: dict[str, Any], summary: dict[str, Any]
) -> Path:
    """Write ``report.html`` under ``out_dir`` and return its path."""
    require("matplotlib").use("Agg")  # no display needed, and no window ever opens
    own = tables["ownership"].to_pylist()
    fail = sorted(tables["failovers"].to_pylist(), key=lambda f: f["to_start_ms"])
    gaps = tables["heartbeat_gaps"].to_pylist()
    viol = sorted(tables["violations"].to_pylist(), key=lambda v: v["time_ms"])
    moves = tables["moves"].to_pylist() if "moves" in tables else []
    membership = tables["membership"].to_pylist() if "membership" in tables else []
    timeline, note = _timeline(own, fail, summary["log_time"]["last_ms"], moves)
    hist = _histograms(gaps, fail)
    rows = summary_rows(summary)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>logmarshal audit</title>",
        "<style>body{font-family:sans-serif;margin:1.5em;max-width:1400px}"
        "table{border-collapse:collapse;font-size:12px;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}</style></head><body>",
        "<h1>Coordination log audit</h1>",
        f"<p>source {html.escape(summary['source'])}; {summary['records_replayed']:,} records "
        f"replayed by the {html.escape(summary['engine'])} engine; log time "
        f"{_fmt_time(summary['log_time']['first_ms'])} to "
        f"{_fmt_time(summary['log_time']['last_ms'])} UTC.</p>",
    ]
    genesis = summary.get("snapshot_genesis") or {}
    if genesis:
        where = ", ".join(f"{cp} (covering offset {off})" for cp, off in genesis.items())
        parts.append(
            "<p><b>Starts from snapshots:</b> the coordination log was truncated behind "
            f"published snapshots; the replay of partitions {html.escape(where)} starts from "
            "that snapshot (its genesis): claims open then show start cause "
            "<i>snapshot</i>, and counts cover only the records after it.</p>"
        )
    late = [cp for cp in summary.get("truncated_history") or [] if str(cp) not in genesis]
    if late:
        parts.append(
            "<p><b>Warning:</b> the oldest records of coordination partitions "
            f"{late} are gone and no valid snapshot covers them; their history starts late.</p>"
        )
    rewinds = summary.get("rewinds") or []
    if rewinds:
        parts += [
            f"<h2>The coordination log went back in time ({len(rewinds)})</h2>",
            "<p><b>Warning:</b> published snapshots show that records once in "
            "<code>__marshal</code> are gone or were replaced (an unclean leader election, or "
            "a broker that lost acknowledged records). This audit describes the log as it is "
            "now, not the history the members acted on; for the recovery see PROTOCOL.md, "
            '"A coordination log that loses records".</p>',
            _html_table(
                rewinds,
                ["coord_partition", "kind", "snapshot_offset", "covered_offset", "evidence"],
            ),
        ]
    if "verify" in summary:
        ok = summary["verify"]["ok"]
        parts.append(
            f"<p>Cross-check against a plain replay: <b>{'passed' if ok else 'FAILED'}</b></p>"
        )
    if rows:
        parts += ["<h2>Groups</h2>", _html_table(rows, list(rows[0]))]
    parts.append("<h2>Ownership timeline</h2>")
    if timeline:
        parts.append(f"<p>{html.escape(note)}</p><img src='data:image/png;base64,{timeline}'>")
    else:
        parts.append(f"<p>{html.escape(note)}</p>")
    if hist:
        parts += [
            "<h2>Heartbeat gaps and failover durations</h2>",
            f"<img src='data:image/png;base64,{hist}'>",
        ]
    parts += [
        f"<h2>Failovers ({len(fail)})</h2>",
        _html_table(
            fail,
            [
                "to_start_ms",
                "group",
                "topic",
                "partition",
                "from_client",
                "to_client",
                "cause",
                "gap_ms",
                "resume_position",
            ],
        ),
        f"<h2>Moves ({len(moves)})</h2>",
        "<p>Every partition a client took or gave up, and why: the cause the rationalizer "
        "decided (stale takeover, restart, admin reset), a clean close, or the membership "
        "change of the group that triggered the rebalance.</p>",
        _html_table(
            moves,
            [
                "time_ms",
                "group",
                "topic",
                "partition",
                "client_id",
                "action",
                "counterpart",
                "cause",
            ],
        ),
        _html_table(_member_moves(summary), ["group", "client_id", "took", "gave_up"]),
        f"<h2>Membership changes ({len(membership)})</h2>",
        _html_table(
            sorted(membership, key=lambda e: (e["time_ms"], e["group"])),
            ["time_ms", "group", "client_id", "instance_id", "event", "detail", "hb_ms"],
        ),
        f"<h2>Violations ({len(viol)})</h2>",
        _html_table(
            viol,
            [
                "time_ms",
                "group",
                "topic",
                "partition",
                "client_id",
                "instance_id",
                "kind",
                "holder_client",
                "lost_at_ms",
                "coord_partition",
                "offset",
            ],
        ),
        "<h2>Verdicts</h2>",
        _html_table(tables["verdicts"].to_pylist(), ["group", "outcome", "reason", "records"]),
        "</body></html>",
    ]
    path = Path(out_dir) / REPORT_FILE
    path.write_text("\n".join(parts))
    return path
