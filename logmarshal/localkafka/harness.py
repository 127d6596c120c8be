"""Apache Kafka on this machine, from Maven Central's jars: fetched once into a cache, a KRaft
storage directory formatted per node, each node a ``java kafka.Kafka`` process on free
loopback ports, stopped by its own pid and by nothing else.

Why here and not in the tests: the tests, the benches, the process scenarios and the docs all
start the same Kafka the same way, and an operator trying logmarshal on Kafka runs
``python -m logmarshal.localkafka start``. No Docker, no tarball: ``mvn`` resolves the pinned
``pom.xml`` beside this file (``kafka_2.13``, ``kafka-tools``, ``kafka-streams`` for the
streams bench, and the slf4j→log4j2 binding the broker needs to log at all).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from .._ports import free_ports
from ..errors import LogmarshalError

log = logging.getLogger(__name__)

POM = Path(__file__).with_name("pom.xml")
#: The Kafka release the pom pins (also the cache directory's name).
KAFKA_VERSION = "4.4.0"

DEFAULT_CONFIG: Mapping[str, Any] = {
    # how many combined broker+controller nodes: 1 for the suite, 3 for the fault tests
    "nodes": 1,
    # JVM heap per node; two cores and a suite beside it, so small
    "heap": "512m",
    # seconds to wait for every node to answer the Admin API
    "start_timeout": 90.0,
    # the broker settings every node gets, over the defaults below
    "server": {},
    # log4j2 level of the broker's own log file (node-N/server.log)
    "log_level": "INFO",
}


class KafkaUnavailable(LogmarshalError, RuntimeError):
    """Java or Maven is missing, or the jars cannot be fetched: Kafka cannot run here."""


class KafkaStartError(LogmarshalError, RuntimeError):
    """A node exited or did not answer in time; the message carries its log's tail."""


def jars_dir() -> Path:
    """Where the jars are cached: ``$LOGMARSHAL_KAFKA_JARS``, else
    ``~/.cache/logmarshal/kafka-<version>``."""
    env = os.environ.get("LOGMARSHAL_KAFKA_JARS")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "logmarshal" / f"kafka-{KAFKA_VERSION}"


def missing_tools() -> list[str]:
    """The tools Kafka needs here that are not on PATH (``java``, ``mvn``)."""
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def fetch(
    target: Path | None = None,
    *,
    quiet: bool = True,
    pom: Path | None = None,
    properties: Mapping[str, str] | None = None,
    expect: str | tuple[str, ...] = ("kafka_2.13-", "kafka-streams-"),
    what: str = "Apache Kafka",
) -> Path:
    """The cached jar directory, filled from Maven Central on first use (``mvn
    dependency:copy-dependencies``). Idempotent: a complete cache is returned as it is.

    By default Kafka's jars (the pom beside this file, into :func:`jars_dir`); other jar sets
    (Spark's Kafka source for the audit) pass their own ``pom``, ``target`` directory,
    ``-D`` ``properties``, the file name prefix of each jar that must be there (``expect``)
    and ``what`` names them in errors: one fetch, cached the same way for every jar set.
    A cache lacking an expected jar (filled before the pom named it: kafka-streams) is
    complemented by the same fetch into the same directory.
    """
    if pom is None:
        pom = POM
    elif target is None:
        raise ValueError("fetch with another pom needs its own target directory")
    target = jars_dir() if target is None else target
    expected = (expect,) if isinstance(expect, str) else tuple(expect)
    marker = target / ".complete"
    if marker.exists() and not _lacking(target, expected):
        return target
    missing = missing_tools()
    if missing:
        raise KafkaUnavailable(
            f"{what} needs {' and '.join(missing)} on PATH "
            "(apt-get install openjdk-17-jre-headless maven)"
        )
    target.mkdir(parents=True, exist_ok=True)
    cmd = ["mvn", "-B", "-f", str(pom), "dependency:copy-dependencies",
           f"-DoutputDirectory={target}"]  # fmt: skip
    cmd += [f"-D{key}={value}" for key, value in sorted((properties or {}).items())]
    if quiet:
        cmd.insert(1, "-q")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise KafkaUnavailable(f"mvn could not fetch {what}'s jars:\n" + "\n".join(tail))
    lacking = _lacking(target, expected)
    if lacking:
        raise KafkaUnavailable(f"mvn finished but {target} holds no {lacking[0]}*.jar")
    label = " ".join(f"{k}={v}" for k, v in sorted((properties or {}).items()))
    marker.write_text((label or KAFKA_VERSION) + "\n")
    return target


def _lacking(target: Path, expected: tuple[str, ...]) -> list[str]:
    """The file name prefixes in ``expected`` that no jar in ``target`` has."""
    names = [p.name for p in target.glob("*.jar")]
    return [prefix for prefix in expected if not any(n.startswith(prefix) for n in names)]


