"""Export from a cluster, the in-process engine, the cross-check and the CLI (no Spark)."""

from __future__ import annotations

import argparse
import json

import pytest

pytest.importorskip("pyarrow")

from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination, read_export_info
from logmarshal.audit.verify import (
    compare,
    records_from_cluster,
    records_from_export,
    reference_replay,
)
from logmarshal.cli import audit as audit_cli
from logmarshal.cli import coord as coord_cli
from logmarshal.cli.context import Context

from .reports import assert_outputs


def test_export_reads_back_exactly_the_log(story_cluster, tmp_path) -> None:
    cluster, script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    assert info.records == sum(len(r) for r in script.records.values())
    again = read_export_info(tmp_path / "export")
    assert again.partitions == info.partitions and again.log_end == info.log_end
    assert again.log_end[("events", 0)] == 0
    exported = dict(records_from_export(again))
    assert exported == {cp: recs for cp, recs in script.records.items() if recs}
    assert dict(records_from_cluster(cluster)) == script.records


class _Remote:
    """Any other Cluster: the export goes through ``fetch`` (one Message per record)."""

    def __init__(self, cluster) -> None:
        self._cluster = cluster

    def __getattr__(self, name):
        return getattr(self._cluster, name)


def test_export_through_fetch_equals_the_embedded_fast_path(story_cluster, tmp_path) -> None:
    cluster, script, _at = story_cluster
    fast = export_coordination(cluster, tmp_path / "fast")
    slow = export_coordination(_Remote(cluster), tmp_path / "slow")
    assert fast.partitions == slow.partitions
    assert dict(records_from_export(fast)) == dict(records_from_export(slow))
    assert dict(records_from_export(fast)) == {cp: r for cp, r in script.records.items() if r}


def test_an_answer_of_nothing_yet_does_not_cut_an_export_short(
    story_cluster, tmp_path, monkeypatch
) -> None:
    """A read that answered nothing below the log end the export read (a slow broker, a
    moving leader: what ``fetch_drop`` answers) ended that partition's export without a
    word: 7 of 29 records exported, and the audit judged that part of the log. The export
    waits for them; records that never come are an error naming the range. The same for
    the reads of the log that ``group describe``, a reset and the audit's check make."""
    from logmarshal import _ranges
    from logmarshal._faults import FaultPlan, FaultyCluster
    from logmarshal.errors import RetriableError

    cluster, script, _at = story_cluster
    truth = {cp: recs for cp, recs in script.records.items() if recs}
    dropped = 0
    for seed in range(3):
        faulty = FaultyCluster(cluster, FaultPlan(fetch_drop=0.5), seed=seed)
        info = export_coordination(faulty, tmp_path / f"export{seed}")
        assert dict(records_from_export(info)) == truth
        # what the admin's and the audit's own reads of the log go through (iter_columns)
        assert dict(records_from_cluster(faulty)) == script.records
        dropped += faulty.injected()["drop"]
    assert dropped > 0
    monkeypatch.setattr(_ranges, "RANGE_WAIT", 0.2)
    never = FaultyCluster(cluster, FaultPlan(fetch_drop=1.0))
    with pytest.raises(RetriableError, match=r"__marshal/\d+: no records from offset 0"):
        export_coordination(never, tmp_path / "never")


def test_read_export_info_explains_a_wrong_directory(tmp_path) -> None:
    with pytest.raises(ValueError, match="not an audit export"):
        read_export_info(tmp_path)


def test_inprocess_audit_passes_the_cross_check(story_cluster, tmp_path) -> None:
    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    config = replay_config_for(info)
    result = run_inprocess(info, tmp_path / "out", config)
    assert result.rows["failovers"] == 4 and result.rows["violations"] == 5
    tables = load_tables(tmp_path / "out")
    check = compare(tables, reference_replay(records_from_cluster(cluster), config))
    assert check.ok, check.mismatches
    # a tampered table is caught
    broken = dict(tables)
    broken["positions"] = tables["positions"].slice(1)
    assert not compare(broken, reference_replay(records_from_cluster(cluster), config)).ok


