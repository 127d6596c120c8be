"""The Spark driver of the audit; also the file ``spark-submit`` runs (absolute imports).

Spark reads the exported Parquet natively, one task per coordination partition's file, whose
rows the export wrote in offset order, so no shuffle or sort is needed to bring a partition's
records together (:data:`WHOLE_FILE_SPLITS`); it runs the fold inside executors with
``mapInArrow``, streaming, so no partition has to fit in memory. The fold is :mod:`.replay`, i.e. the consumers' own rationalizer.

On a cluster::

    spark-submit --py-files logmarshal.zip logmarshal/audit/job.py \\
        --input hdfs:///audit/export --out hdfs:///audit/out

(the executors need ``attrs``, ``mmh3`` and ``pyarrow``; without ``--py-files`` the driver
ships the ``rationalizer`` and ``logmarshal`` packages itself when the master is not local).
Paths are read through Spark, but ``export.json`` is read by the driver with local file I/O.

Or straight from Apache Kafka, with Spark's own Kafka source (:mod:`.kafkasource`)::

    spark-submit --jars "$(python -m logmarshal.audit.kafkasource fetch)" \\
        --py-files logmarshal.zip logmarshal/audit/job.py \\
        --kafka-bootstrap broker1:9092 --out hdfs:///audit/out

The driver fixes the cut (each coordination partition's log end when it starts, with
logmarshal's own client) and the executors read each partition from the brokers up to it;
the same fold then runs on the same rows (:func:`.kafkasource.export_batches` adapts them).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from logmarshal.admin.keys import load_admin_keys
from logmarshal.audit.arrow import fold_batches
from logmarshal.audit.deps import require
from logmarshal.audit.engine import AuditResult, admin_keys_for_export, replay_config_for
from logmarshal.audit.export import (
    KAFKA,
    ExportInfo,
    capture_cut,
    check_export_files,
    read_export_info,
)
from logmarshal.audit.replay import ReplayConfig
from logmarshal.audit.schema import (
    DERIVED_TABLES,
    FLOAT,
    INT,
    STR,
    TABLES,
    TIME,
    UNION_COLUMNS,
    time_column_name,
)

__all__ = ["main", "run_spark", "spark_session"]

log = logging.getLogger(__name__)

#: Configuration measured to work on small machines (shared/notes/measured-facts.md).
BASE_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.driver.memory": "2g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData",
}


def spark_session(
    master: str | None = "local[2]",
    *,
    app_name: str = "logmarshal-audit",
    console_progress: bool = False,
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession configured for the audit (``master=None``: whatever spark-submit set).

    Executors must run this very interpreter, or they import another rationalizer (or none).
    """
    require("pyarrow")
    pyspark_sql = require("pyspark.sql")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = pyspark_sql.SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = dict(BASE_CONF)
    settings["spark.ui.showConsoleProgress"] = "true" if console_progress else "false"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not spark.sparkContext.master.startswith("local"):
        _ship_code(spark)
    return spark


