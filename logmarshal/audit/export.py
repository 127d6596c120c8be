"""Export ``__marshal`` to Parquet, from any :class:`~logmarshal.cluster.Cluster`.

Spark has no reader for Kafka's record batches, but it reads Parquet natively and in
parallel, so the audit first copies the coordination log out: one file per coordination
partition (``coordination/part-00003.parquet``), rows in offset order, columns
``coord_partition, offset, timestamp_ms, key, value``. Next to it ``export.json`` records
what was exported (offset ranges per partition, whether history was already truncated by
retention) and the log-end offsets of the data topics, so the audit can report lag.

The export is a consistent prefix of every coordination partition: each is read up to the
log end seen when the export started, so records written meanwhile are left for next time.

A *cut* (:func:`capture_cut`) is the same directory without the Parquet: ``export.json``
(``"stored": "kafka"``) and the snapshots, for the audit that reads ``__marshal`` straight
from Apache Kafka with Spark's Kafka source (:mod:`.kafkasource`) up to the offsets it names.

Speed: the export reads through :func:`logmarshal._coordlog.iter_columns`, which uses a
cluster's :class:`~logmarshal.cluster.ColumnFetcher` capability when it has one (the
embedded cluster parses stored batches straight into columns, about three times faster than
a ``Message`` per record) and ``Cluster.fetch`` otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from storage import RecordColumns

from .._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC, iter_columns
from ..cluster import Cluster
from .deps import require

__all__ = [
    "COORDINATION_DIR",
    "EXPORT_META",
    "ExportInfo",
    "ExportedPartition",
    "capture_cut",
    "check_export_files",
    "export_coordination",
    "iter_export",
    "read_export_info",
]

log = logging.getLogger(__name__)

EXPORT_META = "export.json"
COORDINATION_DIR = "coordination"
EXPORT_FORMAT = 1
#: where an export's records are: its own Parquet files, or still in Kafka (a cut)
PARQUET, KAFKA = "parquet", "kafka"
_ROW_GROUP = 256 * 1024

#: progress callback: (coordination partition, records done in it, records in it)
Progress = Callable[[int, int, int], None]


@attrs.frozen
class ExportedPartition:
    partition: int
    earliest: int  # > 0: retention removed older records, history starts here
    latest: int  # exclusive: the log end when the export started
    records: int
    #: the log end read again after the snapshot records were copied (None: an older
    #: export): a snapshot in the export covering an offset at or past it is evidence of
    #: a rewind (:mod:`.rewind`), never of a snapshot published while the export ran
    end_after_snapshots: int | None = None


@attrs.frozen
class ExportInfo:
    """What ``export.json`` says about an export directory."""

    path: str
    topic: str
    partitions: tuple[ExportedPartition, ...]
    log_end: dict[tuple[str, int], int]
    exported_at_ms: int
    source: str
    seconds: float = 0.0
    #: PARQUET: the records are under ``coordination/``; KAFKA: a cut, read from Kafka
    stored: str = PARQUET

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def coordination_path(self) -> str:
        return os.path.join(self.path, COORDINATION_DIR)

    @property
    def truncated(self) -> list[int]:
        """Coordination partitions whose oldest records retention already removed."""
        return [p.partition for p in self.partitions if p.earliest > 0]


def _schema() -> Any:
    pa = require("pyarrow")
    return pa.schema(
        [
            ("coord_partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp_ms", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )


def _data_log_ends(cluster: Cluster, topic: str) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for name in cluster.topics():
        if name in (topic, SNAPSHOT_TOPIC):
            continue
        try:
            for o in cluster.describe_topic(name).offsets:
                ends[(name, o.partition)] = o.latest
        except Exception:  # lag is a nicety: never fail an export over it
            log.warning("cannot read log-end offsets of %s; no lag for it", name, exc_info=True)
    return ends


def export_coordination(
    cluster: Cluster,
    out_dir: str | os.PathLike[str],
    *,
    topic: str = COORDINATION_TOPIC,
    progress: Progress | None = None,
) -> ExportInfo:
    """Copy every coordination partition of ``cluster`` to Parquet under ``out_dir``."""
    pa = require("pyarrow")
    pq = require("pyarrow.parquet")
    started = time.perf_counter()
    exported_at = int(time.time() * 1000)
    if topic not in cluster.topics():
        raise ValueError(f"there is no {topic} topic to audit: no consumer ever coordinated here")
    description = cluster.describe_topic(topic)
    root = Path(out_dir)
    coord_dir = root / COORDINATION_DIR
    coord_dir.mkdir(parents=True, exist_ok=True)
    for stale in coord_dir.glob("part-*.parquet"):  # a re-export replaces, never mixes
        stale.unlink()
    schema = _schema()
    exported = []
    for po in description.offsets:
        cp, start, end = po.partition, po.earliest, po.latest
        done = 0
        path = coord_dir / f"part-{cp:05d}.parquet"
        with pq.ParquetWriter(path, schema, compression="snappy") as writer:
            cols: RecordColumns = ([], [], [], [])
            # records [start, end) only: what is written meanwhile is left for next time
            for got in iter_columns(cluster, cp, start, end, topic):
                cols[0].extend(got[0])
                cols[1].extend(got[1])
                cols[2].extend(got[2])
                cols[3].extend(got[3])
                if len(cols[0]) >= _ROW_GROUP:
                    done += _flush(pa, writer, schema, cp, cols)
                    if progress is not None:
                        progress(cp, done, end - start)
            done += _flush(pa, writer, schema, cp, cols)
        if progress is not None:
            progress(cp, done, end - start)
        exported.append(ExportedPartition(cp, start, end, done))
        if start > 0:
            log.warning(
                "%s/%d starts at offset %d: retention removed older records, so the audit "
                "starts from incomplete history there",
                topic,
                cp,
                start,
            )
    info = _finish(cluster, root, topic, len(description.offsets), exported, exported_at, started)
    log.info("exported %d coordination records in %.2f s", info.records, info.seconds)
    return info


def _finish(
    cluster: Cluster,
    root: Path,
    topic: str,
    partitions: int,
    exported: list[ExportedPartition],
    exported_at: int,
    started: float,
    stored: str = PARQUET,
    source: str | None = None,
) -> ExportInfo:
    """Snapshots and data log ends beside the records, then ``export.json``."""
    from .genesis import export_snapshots  # snapshots beside the export: the audit's genesis

    export_snapshots(cluster, root, partitions)
    ends = {o.partition: o.latest for o in cluster.describe_topic(topic).offsets}
    exported = [attrs.evolve(p, end_after_snapshots=ends.get(p.partition)) for p in exported]
    info = ExportInfo(
        path=str(root),
        topic=topic,
        partitions=tuple(exported),
        log_end=_data_log_ends(cluster, topic),
        exported_at_ms=exported_at,
        source=repr(cluster) if source is None else source,
        seconds=time.perf_counter() - started,
        stored=stored,
    )
    _write_meta(info)
    return info


def capture_cut(
    cluster: Cluster,
    out_dir: str | os.PathLike[str],
    *,
    topic: str = COORDINATION_TOPIC,
    source: str | None = None,
) -> ExportInfo:
    """Fix what an audit reading ``__marshal`` from Kafka covers: each coordination
    partition from its earliest offset to the log end now (exclusive), written to
    ``out_dir/export.json`` with the snapshots and the data topics' log ends, as an export
    would, but no records: Spark reads those from Kafka up to these offsets, so the audit is
    of this cut whatever is written meanwhile. ``records`` of a partition counts the
    offsets in its range (``__marshal`` is neither compacted nor transactional, so each
    offset holds one record)."""
    started = time.perf_counter()
    exported_at = int(time.time() * 1000)
    if topic not in cluster.topics():
        raise ValueError(f"there is no {topic} topic to audit: no consumer ever coordinated here")
    offsets = cluster.describe_topic(topic).offsets
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    stale = root / COORDINATION_DIR
    if stale.is_dir():  # an export's Parquet here would not be what the cut describes
        for path in stale.glob("part-*.parquet"):
            path.unlink()
    cut = [ExportedPartition(o.partition, o.earliest, o.latest, o.latest - o.earliest)
           for o in offsets]  # fmt: skip
    info = _finish(cluster, root, topic, len(offsets), cut, exported_at, started, KAFKA, source)
    log.info("cut %s at %s: %d records to read from Kafka", topic,
             {p.partition: p.latest for p in cut}, info.records)  # fmt: skip
    return info


def _flush(pa: Any, writer: Any, schema: Any, cp: int, cols: tuple[list, ...]) -> int:
    n = len(cols[0])
    if not n:
        return 0
    batch = pa.record_batch(
        [
            pa.array([cp] * n, pa.int32()),
            pa.array(cols[0], pa.int64()),
            pa.array(cols[1], pa.int64()),
            pa.array(cols[2], pa.binary()),
            pa.array(cols[3], pa.binary()),
        ],
        schema=schema,
    )
    writer.write_batch(batch, row_group_size=_ROW_GROUP)
    for c in cols:
        c.clear()
    return n


def _write_meta(info: ExportInfo) -> None:
    payload = {
        "format": EXPORT_FORMAT,
        "topic": info.topic,
        "exported_at_ms": info.exported_at_ms,
        "source": info.source,
        "seconds": round(info.seconds, 3),
        "stored": info.stored,
        "partitions": [attrs.asdict(p) for p in info.partitions],
        "log_end": [
            {"topic": t, "partition": p, "latest": end}
            for (t, p), end in sorted(info.log_end.items())
        ],
    }
    path = Path(info.path) / EXPORT_META
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def read_export_info(path: str | os.PathLike[str]) -> ExportInfo:
    """Read ``export.json`` of an export directory (raises ValueError, naming the file, if it
    is not one or does not say what ``coord export`` writes)."""
    meta = Path(path) / EXPORT_META
    try:
        payload = json.loads(meta.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"{path} is not an audit export (no {EXPORT_META}); make one with "
            "'logmarshal coord export --out DIR'"
        ) from None
    except (ValueError, RecursionError, IsADirectoryError) as exc:  # (JSON, UTF-8, nesting)
        raise ValueError(f"{meta} is unreadable: {str(exc)[:200] or 'nested too deep'}") from None
    if not isinstance(payload, dict) or payload.get("format") != EXPORT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else payload
        raise ValueError(f"{meta}: unknown export format {str(found)[:80]!r}")
    try:
        info = ExportInfo(
            path=str(path),
            topic=_typed(payload["topic"], str),
            partitions=tuple(_exported_partition(p) for p in _typed(payload["partitions"], list)),
            log_end={
                (_typed(e["topic"], str), _typed(e["partition"], int)): _typed(e["latest"], int)
                for e in _typed(payload["log_end"], list)
            },
            exported_at_ms=_typed(payload["exported_at_ms"], int),
            source=_typed(payload["source"], str),
            seconds=_typed(payload.get("seconds", 0.0), float),
            stored=_typed(payload.get("stored", PARQUET), str),
        )
    except (KeyError, TypeError, ValueError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{meta} is not what 'coord export' writes: {what}") from None
    return info


def check_export_files(info: ExportInfo) -> None:
    """ValueError naming the first partition file ``export.json`` lists that is missing (an
    export writes one for each coordination partition, records or none): an audit without
    it would replay the others and say nothing of the history it never read. Each file's
    columns, and the statistics it keeps of its rows (no data read: the Spark job reads the
    rows itself), must be an export's: :func:`_check_meta`."""
    for p in info.partitions:
        path = Path(info.coordination_path) / f"part-{p.partition:05d}.parquet"
        if not path.exists():
            raise ValueError(_missing(info, p))
        if info.stored == PARQUET:
            _check_meta(path, p)


