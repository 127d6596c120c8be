"""The audit of a truncated coordination log starts from the snapshot (its genesis), says
so, and on the window after it gives the same tables as an audit of the full history."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("pyarrow")

from logmarshal import EmbeddedCluster
from logmarshal import _coordlog as coordlog
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.audit import summary as summary_mod
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import ExportInfo, export_coordination
from logmarshal.audit.genesis import read_exported_snapshots
from rationalizer import WorldState
from storage import TimestampType, TopicConfig

from . import logs
from .logs import LogClock, Script, random_log

N = 1  # one coordination partition: every record of the random fleet lands there


def _rows(tables, name):
    return sorted((tuple(r.values()) for r in tables[name].to_pylist()), key=repr)


def _publish(cluster, script) -> list[WorldState]:
    worlds = []
    for cp in range(N):
        w = WorldState()
        w.apply_many(script.records[cp])
        coordlog.publish_snapshot(cluster, cp, w)
        worlds.append(w)
    return worlds


def truncated_log(tmp_path, monkeypatch) -> tuple[ExportInfo, ExportInfo, list[WorldState]]:
    """A random log with two published snapshots, exported whole, then truncated behind the
    older snapshot and exported again: ``(full export, truncated export, newest worlds)``."""
    monkeypatch.setattr(
        logs,
        "coordination_topic_config",
        lambda: TopicConfig(
            timestamp_type=TimestampType.LOG_APPEND_TIME, retention_ms=-1, segment_bytes=1024
        ),
    )
    clock = LogClock()
    with EmbeddedCluster(tmp_path / "d", clock=clock, maintenance_interval=0) as cluster:
        script = Script(N, cluster=cluster, clock=clock)
        coordlog.ensure_snapshot_topic(cluster, N)
        rng = random.Random(7)

        def phase() -> None:  # random_log starts its clock at 0: move the base on
            script.base = max(r[1] for recs in script.records.values() for r in recs) + 1000
            random_log(rng, script, 250)

        random_log(rng, script, 250)
        _publish(cluster, script)
        phase()
        genesis = _publish(cluster, script)
        phase()
        full_export = export_coordination(cluster, tmp_path / "full")
        for cp in range(N):
            assert coordlog.truncate(cluster, cp) is not None
        assert all(cluster.earliest_offset(COORDINATION_TOPIC, cp) > 0 for cp in range(N))
        cut_export = export_coordination(cluster, tmp_path / "cut")
    return full_export, cut_export, genesis


def test_audit_after_truncation_starts_from_the_snapshot(tmp_path, monkeypatch) -> None:
    full_export, cut_export, genesis = truncated_log(tmp_path, monkeypatch)
    assert cut_export.truncated == list(range(N))
    assert all(len(v) == 2 for v in read_exported_snapshots(tmp_path / "cut").values())

    since = max(w.now for w in genesis) + 1
    cut_config = replay_config_for(cut_export, since_ms=since)
    assert {cp: g[0] for cp, g in cut_config.genesis.items()} == {
        cp: w.applied_through for cp, w in enumerate(genesis)
    }
    full_config = replay_config_for(full_export, since_ms=since)
    assert full_config.genesis == {}  # nothing truncated there: from the beginning
    cut = run_inprocess(cut_export, tmp_path / "cut-out", cut_config)
    full = run_inprocess(full_export, tmp_path / "full-out", full_config)
    assert cut.records < full.records
    from logmarshal.audit.verify import compare, records_from_export, reference_replay

    check = compare(
        load_tables(tmp_path / "cut-out"),
        reference_replay(records_from_export(cut_export), cut_config),
    )
    assert check.ok, check.mismatches
    a, b = load_tables(tmp_path / "cut-out"), load_tables(tmp_path / "full-out")
    for name in ("positions", "verdicts", "failovers"):
        assert _rows(a, name) == _rows(b, name), name
    # violations: the same records; when the sender lost the partition before the genesis,
    # that moment is not in the truncated history (None) but only in the full one
    va, vb = a["violations"].to_pylist(), b["violations"].to_pylist()
    assert len(va) == len(vb) > 0
    for x, y in zip(va, vb, strict=True):
        if x["lost_at_ms"] is None and y["lost_at_ms"] is not None:
            assert y["lost_at_ms"] < since
            y = {**y, "lost_at_ms": None, "lost_at_time": None}
        assert x == y
    assert a["positions"].num_rows > 0 and a["verdicts"].num_rows > 0
    # claims: those granted after the genesis are identical; those open at it start with
    # cause "snapshot" and end exactly as in the full audit
    own_a = a["ownership"].to_pylist()
    own_b = b["ownership"].to_pylist()
    covered = {cp: w.applied_through for cp, w in enumerate(genesis)}
    later = [o for o in own_a if o["start_cause"] != "snapshot"]
    assert later == [o for o in own_b if o["start_offset"] > covered[o["coord_partition"]]]
    spanning = [o for o in own_a if o["start_cause"] == "snapshot"]
    assert spanning
    ends = ("group", "topic", "partition", "client_id", "end_ms", "end_reason", "end_position")

    def end_of(o):
        return tuple(o[k] for k in ends if k in o)

    full_spanning = [
        o
        for o in own_b
        if o["start_offset"] <= covered[o["coord_partition"]]
        and (o["end_ms"] is None or o["end_ms"] >= since)
    ]
    assert sorted(map(end_of, spanning), key=repr) == sorted(map(end_of, full_spanning), key=repr)
    # the summary and the report say where the replay started
    summary = summary_mod.build_summary(a, cut_export, cut_config, cut)
    assert summary["snapshot_genesis"] == {str(cp): c for cp, c in covered.items()}
    json.dumps(summary)
    pytest.importorskip("matplotlib")
    from logmarshal.audit.report import write_report

    html = write_report(tmp_path / "cut-out", a, summary).read_text()
    assert "Starts from snapshots" in html and f"covering offset {covered[0]}" in html
    assert "no valid snapshot covers them" not in html
