"""Issue 32: "The audit reports the rewind." Evidence one export can show that ``__marshal``
went back in time (logmarshal/audit/rewind.py), from the snapshots published before it did:

- a snapshot covering an offset at or past the log's current end (``beyond_log_end``);
- a snapshot covering an offset inside the log whose world is not the world the audit
  replays there (``world_differs``): the log was rewound and regrew with other records.

The rewind is real: the embedded cluster is closed, the segment of ``__marshal/0`` is cut
back below what the snapshots cover (as an unclean leader election or a restored disk loses
acknowledged records), and the cluster reopens on it. A clean log has no finding, and the
Spark engine reports the same findings as the in-process one.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from logmarshal import EmbeddedCluster
from logmarshal import _coordlog as coordlog
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.audit.columnar import ColumnarAudit
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination
from logmarshal.audit.outputs import write_outputs
from logmarshal.audit.replay import PartitionAudit, ReplayConfig
from rationalizer import WorldState
from tests.rewinding import cut_segment

from .logs import LogClock, Script, random_log

OTHER_KEYS = {"other": b"k" * 32}  # a key configuration the audit does not hold


def _world(script: Script, keys=None) -> WorldState:
    w = WorldState(admin_keys=keys)
    w.apply_many(script.records[0])
    return w


def _grow(script: Script, who: str, t: int, n: int) -> int:
    """``n`` records of ``who`` holding events/0..2 from log time ``t``; the next time."""
    for p in range(3):
        script.claim(who, p, t)
        t += 10
    for i in range(n - 3):
        script.beat(who, i % 3, 100 * i, t)
        t += 10
    return t


def _audit(cluster: EmbeddedCluster, tmp_path: Path, name: str):
    info = export_coordination(cluster, tmp_path / f"{name}-export")
    config = replay_config_for(info)
    out = tmp_path / f"{name}-out"
    result = run_inprocess(info, out, config)
    summary, report = write_outputs(out, info, config, result)
    return info, config, summary, report


def _findings(summary) -> set[tuple[str, int, int]]:
    return {(f["kind"], f["covered_offset"], f["snapshot_offset"]) for f in summary["rewinds"]}


def _rewind_scenario(tmp_path: Path):
    """Snapshots, a clean audit, a cut, its audit, a regrowth and its audit (asserted);
    returns the last audit's ``(info, config, summary)``."""
    clock = LogClock()
    data = tmp_path / "data"
    with EmbeddedCluster(data, clock=clock, maintenance_interval=0) as cluster:
        script = Script(1, cluster=cluster, clock=clock)
        coordlog.ensure_snapshot_topic(cluster, 1)
        t = _grow(script, "a:1", 0, 40)
        s1 = coordlog.publish_snapshot(cluster, 0, _world(script))
        k1 = coordlog.publish_snapshot(cluster, 0, _world(script, OTHER_KEYS), OTHER_KEYS)
        x1 = len(script.records[0]) - 1
        t = _grow(script, "a:1", t, 40)
        s2 = coordlog.publish_snapshot(cluster, 0, _world(script))
        x2 = len(script.records[0]) - 1

        # the clean log: both snapshots of the audit's configuration compared, both match
        _, _, clean, report = _audit(cluster, tmp_path, "clean")
        assert clean["rewinds"] == []
        assert clean["snapshot_checks"] == {"compared": 2, "by_result": {"matches": 2}}
        assert "went back in time" not in report.read_text()

    # an unclean election: the log loses every record from offset 20 on
    assert cut_segment(data / f"{COORDINATION_TOPIC}-0", 20) == 20
    del script.records[0][20:]
    with EmbeddedCluster(data, clock=clock, maintenance_interval=0) as cluster:
        script.cluster = cluster
        assert cluster.latest_offset(COORDINATION_TOPIC, 0) == 20

        # cut: all three snapshots (the other configuration's too) cover offsets it lost
        _, _, cut, report = _audit(cluster, tmp_path, "cut")
        assert _findings(cut) == {
            ("beyond_log_end", x1, s1),
            ("beyond_log_end", x1, k1),
            ("beyond_log_end", x2, s2),
        }
        assert {f["log_end"] for f in cut["rewinds"]} == {20}
        assert all("no longer does" in f["evidence"] for f in cut["rewinds"])
        assert cut["snapshot_checks"]["compared"] == 0
        assert "went back in time (3)" in report.read_text()

        # it regrows with other records, past the first snapshots but not the second
        _grow(script, "b:1", t + 5000, x1 - 20 + 10)
        end = len(script.records[0])
        assert x1 < end <= x2
        info, config, regrown, report = _audit(cluster, tmp_path, "regrown")
        assert _findings(regrown) == {("world_differs", x1, s1), ("beyond_log_end", x2, s2)}
        differs = next(f for f in regrown["rewinds"] if f["kind"] == "world_differs")
        assert differs["applied_through"] == x1
        assert differs["replay_digest"] != differs["snapshot_digest"]
        # the other configuration's snapshot is inside the log now and not compared
        assert regrown["snapshot_checks"] == {"compared": 1, "by_result": {"world_differs": 1}}
        html = report.read_text()
        assert "world_differs" in html and "beyond_log_end" in html
    return info, config, regrown


