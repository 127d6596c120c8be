"""The audit over logs the real scenarios produced (real processes, kills, pauses)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from logmarshal import EmbeddedCluster
from logmarshal.audit.engine import load_tables, replay_config_for, run_inprocess
from logmarshal.audit.export import export_coordination
from logmarshal.audit.verify import compare, records_from_cluster, reference_replay

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.scenario, pytest.mark.slow]


def audit_scenario(name: str, tmp_path: Path) -> dict[str, list[dict]]:
    if not (ROOT / "scenarios" / f"{name}.py").exists():
        pytest.skip(f"scenarios/{name}.py does not exist")
    data = tmp_path / "data"
    run = subprocess.run(
        [sys.executable, "-m", f"scenarios.{name}", "--seed", "1", "--data-dir", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        info = export_coordination(cluster, tmp_path / "export")
        config = replay_config_for(info)
        run_inprocess(info, tmp_path / "out", config)
        tables = load_tables(tmp_path / "out")
        check = compare(tables, reference_replay(records_from_cluster(cluster), config))
    assert check.ok, check.mismatches
    return {name: t.to_pylist() for name, t in tables.items()}


def test_failover_is_a_stale_takeover_from_the_stopped_member(tmp_path) -> None:
    t = audit_scenario("failover", tmp_path)
    stale = [f for f in t["failovers"] if f["cause"] == "stale_takeover"]
    assert stale, t["failovers"]
    victims = {f["from_client"] for f in stale}
    assert len(victims) == 1  # one member was stopped
    assert all(f["to_client"] not in victims for f in stale)
    assert all(f["gap_ms"] > 2 * f["hb_ms"] for f in stale)  # taken only once stale
    ended = [o for o in t["ownership"] if o["end_reason"] == "stale_taken"]
    assert {o["client_id"] for o in ended} == victims and len(ended) == len(stale)
    # a release whose answer the fault wrapper lost is not written again once it landed
    # (it used to be: a ReleasingPartition from a member that no longer held the partition)
    again = [v for v in t["violations"] if v["kind"] == "release_without_claim"]
    assert not again, again


def test_handoff_is_a_release_and_a_claim(tmp_path) -> None:
    t = audit_scenario("handoff", tmp_path)
    released = [f for f in t["failovers"] if f["cause"] == "released"]
    assert released
    assert all(f["from_client"] != f["to_client"] for f in released)
    assert all(f["from_last_seen_ms"] == f["from_end_ms"] for f in released)
    assert not t["violations"]


def test_restart_fences_the_old_instance(tmp_path) -> None:
    t = audit_scenario("restart", tmp_path)
    restarts = [f for f in t["failovers"] if f["cause"] == "restart"]
    assert restarts
    for f in restarts:
        assert f["from_client"] == f["to_client"] and f["from_instance"] != f["to_instance"]
        assert f["gap_ms"] < f["hb_ms"]  # restart recovery needs a fresh claim
    fenced = [o for o in t["ownership"] if o["end_reason"] == "fenced_new_instance"]
    assert len(fenced) == len(restarts)


def test_pause_the_frozen_member_loses_its_claims(tmp_path) -> None:
    t = audit_scenario("pause", tmp_path)
    stale = [f for f in t["failovers"] if f["cause"] == "stale_takeover"]
    assert stale
    frozen = {f["from_client"] for f in stale}
    assert len(frozen) == 1
    # whatever the thawed member still wrote about those partitions was rejected
    for v in t["violations"]:
        if v["client_id"] in frozen and v["kind"] == "heartbeat_without_claim":
            assert v["lost_at_ms"] is not None and v["lost_at_ms"] <= v["time_ms"]


def test_reset_voids_every_claim_and_resumes_at_the_new_offsets(tmp_path) -> None:
    """The real-process reset scenario (broker + 3 consumer processes + the CLI's
    ``group reset --execute``): the audit shows the reset ending every ownership open at
    that moment, and every partition's next holder starting exactly at the new offset."""
    from scenarios.reset import reset_target

    t = audit_scenario("reset", tmp_path)
    new = reset_target(1)
    reset_ends = [o for o in t["ownership"] if o["end_reason"] == "group_reset"]
    assert reset_ends, [o["end_reason"] for o in t["ownership"]]
    partitions = {o["partition"] for o in t["ownership"]}
    assert {o["partition"] for o in reset_ends} == partitions  # every partition was held
    assert sum(1 for v in t["verdicts"] if v["reason"] == "group_paused") >= 1
    positions_set = [v for v in t["verdicts"] if v["reason"] == "position_set"]
    assert positions_set and sum(v["records"] for v in positions_set) == len(partitions)
    for p in sorted(partitions):
        ended = max(o["end_ms"] for o in reset_ends if o["partition"] == p)
        after = sorted(
            (o for o in t["ownership"] if o["partition"] == p and o["start_ms"] >= ended),
            key=lambda o: o["start_offset"],
        )
        assert after, (p, "never claimed again after the reset")
        assert after[0]["start_position"] == new, (p, after[0])
    # the reset's failovers go from the voided holder to the next one, at the new offset
    resets = [f for f in t["failovers"] if f["cause"] == "group_reset"]
    assert resets and all(f["resume_position"] == new for f in resets), resets
