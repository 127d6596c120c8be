"""The audit of a whole coordination log in this process, for tests and small logs.

It sits above both folds (the per-record :mod:`.replay` and the columnar :mod:`.columnar`)
because it chooses between them: the columnar one where numpy and pyarrow are installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .columnar import ColumnarAudit
from .deps import require
from .replay import AuditRows, PartitionAudit, ReplayConfig
from .schema import TABLES

__all__ = ["audit_records"]


def audit_records(
    partitions: Mapping[int, Iterable[tuple[int, int, bytes | None, bytes | None]]],
    config: ReplayConfig,
    *,
    fold: Callable[[int, ReplayConfig], PartitionAudit] | None = None,
) -> AuditRows:
    """In-process audit of ``{coord_partition: [(offset, timestamp_ms, key, value), ...]}``.

    Convenience for tests and small logs; the engines stream in batches instead. ``fold``
    makes each coordination partition's fold: by default the engines' own, the columnar
    :class:`.columnar.ColumnarAudit`, or the per-record :class:`.replay.PartitionAudit` without numpy and pyarrow.
    """
    if fold is None:
        fold = _default_fold()
    out: AuditRows = {name: [] for name in TABLES}
    for cp in sorted(partitions):
        audit = fold(cp, config)
        records = sorted(partitions[cp], key=lambda r: r[0])
        if records:
            offsets, timestamps, keys, values = (list(col) for col in zip(*records, strict=True))
            audit.feed(offsets, timestamps, keys, values)
        for name, rows in audit.finish().items():
            out[name].extend(rows)
    return out


def _default_fold() -> Callable[[int, ReplayConfig], PartitionAudit]:
    try:
        for module in ("numpy", "pyarrow.compute"):
            require(module)
    except ImportError:  # the spark extra's
        return PartitionAudit
    return ColumnarAudit
