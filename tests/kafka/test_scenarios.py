"""The real-process scenarios over Apache Kafka (the session's single node) instead of
logmarshal's broker: member processes join, rebalance, are SIGKILLed, close gracefully,
restart with their client id, and are woken stale after a SIGSTOP; a member frozen with its
worker (pause); the admin resetting a live group (reset); and the node SIGKILLed and
restarted under the group (broker-crash, on a node of its own), with the checks the
scenarios make on logmarshal's broker (ALO: 0 lost; AMO: 0 handed out twice; reset: the
group resumes exactly where it was set).

The cluster is shared, so every run has a topic and a group of its own
(:class:`scenarios.common.OnKafka` with a bootstrap); ``__marshal`` is shared, as on any
cluster. ``python -m scenarios.run_all --kafka --seeds N`` runs them all, each on a Kafka of
its own (and broker-crash, which kills the node).
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from logmarshal.localkafka import KafkaCluster
from scenarios.common import OnKafka, Report, mode_for
from scenarios.processes import SCENARIOS
from scenarios.run_all import OWN_KAFKA
from tests.scenarios.test_processes import _children

pytestmark = [pytest.mark.kafka, pytest.mark.scenario]

#: (scenario, seed): even seeds run ALO, odd AMO; zombie is AMO whatever the seed (restart
#: wakes a stale instance of the same client id in both modes). The second mode of most runs
#: is in .ci/run's second stage (-m long), to keep the README's run under 20 minutes.
RUNS = [
    ("failover", 0),
    pytest.param("failover", 1, marks=pytest.mark.long),
    ("handoff", 2),
    pytest.param("handoff", 3, marks=pytest.mark.long),
    ("restart", 4),
    pytest.param("restart", 5, marks=pytest.mark.long),
    # rebalance is the slowest (27 s): both modes in .ci/run's second stage
    pytest.param("rebalance", 6, marks=pytest.mark.long),
    pytest.param("rebalance", 7, marks=pytest.mark.long),
    ("zombie", 1),
    ("upgrade", 8),
    pytest.param("upgrade", 9, marks=pytest.mark.long),
    # a member and its worker frozen (SIGSTOP) past the lease, woken: 7 s
    ("pause", 10),
    pytest.param("pause", 11, marks=pytest.mark.long),
    # the admin resets the live group's position mid-flight (an operator): 9 s
    ("reset", 13),
    pytest.param("reset", 12, marks=pytest.mark.long),
    # the node SIGKILLed and restarted under the group: a Kafka of its own, 45 s a mode
    pytest.param("broker-crash", 14, marks=pytest.mark.long),
    pytest.param("broker-crash", 15, marks=pytest.mark.long),
]

#: the delivery checks of each mode, one of which a run must have made (handoff makes the
#: stricter "0 lost" and "0 repeated" in both modes)
DELIVERY = {
    "alo": ("ALO: every produced offset handled at least once", "0 lost"),
    "amo": ("AMO: no offset handed out twice", "0 repeated"),
}


#: scenarios whose invariant is not a mode's delivery: the group resumes where the admin
#: set it (and nothing is handed out while the reset waits)
INVARIANT = {"reset": ("every partition resumes exactly at", "nothing handed out during")}


def _run(name: str, seed: int, bootstrap: str | None) -> Report:
    """One run on the shared Kafka (``bootstrap``), or on a node of its own that it stops
    (None: the scenarios that kill the node); it leaves no process behind."""
    before = _children()  # the session's Kafka node is one of them
    os.environ["SCENARIO_SHOW_OUTPUT"] = "1"  # a failure prints the children's output
    try:
        report = SCENARIOS[name](seed, mode=mode_for(seed, None), kafka=OnKafka(bootstrap))
    finally:
        os.environ.pop("SCENARIO_SHOW_OUTPUT", None)
    left = _children() - before
    for pid in left:  # not left behind even if the check below fails
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"
    return report


def _id(run) -> str:
    name, seed = run.values if hasattr(run, "values") else run
    return f"{name}-{seed}"


@pytest.mark.parametrize(("name", "seed"), RUNS, ids=[_id(r) for r in RUNS])
def test_scenario_passes_on_kafka(kafka: KafkaCluster, name: str, seed: int) -> None:
    own = name in OWN_KAFKA
    report = _run(name, seed, None if own else kafka.bootstrap)
    mode = report.mode.split(",")[0]
    where = "over Apache Kafka" if own else "over Apache Kafka at " + kafka.bootstrap
    assert where in report.mode, report.mode
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
    assert report.ok, failed
    # the invariant of the mode was checked (and held), not skipped by an early return
    made = [c for c in report.checks if c.name.startswith(INVARIANT.get(name, DELIVERY[mode]))]
    assert made and all(c.ok for c in made), [c.name for c in report.checks]


def test_multi_broker_says_why_it_has_no_kafka_form(kafka: KafkaCluster) -> None:
    with pytest.raises(ValueError, match="places partitions"):
        SCENARIOS["multi-broker"](0, mode="alo", kafka=OnKafka(kafka.bootstrap))


def test_run_all_says_which_scenarios_kafka_skips_and_why() -> None:
    from scenarios.run_all import skipped_on_kafka

    own = skipped_on_kafka(OnKafka())
    assert set(own) == {"multi-broker"} and "cluster-file rule" in own["multi-broker"]
    shared = skipped_on_kafka(OnKafka("127.0.0.1:9092"))
    assert set(shared) == {"multi-broker", "broker-crash"}
    assert "a Kafka of its own" in shared["broker-crash"]


def test_kafka_options_mean_real_processes() -> None:
    from scenarios.common import kafka_from, parse_args

    args = parse_args("failover", ["--kafka", "--seed", "3"])
    assert args.stage == "processes" and kafka_from(args) == OnKafka(None)
    args = parse_args("failover", ["--kafka", "--kafka-bootstrap", "127.0.0.1:9092"])
    assert kafka_from(args) == OnKafka("127.0.0.1:9092")
    assert parse_args("failover", []).stage == "threads"
    with pytest.raises(SystemExit):
        parse_args("failover", ["--kafka", "--stage", "sim"])
    with pytest.raises(SystemExit, match="goes with --kafka"):
        kafka_from(parse_args("failover", ["--kafka-bootstrap", "127.0.0.1:9092"]))


def test_a_kraft_cluster_id_never_reads_as_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """One run of ``run_all --kafka`` failed formatting its node: its id began with ``-``
    (urlsafe base64 of a first byte 0xF8-0xFB) and ``kafka-storage format -t -...`` took it
    for an option. The id is drawn again then, as Kafka's ``Uuid.randomUuid`` does."""
    import uuid

    from logmarshal.localkafka import harness

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(harness.uuid, "uuid4", lambda: next(draws))
    made = harness.cluster_id()
    assert made == "AQEBAQEBAQEBAQEBAQEBAQ" and len(made) == 22
