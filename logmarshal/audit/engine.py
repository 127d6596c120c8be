"""Running the audit over an export, in-process or on Spark, and reading its tables back.

Both engines run the same fold (:func:`.arrow.fold_partitions`) and write the same tables, one
directory of Parquet files per table under the output directory; Spark is for logs too big
for one process and for running where the data is, the in-process engine for small logs,
tests and the benchmark's baseline.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from .._coordlog import group_of_record
from .arrow import final_schema, fold_partitions, tables_from_rows
from .deps import fewer_collections, require
from .export import PARQUET, ExportInfo, iter_export
from .moves import moves_table, ownership_since
from .replay import ReplayConfig
from .schema import TABLES

__all__ = [
    "AuditResult",
    "admin_keys_for_export",
    "load_tables",
    "replay_config_for",
    "run_inprocess",
]

log = logging.getLogger(__name__)


@attrs.frozen
class AuditResult:
    out_dir: str
    engine: str
    records: int
    seconds: float
    rows: dict[str, int]


def admin_keys_for_export(
    keys: Any, info: ExportInfo, *, groups: Iterable[str] | None = None
) -> dict[str, bytes] | None:
    """Admin keys by group for the replay; a '*' key needs the export's groups first (read
    from the export, or given as ``groups``: a cut of Kafka has no records to read here,
    :func:`.kafkasource.groups_on_kafka`)."""
    if keys is None:
        return None
    found: set[str] = set(groups or ())
    if keys.default is not None and groups is None:
        if info.stored != PARQUET:
            raise ValueError(
                "a '*' admin key needs the groups of the cut: read them from Kafka first "
                "(kafkasource.groups_on_kafka)"
            )
        for _cp, batch in iter_export(info):
            for k, v in zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True
            ):
                group = group_of_record(k, v)
                if group is not None:
                    found.add(group)
    return keys.for_groups(found)


def replay_config_for(
    info: ExportInfo,
    *,
    admin_keys: Any = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> ReplayConfig:
    """The fold's configuration for an export (it brings the data topics' log ends)."""
    from .genesis import choose_genesis, read_exported_snapshots
    from .rewind import plan_snapshot_checks

    starts = {p.partition: p.earliest for p in info.partitions}
    return ReplayConfig(
        admin_keys=admin_keys,
        since_ms=since_ms,
        until_ms=until_ms,
        log_end=dict(info.log_end),
        genesis=choose_genesis(info.path, starts, admin_keys),
        snapshot_checks=plan_snapshot_checks(read_exported_snapshots(info.path), admin_keys),
    )


def _reset_table_dir(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def run_inprocess(
    info: ExportInfo,
    out_dir: str | os.PathLike[str],
    config: ReplayConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> AuditResult:
    """Audit the export in this process and write the tables under ``out_dir``."""
    pq = require("pyarrow.parquet")
    started = time.perf_counter()
    total = info.records
    seen = 0

    def batches() -> Any:
        nonlocal seen
        for _cp, batch in iter_export(info):
            yield batch
            seen += batch.num_rows
            if progress is not None:
                progress(seen, total)

    with fewer_collections():
        rows: dict[str, list[Any]] = {name: [] for name in TABLES}
        for partition_rows in fold_partitions(batches(), config):
            for name, table_rows in partition_rows.items():
                rows[name].extend(table_rows)
        tables = tables_from_rows(rows)
        del rows
        tables["moves"] = moves_table(tables, config.since_ms)
        tables["ownership"] = ownership_since(tables["ownership"], config.since_ms)
    root = Path(out_dir)
    counts = {}
    for name, table in tables.items():
        _reset_table_dir(root / name)
        pq.write_table(table, root / name / "part-00000.parquet")
        counts[name] = table.num_rows
    return AuditResult(str(root), "in-process", total, time.perf_counter() - started, counts)


def load_tables(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Every table of an audit output as a pyarrow Table (Spark's or ours, same columns)."""
    pq = require("pyarrow.parquet")
    pa = require("pyarrow")
    out = {}
    for name in TABLES:
        path = Path(out_dir) / name
        files = sorted(p for p in path.glob("*.parquet")) if path.is_dir() else []
        if not files:
            out[name] = final_schema(name).empty_table()
            continue
        parts = [pq.read_table(f) for f in files]
        table = pa.concat_tables(parts, promote_options="permissive")
        # Spark may write timestamps at another unit; the int64 *_ms columns are the truth
        out[name] = table.select(final_schema(name).names).cast(final_schema(name))
    return out
