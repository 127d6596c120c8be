"""The bounded-log scenario in real processes (broker, members, admin CLI), one seed."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("confluent_kafka")

from scenarios.common import mode_for
from scenarios.snapshots import run

from .test_processes import _children


@pytest.mark.scenario
def test_snapshots_truncation_late_joiners_and_reset_in_real_processes() -> None:
    before = _children()
    os.environ["SCENARIO_SHOW_OUTPUT"] = "1"
    try:
        report = run(3, mode=mode_for(3, None))
    finally:
        os.environ.pop("SCENARIO_SHOW_OUTPUT", None)
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    assert report.ok, failed
    assert _children() - before == set()
