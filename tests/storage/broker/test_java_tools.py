"""Apache Kafka's own Java client and command-line tools (the 4.4.0 jars) against
logmarshal's broker, and Kafka's log reader (``kafka-dump-log``) on the files it writes.

Kafka's Java client is the reference implementation (Streams, Connect, Spark and Flink use
it), and operators reach for Kafka's ``bin/`` tools first. What these tests show works is
listed in docs/broker.md ("Kafka's Java client and tools"), and so is what the broker
refuses: classic group consumption (kafka-consumer-perf-test), transactions. A refusal is
Kafka's error code, at once; no test here may see the broker drop a connection (checked
after every test from the broker's own log).

Marked ``kafka``: counted and skipped with the Kafka tests when Java or Maven is missing.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

import logmarshal
from logmarshal._broker_groups import MarshalGroupView
from logmarshal.localkafka import KafkaUnavailable, fetch, missing_tools, run_tool, tools
from storage import DataDir
from storage.broker import BrokerConfig, BrokerThread
from storage.broker.errors import ErrorCode
from storage.broker.groups import CLASSIC_REFUSED, NO_TRANSACTIONS
from storage.broker.wire import SUPPORTED
from tests.kafka.conftest import kafka_required
from tests.marshal_group import consuming_group, wait_for
from tests.storage.broker.helpers import RawClient

pytestmark = pytest.mark.kafka

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
GROUP, GROUP_TOPIC, GROUP_RECORDS = "billing", "orders", 20


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def jars() -> Path:
    """Kafka's cached jars; skipped (failed where Kafka is required) as tests/kafka is."""
    missing = missing_tools()
    reason = f"{' and '.join(missing)} not on PATH" if missing else None
    if reason is None:
        try:
            return fetch()
        except KafkaUnavailable as exc:
            reason = str(exc)
    if kafka_required():
        pytest.fail(
            f"Apache Kafka's tools are required here but cannot run: {reason}", pytrace=False
        )
    pytest.skip(f"Apache Kafka's tools cannot run here ({reason})")


