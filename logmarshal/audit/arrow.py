"""Arrow glue around the pure fold, shared by the Spark executors and the in-process engine.

:func:`fold_batches` is the function Spark runs (``mapInArrow``): it receives Arrow record
batches sorted by (coordination partition, offset), runs one :class:`.columnar.ColumnarAudit`
per coordination partition, and yields every output table's rows in one *union* schema
(``table`` column + all columns), because a Spark UDF returns a single schema. The writers
then split the union into the tables of :mod:`.schema`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from .columnar import ColumnarAudit
from .deps import require
from .replay import AuditRows, ReplayConfig
from .schema import FLOAT, INT, STR, TABLES, TIME, UNION_COLUMNS, time_column_name

__all__ = [
    "InputOrderError",
    "final_schema",
    "fold_batches",
    "rows_to_union",
    "split_union",
    "table_from_rows",
    "union_schema",
]


class InputOrderError(RuntimeError):
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


def fold_batches(batches: Iterable[Any], config: ReplayConfig) -> Iterator[Any]:
    """Audit record batches sorted by (coord_partition, offset); yield union batches.

    Each coordination partition must arrive whole and in order within one call: a partition
    seen again after another one started, or an offset going backwards, raises
    :class:`InputOrderError` instead of producing a wrong audit.
    """
    np = require("numpy")
    done: set[int] = set()
    audit: ColumnarAudit | None = None
    last_offset = -1
    for batch in batches:
        if batch.num_rows == 0:
            continue
        cps = batch.column("coord_partition").to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(cps[1:] != cps[:-1]) + 1).tolist(), len(cps)]
        for lo, hi in itertools.pairwise(cuts):
            cp = int(cps[lo])
            if audit is None or audit.coord_partition != cp:
                if audit is not None:
                    done.add(audit.coord_partition)
                    out = rows_to_union(audit.finish())
                    if out is not None:
                        yield out
                if cp in done:
                    raise InputOrderError(f"coordination partition {cp} arrived in pieces")
                audit = ColumnarAudit(cp, config)
                last_offset = -1
            part = batch.slice(lo, hi - lo)
            column = part.column("offset").to_numpy(zero_copy_only=False)
            if column[0] <= last_offset or (np.diff(column) <= 0).any():
                raise InputOrderError(f"coordination partition {cp}: offsets out of order")
            last_offset = int(column[-1])
            audit.feed_arrow(part)
    if audit is not None:
        out = rows_to_union(audit.finish())
        if out is not None:
            yield out


def split_union(union: Any) -> dict[str, Any]:
    """The union table's rows as the final tables (pyarrow), in a stable row order."""
    pa = require("pyarrow")
    pc = require("pyarrow.compute")
    out = {}
    for table, columns in TABLES.items():
        part = union.filter(pc.equal(union.column("table"), table))
        if table == "verdicts":  # one row per (group, outcome, reason), summed over partitions
            keys = ["group", "outcome", "reason"]
            summed = part.group_by(keys).aggregate([("records", "sum")])
            part = summed.rename_columns([*keys, "records"]).sort_by(
                [(k, "ascending") for k in keys]
            )
        arrays = []
        for name, kind in columns:
            col = part.column(name)
            arrays.append(col)
            if kind == TIME:
                arrays.append(col.cast(pa.timestamp("ms", tz="UTC")))
        out[table] = pa.Table.from_arrays(arrays, schema=final_schema(table))
    return out


def table_from_rows(table: str, rows: list[tuple[Any, ...]]) -> Any:
    """Rows of ``table`` (column order of :data:`.schema.TABLES`) as a pyarrow Table in its
    final schema (with the ``*_time`` columns)."""
    pa = require("pyarrow")
    columns = TABLES[table]
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    arrays = []
    for (_name, kind), col in zip(columns, values, strict=True):
        arr = pa.array(list(col), _arrow_type(pa, kind))
        arrays.append(arr)
        if kind == TIME:
            arrays.append(arr.cast(pa.timestamp("ms", tz="UTC")))
    return pa.Table.from_arrays(arrays, schema=final_schema(table))