#: the columns an export never leaves null
_NOT_NULL = ("coord_partition", "offset", "timestamp_ms")


def _check_meta(path: Path, p: ExportedPartition) -> None:
    """The file's schema is an export's, and where it keeps statistics of a row group, no
    ``coord_partition``, ``offset`` or ``timestamp_ms`` is null and each row is of its
    partition and offset range. A damaged export (a null offset) was audited without a word
    into false violations; a missing column was a traceback."""
    pq = require("pyarrow.parquet")
    try:
        meta = pq.ParquetFile(path).metadata
        schema = meta.schema.to_arrow_schema()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path} is unreadable: {exc}") from None
    _check_schema(path, schema)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            name = column.path_in_schema
            stats = column.statistics
            if name not in _NOT_NULL or stats is None:
                continue
            if stats.has_null_count and stats.null_count:
                raise ValueError(f"{path}: {stats.null_count} row(s) have no {name}")
            if not stats.has_min_max:
                continue
            if name == "coord_partition" and not stats.min == stats.max == p.partition:
                raise ValueError(
                    f"{path}: rows of another coordination partition than {p.partition}"
                )
            if name == "offset" and not p.earliest <= stats.min <= stats.max < p.latest:
                raise ValueError(_outside(path, p))


def _check_schema(path: Path, schema: Any) -> None:
    want = _schema()
    if schema.names != want.names or any(
        not schema.field(n).type.equals(want.field(n).type) for n in want.names
    ):
        raise ValueError(
            f"{path} is not what 'coord export' writes: its columns are "
            f"{', '.join(f'{f.name} {f.type}' for f in schema)}; an export's are "
            f"{', '.join(f'{f.name} {f.type}' for f in want)}"
        )