class _Records(logging.Handler):
    """The broker's warnings, kept to check that no connection was dropped."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def broker_log() -> Iterator[_Records]:
    handler = _Records()
    logger = logging.getLogger("storage.broker")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, jars, broker_log) -> Iterator[BrokerThread]:
    """One broker for the module, with the Marshal group view (as ``logmarshal broker start``)."""
    data = tmp_path_factory.mktemp("java-tools") / "data"
    config = BrokerConfig(data_dir=data, port=0, group_view=MarshalGroupView)
    with BrokerThread(config) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_connection_dropped(broker_log) -> Iterator[None]:
    """Every request of Kafka's Java client is answered or refused with a code: the broker
    never closes a connection on it (it logs a warning from its server when it does)."""
    start = len(broker_log.records)
    yield
    dropped = [
        r.getMessage() for r in broker_log.records[start:]
        if r.name == "storage.broker.server" or r.levelno >= logging.ERROR
    ]  # fmt: skip
    assert not dropped, dropped


def tool(
    name: str, *args: str, input: str | None = None, timeout: float = 90.0
) -> CompletedProcess[str]:
    return run_tool(name, *args, input=input, timeout=timeout)


def ok(done: CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args[-1]}: {done.stdout}\n{done.stderr}"
    return done.stdout


def create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
            "--partitions", str(partitions)]  # fmt: skip
    for key, value in configs.items():
        args += ["--config", f"{key.replace('_', '.')}={value}"]
    assert ok(tool("kafka-topics", *args)).strip() == f"Created topic {topic}."


def stored_batch(broker: BrokerThread, topic: str, partition: int = 0, offset: int = 0) -> bytes:
    """The first stored batch at ``offset``, as the broker keeps it."""
    handlers = broker.server.handlers
    assert handlers is not None
    return handlers.data_dir.partition(topic, partition).read(offset, 1).data


# ---------------------------------------------------------------------------- the tools


def test_every_tool_name_is_a_main_class_in_the_jars(jars) -> None:
    classes = set()
    for jar in jars.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes.update(n[: -len(".class")].replace("/", ".") for n in z.namelist()
                           if n.endswith(".class"))  # fmt: skip
    missing = {name: main for name, main in tools().items() if main not in classes}
    assert not missing, missing


def test_the_java_client_can_use_every_version_the_broker_advertises(broker) -> None:
    """kafka-broker-api-versions: ApiVersions v3 after the broker refused the client's v4
    (with Kafka's v0 answer), and each advertised range usable up to its top."""
    out = ok(tool("org.apache.kafka.tools.BrokerApiVersionsCommand", "--bootstrap-server",
                  broker.bootstrap))  # fmt: skip
    for spec in SUPPORTED.values():
        versions = (f"{spec.min_version} to {spec.max_version}"
                    if spec.min_version != spec.max_version else str(spec.min_version))  # fmt: skip
        assert re.search(rf"\({spec.key}\): {versions} \[usable: {spec.max_version}\]", out), (
            spec,
            out,
        )


def test_kafka_topics_create_describe_list_alter_delete(broker) -> None:
    b = broker.bootstrap
    create(b, "jt-topics", 2, retention_ms="3600000")
    assert "jt-topics" in ok(tool("kafka-topics", "--bootstrap-server", b, "--list")).split()
    described = ok(
        tool("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", "jt-topics")
    )
    assert "PartitionCount: 2" in described and "retention.ms=3600000" in described, described
    rows = re.findall(r"Partition: (\d+)\tLeader: (\d+)\tReplicas: (\d+)\tIsr: (\d+)", described)
    assert rows == [("0", "0", "0", "0"), ("1", "0", "0", "0")], described

    ok(tool("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", "jt-topics",
            "--partitions", "4"))  # fmt: skip
    described = ok(
        tool("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", "jt-topics")
    )
    assert "PartitionCount: 4" in described and described.count("Partition: ") == 4, described

    # refusals are Kafka's codes, with the broker's reason
    shrink = tool("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", "jt-topics",
                  "--partitions", "2")  # fmt: skip
    assert "InvalidPartitionsException" in shrink.stdout + shrink.stderr
    assert "can only grow" in shrink.stdout + shrink.stderr
    replicated = tool("kafka-topics", "--bootstrap-server", b, "--create", "--topic", "jt-rf3",
                      "--replication-factor", "3")  # fmt: skip
    assert "InvalidReplicationFactorException" in replicated.stdout + replicated.stderr

    ok(tool("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", "jt-topics"))
    listed = ok(tool("kafka-topics", "--bootstrap-server", b, "--list")).split()
    assert "jt-topics" not in listed and "jt-rf3" not in listed


def test_kafka_configs_describe_and_alter_a_topic(broker) -> None:
    b = broker.bootstrap
    create(b, "jt-configs", cleanup_policy="compact")
    entity = ("--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "jt-configs")

    def dynamic() -> dict[str, str]:
        out = ok(tool("kafka-configs", *entity, "--describe"))
        return dict(re.findall(r"^\s+([a-z.]+)=(\S*) sensitive=false", out, re.M))

    assert dynamic() == {"cleanup.policy": "compact"}
    ok(
        tool(
            "kafka-configs",
            *entity,
            "--alter",
            "--add-config",
            # (delete.retention.ms at its default value: the topic's own all the same)
            "retention.ms=12345,segment.bytes=1048576,delete.retention.ms=86400000",
        )
    )
    assert dynamic() == {
        "cleanup.policy": "compact",
        "retention.ms": "12345",
        "segment.bytes": "1048576",
        "delete.retention.ms": "86400000",
    }
    ok(
        tool(
            "kafka-configs",
            *entity,
            "--alter",
            "--delete-config",
            "retention.ms,delete.retention.ms",
        )
    )
    assert dynamic() == {"cleanup.policy": "compact", "segment.bytes": "1048576"}
    every = ok(tool("kafka-configs", *entity, "--describe", "--all"))
    assert "retention.ms=604800000 " in every and "max.message.bytes=" in every, every
    assert f"flush.ms={2**63 - 1} " in every and f"flush.messages={2**63 - 1} " in every, every
    bad = tool("kafka-configs", *entity, "--alter", "--add-config", "retention.ms=soon")
    assert "InvalidConfigurationException" in bad.stdout + bad.stderr
    assert dynamic() == {"cleanup.policy": "compact", "segment.bytes": "1048576"}


@pytest.mark.parametrize("codec", CODECS)
def test_console_producer_and_consumer_round_trip(broker, codec) -> None:
    """Keys and headers through Kafka's console tools; the batch is stored in that codec."""
    b = broker.bootstrap
    topic = f"jt-console-{codec}"
    create(b, topic)
    lines = [f"h1:{codec}{i},h2:x\tkey-{i}\tvalue {i} {codec}" for i in range(6)]
    ok(tool("kafka-console-producer", "--bootstrap-server", b, "--topic", topic,
            "--compression-codec", codec, "--reader-property", "parse.key=true",
            "--reader-property", "parse.headers=true", input="\n".join(lines) + "\n"))  # fmt: skip
    batch = stored_batch(broker, topic)
    (attributes,) = struct.unpack_from(">h", batch, 21)
    assert attributes & 0x07 == CODEC_IDS[codec]
    (producer_id,) = struct.unpack_from(">q", batch, 43)
    assert producer_id >= 0  # the Java producer is idempotent by default
    out = ok(tool("kafka-console-consumer", "--bootstrap-server", b, "--topic", topic,
                  "--partition", "0", "--offset", "earliest", "--max-messages", str(len(lines)),
                  "--timeout-ms", "30000", "--formatter-property", "print.key=true",
                  "--formatter-property", "print.headers=true",
                  "--formatter-property", "print.offset=true"))  # fmt: skip
    assert out.splitlines() == [f"Offset:{i}\t{line}" for i, line in enumerate(lines)]


def test_get_offsets_and_delete_records(broker) -> None:
    b = broker.bootstrap
    topic = "jt-offsets"
    # one segment: delete-records moves the log start inside it, as Kafka's does
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    # --timeout is the tool's linger.ms (1 s by default): each --sync send would wait it out
    ok(tool("kafka-console-producer", "--bootstrap-server", b, "--topic", topic, "--sync",
            "--timeout", "0", input="".join(f"record {i}\n" for i in range(20))))  # fmt: skip

    def offsets(time_spec: str) -> str:
        out = ok(tool("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic,
                      "--time", time_spec))  # fmt: skip
        return out.strip()

    assert offsets("-1") == f"{topic}:0:20"
    assert offsets("-2") == f"{topic}:0:0"
    consumed = ok(
        tool(
            "kafka-console-consumer",
            "--bootstrap-server",
            b,
            "--topic",
            topic,
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            "20",
            "--timeout-ms",
            "30000",
            "--formatter-property",
            "print.timestamp=true",
        )
    )
    stamps = [int(t) for t in re.findall(r"^CreateTime:(\d+)\t", consumed, re.M)]
    assert len(stamps) == 20 and stamps == sorted(stamps)
    # by timestamp: the first offset whose timestamp is at least the one asked for
    assert offsets(str(stamps[7])) == f"{topic}:0:{stamps.index(stamps[7])}"
    assert offsets(str(stamps[-1] + 1)) == ""  # later than every record: no offset
    # MAX_TIMESTAMP (ListOffsets v7): the first record holding the largest timestamp
    assert offsets("-3") == f"{topic}:0:{stamps.index(max(stamps))}"

    spec = Path(broker.config.data_dir).parent / "delete.json"
    spec.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 12}]})
    )
    out = ok(tool("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", str(spec)))
    assert f"partition: {topic}-0\tlow_watermark: 12" in out, out
    assert offsets("-2") == f"{topic}:0:12"
    first = ok(tool("kafka-console-consumer", "--bootstrap-server", b, "--topic", topic,
                    "--partition", "0", "--offset", "earliest", "--max-messages", "1",
                    "--timeout-ms", "30000"))  # fmt: skip
    assert first.splitlines() == ["record 12"]


