"""Spark reads ``__marshal`` straight from Apache Kafka, with Spark's own Kafka source.

Why: the Parquet export (:mod:`.export`) copies the whole log through one process first;
where Spark runs beside Kafka its executors can read each coordination partition from the
brokers themselves. What stays the same is the fold: the adapter here turns Kafka's rows
into the export's rows, and :func:`.arrow.fold_batches` audits them as it audits Parquet.

- The jars: ``spark-sql-kafka-0-10`` and what it needs (its own ``kafka-clients``, not the
  broker's), fetched once from Maven Central by the pom in ``spark-kafka/`` with the same
  cached fetch as Apache Kafka's own jars (:func:`logmarshal.localkafka.fetch`), and handed
  to Spark as file paths (``spark.jars``): nothing is downloaded when an audit runs.
- The cut: :func:`.export.capture_cut` fixes each coordination partition's range (earliest
  to the log end when the audit starts); Spark reads exactly that (``startingOffsets`` /
  ``endingOffsets`` per partition), so the audit is of a fixed cut.
- The order: Spark's Kafka source makes one input partition per Kafka partition unless
  ``minPartitions`` or ``maxRecordsPerPartition`` ask for more (we set neither), and reads
  it in offset order: one task folds one coordination partition whole, as with Parquet.
- The clock: Spark gives ``timestamp`` as a timestamp (microseconds, from Kafka's
  milliseconds) and ``timestampType``; the adapter converts back to epoch milliseconds
  exactly (refusing anything that is not a whole millisecond) and refuses a record whose
  timestamp is not the broker's (``timestampType`` 1, LogAppendTime): the rationalizer
  decides on the log's clock, and an audit on the producers' clocks would be another one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import LogmarshalError
from .deps import require
from .export import KAFKA, ExportInfo

__all__ = [
    "LOG_APPEND_TIME",
    "POM",
    "KafkaSourceError",
    "connector_version",
    "export_batch",
    "export_batches",
    "fetch_jars",
    "groups_on_kafka",
    "jars_dir",
    "read_coordination",
    "reader_options",
    "spark_conf",
    "task_failure",
]

log = logging.getLogger(__name__)

POM = Path(__file__).parent / "spark-kafka" / "pom.xml"
#: Kafka's TimestampType ids, as Spark's Kafka source gives them in ``timestampType``
LOG_APPEND_TIME = 1
_TIMESTAMP_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
#: what a timestamp column's unit is worth in milliseconds (Spark sends microseconds)
_PER_MS = {"ms": 1, "us": 1000, "ns": 1_000_000}
#: the columns read from Spark's Kafka source, in the adapter's input order
KAFKA_COLUMNS = ("partition", "offset", "timestamp", "timestampType", "key", "value")


class KafkaSourceError(LogmarshalError, RuntimeError):
    """Spark's Kafka source cannot audit this: a record off the broker's clock, a timestamp
    that is not whole milliseconds, or a coordination partition not read whole in order."""


# -- the jars ------------------------------------------------------------------------------


def pinned_version() -> str:
    """The connector version the pom pins (``spark.version``)."""
    root = ET.parse(POM).getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = root.find("m:properties/m:spark.version", ns)
    version = "" if found is None else (found.text or "").strip()
    if not version:
        raise ValueError(f"{POM} pins no spark.version")
    return version


def connector_version() -> str:
    """``$LOGMARSHAL_SPARK_KAFKA_VERSION``, else the pom's pin."""
    return os.environ.get("LOGMARSHAL_SPARK_KAFKA_VERSION") or pinned_version()


def jars_dir(version: str | None = None) -> Path:
    """Where the jars are cached: ``$LOGMARSHAL_SPARK_KAFKA_JARS``, else
    ``~/.cache/logmarshal/spark-kafka-<version>``."""
    env = os.environ.get("LOGMARSHAL_SPARK_KAFKA_JARS")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "logmarshal" / f"spark-kafka-{version or connector_version()}"


def fetch_jars(*, quiet: bool = True) -> list[Path]:
    """The connector's jars, from the cache (filled from Maven Central on first use).

    Raises :class:`logmarshal.localkafka.KafkaUnavailable` without java or mvn, or when
    Maven Central does not have the version."""
    from ..localkafka.harness import fetch

    version = connector_version()
    target = fetch(
        jars_dir(version),
        quiet=quiet,
        pom=POM,
        properties={"spark.version": version},
        expect="spark-sql-kafka-0-10_2.13-",
        what=f"Spark's Kafka source {version}",
    )
    return sorted(target.glob("*.jar"))


def spark_conf(jars: Sequence[Path]) -> dict[str, str]:
    """The session settings that give Spark the ``kafka`` format: the cached jars as file
    paths (``spark.jars``; read when the JVM starts, so only a new session gets them)."""
    _warn_on_version_mismatch(jars)
    return {"spark.jars": ",".join(str(Path(j).resolve()) for j in jars)}


def _warn_on_version_mismatch(jars: Sequence[Path]) -> None:
    try:
        import pyspark
    except ImportError:
        return
    for jar in jars:
        m = re.match(r"spark-sql-kafka-0-10_2\.13-(.+)\.jar$", Path(jar).name)
        if m and m.group(1) != pyspark.__version__:
            log.warning(
                "Spark's Kafka source %s runs on Spark %s (the pinned connector; see %s)",
                m.group(1),
                pyspark.__version__,
                POM,
            )


# -- the read ------------------------------------------------------------------------------


