"""The audit's closing step, the same on every path: tables → ``summary.json`` → ``report.html``.

The CLI (in-process or ``--master``) and the Spark driver run by ``spark-submit`` both end
here, so every path leaves the same files behind. The driver writes them with local file
I/O from the result tables; when the tables went to a non-local URI (``hdfs://``, ``s3a://``)
the tables are read back through Spark and the two files go to a local directory instead.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .engine import AuditResult, load_tables
from .export import ExportInfo
from .replay import ReplayConfig

__all__ = ["is_local_path", "spark_tables", "write_outputs"]

log = logging.getLogger(__name__)


def is_local_path(path: str | os.PathLike[str]) -> bool:
    """True for a plain path or a ``file:`` URI: one the driver can open itself."""
    scheme = urlparse(os.fspath(path)).scheme
    return scheme in ("", "file") or len(scheme) == 1  # "C:" on Windows is a drive


def _local(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    return Path(urlparse(text).path if text.startswith("file:") else text)


def spark_tables(spark: Any, out_dir: str) -> dict[str, Any]:
    """The result tables as pyarrow Tables, read through Spark (for a non-local ``out_dir``)."""
    from .arrow import final_schema
    from .schema import TABLES

    tables = {}
    for name in TABLES:
        frame = spark.read.parquet(f"{out_dir.rstrip('/')}/{name}")
        schema = final_schema(name)
        tables[name] = frame.toArrow().select(schema.names).cast(schema)
    return tables


def write_outputs(
    out_dir: str | os.PathLike[str],
    info: ExportInfo,
    config: ReplayConfig,
    result: AuditResult,
    *,
    tables: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    report: bool = True,
    local_dir: str | os.PathLike[str] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Write ``summary.json`` (and ``report.html`` unless ``report`` is false).

    ``tables`` defaults to reading them from ``out_dir``; ``local_dir`` (default: ``out_dir``)
    is where the two files go. Returns the summary and the report's path (or None).
    """
    from .report import write_report
    from .summary import write_summary

    target = _local(local_dir if local_dir is not None else out_dir)
    target.mkdir(parents=True, exist_ok=True)
    if tables is None:
        tables = load_tables(_local(out_dir))
    summary = write_summary(target, info, config, result, extra=extra, tables=tables)
    path = write_report(target, tables, summary) if report else None
    log.info("wrote %s%s", target / "summary.json", "" if path is None else f" and {path}")
    return summary, path