@pytest.fixture
def marshal_group(broker) -> Iterator[str]:
    """A live Marshal group: logmarshal's Consumer reading GROUP_TOPIC until the test ends."""
    with consuming_group(broker.bootstrap, GROUP_TOPIC, GROUP, GROUP_RECORDS):
        yield broker.bootstrap


def test_kafka_consumer_groups_lists_and_describes_a_marshal_group(marshal_group) -> None:
    b = marshal_group
    assert GROUP in ok(tool("kafka-consumer-groups", "--bootstrap-server", b, "--list")).split()
    # with its state (ListGroups v4), and filtered by it
    by_state = ok(tool("kafka-consumer-groups", "--bootstrap-server", b, "--list", "--state"))
    assert re.search(rf"^{GROUP}\s+Stable\s*$", by_state, re.M), by_state
    empty_only = ok(
        tool("kafka-consumer-groups", "--bootstrap-server", b, "--list", "--state", "Empty")
    )
    assert GROUP not in empty_only.split(), empty_only
    half = GROUP_RECORDS // 2

    def described() -> list[tuple[str, ...]] | None:
        out = ok(
            tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", GROUP)
        )
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        rows = [line.split() for line in out.splitlines() if line.startswith(f"{GROUP} ")]
        return rows if len(rows) == 2 and all(r[3] == str(half) for r in rows) else None

    rows = wait_for(described, what="the positions committed through the heartbeats")
    assert sorted(r[:6] for r in rows) == [
        [GROUP, GROUP_TOPIC, str(p), str(half), str(half), "0"] for p in (0, 1)
    ]
    for row in rows:
        assert row[6].startswith("worker-1/") and row[-1] == "worker-1", row
    members = ok(tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe",
                      "--group", GROUP, "--members", "--verbose"))  # fmt: skip
    assert re.search(
        rf"^{GROUP}\s+worker-1/\S+\s+worker-1\s+2\s+-\s+{GROUP_TOPIC}:0,1\s", members, re.M
    ), members
    state = ok(tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe",
                    "--group", GROUP, "--state"))  # fmt: skip
    assert re.search(rf"^{GROUP}\s+\S+\s+\(0\)\s+marshal\s+Stable\s+1\s*$", state, re.M), state
    # deleting needs DeleteGroups, which the broker does not advertise: the client says so
    deleted = tool("kafka-consumer-groups", "--bootstrap-server", b, "--delete", "--group", GROUP)
    assert "does not support DELETE_GROUPS" in deleted.stdout + deleted.stderr, deleted.stdout