def reader_options(bootstrap: str, info: ExportInfo) -> dict[str, str]:
    """Options of Spark's Kafka source that read the cut ``info`` and nothing else."""
    if info.stored != KAFKA:
        raise ValueError(f"{info.path} is an export of Parquet files, not a cut of Kafka")
    topic = info.topic
    return {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({topic: [p.partition for p in info.partitions]}),
        "startingOffsets": json.dumps({topic: {str(p.partition): p.earliest for p in info.partitions}}),
        "endingOffsets": json.dumps({topic: {str(p.partition): p.latest for p in info.partitions}}),
        # records removed by retention after the cut was taken: fail, never audit less
        "failOnDataLoss": "true",
        "includeHeaders": "false",
    }  # fmt: skip


def read_coordination(spark: Any, bootstrap: str, info: ExportInfo) -> Any:
    """The cut's records as a DataFrame of :data:`KAFKA_COLUMNS`, one input partition per
    non-empty coordination partition, each in offset order."""
    reader = spark.read.format("kafka")
    for key, value in reader_options(bootstrap, info).items():
        reader = reader.option(key, value)
    return reader.load().select(*KAFKA_COLUMNS)


def export_batch(batch: Any, topic: str = "__marshal") -> Any:
    """One Arrow batch of Spark's Kafka rows (:data:`KAFKA_COLUMNS`) as the export's rows
    (``coord_partition, offset, timestamp_ms, key, value``), the fold's input.

    Refuses (:class:`KafkaSourceError`) a record not stamped LogAppendTime and a timestamp
    that is not a whole number of milliseconds."""
    pa = require("pyarrow")
    np = require("numpy")
    from .export import _schema

    partitions = batch.column("partition").to_numpy(zero_copy_only=False)
    offsets = batch.column("offset").to_numpy(zero_copy_only=False)
    kinds = batch.column("timestampType").to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(kinds != LOG_APPEND_TIME)
    if bad.size:
        i = int(bad[0])
        kind = int(kinds[i])
        raise KafkaSourceError(
            f"{topic}/{partitions[i]} offset {offsets[i]} has timestampType {kind} "
            f"({_TIMESTAMP_TYPES.get(kind, 'unknown')}), not LogAppendTime "
            f"({LOG_APPEND_TIME}): the audit replays on the broker's clock and refuses "
            f"this log (set message.timestamp.type=LogAppendTime on {topic})"
        )
    column = batch.column("timestamp")
    unit = column.type.unit
    per_ms = _PER_MS.get(unit)
    raw = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if per_ms is None:  # seconds: a millisecond clock cannot be said in them
        raise KafkaSourceError(f"{topic}: timestamps arrive in {unit!r}, not milliseconds")
    ms, rest = np.divmod(raw, per_ms)
    if rest.any():
        i = int(np.flatnonzero(rest)[0])
        raise KafkaSourceError(
            f"{topic}/{partitions[i]} offset {offsets[i]}: timestamp {raw[i]} {unit} is not a "
            "whole millisecond; Kafka's clock is in milliseconds"
        )
    return pa.record_batch(
        [
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(ms, pa.int64()),
            batch.column("key").cast(pa.binary()),
            batch.column("value").cast(pa.binary()),
        ],
        schema=_schema(),
    )


def export_batches(batches: Iterable[Any], topic: str = "__marshal") -> Iterator[Any]:
    """:func:`export_batch` over a task's batches (the adapter in front of the fold)."""
    for batch in batches:
        if batch.num_rows:
            yield export_batch(batch, topic)


def _groups(batches: Iterator[Any]) -> Iterator[Any]:
    """The groups named in a task's records (for a wildcard admin key); executors."""
    pa = require("pyarrow")
    from .._coordlog import group_of_record

    found: set[str] = set()
    for batch in batches:
        keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
        for k, v in zip(keys, values, strict=True):
            group = group_of_record(k, v)
            if group is not None:
                found.add(group)
    yield pa.record_batch([pa.array(sorted(found), pa.string())], names=["group"])


def groups_on_kafka(spark: Any, bootstrap: str, info: ExportInfo) -> set[str]:
    """Every group the cut names, read by Spark (one more pass over the cut): what a
    wildcard admin key is expanded to, as :func:`.engine.admin_keys_for_export` does from
    an export."""
    frame = read_coordination(spark, bootstrap, info).select("key", "value")
    rows = frame.mapInArrow(_groups, "group string").distinct().collect()
    return {r["group"] for r in rows}


_TASK_ERROR = re.compile(r"(KafkaSourceError|InputOrderError): ([^\n]+)")


def task_failure(exc: BaseException) -> str | None:
    """The one line a refusal raised in an executor (:class:`KafkaSourceError`,
    :class:`.arrow.InputOrderError`) left in Spark's error, or None if it is another."""
    m = _TASK_ERROR.search(str(exc))
    return None if m is None else m.group(2).strip()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m logmarshal.audit.kafkasource fetch``: fill the cache and print the jars
    comma-separated, as ``spark-submit --jars`` takes them."""
    import argparse
    import sys

    from ..localkafka.harness import KafkaUnavailable

    parser = argparse.ArgumentParser(
        prog="python -m logmarshal.audit.kafkasource",
        description="Spark's Kafka source for the audit, from Maven Central (needs java, mvn).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the pinned jars into the cache; print them for --jars")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        jars = fetch_jars(quiet=False)
    except KafkaUnavailable as exc:
        print(f"kafkasource: error: {exc}", file=sys.stderr)
        return 1
    print(",".join(str(j) for j in jars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
