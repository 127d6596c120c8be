"""Idempotent producer state of one partition, as Kafka defines it (KIP-98).

Per producer id the partition remembers the current epoch and the last five batches
(first and last sequence, first and last offset). An incoming batch is checked against it:

* a copy of one of the last five batches (same epoch, same sequence range) is a retry:
  it is answered with the original offsets and not stored again;
* an epoch older than the current one is fenced (INVALID_PRODUCER_EPOCH);
* in the current epoch the first sequence must follow the last one (wrapping at 2^31-1),
  in a newer epoch it must be 0; otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the
  partition has no state for (never seen, or its batches were deleted) may start anywhere.

The state is rebuilt after a restart from the stored batch headers (they keep producer
id, epoch and base sequence), so a retry that crosses a broker crash still dedupes. This
module is pure: it sees batch headers, never files; :mod:`storage.broker` holds the lock
that makes check, append and record one step.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from storage._errors import CorruptRecordError, StorageError

__all__ = [
    "BatchIdentity",
    "Duplicate",
    "InvalidProducerEpoch",
    "OutOfOrderSequence",
    "ProducerStates",
    "RetainedBatch",
    "batch_identities",
    "last_sequence",
]

# Kafka keeps this many batches per producer for duplicate detection; producers may have
# at most this many requests in flight with idempotence on.
RETAINED_BATCHES = 5
_INT32_MAX = (1 << 31) - 1
_HEAD = struct.Struct(">qi")  # base offset, batch length
_PRODUCER = struct.Struct(">hiqqqhii")  # attributes .. record count, from byte 21
_TIMESTAMP_TYPE_MASK = 0x08
_MIN_HEADER = 61


class OutOfOrderSequence(StorageError):
    """A batch's first sequence does not follow the producer's last one (a gap or a reorder)."""


class InvalidProducerEpoch(StorageError):
    """A batch from an epoch older than the producer's current one: the producer is fenced."""


class BatchIdentity(NamedTuple):
    """What idempotence needs from one incoming batch header."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int  # record count - 1 as sent; compaction may thin stored batches
    log_append_time: bool  # the batch carries the broker's time (read back on recovery)
    max_timestamp: int
    base_offset: int  # meaningful for stored batches only


class RetainedBatch(NamedTuple):
    """One of a producer's last batches: its sequence range and where it was stored."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    append_time: int  # LogAppendTime the broker gave it, -1 for CreateTime


class Duplicate(NamedTuple):
    """The answer to a retried batch: the original's offsets."""

    batch: RetainedBatch


def last_sequence(base_sequence: int, increment: int) -> int:
    """The sequence of a batch's last record (base + last offset delta), wrapping like Kafka."""
    if base_sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - base_sequence) - 1
    return base_sequence + increment