def test_producer_perf_test_with_an_idempotent_producer(broker) -> None:
    b = broker.bootstrap
    create(b, "jt-perf", 2)
    out = ok(
        tool(
            "kafka-producer-perf-test",
            "--topic",
            "jt-perf",
            "--num-records",
            "3000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--command-property",
            f"bootstrap.servers={b}",
            "enable.idempotence=true",
            "acks=all",
            "linger.ms=5",
        )
    )
    assert re.search(r"^3000 records sent, ", out, re.M), out
    ends = ok(tool("kafka-get-offsets", "--bootstrap-server", b, "--topic", "jt-perf")).split()
    assert sum(int(line.rsplit(":", 1)[1]) for line in ends) == 3000, ends
    for partition in (0, 1):
        batch = stored_batch(broker, "jt-perf", partition)
        producer_id, epoch, sequence = struct.unpack_from(">qhi", batch, 43)
        assert producer_id >= 0 and epoch == 0 and sequence == 0


def test_consumer_perf_test_is_refused_at_once(broker, broker_log) -> None:
    """kafka-consumer-perf-test always consumes in a Kafka consumer group, which this broker
    does not run (its groups coordinate through __marshal): refused at once, with the code."""
    b = broker.bootstrap
    create(b, "jt-consume")
    started = time.monotonic()
    done = tool("kafka-consumer-perf-test", "--bootstrap-server", b, "--topic", "jt-consume",
                "--num-records", "10", "--timeout", "60000")  # fmt: skip
    assert time.monotonic() - started < 30  # a bound against waiting for a rebalance
    assert done.returncode != 0
    assert "GroupAuthorizationException" in done.stdout + done.stderr
    assert any(CLASSIC_REFUSED in r.getMessage() for r in broker_log.records)
    started = time.monotonic()
    console = tool("kafka-console-consumer", "--bootstrap-server", b, "--topic", "jt-consume",
                   "--from-beginning", "--max-messages", "1", "--timeout-ms", "60000")  # fmt: skip
    assert time.monotonic() - started < 30
    assert "GroupAuthorizationException" in console.stdout + console.stderr


