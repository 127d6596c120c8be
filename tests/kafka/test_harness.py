"""The local Apache Kafka itself: it answers, its tools run against it, and its settings are
checked before any JVM starts."""

from __future__ import annotations

import pytest

import logmarshal
from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster, jars_dir, tools

pytestmark = pytest.mark.kafka


def test_settings_are_checked_before_anything_starts(tmp_path) -> None:
    with pytest.raises(TypeError, match="unknown KafkaCluster settings \\['heep'\\]"):
        KafkaCluster(tmp_path, heep="1g")
    with pytest.raises(ValueError, match="nodes must be at least 1"):
        KafkaCluster(tmp_path, nodes=0)


def test_the_cluster_is_apache_kafka_and_its_tools_see_our_topics(kafka) -> None:
    assert (jars_dir() / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    with logmarshal.connect(bootstrap=kafka.bootstrap) as cluster:
        cluster.create_topic("harness-topic", 3)
        assert cluster.partitions("harness-topic") == 3
    listed = kafka.tool(tools()["kafka-topics"], "--bootstrap-server", kafka.bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "harness-topic" in listed.stdout.split()
    described = kafka.tool(tools()["kafka-topics"], "--bootstrap-server", kafka.bootstrap,
                           "--describe", "--topic", "harness-topic")  # fmt: skip
    assert described.stdout.count("Partition: ") == 3, described.stdout
    assert kafka.leader("harness-topic", 0) == 1
    node = kafka.nodes[0]
    assert node.pid is not None and node.log_file.exists()
    assert "Kafka Server started" in node.log_file.read_text(errors="replace")


def test_a_cache_lacking_an_expected_jar_is_complemented_by_the_next_fetch(tmp_path,
                                                                          monkeypatch) -> None:
    """A cache filled before the pom named kafka-streams is fetched into again, once; a
    complete one is returned without running mvn."""
    import subprocess

    from logmarshal.localkafka import harness

    cache = tmp_path / "jars"
    cache.mkdir()
    (cache / f"kafka_2.13-{KAFKA_VERSION}.jar").write_bytes(b"")
    (cache / ".complete").write_text(KAFKA_VERSION + "\n")
    runs = []

    def mvn(cmd, **_kw):
        runs.append(cmd)
        (cache / f"kafka-streams-{KAFKA_VERSION}.jar").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(harness.subprocess, "run", mvn)
    assert harness.fetch(cache, pom=harness.POM) == cache
    assert len(runs) == 1 and f"-DoutputDirectory={cache}" in runs[0]
    assert harness.fetch(cache, pom=harness.POM) == cache
    assert len(runs) == 1  # complete now: no second mvn