def _follows(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def batch_identities(buf: Any) -> Iterator[BatchIdentity]:
    """Producer fields of each concatenated batch; CorruptRecordError if the framing is bad.

    Only headers are read; the CRC is checked by the append (or by the caller before it
    answers a duplicate).
    """
    mv = memoryview(buf).cast("B")
    pos, n = 0, len(mv)
    while pos < n:
        if n - pos < _MIN_HEADER:
            raise CorruptRecordError(f"trailing {n - pos} bytes are not a whole batch header")
        base, length = _HEAD.unpack_from(mv, pos)
        attrs_, delta, _, max_ts, pid, epoch, seq, _ = _PRODUCER.unpack_from(mv, pos + 21)
        if length < _MIN_HEADER - 12 or pos + length + 12 > n or delta < 0:
            raise CorruptRecordError(f"batch at byte {pos} has a bad length or offset delta")
        yield BatchIdentity(
            pid, epoch, seq, delta, bool(attrs_ & _TIMESTAMP_TYPE_MASK), max_ts, base
        )
        pos += length + 12


class _Producer:
    __slots__ = ("batches", "epoch", "last_ms")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[RetainedBatch] = deque(maxlen=RETAINED_BATCHES)
        self.last_ms = 0  # when its last batch was stored (for expiry)


class ProducerStates:
    """The idempotence state of one partition. Not thread-safe: the caller serialises."""

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}
        self.loaded = False

    def __len__(self) -> int:
        return len(self._producers)

    def epoch_of(self, producer_id: int) -> int | None:
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.epoch

    def retained(self, producer_id: int) -> list[RetainedBatch]:
        entry = self._producers.get(producer_id)
        return [] if entry is None else list(entry.batches)

    def check(self, batches: Iterable[BatchIdentity]) -> Duplicate | None:
        """Check an append's batches in order, as if each earlier one had been stored.

        Returns the first retried batch found (Kafka then stores none of the append), or
        None if all may be appended; raises OutOfOrderSequence or InvalidProducerEpoch.
        """
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last seq) of earlier batches
        for b in batches:
            if b.producer_id < 0:
                continue
            entry = self._producers.get(b.producer_id)
            seen = pending.get(b.producer_id)
            if seen is None and entry is not None and b.producer_epoch == entry.epoch:
                for kept in entry.batches:
                    if kept.first_seq == b.base_sequence and kept.last_seq == last_sequence(
                        b.base_sequence, b.last_offset_delta
                    ):
                        return Duplicate(kept)
            if seen is not None:
                epoch, last = seen
            elif entry is not None:
                epoch, last = entry.epoch, entry.batches[-1].last_seq if entry.batches else -1
            else:
                epoch, last = None, -1
            self._check_one(b, epoch, last)
            pending[b.producer_id] = (
                b.producer_epoch,
                last_sequence(b.base_sequence, b.last_offset_delta),
            )
        return None

    @staticmethod
    def _check_one(b: BatchIdentity, epoch: int | None, last: int) -> None:
        if b.base_sequence < 0:
            raise OutOfOrderSequence(
                f"producer {b.producer_id} sent base sequence {b.base_sequence}"
            )
        if epoch is None:
            return  # no state: any start is accepted (Kafka: state may have been deleted)
        if b.producer_epoch < epoch:
            raise InvalidProducerEpoch(
                f"producer {b.producer_id} epoch {b.producer_epoch} is older than "
                f"the current epoch {epoch}"
            )
        if b.producer_epoch > epoch:
            if b.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"producer {b.producer_id} began epoch {b.producer_epoch} at sequence "
                    f"{b.base_sequence}, not 0"
                )
            return
        if not _follows(last, b.base_sequence):
            raise OutOfOrderSequence(
                f"producer {b.producer_id} epoch {epoch}: expected sequence "
                f"{0 if last == _INT32_MAX else last + 1}, got {b.base_sequence}"
            )

    def record(
        self, b: BatchIdentity, first_offset: int, append_time: int, now_ms: int | None = None
    ) -> None:
        """Remember a stored batch (after an append, or while replaying stored headers).

        ``now_ms`` is when it was stored; on replay the batch's max timestamp (Kafka's rule).
        """
        if b.producer_id < 0 or b.base_sequence < 0:
            return
        entry = self._producers.get(b.producer_id)
        if entry is None or b.producer_epoch > entry.epoch:
            entry = self._producers[b.producer_id] = _Producer(b.producer_epoch)
        elif b.producer_epoch < entry.epoch:
            return  # cannot happen for batches the broker accepted; ignore on replay
        entry.last_ms = b.max_timestamp if now_ms is None else now_ms
        entry.batches.append(
            RetainedBatch(
                b.base_sequence,
                last_sequence(b.base_sequence, b.last_offset_delta),
                first_offset,
                first_offset + b.last_offset_delta,
                append_time,
            )
        )

    def expire(self, now_ms: int, max_age_ms: int) -> int:
        """Forget producers idle for ``max_age_ms`` (Kafka's producer.id.expiration.ms).

        A forgotten producer that comes back is treated as new (any sequence accepted), as in
        Kafka; returns how many were forgotten.
        """
        idle = [pid for pid, e in self._producers.items() if now_ms - e.last_ms >= max_age_ms]
        for pid in idle:
            del self._producers[pid]
        return len(idle)

    def replay(self, stored: Any) -> int:
        """Feed the state from stored batches (offsets assigned); returns the next offset.

        Returns -1 if ``stored`` holds no batch.
        """
        following = -1
        for b in batch_identities(stored):
            self.record(b, b.base_offset, b.max_timestamp if b.log_append_time else -1)
            following = b.base_offset + b.last_offset_delta + 1
        return following
