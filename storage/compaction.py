"""Log compaction: keep the latest record of every key in a partition's closed segments.

What Kafka's cleaner guarantees, and this one too:

* only closed segments are cleaned (the active one is still being written), and only those
  older than ``min.compaction.lag.ms``;
* a record survives if it is the latest of its key among the cleanable segments (records
  without a key, written before the topic became compacted, are kept);
* a tombstone (null value) that is the latest of its key survives until its segment is older
  than ``delete.retention.ms``, so readers that are behind still see the delete;
* order and offsets never change: surviving records keep their offsets; a batch with gaps is
  written as one batch per run of consecutive survivors, so every stored batch still has
  offset deltas 0, 1, 2, ...; readers skip the removed offsets.

Crash safety: a segment is rewritten into ``<base>.log.cleaned`` (fsynced), its index files
are removed (they are rebuilt from the log on open), and the cleaned file replaces the
segment with one atomic rename, then the directory is fsynced. A crash before the rename
leaves the original segment and a stray ``.cleaned`` file, which opening the log removes; a
crash after it leaves the cleaned segment. Either way the log is valid.

The pure part, :func:`plan`, decides which offsets survive; :func:`rewrite` produces the
new segment bytes. :class:`storage.log.PartitionLog` does the file work under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from storage.records import (
    Compression,
    NewRecord,
    Record,
    decode_batch,
    encode_batch,
    iter_batches,
)

__all__ = ["CLEANED_SUFFIX", "latest_offsets", "rewrite"]

CLEANED_SUFFIX = ".cleaned"


def latest_offsets(segments_data: Iterable[bytes]) -> dict[bytes, int]:
    """Key -> offset of its latest record, over the batches of the given segments, in order."""
    latest: dict[bytes, int] = {}
    for data in segments_data:
        for _h, batch in iter_batches(data):
            for rec in decode_batch(batch)[1]:
                if rec.key is not None:
                    latest[rec.key] = rec.offset
    return latest


def _runs(records: list[Record]) -> Iterator[list[Record]]:
    """Consecutive-offset runs of ``records``."""
    run: list[Record] = []
    for rec in records:
        if run and rec.offset != run[-1].offset + 1:
            yield run
            run = []
        run.append(rec)
    if run:
        yield run


def rewrite(
    data: bytes, latest: dict[bytes, int], *, drop_tombstones: bool
) -> tuple[bytes, int, int, int]:
    """The segment ``data`` with superseded records (and, if asked, tombstones) removed.

    Returns (new bytes, records kept, records removed, tombstones kept). Batches that lose nothing are copied
    byte for byte; the others are re-encoded per run of survivors with the same codec,
    timestamp type and producer fields.
    """
    out = bytearray()
    kept = removed = tombstones = 0
    for h, batch in iter_batches(data):
        records = decode_batch(batch)[1]
        survivors = [
            r
            for r in records
            if r.key is None
            or (latest.get(r.key) == r.offset and not (drop_tombstones and r.value is None))
        ]
        kept += len(survivors)
        removed += len(records) - len(survivors)
        if len(survivors) == len(records):
            out += batch
            tombstones += sum(1 for r in survivors if r.value is None)
            continue
        # a LogAppendTime batch's records all read its max timestamp: re-encoding them
        # with that timestamp and the same type reproduces it
        for run in _runs(survivors):
            delta = run[0].offset - h.base_offset
            new = encode_batch(
                [NewRecord(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp) for r in run],
                base_offset=run[0].offset,
                timestamp_type=h.timestamp_type,
                compression=Compression(h.compression),
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence + delta if h.base_sequence >= 0 else -1,
                partition_leader_epoch=h.partition_leader_epoch,
            )
            out += new
        tombstones += sum(1 for r in survivors if r.value is None)
    return bytes(out), kept, removed, tombstones
