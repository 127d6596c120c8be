"""Arrow glue around the pure fold, shared by the Spark executors and the in-process engine.

:func:`fold_partitions` receives Arrow record batches sorted by (coordination partition,
offset), runs one :class:`.columnar.ColumnarAudit` per coordination partition and yields its
rows. :func:`fold_batches`, the function Spark runs (``mapInArrow``), yields them in one
*union* schema (``table`` column + all columns), because a Spark UDF returns a single
schema, and the driver splits the union into the tables of :mod:`.schema`; the in-process
engine makes the tables from the rows directly (:func:`tables_from_rows`). Both end in the
same :func:`_final` step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import LogmarshalError
from .columnar import ColumnarAudit
from .deps import fewer_collections, require
from .replay import AuditRows, ReplayConfig
from .schema import FLOAT, INT, STR, TABLES, TIME, UNION_COLUMNS, time_column_name

__all__ = [
    "InputOrderError",
    "final_schema",
    "fold_batches",
    "fold_partitions",
    "rows_to_union",
    "split_union",
    "table_from_rows",
    "tables_from_rows",
    "union_schema",
]


class InputOrderError(LogmarshalError, RuntimeError):
    """The fold got a coordination partition's records out of order or split across tasks."""


def _arrow_type(pa: Any, kind: str) -> Any:
    return {STR: pa.string(), INT: pa.int64(), FLOAT: pa.float64(), TIME: pa.int64()}[kind]


def union_schema() -> Any:
    pa = require("pyarrow")
    return pa.schema([(name, _arrow_type(pa, kind)) for name, kind in UNION_COLUMNS])


def final_schema(table: str) -> Any:
    """A table's columns as written: TIME columns as int64 ms plus a UTC timestamp next to them."""
    pa = require("pyarrow")
    fields = []
    for name, kind in TABLES[table]:
        fields.append((name, _arrow_type(pa, kind)))
        if kind == TIME:
            fields.append((time_column_name(name), pa.timestamp("ms", tz="UTC")))
    return pa.schema(fields)


def rows_to_union(rows: AuditRows) -> Any:
    """One Arrow RecordBatch holding every table's rows (None when there are none)."""
    pa = require("pyarrow")
    schema = union_schema()
    parts = []
    for table, table_rows in rows.items():
        if not table_rows:
            continue
        n = len(table_rows)
        columns = dict(
            zip((c for c, _ in TABLES[table]), zip(*table_rows, strict=True), strict=True)
        )
        arrays = []
        for field in schema:
            if field.name == "table":
                arrays.append(pa.array([table] * n, pa.string()))
            elif field.name in columns:
                arrays.append(pa.array(columns[field.name], field.type))
            else:
                arrays.append(pa.nulls(n, field.type))
        parts.append(pa.Table.from_arrays(arrays, schema=schema))
    if not parts:
        return None
    return pa.concat_tables(parts).combine_chunks().to_batches()[0]


#: the fold is fed at least this many records at once (Spark hands 10,000-row batches;
#: each feed has a fixed cost of a few numpy calls and a pass over the keys it saw)
FEED_ROWS = 1 << 16


