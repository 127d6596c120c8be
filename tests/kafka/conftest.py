"""Apache Kafka for the tests in this folder: one single-node KRaft cluster for the session
(``kafka``), started from Maven Central's jars by :mod:`logmarshal.localkafka` and stopped by
its pid at the end.

Without ``java`` or ``mvn`` these tests skip with one line saying how to enable them, except
where Kafka is required (``CI`` or ``LOGMARSHAL_REQUIRE_KAFKA`` set): there a Kafka that cannot
start fails the run, so a green CI always means the tests ran on Kafka.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from logmarshal.localkafka import KafkaCluster, KafkaStartError, KafkaUnavailable, missing_tools
from logmarshal.network import NetworkCluster


def kafka_required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("LOGMARSHAL_REQUIRE_KAFKA"))


def _unavailable(reason: str) -> None:
    if kafka_required():
        pytest.fail(f"Apache Kafka is required here but cannot run: {reason}", pytrace=False)
    pytest.skip(
        f"Apache Kafka cannot run here ({reason}); install java and mvn "
        "(apt-get install openjdk-17-jdk-headless maven) to run these tests"
    )


#: start_timeout of the 3-node clusters of the fault tests (the harness default is 90 s). A
#: node restarted mid-test shares two cores with two live nodes and the test's clients
#: (whose load producer's librdkafka threads spun while a leader was away: test_faults.py's
#: Producing): one restart took over 90 s on 2026-11-30.
FAULT_START_TIMEOUT = 240.0
#: a fault test's node settings: a paused follower leaves the ISR after 2 s, a killed node is
#: fenced after 3 s
FAULT_SERVER = {
    "replica.lag.time.max.ms": 2000,
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
}


def wait_for(predicate, timeout: float, what: str) -> None:
    """Until ``predicate()``, polled every 0.1 s; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def start_cluster(workdir, **config) -> KafkaCluster:
    if config.get("nodes", 1) > 1:  # a fault test's cluster, whose nodes it restarts
        config.setdefault("start_timeout", FAULT_START_TIMEOUT)
    return start(KafkaCluster(workdir, **config))


def start(cluster: KafkaCluster) -> KafkaCluster:
    """``cluster`` started, or the test skipped (failed where Kafka is required)."""
    missing = missing_tools()
    if missing:
        _unavailable(f"{' and '.join(missing)} not on PATH")
    try:
        return cluster.start()
    except (KafkaUnavailable, KafkaStartError) as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Iterator[KafkaCluster]:
    """One single-node Apache Kafka for the session; topics are per test (unique names)."""
    cluster = start_cluster(tmp_path_factory.mktemp("kafka"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def bootstrap(kafka: KafkaCluster) -> str:
    return kafka.bootstrap


@pytest.fixture
def librdkafka_only(bootstrap: str) -> Iterator[NetworkCluster]:
    """A NetworkCluster that reads as it must under SASL (or TLS settings beyond CA, client
    certificate and hostname check): the stored batches cannot be fetched, and the replay
    and ``fetch_columns`` read records through librdkafka."""
    with NetworkCluster(bootstrap, timeout=30.0) as c:
        c._batches_ok = False
        yield c
