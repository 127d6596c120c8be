"""Each scenario for a few seeds (both modes); ``python -m scenarios.run_all`` runs many."""

from __future__ import annotations

import importlib
import threading

import pytest

from scenarios.common import mode_for


@pytest.mark.scenario
@pytest.mark.parametrize("name", ["failover", "handoff", "race", "pause", "restart"])
@pytest.mark.parametrize("seed", [0, 1])
def test_scenario_passes(name: str, seed: int) -> None:
    module = importlib.import_module(f"scenarios.{name}")
    report = module.run(seed, mode=mode_for(seed, None))
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    assert report.ok, failed
    left = [
        t.name for t in threading.enumerate() if t.name.startswith(("logmarshal-", "scenario-"))
    ]
    assert not left, left


@pytest.mark.scenario
def test_a_scenario_runs_from_the_command_line_and_keeps_its_log(tmp_path, capsys) -> None:
    from scenarios import handoff

    data = tmp_path / "kept"
    assert handoff.main(["--seed", "2", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "0 lost" in out
    assert (data / "__marshal-0").is_dir()