def fold_partitions(
    batches: Iterable[Any], config: ReplayConfig, *, feed_rows: int = FEED_ROWS
) -> Iterator[AuditRows]:
    """Audit record batches sorted by (coord_partition, offset); yield each coordination
    partition's rows (:meth:`.replay.PartitionAudit.finish`) when it is done. Small
    batches are gathered and fed ``feed_rows`` records at a time.

    Each coordination partition must arrive whole and in order within one call: a partition
    seen again after another one started, or an offset going backwards, raises
    :class:`InputOrderError` instead of producing a wrong audit.
    """
    np = require("numpy")
    pa = require("pyarrow")
    done: set[int] = set()
    audit: ColumnarAudit | None = None
    pending: list[Any] = []
    rows = 0
    last_offset = -1

    def flush() -> None:
        nonlocal rows
        if pending:
            assert audit is not None
            audit.feed_arrow(pending[0] if len(pending) == 1 else pa.Table.from_batches(pending))
            pending.clear()
            rows = 0

    for batch in batches:
        if batch.num_rows == 0:
            continue
        cps = batch.column("coord_partition").to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(cps[1:] != cps[:-1]) + 1).tolist(), len(cps)]
        for lo, hi in itertools.pairwise(cuts):
            cp = int(cps[lo])
            if audit is None or audit.coord_partition != cp:
                if audit is not None:
                    flush()
                    done.add(audit.coord_partition)
                    yield audit.finish()
                if cp in done:
                    raise InputOrderError(f"coordination partition {cp} arrived in pieces")
                audit = ColumnarAudit(cp, config)
                last_offset = -1
            part = batch.slice(lo, hi - lo)
            column = part.column("offset").to_numpy(zero_copy_only=False)
            if column[0] <= last_offset or (np.diff(column) <= 0).any():
                raise InputOrderError(f"coordination partition {cp}: offsets out of order")
            last_offset = int(column[-1])
            pending.append(part)
            rows += hi - lo
            if rows >= feed_rows:
                flush()
    if audit is not None:
        flush()
        yield audit.finish()


def fold_batches(batches: Iterable[Any], config: ReplayConfig) -> Iterator[Any]:
    """:func:`fold_partitions` in the union schema, as Spark's ``mapInArrow`` needs it."""
    with fewer_collections():
        for rows in fold_partitions(batches, config):
            out = rows_to_union(rows)
            if out is not None:
                yield out


def _final(table: str, part: Any) -> Any:
    """A table's folded rows (Arrow, the fold's columns) in its final form: the verdicts
    summed over coordination partitions (one row per group, outcome and reason, sorted),
    and a UTC timestamp next to each TIME column. Both engines end with this."""
    pa = require("pyarrow")
    if table == "verdicts":
        keys = ["group", "outcome", "reason"]
        summed = part.group_by(keys).aggregate([("records", "sum")])
        part = summed.rename_columns([*keys, "records"]).sort_by([(k, "ascending") for k in keys])
    arrays = []
    for name, kind in TABLES[table]:
        col = part.column(name)
        arrays.append(col)
        if kind == TIME:
            arrays.append(col.cast(pa.timestamp("ms", tz="UTC")))
    return pa.Table.from_arrays(arrays, schema=final_schema(table))


def split_union(union: Any) -> dict[str, Any]:
    """The union table's rows as the final tables (pyarrow), in a stable row order."""
    pc = require("pyarrow.compute")
    return {
        table: _final(table, union.filter(pc.equal(union.column("table"), table)))
        for table in TABLES
    }


def tables_from_rows(rows: AuditRows) -> dict[str, Any]:
    """The fold's rows of every table (all coordination partitions) as the final tables,
    without the union schema (the in-process engine: one schema per table is enough)."""
    pa = require("pyarrow")
    out = {}
    for table, columns in TABLES.items():
        table_rows = rows.get(table, [])
        values = list(zip(*table_rows, strict=True)) if table_rows else [() for _ in columns]
        arrays = [
            pa.array(col, _arrow_type(pa, kind))
            for (_name, kind), col in zip(columns, values, strict=True)
        ]
        folded = pa.Table.from_arrays(arrays, names=[name for name, _ in columns])
        out[table] = _final(table, folded)
    return out


def table_from_rows(table: str, rows: list[tuple[Any, ...]]) -> Any:
    """Rows of ``table`` (column order of :data:`.schema.TABLES`) as a pyarrow Table in its
    final schema (with the ``*_time`` columns)."""
    pa = require("pyarrow")
    columns = TABLES[table]
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    arrays = []
    for (_name, kind), col in zip(columns, values, strict=True):
        arr = pa.array(col, _arrow_type(pa, kind))
        arrays.append(arr)
        if kind == TIME:
            arrays.append(arr.cast(pa.timestamp("ms", tz="UTC")))
    return pa.Table.from_arrays(arrays, schema=final_schema(table))
