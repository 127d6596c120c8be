"""The real-process scenarios (a broker process, member processes, real signals), one seed
each, alternating the modes; ``python -m scenarios.run_all --processes --seeds 20`` runs many.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

pytest.importorskip("confluent_kafka")

from scenarios.common import mode_for
from scenarios.processes import SCENARIOS

SEEDS = {
    "failover": 0,
    "pause": 1,
    "handoff": 2,
    "restart": 3,
    "rebalance": 7,  # AMO (Kafka runs it ALO; the threads stage in -m long)
    "broker-crash": 4,
    "reset": 5,
    "multi-broker": 7,
    "upgrade": 9,
}


def _children() -> set[int]:
    """Live processes whose parent is this test process (none may be left behind)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z":
            out.add(int(entry))
    return out


def _passes(name: str, seed: int) -> None:
    """The scenario passes, and leaves no process of its own behind."""
    before = _children()  # e.g. a Spark JVM another test module's session fixture keeps
    os.environ["SCENARIO_SHOW_OUTPUT"] = "1"  # a failure prints the children's output
    try:
        report = SCENARIOS[name](seed, mode=mode_for(seed, None))
    finally:
        os.environ.pop("SCENARIO_SHOW_OUTPUT", None)
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    assert report.ok, failed
    left = _children() - before
    for pid in left:  # do not leave them behind even if the check below fails
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"


#: run in .ci/run's second stage (-m long) only, to keep the README's run under 20 minutes:
#: each is covered in the default run elsewhere (rebalance and upgrade on Kafka's processes,
#: tests/kafka/test_scenarios.py; several brokers by the 3-node Kafka stage and
#: tests/storage/broker)
LONG = {"rebalance", "multi-broker", "upgrade"}


@pytest.mark.scenario
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.long) if n in LONG else n for n in sorted(SEEDS)]
)
def test_real_process_scenario_passes(name: str) -> None:
    _passes(name, SEEDS[name])


@pytest.mark.scenario
@pytest.mark.long  # .ci/run's second stage: the README's run has it on Kafka (tests/kafka)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_woken_zombie_makes_nobody_hand_an_offset_out_twice(seed: int) -> None:
    """The woken zombie of docs/protocol-notes.md on real processes (AMO whatever the seed):
    on the code before protocol version 4, the woken instance's heartbeat takes the partition back from its client's newer instance and
    its release rewinds the resume point, so the next holder repeats thousands of offsets."""
    _passes("zombie", seed)
