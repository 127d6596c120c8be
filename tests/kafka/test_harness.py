"""The local Apache Kafka itself: it answers, its tools run against it, and its settings are
checked before any JVM starts."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import logmarshal
from logmarshal.localkafka import KAFKA_VERSION, KafkaCluster, jars_dir, tools

pytestmark = pytest.mark.kafka


def test_settings_are_checked_before_anything_starts(tmp_path) -> None:
    with pytest.raises(TypeError, match="unknown KafkaCluster settings \\['heep'\\]"):
        KafkaCluster(tmp_path, heep="1g")
    with pytest.raises(ValueError, match="nodes must be at least 1"):
        KafkaCluster(tmp_path, nodes=0)


def test_a_node_that_does_not_shut_down_in_time_is_killed(tmp_path) -> None:
    """``shut_down`` (the rolling restart of the fault stage): SIGTERM, and SIGKILL once its
    time is up, by the node's pid. Stand-ins for the JVM: one that exits on SIGTERM, one
    that ignores it (a controlled shutdown that does not end)."""
    cluster = KafkaCluster(tmp_path, nodes=2)
    clean, stuck = cluster.nodes
    clean.proc = subprocess.Popen(["sleep", "60"])
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    stuck.proc = subprocess.Popen([sys.executable, "-c", ignores + "print(1, flush=True); time.sleep(60)"],
                                  stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert stuck.proc.stdout is not None and stuck.proc.stdout.readline()  # handler set
        started = time.monotonic()
        sleeper, ignorer = clean.proc, stuck.proc
        assert cluster.shut_down(1, timeout=10) is True
        assert clean.proc is None and sleeper.returncode == -signal.SIGTERM
        assert cluster.shut_down(2, timeout=0.5) is False
        assert stuck.proc is None and ignorer.returncode == -signal.SIGKILL
        assert time.monotonic() - started < 10
        assert cluster.shut_down(2) is True  # a stopped node: nothing to do
    finally:
        for node in cluster.nodes:
            if node.proc is not None:
                node.proc.kill()
                node.proc.wait(10)


def test_a_node_whose_port_is_taken_starts_on_new_ports_and_says_why(tmp_path, caplog) -> None:
    """Another listener takes a node's port between the pick and the JVM's bind: the node
    exits at start-up; the cluster starts again on new ports, and the warning carries the
    cause from the node's log (not only its shutdown, which is all a log's tail shows)."""
    from tests.kafka.conftest import start

    cluster = KafkaCluster(tmp_path)
    taken = cluster.nodes[0].port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with caplog.at_level(logging.WARNING, logger="logmarshal.localkafka.harness"):
            try:
                start(cluster)
                assert cluster.nodes[0].port != taken
                with logmarshal.connect(bootstrap=cluster.bootstrap) as client:
                    client.create_topic("after-a-taken-port", 1)
            finally:
                cluster.stop()
    assert all(node.pid is None for node in cluster.nodes)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "could not bind its port" in said and "first errors:" in said
    assert "Address already in use" in said


def test_a_node_whose_log_says_it_gave_up_ends_the_wait_at_once(tmp_path) -> None:
    """Without a JVM: two stand-in processes that never answer, the second of whose logs
    says its start-up failed. The wait for the first (which never sees the second alive)
    ends at once with the second's log, not after the whole timeout."""
    from logmarshal.localkafka.harness import KafkaStartError

    cluster = KafkaCluster(tmp_path, nodes=2)
    for node in cluster.nodes:
        node.workdir.mkdir(parents=True)
        node.proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        cluster.nodes[1].log_file.write_text(
            "[x] ERROR Unable to start acceptor: Address already in use\n"
            "[x] ERROR Exiting Kafka due to fatal exception during startup. (kafka.Kafka$)\n"
        )
        started = time.monotonic()
        with pytest.raises(KafkaStartError, match="kafka node 2 gave up its start-up") as raised:
            cluster.wait_ready(timeout=30)
        assert "Address already in use" in str(raised.value)  # (what start() retries on)
        assert time.monotonic() - started < 25  # (not the timeout, waited out)
    finally:
        for node in cluster.nodes:
            node.proc.kill()
            node.proc.wait(10)