def test_a_transactional_producer_gets_kafkas_code_at_once(broker) -> None:
    b = broker.bootstrap
    create(b, "jt-tx")
    started = time.monotonic()
    done = tool("kafka-producer-perf-test", "--topic", "jt-tx", "--num-records", "10",
                "--record-size", "10", "--throughput", "-1", "--transactional-id", "jt-tx-1",
                "--command-property", f"bootstrap.servers={b}", "max.block.ms=60000")  # fmt: skip
    assert time.monotonic() - started < 30  # not retried until max.block.ms
    assert done.returncode != 0
    assert "Could not find a coordinator with type TRANSACTION" in done.stderr, done.stderr
    assert NO_TRANSACTIONS in done.stderr
    assert (
        ok(tool("kafka-get-offsets", "--bootstrap-server", b, "--topic", "jt-tx")).strip()
        == "jt-tx:0:0"
    )
    # on the wire: UNSUPPORTED_VERSION, and the connection answers the next request
    assert broker.address is not None
    with RawClient(broker.address) as raw:
        answer = raw.call(
            FindCoordinatorRequest[2](key="jt-tx-1", key_type=1), FindCoordinatorResponse
        )
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
        md = raw.call(MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                         include_cluster_authorized_operations=False,
                                         include_topic_authorized_operations=False),
                      MetadataResponse)  # fmt: skip
        assert "jt-tx" in [t.name for t in md.topics]


def test_a_batch_the_broker_recompresses_as_lz4_is_read_by_the_java_consumer(broker) -> None:
    """A topic whose ``compression.type`` is lz4 and an uncompressed producer: the broker
    compresses each batch itself. A batch past one LZ4 block (64 KiB) was written with linked
    blocks, which Kafka's reader refuses ("Dependent block stream is unsupported"): the Java
    consumer got none of its records (a helper's fuzz of the broker). Each record is
    distinct, so the consumer's output shows every one arrived."""
    b = broker.bootstrap
    topic = "jt-recompressed-lz4"
    create(b, topic, compression_type="lz4")
    producer = KafkaProducer({"bootstrap.servers": b, "linger.ms": 50, "batch.size": 1 << 20,
                              "compression.type": "none"})  # fmt: skip
    values = [b"%04d-" % i + bytes(range(32, 127)) * 20 for i in range(120)]  # ~230 KiB
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(10) == 0
    batch = stored_batch(broker, topic)
    (attributes,) = struct.unpack_from(">h", batch, 21)
    (last_delta,) = struct.unpack_from(">i", batch, 23)
    assert attributes & 0x07 == CODEC_IDS["lz4"] and last_delta > 40  # one batch, many blocks
    out = ok(tool("kafka-console-consumer", "--bootstrap-server", b, "--topic", topic,
                  "--partition", "0", "--offset", "earliest", "--max-messages", str(len(values)),
                  "--timeout-ms", "30000"))  # fmt: skip
    assert out.splitlines() == [v.decode() for v in values]


# ---------------------------------------------------------------------------- kafka-dump-log