def _parser() -> argparse.ArgumentParser:
    from logmarshal.cli.main import _common_options

    parser = argparse.ArgumentParser(prog="logmarshal")
    commands = parser.add_subparsers(dest="command", required=True)
    common = _common_options(defaults=False)
    audit_cli.register(commands, common)
    coord_cli.register(commands, common)
    return parser


def _run(argv: list[str], ctx: Context) -> int:
    args = _parser().parse_args(argv)
    return args.func(args, ctx)


def test_cli_audit_local_engine_writes_tables_summary_and_report(
    story_cluster, tmp_path, capsys
) -> None:
    cluster, _script, _at = story_cluster
    ctx = Context(data_dir=str(tmp_path / "data"), as_json=False)
    ctx._cluster = cluster  # the fixture already holds the directory's lock
    out = tmp_path / "out"
    code = _run(
        ["audit", "--out", str(out), "--engine", "local", "--verify"],
        ctx,
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "cross-check: ok" in printed and "violations: 5" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failovers"]["by_cause"] == {
        "stale_takeover": 1,
        "released": 1,
        "restart": 1,
        "group_reset": 1,
    }
    assert summary["verify"]["ok"] is True
    assert_outputs(out, "in-process")
    for table in (
        "ownership",
        "failovers",
        "verdicts",
        "violations",
        "heartbeat_gaps",
        "positions",
    ):
        assert list((out / table).glob("*.parquet")), table
    assert (out / "export" / "export.json").exists()


