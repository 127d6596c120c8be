"""Fixtures shared across test folders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session for every Spark test (starting one costs seconds).

    ``spark.jars`` is read once, when the session's JVM starts, and a process has one
    session: so this one carries Spark's Kafka source (for tests/kafka/test_audit_kafka.py)
    whenever its jars are cached or can be fetched (java and mvn), and goes without it
    otherwise; the tests that need it say so."""
    pytest.importorskip("pyspark")
    from logmarshal.audit.job import spark_session
    from logmarshal.audit.kafkasource import fetch_jars, spark_conf
    from logmarshal.localkafka import KafkaUnavailable

    try:
        conf = spark_conf(fetch_jars())
    except KafkaUnavailable:
        conf = {}
    session = spark_session("local[2]", app_name="logmarshal-audit-tests", conf=conf)
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line counting the tests that ran on Apache Kafka (tests/kafka/) or Kafka's tools
    (marker ``kafka`` elsewhere: tests/storage/broker/test_java_tools.py), so a run that skipped them
    says so at the end, where CI's log is read."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped", "xfailed", "xpassed"):
        reports = terminalreporter.stats.get(outcome, [])
        n = sum(
            1
            for r in reports
            if (
                getattr(r, "nodeid", "").startswith("tests/kafka/")
                or "kafka" in getattr(r, "keywords", {})
            )
            and getattr(r, "when", "call") in ("call", "setup")
            and not (outcome == "passed" and getattr(r, "when", "call") == "setup")
        )
        if n:
            counts[outcome] = n
    if counts:
        line = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
        terminalreporter.write_line(f"Apache Kafka tests (marker kafka): {line}")