BASE_TS = 1_700_000_000_000
COMPACT_KEYS, COMPACT_ROUNDS = 5, 10
PAD = b"-" * 100  # compressible: librdkafka stores a batch uncompressed when that is smaller


@pytest.fixture(scope="module")
def written(tmp_path_factory, jars) -> Path:
    """A data directory written by logmarshal's broker, closed, a compacted topic cleaned:
    a keyed topic, one topic per codec, ``__marshal`` (a Marshal group ran), ``compacted``."""
    data = tmp_path_factory.mktemp("dump-log") / "data"
    # retention.ms=-1: the records carry fixed timestamps from 2023, which retention would delete
    small = {"segment.bytes": "600", "index.interval.bytes": "1", "retention.ms": "-1"}
    config = BrokerConfig(data_dir=data, port=0, group_view=MarshalGroupView)
    with BrokerThread(config) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        topics = [NewTopic("keyed", 1, 1, config=small)]
        topics += [NewTopic(f"zipped-{c}", 1, 1, config=small) for c in CODECS[1:]]
        topics.append(NewTopic("compacted", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "400", "index.interval.bytes": "1",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}))  # fmt: skip
        for future in admin.create_topics(topics).values():
            future.result(10)
        for codec in (*CODECS[1:], "none"):
            producer = KafkaProducer({"bootstrap.servers": running.bootstrap, "linger.ms": 20,
                                      "compression.type": codec})  # fmt: skip
            topic = "keyed" if codec == "none" else f"zipped-{codec}"
            for i in range(40):
                producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i + PAD,
                                 headers=[("h", b"%d" % i)], timestamp=BASE_TS + i)  # fmt: skip
                if i % 4 == 3:
                    producer.flush(10)
            assert producer.flush(10) == 0
        producer = KafkaProducer({"bootstrap.servers": running.bootstrap, "linger.ms": 0})
        for r in range(COMPACT_ROUNDS):
            for k in range(COMPACT_KEYS):
                producer.produce("compacted", key=b"c%d" % k, value=b"c%d-%d" % (k, r),
                                 timestamp=BASE_TS + r * COMPACT_KEYS + k)  # fmt: skip
            producer.flush(10)
        assert producer.flush(10) == 0
        # __marshal: a member joins, claims, heartbeats and leaves
        cluster = logmarshal.connect(bootstrap=running.bootstrap)
        try:
            cluster.create_topic("work", partitions=1)
            with logmarshal.Producer(cluster) as p:
                p.send("work", b"w", partition=0)
            marshaler = logmarshal.Marshaler(cluster, client_id="dumper", group_id="dump",
                                             heartbeat_interval=3.0)  # fmt: skip
            try:
                with logmarshal.Consumer(marshaler, ["work"], mode="alo") as consumer:

                    def consumed() -> bool:
                        got = consumer.poll(timeout=0.2)
                        for message in got:
                            consumer.commit(message)
                        return bool(got)

                    wait_for(consumed, what="the Marshal member to consume")
            finally:
                marshaler.close()
        finally:
            cluster.close()
    with DataDir(data, clean_interval_s=0) as d:
        assert d.clean() > 0  # the cleaner removed overwritten records
    return data


def dump(*args: str) -> str:
    """What kafka-dump-log prints: the dump on stdout, the mismatches it found on stderr."""
    done = tool("kafka-dump-log", *args, timeout=120.0)
    return ok(done) + done.stderr


def segments(data: Path, topic: str, suffix: str = ".log") -> list[Path]:
    found = sorted((data / f"{topic}-0").glob(f"*{suffix}"))
    assert found, f"no {suffix} files for {topic}"
    return found


_BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*? (CreateTime|LogAppendTime): "
    r"(\d+) size: \d+ magic: 2 compresscodec: (\w+) crc: \d+ isvalid: (\w+)$",
    re.M,
)
_RECORD = re.compile(
    r"^\| offset: (\d+) (CreateTime|LogAppendTime): (\d+) keySize: \d+ valueSize: \d+ "
    r"sequence: -?\d+ headerKeys: \[([^\]]*)\] key: (\S*) payload: (.*)$",
    re.M,
)