def _outside(path: Path, p: ExportedPartition) -> str:
    return (
        f"{path}: offsets outside [{p.earliest}, {p.latest}), the range {EXPORT_META} says "
        "it holds, or out of order"
    )


def _check_batch(path: Path, p: ExportedPartition, batch: Any, after: int) -> int:
    """The rows of ``batch`` are an export's (:func:`_check_meta`, on the rows themselves:
    statistics are optional), in offset order after ``after``; its last offset."""
    pc = require("pyarrow.compute")
    if batch.num_rows == 0:
        return after
    for name in _NOT_NULL:
        if batch.column(name).null_count:
            raise ValueError(f"{path}: {batch.column(name).null_count} row(s) have no {name}")
    cps = pc.min_max(batch.column("coord_partition"))
    if not cps["min"].as_py() == cps["max"].as_py() == p.partition:
        raise ValueError(f"{path}: rows of another coordination partition than {p.partition}")
    offsets = batch.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    ordered = (
        batch.num_rows == 1
        or pc.all(pc.greater(offsets.slice(1), offsets.slice(0, batch.num_rows - 1))).as_py()
    )
    if not (ordered and first > after and p.earliest <= first and last < p.latest):
        raise ValueError(_outside(path, p))
    return last


def _missing(info: ExportInfo, p: ExportedPartition) -> str:
    path = Path(info.coordination_path) / f"part-{p.partition:05d}.parquet"
    return (
        f"{path} is missing: {EXPORT_META} says it holds {p.records:,} records of "
        f"coordination partition {p.partition} (export again with 'coord export')"
    )