def test_cli_coord_export_then_audit_the_export(story_cluster, tmp_path, capsys) -> None:
    cluster, _script, _at = story_cluster
    ctx = Context(data_dir=str(tmp_path / "data"), as_json=False)
    ctx._cluster = cluster
    assert _run(["coord", "export", "--out", str(tmp_path / "exp")], ctx) == 0
    assert "exported 29 coordination records" in capsys.readouterr().out
    fresh = Context(data_dir=None, as_json=True)
    code = _run(
        [
            "audit",
            "--input",
            str(tmp_path / "exp"),
            "--out",
            str(tmp_path / "out"),
            "--engine",
            "local",
            "--no-report",
            "--since",
            "2023-11-14T22:13:24Z",
        ],
        fresh,
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["window"]["since_ms"] == 1_700_000_004_000
    assert summary["failovers"]["by_cause"] == {"group_reset": 1}
    assert fresh._cluster is None  # --input never opens a cluster


def test_cli_audit_refuses_an_export_it_would_misread_or_destroy(
    story_cluster, tmp_path, capsys
) -> None:
    """Found by an attack on the CLI: ``--out`` equal to ``--input`` wrote the tables over
    the export (rc 0); an export missing a partition's file was audited without it (rc 0,
    ``cross-check: ok``); an ``export.json`` of another shape was a traceback. Each is now
    one error naming the file, and the export is untouched."""
    from logmarshal.cli.context import CliError

    cluster, _script, _at = story_cluster
    ctx = Context(data_dir=str(tmp_path / "data"), as_json=False)
    ctx._cluster = cluster
    exp = tmp_path / "exp"
    assert _run(["coord", "export", "--out", str(exp)], ctx) == 0
    parts = sorted(p.name for p in (exp / "coordination").iterdir())

    def audit(out) -> str:
        with pytest.raises((CliError, ValueError)) as raised:
            argv = ["audit", "--input", str(exp), "--out", str(out), "--engine", "local"]
            _run(argv, Context(data_dir=None, as_json=False))
        return str(raised.value)

    for out in (exp, exp / "coordination"):
        assert "is inside --input" in audit(out)
    assert sorted(p.name for p in (exp / "coordination").iterdir()) == parts
    meta = (exp / "export.json").read_text()
    for broken, says in (
        (meta.replace('"partitions": [', '"partitions": "x", "was": ['), "is not a list"),
        (meta.replace('"latest"', '"newest"', 1), "no 'latest'"),
        ("[]", "unknown export format"),
        (meta[:40], "is unreadable"),
    ):
        (exp / "export.json").write_text(broken)
        assert says in audit(tmp_path / "out"), broken[:60]
    (exp / "export.json").write_text(meta)
    # a damaged file (an attack on the audit, 2026-12-06): a null offset was audited into
    # 16 false violations with rc 0, a missing column or a null time was a traceback
    import pyarrow as pa
    import pyarrow.parquet as pq

    full = max(parts, key=lambda n: pq.read_metadata(exp / "coordination" / n).num_rows)
    path = exp / "coordination" / full
    good = path.read_bytes()
    table = pq.read_table(path)
    n = table.num_rows
    assert n > 2
    nulls = pa.array([None, *table.column("offset").to_pylist()[1:]], pa.int64())
    other = (table.column("coord_partition")[0].as_py() + 1) % len(parts)
    for damaged, says in (
        (table.set_column(1, "offset", nulls), "row(s) have no offset"),
        (table.drop_columns(["key"]), "is not what 'coord export' writes"),
        (table.take(list(range(n - 1, -1, -1))), "or out of order"),
        (pa.concat_tables([table, table.slice(n - 1, 1)]), "or out of order"),
        (
            table.set_column(0, "coord_partition", pa.array([other] * n, pa.int32())),
            "rows of another coordination partition",
        ),
    ):
        for statistics in (True, False):  # (the file's statistics, else its rows, say it)
            pq.write_table(damaged, path, write_statistics=statistics)
            assert says in audit(tmp_path / "out"), (says, statistics)
    path.write_bytes(good)
    (exp / "coordination" / parts[3]).unlink()
    assert f"{parts[3]} is missing" in audit(tmp_path / "out")
    assert not (tmp_path / "out" / "summary.json").exists()


def test_parse_time_accepts_ms_and_iso() -> None:
    assert audit_cli.parse_time("1700000000000") == 1_700_000_000_000
    assert audit_cli.parse_time("2023-11-14T22:13:20") == 1_700_000_000_000
    assert audit_cli.parse_time("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        audit_cli.parse_time("yesterday")


def test_cli_audit_of_a_rebalancing_log_counts_moves_per_member(
    rebalance_cluster, tmp_path, capsys
) -> None:
    cluster, _script = rebalance_cluster
    ctx = Context(data_dir=str(tmp_path / "data"), as_json=False)
    ctx._cluster = cluster
    out = tmp_path / "out"
    assert _run(["audit", "--out", str(out), "--engine", "local", "--verify"], ctx) == 0
    printed = capsys.readouterr().out
    assert "cross-check: ok" in printed
    assert "  g/a: took failover 1, rebalance 5; gave up rebalance 2" in printed
    summary = assert_outputs(out, "in-process")
    g = summary["groups"]["g"]
    assert g["moves_by_member"] == {
        "a": {"took": {"rebalance": 5, "failover": 1}, "gave_up": {"rebalance": 2}},
        "b": {"took": {"rebalance": 1}, "gave_up": {"failover": 1}},
        "c": {"took": {"rebalance": 1}, "gave_up": {"closed": 1}},
    }
    assert g["membership"] == {"joined": 3, "left": 1, "expired": 1, "partitions_added": 1}
    assert g["moves"]["rebalance: member left (c)"] == 1
    legacy = summary["groups"]["legacy"]["moves_by_member"]
    assert legacy == {
        "old": {"took": {"claim": 1}, "gave_up": {"release": 1}},
        "new": {"took": {"handoff": 1}, "gave_up": {}},
    }
    assert summary["moves"]["count"] == 12 + 3
    html = (out / "report.html").read_text()
    assert "<h2>Moves (15)</h2>" in html and "rebalance: member joined (b)" in html
    assert "<h2>Membership changes (6)</h2>" in html
    moves = load_tables(out)["moves"].to_pylist()
    assert {(m["client_id"], m["action"], m["cause"]) for m in moves if m["partition"] == 2} >= {
        ("c", "gave_up", "closed"),
        ("a", "took", "rebalance: member left (c)"),
    }