def classpath(jars: Path | None = None) -> str:
    """Every cached jar, as a ``java -cp`` argument."""
    return str((jars or fetch()) / "*")


#: the tools' class data sharing archive, in the jars' directory (below)
_SHARED_CLASSES = "tools.jsa"
#: what a JVM prints on stdout when it dies (a damaged class archive, for one)
_JVM_FATAL = "A fatal error has been detected by the Java Runtime Environment"


def java(main: str, args: Iterable[str], *, jars: Path | None = None, timeout: float = 120.0,
         heap: str = "256m", input: str | None = None,
         save_classes: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Runs one of Kafka's Java tools (a main class from the jars) to the end; what
    ``bin/kafka-*.sh`` would run. Tools log to stderr at WARN; stdout is the tool's answer;
    ``input`` is its stdin (the console producer's lines), else stdin is empty.

    Class data sharing (AppCDS): the first tool run on a machine saves the classes it loaded
    into an archive beside the jars, and later runs map it instead of loading those classes
    from the jars, which halves a short tool's run (0.87 s -> 0.42 s for ``kafka-topics
    --list``, 2026-12-01). An archive that does not fit (other jars, another JDK) is ignored
    quietly; one that makes the JVM die at start (a damaged file) is deleted and the tool
    run again without it. ``save_classes=False``: this run uses an archive but makes none (a
    tool unlike the others, whose classes would make a poor archive for them)."""
    jars = jars or fetch()
    base = [
        "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData", "-Dlog4j2.level=WARN",
        # a JVM that dies writes its report into the temporary directory, not the caller's
        f"-XX:ErrorFile={Path(tempfile.gettempdir()) / 'logmarshal-java-hs_err_%p.log'}",
    ]  # fmt: skip
    tail = ["-cp", classpath(jars), main, *args]
    archive = jars / _SHARED_CLASSES
    dumping = None
    # (a JDK without these options ignores them; the JVM's own notes on the archive stay off
    # stdout, which is the tool's answer)
    sharing = ["-XX:+IgnoreUnrecognizedVMOptions", "-Xlog:cds=off,cds+dynamic=off"]
    mapped = archive.exists()
    if mapped:
        sharing.append(f"-XX:SharedArchiveFile={archive}")
    elif save_classes and os.access(jars, os.W_OK):
        # written under a name of its own, and in place only once the JVM exited cleanly
        # (a file cut short would make every later JVM die at start)
        dumping = jars / f"{_SHARED_CLASSES}.{os.getpid()}.{threading.get_ident()}"
        sharing.append(f"-XX:ArchiveClassesAtExit={dumping}")

    def run(flags: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *flags, *tail], capture_output=True, text=True, timeout=timeout,
            input=input or "",
        )  # fmt: skip

    try:
        done = run(sharing)
    except BaseException:
        if dumping is not None:
            dumping.unlink(missing_ok=True)  # (a JVM killed while it wrote)
        raise
    if dumping is not None and dumping.exists():
        if done.returncode >= 0 and _JVM_FATAL not in done.stdout and not archive.exists():
            os.replace(dumping, archive)
        else:  # killed by a signal, dead, or another tool's run saved one meanwhile
            dumping.unlink()
    if mapped and done.returncode != 0 and _JVM_FATAL in done.stdout:
        log.warning("a Kafka tool's JVM died with the class archive %s: deleted", archive)
        archive.unlink(missing_ok=True)
        done = run([])
    return done


def run_tool(name: str, *args: str, timeout: float = 120.0, input: str | None = None,
             jars: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """One of Kafka's command-line tools by its ``bin/`` name (``kafka-topics``, see
    :func:`tools`) or main class, against whatever ``--bootstrap-server`` its arguments name:
    Kafka, or logmarshal's own broker. The same code path as :meth:`KafkaCluster.tool`."""
    return java(_TOOLS.get(name, name), args, jars=jars, timeout=timeout, input=input)


def _dies_with_us() -> list[str]:
    """A prefix that makes a node get SIGKILL when the process that started it dies, however
    it dies (a test runner killed by a signal, a crash in native code): without it a node
    outlives its test as an orphan JVM holding ports and memory. The kernel ties the signal
    to the starting *thread*, so only a start from the main thread asks for it."""
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")  # util-linux, on every Debian and Ubuntu
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid).

    Never one that starts with ``-`` (1 in 64 do): ``kafka-storage format -t -AbC...`` reads
    it as an option and fails, which is why Kafka's own ``Uuid.randomUuid`` draws again."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


_SERIOUS = re.compile(r"\] (ERROR|FATAL) |Exception|Address already in use")


_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