def _typed(value: Any, kind: type) -> Any:
    """``value`` if of ``kind`` (an int for a float; never a bool), else TypeError."""
    ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not ok or isinstance(value, bool):
        raise TypeError(
            f"{str(value)[:80]!r} is not {'an' if kind is int else 'a'} {kind.__name__}"
        )
    return value


def _exported_partition(entry: Any) -> ExportedPartition:
    if not isinstance(entry, dict):
        raise TypeError(f"a partition entry {str(entry)[:80]!r} is not an object")
    after = entry.get("end_after_snapshots")
    return ExportedPartition(
        partition=_typed(entry["partition"], int),
        earliest=_typed(entry["earliest"], int),
        latest=_typed(entry["latest"], int),
        records=_typed(entry["records"], int),
        end_after_snapshots=None if after is None else _typed(after, int),
    )


def iter_export(info: ExportInfo, batch_rows: int = 64 * 1024) -> Iterator[tuple[int, Any]]:
    """``(coord_partition, pyarrow.RecordBatch)`` in offset order, partition by partition."""
    if info.stored != PARQUET:
        raise ValueError(
            f"{info.path} is a cut of {info.topic} on Kafka, not an export: its records are "
            "read from Kafka (logmarshal audit --source kafka), or export them with "
            "'logmarshal coord export'"
        )
    pq = require("pyarrow.parquet")
    for p in info.partitions:
        path = Path(info.coordination_path) / f"part-{p.partition:05d}.parquet"
        if not path.exists():
            raise ValueError(_missing(info, p))
        after = -1
        try:
            parquet = pq.ParquetFile(path)
            _check_schema(path, parquet.schema_arrow)
            for batch in parquet.iter_batches(batch_size=batch_rows):
                after = _check_batch(path, p, batch, after)
                yield p.partition, batch
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            if str(exc).startswith(str(path)):
                raise  # (ours: it names the file already)
            raise ValueError(f"{path} is unreadable: {exc}") from None
