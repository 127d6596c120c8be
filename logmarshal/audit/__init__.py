"""Audit: replay the coordination log after the fact and explain every ownership change.

Pipeline: :mod:`.export` copies ``__marshal`` to Parquet (pyarrow), or on Apache Kafka
fixes a cut that Spark reads with its own Kafka source (:mod:`.kafkasource`); :mod:`.job`
(Spark) or :mod:`.engine` (in-process) runs the pure fold over it, which reads the verdicts of the
consumers' own rationalizer: :mod:`.columnar` (Arrow batches, its bookkeeping on columns),
whose per-record reference is :mod:`.replay`; :mod:`.summary` and :mod:`.report` turn the
tables into ``summary.json``, a printed table and ``report.html``; :mod:`.verify` checks the
audit against a naive replay.

Only :mod:`.replay` and :mod:`.schema` are importable without the ``spark`` extra; the other
modules import pyarrow, pyspark and matplotlib when used and say how to install them.
"""

from .local import audit_records
from .replay import PartitionAudit, ReplayConfig, new_world
from .schema import TABLES

__all__ = ["TABLES", "PartitionAudit", "ReplayConfig", "audit_records", "new_world"]