def _ship_code(spark: Any) -> None:
    """Send our packages to the executors so they run the driver's rationalizer."""
    import logmarshal
    import rationalizer

    root = Path(rationalizer.__file__).resolve().parent.parent
    fd, name = tempfile.mkstemp(prefix="logmarshal-audit-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as zf:
        for package_file in (rationalizer.__file__, logmarshal.__file__):
            base = Path(package_file).resolve().parent
            for path in base.rglob("*.py"):
                zf.write(path, path.relative_to(root))
        storage_dir = root / "storage"
        for path in storage_dir.rglob("*.py"):
            zf.write(path, path.relative_to(root))
    spark.sparkContext.addPyFile(name)
    log.info("shipped rationalizer/logmarshal/storage to the executors as %s", name)


#: The export is one Parquet file per coordination partition, rows in offset order
#: (:mod:`.export`). With these, Spark's file source makes each file one input partition,
#: never split (maxSplitBytes = min(maxPartitionBytes, max(openCost, bytes per core))) and
#: never packed with another (each file costs openCost), so a task reads one coordination
#: partition whole and in order: no shuffle, no sort. The fold still checks the order.
WHOLE_FILE_SPLITS = {
    "spark.sql.files.maxPartitionBytes": str(1 << 50),
    "spark.sql.files.openCostInBytes": str(1 << 50),
}


@contextlib.contextmanager
def whole_file_splits(spark: Any) -> Iterator[None]:
    """Plan file reads with :data:`WHOLE_FILE_SPLITS` inside the block (then restore)."""
    saved = {key: spark.conf.get(key, None) for key in WHOLE_FILE_SPLITS}
    for key, value in WHOLE_FILE_SPLITS.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _spark_type(types: Any, kind: str) -> Any:
    return {
        STR: types.StringType(),
        INT: types.LongType(),
        FLOAT: types.DoubleType(),
        TIME: types.LongType(),
    }[kind]


def _union_struct(types: Any) -> Any:
    return types.StructType(
        [types.StructField(name, _spark_type(types, kind), True) for name, kind in UNION_COLUMNS]
    )


def _executor_fold(batches: Iterator[Any], config: ReplayConfig) -> Iterator[Any]:
    """Runs in the executors (pickled by reference: module-level, no closure state)."""
    return fold_batches(batches, config)


def _executor_kafka_fold(batches: Iterator[Any], config: ReplayConfig, topic: str) -> Iterator[Any]:
    """The same fold behind the adapter from Spark's Kafka rows to the export's rows."""
    from logmarshal.audit.kafkasource import export_batches

    return fold_batches(export_batches(batches, topic), config)


def run_spark(
    spark: Any,
    info: ExportInfo,
    out_dir: str | os.PathLike[str],
    config: ReplayConfig,
    *,
    data_path: str | None = None,
    kafka_bootstrap: str | None = None,
) -> AuditResult:
    """Audit the export with Spark and write each table under ``out_dir``.

    A cut of Kafka (``info.stored == "kafka"``, :func:`.export.capture_cut`) is read from
    the brokers at ``kafka_bootstrap`` with Spark's Kafka source instead of Parquet files;
    the session must have been made with :func:`.kafkasource.spark_conf`. A record the
    adapter refuses raises :class:`.kafkasource.KafkaSourceError` with its one line.
    """
    started = time.perf_counter()
    if info.stored == KAFKA:
        from logmarshal.audit.kafkasource import KafkaSourceError, read_coordination, task_failure

        if kafka_bootstrap is None:
            raise ValueError(f"{info.path} is a cut of Kafka: reading it needs kafka_bootstrap")
        records = read_coordination(spark, kafka_bootstrap, info)
        fold = functools.partial(_executor_kafka_fold, config=config, topic=info.topic)
        try:
            rows = _fold_and_write(spark, records, fold, out_dir, config)
        except Exception as exc:
            line = task_failure(exc)
            if line is None:
                raise
            raise KafkaSourceError(line) from None
    else:
        source = data_path or info.coordination_path
        with whole_file_splits(spark):  # read at planning time, i.e. by every action below
            records = spark.read.parquet(source)
            fold = functools.partial(_executor_fold, config=config)
            rows = _fold_and_write(spark, records, fold, out_dir, config)
    return AuditResult(
        os.fspath(out_dir), "spark", info.records, time.perf_counter() - started, rows
    )


def _fold_and_write(
    spark: Any, records: Any, fold: Any, out_dir: str | os.PathLike[str], config: ReplayConfig
) -> dict[str, int]:
    """Fold every coordination partition in its own task; write the tables; count rows."""
    functions = require("pyspark.sql.functions")
    types = require("pyspark.sql.types")
    storage_level = require("pyspark").StorageLevel
    union = records.mapInArrow(fold, _union_struct(types))
    union = union.persist(storage_level.MEMORY_AND_DISK)
    before = None
    try:
        # one replay (it fills the cache every table below reads) that also counts the rows
        counts = {r["table"]: r["count"] for r in union.groupBy("table").count().collect()}
        _check_whole(union, functions)
        rows = {}
        for name, columns in TABLES.items():
            if name in DERIVED_TABLES:
                continue
            selected = []
            for column, kind in columns:
                selected.append(functions.col(column))
                if kind == TIME:
                    selected.append(
                        functions.expr(f"timestamp_millis(`{column}`)").alias(
                            time_column_name(column)
                        )
                    )
            table = union.where(functions.col("table") == name)
            if name == "ownership" and config.since_ms is not None:
                # the claims before the window the fold kept for the moves alone
                # (:func:`.moves.ownership_since`): taken aside, not written
                end = functions.col("end_ms")
                before = table.where(end < config.since_ms).select(*selected).toArrow()
                table = table.where(end.isNull() | (end >= config.since_ms))
                counts[name] = table.count()
            if name == "verdicts":  # one row per (group, outcome, reason), over partitions
                keys = ["group", "outcome", "reason"]
                table = (
                    table.groupBy(*keys)
                    .agg(functions.sum("records").alias("records"))
                    .orderBy(*keys)
                )
            table = table.select(*selected)
            path = os.path.join(os.fspath(out_dir), name)
            table.coalesce(1).write.mode("overwrite").parquet(path)
            rows[name] = table.count() if name == "verdicts" else counts.get(name, 0)
    finally:
        union.unpersist()
    rows.update(_write_derived(spark, out_dir, config, before))
    return rows


def _check_whole(union: Any, functions: Any) -> None:
    """Each coordination partition folded by one task: a partition split between tasks
    would be audited as two (each piece from an empty world), so it is refused."""
    from logmarshal.audit.arrow import InputOrderError

    seen = union.where(functions.col("table") == "coordination").select("coord_partition")
    cps = [r[0] for r in seen.collect()]
    split = sorted({cp for cp in cps if cps.count(cp) > 1})
    if split:
        raise InputOrderError(
            f"coordination partitions {split} were folded in pieces by several tasks"
        )


def _write_derived(
    spark: Any, out_dir: str | os.PathLike[str], config: ReplayConfig, before: Any = None
) -> dict[str, int]:
    """The tables the driver derives from the folded ones (:data:`DERIVED_TABLES`), computed
    by the same code as in-process (:func:`.moves.moves_table`) from what Spark wrote, and
    ``before`` (the claims before ``--since`` kept for the moves, not written)."""
    from logmarshal.audit.arrow import final_schema
    from logmarshal.audit.moves import moves_table
    from logmarshal.audit.outputs import is_local_path

    base = os.fspath(out_dir).rstrip("/")
    folded = {}
    for name in ("ownership", "membership"):
        schema = final_schema(name)
        folded[name] = (
            spark.read.parquet(f"{base}/{name}").toArrow().select(schema.names).cast(schema)
        )
        if name == "ownership" and before is not None and before.num_rows:
            pa = require("pyarrow")
            extra = before.select(schema.names).cast(schema)
            folded[name] = pa.concat_tables([folded[name], extra])
    moves = moves_table(folded, config.since_ms)
    path = f"{base}/moves"
    if is_local_path(base):
        pq = require("pyarrow.parquet")
        local = Path(path[5:] if path.startswith("file:") else path)
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        pq.write_table(moves, local / "part-00000.parquet")
    else:
        frame = spark.createDataFrame(moves) if moves.num_rows else None
        if frame is None:
            frame = spark.createDataFrame([], _final_struct(require("pyspark.sql.types"), "moves"))
        frame.coalesce(1).write.mode("overwrite").parquet(path)
    return {"moves": moves.num_rows}


def _final_struct(types: Any, table: str) -> Any:
    fields = []
    for column, kind in TABLES[table]:
        fields.append(types.StructField(column, _spark_type(types, kind), True))
        if kind == TIME:
            fields.append(types.StructField(time_column_name(column), types.TimestampType(), True))
    return types.StructType(fields)


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit logmarshal/audit/job.py --input EXPORT --out DIR`` (or ``python -m``);
    ``--kafka-bootstrap HOST:PORT`` instead of ``--input`` reads ``__marshal`` from Kafka."""
    parser = argparse.ArgumentParser(
        prog="logmarshal-audit-job",
        description="Replay an exported coordination log on Spark and explain it.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--input", help="export directory (coord export)")
    where.add_argument(
        "--kafka-bootstrap",
        metavar="HOST:PORT",
        help="read __marshal from these Apache Kafka brokers with Spark's Kafka source, up to "
        "the log ends when the job starts (the cut is written to OUT/kafka-cut, or to "
        "LOCAL_OUT/kafka-cut when --out is not local)",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[2]")
    parser.add_argument("--since", type=int, default=None, help="log time, epoch ms")
    parser.add_argument("--until", type=int, default=None, help="log time, epoch ms")
    parser.add_argument(
        "--no-report", action="store_true", help="write summary.json but not report.html"
    )
    parser.add_argument(
        "--local-out",
        default=None,
        help="where summary.json and report.html go when --out is not a local path "
        "(hdfs://, s3a://...); default ./audit-report",
    )
    parser.add_argument(
        "--admin-key-file",
        default=None,
        help="admin keys of keyed groups (as for logmarshal audit); without them a keyed "
        "group's verdicts would differ from its members'",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from logmarshal.audit.outputs import (  # late: only the driver needs them
        is_local_path,
        spark_tables,
        write_outputs,
    )

    keys = None if args.admin_key_file is None else load_admin_keys(args.admin_key_file)
    local = is_local_path(args.out)
    local_dir = None if local else (args.local_out or "audit-report")
    conf: dict[str, str] = {}
    if args.kafka_bootstrap is None:
        info = read_export_info(args.input)
        if info.stored == KAFKA:
            parser.error(f"{args.input} is a cut of Kafka, not an export: use --kafka-bootstrap")
        if is_local_path(args.input):  # (its files' columns and statistics: the CLI's check)
            try:
                check_export_files(info)
            except ValueError as exc:
                parser.error(str(exc))
    else:
        cut_root = args.out if local_dir is None else local_dir  # (None: the output is local)
        info = _capture(args.kafka_bootstrap, Path(cut_root) / "kafka-cut")
        if "PYSPARK_GATEWAY_PORT" not in os.environ:  # spark-submit: its --jars, set already
            from logmarshal.audit.kafkasource import fetch_jars, spark_conf

            conf = spark_conf(fetch_jars())
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # not under spark-submit, which would have set the master
    spark = spark_session(master, conf=conf)
    try:
        groups = None
        if keys is not None and keys.default is not None and args.kafka_bootstrap is not None:
            from logmarshal.audit.kafkasource import groups_on_kafka

            groups = groups_on_kafka(spark, args.kafka_bootstrap, info)
        config = replay_config_for(
            info,
            admin_keys=admin_keys_for_export(keys, info, groups=groups),
            since_ms=args.since,
            until_ms=args.until,
        )
        result = run_spark(spark, info, args.out, config, kafka_bootstrap=args.kafka_bootstrap)
        tables = None if local else spark_tables(spark, args.out)
    finally:
        spark.stop()
    write_outputs(
        args.out,
        info,
        config,
        result,
        tables=tables,
        report=not args.no_report,
        local_dir=local_dir,
    )
    log.info("audited %d records in %.1f s into %s", result.records, result.seconds, args.out)
    return 0


def _capture(bootstrap: str, cut_dir: Path) -> ExportInfo:
    """The cut of ``__marshal`` on Kafka the job audits, fixed by the driver."""
    from logmarshal import connect

    cluster = connect(bootstrap=bootstrap)
    try:
        return capture_cut(cluster, cut_dir, source=f"kafka {bootstrap}")
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