def parsed(out: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    batches, records = _BATCH.findall(out), _RECORD.findall(out)
    assert batches and records, out[:2000]
    assert all(b[-1] == "true" for b in batches), "a batch failed Kafka's CRC check"
    assert out.count("isvalid: ") == len(batches)
    return batches, records


@pytest.mark.parametrize("codec", CODECS)
def test_dump_log_reads_keyed_and_compressed_segments(written, codec) -> None:
    topic = "keyed" if codec == "none" else f"zipped-{codec}"
    files = segments(written, topic)
    assert len(files) > 1  # sealed segments and the active one
    batches, records = parsed(dump("--files", ",".join(map(str, files)), "--print-data-log"))
    assert {b[5] for b in batches} == {codec}
    assert sum(int(b[2]) for b in batches) == 40
    assert [(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5]) for r in records] == [
        (i, "CreateTime", BASE_TS + i, "h", f"k{i}", f"v{i}{PAD.decode()}") for i in range(40)
    ]


def test_dump_log_reads_marshal_segments(written) -> None:
    files = sorted(written.glob("__marshal-*/*.log"))
    batches, records = parsed(dump("--files", ",".join(map(str, files)), "--print-data-log"))
    assert {b[3] for b in batches} == {"LogAppendTime"}  # __marshal is stamped by the broker
    assert len(records) == sum(int(b[2]) for b in batches) >= 3  # join, claim, heartbeat at least
    assert any(r[4].startswith("dump/") for r in records), records[:5]  # keyed by group/topic/p


def test_dump_log_reads_a_cleaned_compacted_topic(written) -> None:
    files = segments(written, "compacted")
    _, records = parsed(dump("--files", ",".join(map(str, files)), "--print-data-log"))
    offsets = [int(r[0]) for r in records]
    assert offsets == sorted(set(offsets))
    assert len(records) < COMPACT_KEYS * COMPACT_ROUNDS  # cleaned
    latest = {}
    for offset, _, ts, _, key, value in records:
        k, r = divmod(int(ts) - BASE_TS, COMPACT_KEYS)[::-1]
        assert (key, value) == (f"c{k}", f"c{k}-{r}") and offset == str(int(ts) - BASE_TS)
        latest[key] = value
    assert latest == {f"c{k}": f"c{k}-{COMPACT_ROUNDS - 1}" for k in range(COMPACT_KEYS)}
    # in the cleaned (sealed) part, a key is kept once
    sealed_end = int(files[-1].stem)  # the active segment's base: never cleaned
    cleaned = [r[4] for r in records if int(r[0]) < sealed_end]
    assert len(cleaned) == len(set(cleaned))


def test_index_files_are_kafkas(written) -> None:
    """--index-sanity-check passes, and dumping the indexes against the logs finds no
    offset or timestamp that Kafka would have written differently."""
    indexes = []
    for topic in ["keyed", "compacted", *(f"zipped-{c}" for c in CODECS[1:])]:
        indexes += segments(written, topic, ".index") + segments(written, topic, ".timeindex")
    indexes += sorted(written.glob("__marshal-*/*.index")) + sorted(
        written.glob("__marshal-*/*.timeindex")
    )
    files = ",".join(map(str, indexes))
    checked = dump("--files", files, "--index-sanity-check")
    passed = checked.count(" passed sanity check.")
    # an offset index without entries (a segment of one batch) is "empty", as in Kafka
    assert passed + checked.count(" is empty.") == len(indexes), checked
    assert passed > len(indexes) // 2
    assert "failed" not in checked.lower()
    entries = dump("--files", files)
    assert "Mismatches in" not in entries and "not found in" not in entries, entries[-3000:]
    assert "Found timestamp mismatch" not in entries
    assert len(re.findall(r"^offset: \d+ position: \d+$", entries, re.M)) > 10
    assert len(re.findall(r"^timestamp: \d+ offset: \d+$", entries, re.M)) > 10
