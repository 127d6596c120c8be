"""bench/upgrade_beats.py on a small group: the figures it prints come from real runs of
both caps (a group upgraded by killed instances names its tenures only at cap 9)."""

from __future__ import annotations

import argparse

from bench.upgrade_beats import run_cap


def test_cap_9_names_the_tenures_and_writes_one_record_per_member_and_cp_per_pass() -> None:
    args = argparse.Namespace(
        members=2, partitions=16, hb_ms=1000, coordination_partitions=2, window_hb=3, seed=0
    )
    at_8, at_9 = run_cap(8, args), run_cap(9, args)
    assert at_8["unnamed at end"] == 16 and at_9["unnamed at end"] == 0
    assert at_8["namings"] == 0 and at_9["namings"] >= 16  # each tenure named (once, unless
    # a write's outcome was lost)
    # cap 8: a Heartbeat per partition; cap 9: MemberHeartbeats, at most one per member and
    # coordination partition per pass (passes come every 0.325 to 0.65 HB)
    assert at_8["records/HB"] == at_8["partitions/HB"] >= 16
    assert at_9["records/HB"] <= 2 * 2 * 3.1 < at_8["records/HB"]
    assert at_9["partitions/HB"] >= 16
