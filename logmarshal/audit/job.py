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
from logmarshal.audit.export import ExportInfo, read_export_info
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
        for package in (rationalizer, logmarshal):
            base = Path(package.__file__).resolve().parent
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


def run_spark(
    spark: Any,
    info: ExportInfo,
    out_dir: str | os.PathLike[str],
    config: ReplayConfig,
    *,
    data_path: str | None = None,
) -> AuditResult:
    """Audit the export with Spark and write each table under ``out_dir``."""
    started = time.perf_counter()
    source = data_path or info.coordination_path
    with whole_file_splits(spark):  # read at planning time, i.e. by every action below
        rows = _fold_and_write(spark, source, out_dir, config)
    return AuditResult(
        os.fspath(out_dir), "spark", info.records, time.perf_counter() - started, rows
    )


def _fold_and_write(
    spark: Any, source: str, out_dir: str | os.PathLike[str], config: ReplayConfig
) -> dict[str, int]:
    """Fold every coordination partition in its own task; write the tables; count rows."""
    functions = require("pyspark.sql.functions")
    types = require("pyspark.sql.types")
    storage_level = require("pyspark").StorageLevel
    records = spark.read.parquet(source)
    union = records.mapInArrow(
        functools.partial(_executor_fold, config=config), _union_struct(types)
    )
    union = union.persist(storage_level.MEMORY_AND_DISK)
    try:
        # one replay (it fills the cache every table below reads) that also counts the rows
        counts = {r["table"]: r["count"] for r in union.groupBy("table").count().collect()}
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
    rows.update(_write_derived(spark, out_dir, config))
    return rows


def _write_derived(
    spark: Any, out_dir: str | os.PathLike[str], config: ReplayConfig
) -> dict[str, int]:
    """The tables the driver derives from the folded ones (:data:`DERIVED_TABLES`), computed
    by the same code as in-process (:func:`.moves.moves_table`) from what Spark wrote."""
    from logmarshal.audit.arrow import final_schema
    from logmarshal.audit.moves import moves_table
    from logmarshal.audit.outputs import is_local_path

    base = os.fspath(out_dir).rstrip("/")
    folded = {}
    for name in ("ownership", "membership"):
        schema = final_schema(name)
        folded[name] = spark.read.parquet(f"{base}/{name}").toArrow().select(schema.names).cast(
            schema
        )
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
    """``spark-submit logmarshal/audit/job.py --input EXPORT --out DIR`` (or ``python -m``)."""
    parser = argparse.ArgumentParser(
        prog="logmarshal-audit-job",
        description="Replay an exported coordination log on Spark and explain it.",
    )
    parser.add_argument("--input", required=True, help="export directory (coord export)")
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

    info = read_export_info(args.input)
    keys = None if args.admin_key_file is None else load_admin_keys(args.admin_key_file)
    config = replay_config_for(
        info,
        admin_keys=admin_keys_for_export(keys, info),
        since_ms=args.since,
        until_ms=args.until,
    )
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # not under spark-submit, which would have set the master
    local = is_local_path(args.out)
    spark = spark_session(master)
    try:
        result = run_spark(spark, info, args.out, config)
        tables = None if local else spark_tables(spark, args.out)
    finally:
        spark.stop()
    local_dir = None if local else (args.local_out or "audit-report")
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


if __name__ == "__main__":
    sys.exit(main())