def test_the_audit_reports_a_rewind_shown_by_published_snapshots(tmp_path) -> None:
    _rewind_scenario(tmp_path)


def _checks_config(records, covered: list[int], wrong: int) -> ReplayConfig:
    """Snapshot checks at ``covered`` with the true digests, but ``wrong``'s is not."""
    checks = []
    for i, c in enumerate(covered):
        w = WorldState()
        w.apply_many(records[: c + 1])
        digest = hashlib.sha256(w.to_bytes()).hexdigest()
        if c == wrong:
            digest = hashlib.sha256(b"another world").hexdigest()
        checks.append((c, 100 + i, digest))
    return ReplayConfig(snapshot_checks={0: tuple(checks)})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_folds_compare_the_world_at_each_covered_offset(seed: int) -> None:
    """Chunked at random, the per-record and the columnar fold stop at each covered offset:
    the true digests match, the wrong one differs, none is skipped."""
    rng = random.Random(seed)
    script = Script(1)
    random_log(rng, script, 300)
    records = script.records[0]
    last = records[-1][0]
    covered = sorted({0, rng.randrange(1, last), rng.randrange(1, last), last - 1, last})
    wrong = covered[1]
    config = _checks_config(records, covered, wrong)
    results = []
    for fold in (PartitionAudit, ColumnarAudit):
        audit = fold(0, config)
        pos = 0
        while pos < len(records):
            n = rng.randint(1, 40)
            chunk = records[pos : pos + n]
            audit.feed(*(list(col) for col in zip(*chunk, strict=True)))
            pos += n
        rows = audit.finish()["snapshot_checks"]
        results.append(sorted(rows))
    assert results[0] == results[1]
    got = {row[2]: row[6] for row in results[0]}
    assert got == {c: "world_differs" if c == wrong else "matches" for c in covered}
    assert all(row[3] == row[2] for row in results[0])  # compared exactly at the offset


def test_a_window_ending_before_a_snapshot_leaves_it_unchecked() -> None:
    rng = random.Random(5)
    script = Script(1)
    random_log(rng, script, 200)
    records = script.records[0]
    last = records[-1][0]
    # the window ends with record c: the next one is later (log time only grows here)
    c = next(i for i in range(last // 2, last) if records[i + 1][1] > records[i][1])
    assert records[-1][1] > records[c][1]
    checks = _checks_config(records, [c, last], wrong=-1).snapshot_checks
    config = ReplayConfig(snapshot_checks=checks, until_ms=records[c][1])
    for fold in (PartitionAudit, ColumnarAudit):
        audit = fold(0, config)
        audit.feed(*(list(col) for col in zip(*records, strict=True)))
        rows = audit.finish()["snapshot_checks"]
        assert [(r[2], r[6]) for r in rows] == [(c, "matches")], fold


@pytest.mark.spark
def test_spark_reports_the_same_rewind_findings(spark, tmp_path) -> None:
    from logmarshal.audit.job import run_spark

    info, config, regrown = _rewind_scenario(tmp_path)
    result = run_spark(spark, info, tmp_path / "spark", config)
    summary, _ = write_outputs(tmp_path / "spark", info, config, result, report=False)
    assert summary["rewinds"] == regrown["rewinds"]
    assert summary["snapshot_checks"] == regrown["snapshot_checks"]
    got = load_tables(tmp_path / "spark")["snapshot_checks"].to_pylist()
    want = load_tables(tmp_path / "regrown-out")["snapshot_checks"].to_pylist()
    assert got == want and len(got) == 1


@pytest.mark.parametrize("truncate", [False, True])
def test_snapshots_published_by_members_match_the_audits_replay(tmp_path, truncate) -> None:
    """No false alarm: the snapshots real Marshalers publish are the worlds the audit
    replays at their covered offsets. Behind a truncation the replay starts from the newest
    snapshot (its genesis), which is no comparison: older ones are not comparable."""
    from logmarshal.marshaler import Marshaler
    from tests.logmarshal.test_snapshots import _coordination_topic, _eventually, _traffic

    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        _coordination_topic(cluster, 2)
        members = [
            Marshaler(cluster, name, "g", 1.0, fetch_wait=0.05, coordination_partitions=2,
                      snapshot_records=25, snapshot_interval=None, truncate=truncate)
            for name in ("a", "b")
        ]  # fmt: skip
        try:
            _traffic(members, 30)
            for m in members:
                assert m.wait_caught_up(10)
            _eventually(
                lambda: sum(len(coordlog.read_snapshots(cluster, cp)) for cp in (0, 1)) >= 2
            )
        finally:
            for m in members:
                m.close()
        _, _, summary, _ = _audit(cluster, tmp_path, "members")
    assert summary["rewinds"] == []
    checks = summary["snapshot_checks"]
    if truncate:
        assert summary["snapshot_genesis"] and checks["compared"] == 0
    else:
        assert summary["snapshot_genesis"] == {}
        assert checks["compared"] >= 2 and checks["by_result"] == {"matches": checks["compared"]}