@attrs.define
class KafkaNode:
    """One combined broker+controller process. ``pid`` is None while it is stopped."""

    node_id: int
    port: int
    controller_port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    #: the size of its log when it was last started (what a restart's wait reads from)
    log_mark: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None or self.proc.poll() is not None else self.proc.pid

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        """The first errors of the node's output and log, then their last ``lines``: a node
        that exits logs its shutdown after the cause, which a tail alone leaves out."""
        errors: list[str] = []
        tail: list[str] = []
        for path in (self.workdir / "stdout.log", self.log_file):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()
                errors.extend(line for line in text if _SERIOUS.search(line))
                tail.extend(text[-lines:])
        if not errors:
            return "\n".join(tail)
        return "\n".join(["first errors:", *errors[:10], "last lines:", *tail])


#: what a node logs when its start-up failed; its JVM may live on a while (its controller's
#: threads), never seen alive by the others and not exited: the fault stage's start-up on
#: 2026-12-06 waited out its 240 s for node 1 to see such a node 3
_GAVE_UP = b"Exiting Kafka due to fatal exception during startup"


def _gave_up(node: KafkaNode, read: dict[int, int]) -> bool:
    """Does ``node``'s log say it gave up its start-up? Reads only what was added since the
    last look (``read``), from a little before it (a line written across two looks)."""
    start = max(node.log_mark, read.get(node.node_id, node.log_mark) - len(_GAVE_UP))
    try:
        with open(node.log_file, "rb") as f:
            f.seek(start)
            chunk = f.read()
    except OSError:
        return False
    read[node.node_id] = start + len(chunk)
    return _GAVE_UP in chunk


