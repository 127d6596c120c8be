"""The audit submitted with spark-submit to a real standalone Spark cluster (master + worker
JVMs on 127.0.0.1, started from pyspark's scripts) equals the in-process audit, table by table,
and leaves summary.json and report.html behind. Both JVMs are stopped whatever happens."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import logmarshal.audit.job as job_module
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination
from logmarshal.audit.standalone import spark_bin, spark_env, standalone_cluster

from .reports import assert_outputs
from .test_spark import same_rows

# in .ci/run's second stage (-m long): the in-process and Kafka-source audits run by default
pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.long]


def _jvms(work: Path) -> list[int]:
    """Pids of Spark master/worker JVMs started for this test (their env names its dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"org.apache.spark.deploy" in cmdline and str(work).encode() in environ:
            found.append(int(pid))
    return found


def test_spark_submit_to_a_standalone_cluster_equals_the_inprocess_audit(
    story_cluster, tmp_path
) -> None:
    cluster, _script, _at = story_cluster
    info = export_coordination(cluster, tmp_path / "export")
    run_inprocess(info, tmp_path / "local", replay_config_for(info))
    work, out = tmp_path / "spark", tmp_path / "out"
    with standalone_cluster(work, cores=2, memory="1g") as master:
        assert master.startswith("spark://127.0.0.1:")
        assert len(_jvms(work)) == 2  # master and worker
        env = spark_env(work / "logs")
        # spark-submit runs job.py from its own directory: without this its driver imports
        # whatever logmarshal is installed (another checkout's) and ships that to executors
        checkout = str(Path(job_module.__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, env.get("PYTHONPATH")) if p)
        submitted = subprocess.run(
            [
                spark_bin("spark-submit"),
                "--master",
                master,
                "--conf",
                "spark.executor.memory=1g",
                "--conf",
                "spark.ui.enabled=false",
                job_module.__file__,
                "--input",
                info.path,
                "--out",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert _jvms(work) == []  # both JVMs are gone once the block is left
    assert_outputs(out, "spark")
    got, want = load_tables(out), load_tables(tmp_path / "local")
    for table in want:
        assert same_rows(got[table], want[table]), table


def test_a_failing_start_still_stops_what_it_started(tmp_path, monkeypatch) -> None:
    """A worker that cannot start (bad memory setting) raises, and the master is stopped."""
    work = tmp_path / "spark"
    with (
        pytest.raises((RuntimeError, TimeoutError)),
        standalone_cluster(work, memory="not-a-size", timeout=60),
    ):
        pass  # pragma: no cover - never reached
    assert _jvms(work) == []