@pytest.mark.long  # (two 3-node start-ups: .ci/run's second stage)
def test_a_node_that_gives_up_its_start_up_restarts_the_cluster(tmp_path, caplog) -> None:
    """The fault stage's cluster on 2026-12-06: node 3's broker port was node 1's controller
    port (one port picked twice), so node 3's broker could not bind it and gave up, while its
    JVM lived on, never seen alive by node 1. The start-up waited out its 240 s for node 1.
    Now a node whose log says it gave up its start-up ends the wait, and the cluster starts
    again on new ports (no two alike now: tests/logmarshal/test_ports.py)."""
    from tests.kafka.conftest import start

    cluster = KafkaCluster(tmp_path, nodes=3, start_timeout=90)
    cluster.nodes[2].port = cluster.nodes[0].controller_port  # (the CI run's two picks)
    with caplog.at_level(logging.WARNING, logger="logmarshal.localkafka.harness"):
        try:
            start(cluster)
            ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
            assert len(set(ports)) == 6
        finally:
            cluster.stop()
    assert all(node.pid is None for node in cluster.nodes)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "could not bind its port" in said and "kafka node 3" in said, said[:2000]


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


def test_a_node_dies_with_the_process_that_started_it(tmp_path) -> None:
    """A test runner killed by a signal (or a crash in native code) leaves no orphan JVM: the
    node gets SIGKILL from the kernel when its starter dies."""
    script = (
        "import sys\n"
        "from logmarshal.localkafka import KafkaCluster\n"
        "c = KafkaCluster(sys.argv[1], heap='256m').start()\n"
        "print(c.nodes[0].pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    starter = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    jvm = None
    try:
        assert starter.stdout is not None
        jvm = int(starter.stdout.readline())
        assert _alive(jvm)
        starter.kill()  # SIGKILL: the starter cannot stop anything itself
        starter.wait(10)
        deadline = time.monotonic() + 20
        while _alive(jvm) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(jvm), f"node pid {jvm} outlived its starter"
        jvm = None
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(10)
        if jvm is not None and _alive(jvm):
            os.kill(jvm, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left to init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_cache_lacking_an_expected_jar_is_complemented_by_the_next_fetch(
    tmp_path, monkeypatch
) -> None:
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


def _linked_jars(tmp_path):
    """The cached jars, linked into a directory of their own (its own class archive)."""
    jars = tmp_path / "jars"
    jars.mkdir()
    for jar in jars_dir().glob("*.jar"):
        (jars / jar.name).symlink_to(jar)
    return jars


def test_the_first_tool_run_saves_a_class_archive_the_next_runs_use(tmp_path, monkeypatch) -> None:
    """The tools' class data sharing: the first run leaves ``tools.jsa`` (and no partial
    file), one the JVM maps for these jars, and later runs answer the same; a damaged
    archive is deleted, the tool answers."""
    from logmarshal.localkafka.harness import classpath, run_tool, tools

    jars = _linked_jars(tmp_path)
    first = run_tool("kafka-topics", "--version", jars=jars)
    assert (first.returncode, first.stdout) == (0, f"{KAFKA_VERSION}\n"), first.stderr
    archive = jars / "tools.jsa"
    assert archive.stat().st_size > 1 << 20
    assert sorted(p.name for p in jars.iterdir() if not p.name.endswith(".jar")) == ["tools.jsa"]
    # -Xshare:on: a JVM that cannot map the archive for this class path refuses to start
    mapped = subprocess.run(
        ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:on",
         f"-XX:SharedArchiveFile={archive}", "-cp", classpath(jars),
         tools()["kafka-topics"], "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (mapped.returncode, mapped.stdout) == (0, f"{KAFKA_VERSION}\n"), mapped.stderr
    again = run_tool("kafka-topics", "--version", jars=jars)
    assert (again.returncode, again.stdout) == (0, f"{KAFKA_VERSION}\n"), again.stderr
    # cut short (a disk that filled up): the JVM dies mapping it (SIGBUS, JDK 17), and its
    # crash report goes to the temporary directory: this test's, not the machine's
    reports = tmp_path / "reports"
    reports.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(reports))
    archive.write_bytes(archive.read_bytes()[:4096])
    damaged = run_tool("kafka-topics", "--version", jars=jars)
    assert (damaged.returncode, damaged.stdout) == (0, f"{KAFKA_VERSION}\n"), damaged.stderr
    assert not archive.exists()
    assert [p.name.startswith("logmarshal-java-hs_err_") for p in reports.iterdir()] == [True]


def test_an_archive_of_other_jars_is_ignored_quietly(tmp_path) -> None:
    """An archive made with another class path (another Kafka's jars) is not used, and the
    JVM's note about it stays off the tool's answer."""
    from logmarshal.localkafka.harness import run_tool

    jars = _linked_jars(tmp_path)
    run_tool("kafka-topics", "--version", jars=jars)
    assert (jars / "tools.jsa").exists()
    next(jars.glob("zstd-jni-*.jar")).unlink()  # another jar set, the archive kept
    other = run_tool("kafka-topics", "--version", jars=jars)
    assert (other.returncode, other.stdout) == (0, f"{KAFKA_VERSION}\n"), other.stderr
    assert "archive" not in other.stderr.lower()
    assert (jars / "tools.jsa").exists()  # not taken for a damaged one
