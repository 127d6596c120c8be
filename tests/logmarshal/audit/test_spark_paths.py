"""Every Spark path (CLI --master, the job spark-submit runs) leaves the same outputs, and the
job reads each coordination partition's file in one task, in order, without a shuffle."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination
from logmarshal.audit.outputs import is_local_path

from .reports import assert_outputs
from .test_spark import same_rows

pytestmark = pytest.mark.spark


def test_job_main_writes_tables_summary_and_report(spark, story_cluster, tmp_path, monkeypatch):
    from logmarshal.audit import job

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    monkeypatch.setattr(spark, "stop", lambda: None)  # main stops "its" (our shared) session
    out = tmp_path / "out"
    assert job.main(["--input", info.path, "--out", str(out), "--master", "local[2]"]) == 0
    summary = assert_outputs(out, "spark")
    assert summary["failovers"]["by_cause"]["stale_takeover"] == 1
    run_inprocess(info, tmp_path / "local", replay_config_for(info))
    got, want = load_tables(out), load_tables(tmp_path / "local")
    for table in want:
        assert same_rows(got[table], want[table]), table


def test_each_coordination_partition_is_one_task_with_no_shuffle(spark, story_cluster, tmp_path):
    from logmarshal.audit.job import _executor_fold, _union_struct, whole_file_splits

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    files = sorted(Path(info.coordination_path).glob("part-*.parquet"))
    assert len(files) == len(info.partitions) > 1
    types = pytest.importorskip("pyspark.sql.types")
    with whole_file_splits(spark):
        records = spark.read.parquet(info.coordination_path)
        assert records.rdd.getNumPartitions() == len(files)
        folded = records.mapInArrow(
            functools.partial(_executor_fold, config=replay_config_for(info)),
            _union_struct(types),
        )
        plan = folded._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan and "Sort" not in plan, plan
    # outside the block the session's own split settings are back
    assert spark.conf.get("spark.sql.files.maxPartitionBytes") != str(1 << 50)


def test_an_export_out_of_order_is_refused_not_audited(spark, story_cluster, tmp_path):
    import pyarrow.parquet as pq

    from logmarshal.audit.job import run_spark

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    biggest = max(
        Path(info.coordination_path).glob("part-*.parquet"), key=lambda p: p.stat().st_size
    )
    table = pq.read_table(biggest)
    assert table.num_rows > 2
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), biggest)
    with pytest.raises(Exception, match="out of order"):
        run_spark(spark, info, tmp_path / "out", replay_config_for(info))


def test_a_coordination_partition_folded_by_two_tasks_is_refused(spark, story_cluster, tmp_path):
    """Two files of one coordination partition are two tasks: each would fold its piece from
    an empty world; the driver finds the partition twice and refuses the audit."""
    import pyarrow.parquet as pq

    from logmarshal.audit.job import run_spark

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    biggest = max(
        Path(info.coordination_path).glob("part-*.parquet"), key=lambda p: p.stat().st_size
    )
    table = pq.read_table(biggest)
    half = table.num_rows // 2
    assert half > 0
    biggest.unlink()
    pq.write_table(table.slice(0, half), biggest.with_name(biggest.stem + "-a.parquet"))
    pq.write_table(table.slice(half), biggest.with_name(biggest.stem + "-b.parquet"))
    with pytest.raises(Exception, match=r"folded in pieces by several tasks"):
        run_spark(spark, info, tmp_path / "out", replay_config_for(info))


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("out", True),
        ("/tmp/out", True),
        ("file:///tmp/out", True),
        ("hdfs:///audit/out", False),
        ("s3a://bucket/out", False),
    ],
)
def test_which_outputs_the_driver_can_write_itself(path: str, local: bool) -> None:
    assert is_local_path(path) is local


def test_a_master_spark_cannot_start_is_one_line(story_cluster, tmp_path) -> None:
    """``--master bogus://x`` ended in pyspark's and Java's tracebacks (an attack on the
    audit, 2026-12-06). In a process of its own: this one's Spark session would be reused."""
    import subprocess
    import sys

    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    done = subprocess.run(
        [sys.executable, "-m", "logmarshal", "audit", "--input", info.path, "--out",
         str(tmp_path / "out"), "--master", "bogus://x", "--no-report"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("logmarshal: error: cannot start Spark with --master bogus://x")
    )