class KafkaCluster:
    """``nodes`` KRaft nodes, each broker and controller, on 127.0.0.1.

    Use as a context manager, or ``start()`` / ``stop()``. Failure tests use
    :meth:`kill` (SIGKILL), :meth:`pause` / :meth:`resume` (SIGSTOP / SIGCONT) and
    :meth:`restart` on one node. Every signal goes to a pid this object started.
    """

    def __init__(self, workdir: Path | str, **config: Any) -> None:
        unknown = set(config) - set(DEFAULT_CONFIG)
        if unknown:
            raise TypeError(
                f"unknown KafkaCluster settings {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}"
            )
        self.config = {**DEFAULT_CONFIG, **config}
        n = int(self.config["nodes"])
        if n < 1:
            raise ValueError("nodes must be at least 1")
        self.workdir = Path(workdir)
        self.jars: Path | None = None
        self.cluster_id = cluster_id()
        ports = free_ports(2 * n)
        self.nodes = [
            KafkaNode(i + 1, ports[2 * i], ports[2 * i + 1], self.workdir / f"node-{i + 1}")
            for i in range(n)
        ]

    # -- life cycle ----------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def server_properties(self, node: KafkaNode) -> dict[str, str]:
        n = len(self.nodes)
        rf = str(min(3, n))
        isr = str(min(2, n))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
                                    f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.workdir / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # small machine: few threads, and a segment roll a test can reach
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "log.cleaner.threads": "1",
            "num.recovery.threads.per.data.dir": "1",
        }  # fmt: skip
        if n == 1:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{node.controller_port}"
        else:
            props["controller.quorum.voters"] = ",".join(
                f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes
            )
        props.update({str(k): str(v) for k, v in dict(self.config["server"]).items()})
        return props

    def _prepare(self, node: KafkaNode) -> None:
        node.workdir.mkdir(parents=True, exist_ok=True)
        props = self.server_properties(node)
        (node.workdir / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in props.items())
        )
        (node.workdir / "log4j2.properties").write_text(
            _LOG4J2.format(path=node.log_file, level=self.config["log_level"])
        )
        if (node.workdir / "data" / "meta.properties").exists():
            return
        args = ["format", "-t", self.cluster_id, "-c", str(node.workdir / "server.properties")]
        if len(self.nodes) == 1:
            args.append("--standalone")
        done = java("kafka.tools.StorageTool", args, jars=self.jars, save_classes=False)
        if done.returncode != 0:
            raise KafkaStartError(
                f"formatting node {node.node_id} failed:\n{done.stdout}\n{done.stderr}"
            )

    def _spawn(self, node: KafkaNode) -> None:
        heap = self.config["heap"]
        cmd = [
            "java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:-UsePerfData", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.workdir / 'log4j2.properties'}",
            "-cp", classpath(self.jars), "kafka.Kafka", str(node.workdir / "server.properties"),
        ]  # fmt: skip
        cmd = _dies_with_us() + cmd
        node.log_mark = node.log_file.stat().st_size if node.log_file.exists() else 0
        with open(node.workdir / "stdout.log", "ab") as out:
            node.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        log.info("kafka node %d started, pid %d, %s", node.node_id, node.proc.pid, node.bootstrap)

    def start(self) -> KafkaCluster:
        """Formats and starts every node; once more on new ports if a node could not bind
        its own (another listener took it between :func:`free_port` and the JVM's bind)."""
        self.jars = fetch()
        for attempt in (1, 2):
            for node in self.nodes:
                self._prepare(node)
            try:
                for node in self.nodes:
                    self._spawn(node)
                self.wait_ready()
                return self
            except KafkaStartError as exc:
                self.stop()
                if attempt == 2 or "Address already in use" not in str(exc):
                    raise
                log.warning("a kafka node could not bind its port; again on new ports: %s", exc)
                self._new_ports()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _new_ports(self) -> None:
        """Fresh ports and fresh data for every node (a node never started keeps nothing)."""
        ports = free_ports(2 * len(self.nodes))
        for i, node in enumerate(self.nodes):
            shutil.rmtree(node.workdir, ignore_errors=True)
            node.port, node.controller_port = ports[2 * i], ports[2 * i + 1]

    def wait_ready(
        self, timeout: float | None = None, nodes: Iterable[KafkaNode] | None = None
    ) -> None:
        """Until every node (or those named) answers metadata and sees all brokers alive."""
        from confluent_kafka.admin import AdminClient

        wanted = list(self.nodes if nodes is None else nodes)
        deadline = time.monotonic() + float(timeout or self.config["start_timeout"])
        read: dict[int, int] = {}  # node -> how much of its log was looked at
        for node in wanted:
            # (Any: librdkafka takes a logger, which confluent_kafka's stub types leave out)
            conf: dict[str, Any] = {"bootstrap.servers": node.bootstrap, "log_level": 0,
                                    "logger": logging.getLogger("localkafka.admin")}  # fmt: skip
            admin = AdminClient(conf)
            while True:
                for other in wanted:  # (one that exits is never seen alive by the others)
                    if other.proc is None or other.proc.poll() is not None:
                        tail = other.log_tail()
                        raise KafkaStartError(f"kafka node {other.node_id} exited:\n{tail}")
                    if _gave_up(other, read):
                        raise KafkaStartError(
                            f"kafka node {other.node_id} gave up its start-up:\n{other.log_tail()}"
                        )
                try:
                    md = admin.list_topics(timeout=2.0)
                    alive = {b.id for b in md.brokers.values()}
                    if alive >= {m.node_id for m in self.nodes if m.pid is not None}:
                        break
                except Exception:  # not up yet; the deadline decides
                    pass
                if time.monotonic() > deadline:
                    raise KafkaStartError(
                        f"kafka node {node.node_id} did not answer in time:\n{node.log_tail()}"
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every running node (a clean shutdown), SIGKILL what is left after 30 s."""
        for node in self.nodes:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGCONT)  # a paused node cannot shut down
                os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30.0
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)
            node.proc = None

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def kill(self, node_id: int) -> None:
        """kill -9: no shutdown, no flush beyond what the OS has."""
        node = self.node(node_id)
        if node.proc is not None:
            node.proc.kill()
            node.proc.wait(10)
            node.proc = None

    def shut_down(self, node_id: int, timeout: float = 120.0) -> bool:
        """SIGTERM: a clean shutdown (Kafka's controlled shutdown moves the node's leaders
        away first). False if the node had not exited within ``timeout`` seconds and was
        killed instead: on a starved machine Kafka's controller quorum can miss its own
        timeouts and keep a controlled shutdown waiting for a minute or more."""
        node = self.node(node_id)
        if node.proc is None:
            return True
        node.proc.terminate()
        try:
            node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(node_id)
            return False
        node.proc = None
        return True

    def pause(self, node_id: int) -> None:
        pid = self.node(node_id).pid
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        pid = self.node(node_id).pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Starts a stopped or killed node again on its ports and data."""
        node = self.node(node_id)
        if node.pid is not None:
            raise RuntimeError(f"node {node_id} is running (pid {node.pid})")
        self._spawn(node)
        if wait:
            self.wait_ready(nodes=[node])

    # -- tools -----------------------------------------------------------------------------

    def tool(self, main: str, *args: str, timeout: float = 120.0,
             input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """One of Kafka's command-line tools (a main class, see :func:`tools`), run to the end
        with the jars this cluster runs on."""
        return java(main, args, jars=self.jars, timeout=timeout, input=input)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic/partition`` now (-1 while none does)."""
        from confluent_kafka.admin import AdminClient

        alive = [n for n in self.nodes if n.pid is not None]
        admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in alive)})
        md = admin.list_topics(topic, timeout=10.0)
        return int(md.topics[topic].partitions[partition].leader)


def tools() -> dict[str, str]:
    """The ``bin/kafka-*.sh`` names operators know, and the main class each runs."""
    return dict(_TOOLS)


_TOOLS = {
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-storage": "kafka.tools.StorageTool",
}
