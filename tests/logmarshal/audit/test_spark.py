"""The Spark job: same tables as the in-process fold, and the cross-check holds."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyarrow")

from logmarshal import EmbeddedCluster
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination
from logmarshal.audit.verify import (
    compare,
    records_from_cluster,
    records_from_export,
    reference_replay,
)
from logmarshal.cli.context import Context

from .logs import LogClock, Script, random_log
from .reports import assert_outputs
from .test_export_local import _run

pytestmark = pytest.mark.spark


def same_rows(a, b) -> bool:
    return sorted(map(repr, a.to_pylist())) == sorted(map(repr, b.to_pylist()))


def test_spark_audit_equals_the_inprocess_audit(spark, story_cluster, tmp_path) -> None:
    from logmarshal.audit.job import run_spark

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    config = replay_config_for(info)
    result = run_spark(spark, info, tmp_path / "spark", config)
    run_inprocess(info, tmp_path / "local", config)
    got, want = load_tables(tmp_path / "spark"), load_tables(tmp_path / "local")
    for table in want:
        assert same_rows(got[table], want[table]), table
    assert result.rows["failovers"] == 4
    failover = {f["cause"]: f for f in got["failovers"].to_pylist()}["stale_takeover"]
    assert (failover["from_client"], failover["to_client"], failover["gap_ms"]) == ("a", "b", 2400)
    check = compare(got, reference_replay(records_from_cluster(cluster), config))
    assert check.ok, check.mismatches


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_cross_check_on_random_logs(spark, tmp_path, seed: int) -> None:
    from logmarshal.audit.job import run_spark

    clock = LogClock()
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        script = Script(5, cluster=cluster, clock=clock)
        random_log(random.Random(seed), script, 1500, partitions=12)
        info = export_coordination(cluster, tmp_path / "export")
        config = replay_config_for(info)
        run_spark(spark, info, tmp_path / "out", config)
        check = compare(
            load_tables(tmp_path / "out"), reference_replay(records_from_cluster(cluster), config)
        )
    assert check.ok, check.mismatches
    assert check.verdict_records == sum(len(recs) for recs in script.records.values())


def test_cli_audit_on_spark_with_verify(
    spark, story_cluster, tmp_path, capsys, monkeypatch
) -> None:
    cluster, _script, _at = story_cluster
    monkeypatch.setattr(spark, "stop", lambda: None)  # the CLI stops "its" (our shared) session
    ctx = Context(data_dir=str(tmp_path / "data"), as_json=False)
    ctx._cluster = cluster
    out = tmp_path / "out"
    code = _run(["audit", "--out", str(out), "--verify"], ctx)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "cross-check: ok" in captured.out
    assert "replaying on Spark" in captured.err
    summary = assert_outputs(out, "spark")
    assert summary["verify"]["ok"]


def test_spark_audit_of_a_truncated_log_starts_from_the_snapshot(
    spark, tmp_path, monkeypatch
) -> None:
    """The genesis (a snapshot's world) travels to Spark's executors with the replay
    configuration: on Spark the truncated log's audit gives the in-process tables, claims
    open at the snapshot included, and on the window after it the full history's."""
    from logmarshal.audit.job import run_spark

    from .test_genesis import truncated_log

    full_export, cut_export, genesis = truncated_log(tmp_path, monkeypatch)
    assert cut_export.truncated == [0]
    since = max(w.now for w in genesis) + 1
    config = replay_config_for(cut_export, since_ms=since)
    assert {cp: g[0] for cp, g in config.genesis.items()} == {
        cp: w.applied_through for cp, w in enumerate(genesis)
    }
    result = run_spark(spark, cut_export, tmp_path / "spark", config)
    run_inprocess(cut_export, tmp_path / "local", config)
    got, want = load_tables(tmp_path / "spark"), load_tables(tmp_path / "local")
    for table in want:
        assert same_rows(got[table], want[table]), table
    assert result.records == cut_export.records
    starts = [o["start_cause"] for o in got["ownership"].to_pylist()]
    assert "snapshot" in starts  # claims open at the genesis start from it
    # ... and the window after the snapshot is the full history's (positions, verdicts)
    full_config = replay_config_for(full_export, since_ms=since)
    run_inprocess(full_export, tmp_path / "full", full_config)
    full = load_tables(tmp_path / "full")
    for table in ("positions", "verdicts", "failovers"):
        assert same_rows(got[table], full[table]), table
    check = compare(got, reference_replay(records_from_export(cut_export), config))
    assert check.ok, check.mismatches


def test_spark_audit_of_a_rebalancing_log_equals_the_inprocess_audit(
    spark, rebalance_cluster, tmp_path
) -> None:
    """Membership records (protocol version 2) and the moves they cause: the membership
    table comes out of the executors' folds, the moves table from the driver, and both are
    the in-process engine's."""
    from logmarshal.audit.job import run_spark

    cluster, _script = rebalance_cluster
    info = export_coordination(cluster, tmp_path / "export")
    config = replay_config_for(info)
    result = run_spark(spark, info, tmp_path / "spark", config)
    run_inprocess(info, tmp_path / "local", config)
    got, want = load_tables(tmp_path / "spark"), load_tables(tmp_path / "local")
    for table in want:
        assert same_rows(got[table], want[table]), table
    assert result.rows["moves"] == 15 and got["membership"].num_rows == 6
    causes = {(m["client_id"], m["action"], m["cause"]) for m in got["moves"].to_pylist()}
    assert ("a", "took", "rebalance: partitions added (events 3->4)") in causes
    assert ("b", "gave_up", "failover: holder stale") in causes
    check = compare(got, reference_replay(records_from_cluster(cluster), config))
    assert check.ok, check.mismatches


def test_spark_audit_of_a_log_with_tasks_equals_the_inprocess_audit(spark, tmp_path) -> None:
    """Task records (protocol version 3) on the same keys as plain heartbeats and releases:
    the executors fold them as the in-process engine does, and the cross-check holds."""
    from logmarshal.audit.job import run_spark

    clock = LogClock()
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        script = Script(3, cluster=cluster, clock=clock)
        random_log(random.Random(5), script, 600, partitions=6, tasks=0.5)
        assert any(v[0] == 3 for recs in script.records.values() for *_, v in recs if v)
        info = export_coordination(cluster, tmp_path / "export")
        config = replay_config_for(info)
        run_spark(spark, info, tmp_path / "spark", config)
        run_inprocess(info, tmp_path / "local", config)
        got, want = load_tables(tmp_path / "spark"), load_tables(tmp_path / "local")
        for table in want:
            assert same_rows(got[table], want[table]), table
        check = compare(got, reference_replay(records_from_cluster(cluster), config))
    assert check.ok, check.mismatches
    counts = {(r["outcome"], r["reason"]) for r in got["verdicts"].to_pylist()}
    assert ("accepted", "released") in counts and ("accepted", "renewed") in counts
