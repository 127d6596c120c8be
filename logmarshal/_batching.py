"""Records on their way to a batch: kept as columns, encoded without a Python loop.

:class:`RecordColumns` is what :class:`~logmarshal.producer.Producer` hands to
``Cluster.produce``: a ``Sequence[NewRecord]`` like any other (a NewRecord is built only when
someone indexes it), whose columns the embedded cluster encodes directly. :func:`encode_plain`
writes the very bytes :func:`storage.encode_batch` writes (RecordBatch v2, docs/architecture.md,
"One record format end to end") for the common case - no headers, timestamps not older than
the batch's first, lengths under 16 KiB - with the per-record work in C loops (``map`` over
precomputed varints and ``bytes.join``), about a third of the per-record cost of
``encode_batch``. Anything else returns None and the caller uses ``encode_batch``. With the
optional C extension ``logmarshal._fastproduce`` built, the same bytes come from C (any
lengths and timestamps; headers still go to ``encode_batch``), about a tenth of the cost: the
encoding was most of ``Cluster.produce``'s time, which capped the embedded Producer.

Also here: the checks of a record's fields before it joins a batch (:func:`as_bytes`,
:func:`checked_headers`), and the Producer's batch, :class:`_Batch`,
which splits itself when the cluster refuses it as too large (:meth:`_Batch.send`).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from operator import add, attrgetter, sub
from typing import Any, cast, overload

import crc32c

from storage import NewRecord, RecordTooLarge, check_header_name

from ._seconds import seconds
from .cluster import ProduceResult

try:
    from ._fastproduce import encode_plain as _encode_plain_c
except ImportError:  # built without a C compiler: the Python encoder below
    _encode_plain_c = None

__all__ = [
    "RecordColumns",
    "as_bytes",
    "checked_headers",
    "columns_of",
    "encode_plain",
    "encode_plain_py",
]

Header = tuple[str, bytes | None]

#: the Producer's logger: a batch split is the Producer's news (logmarshal/producer.py)
log = logging.getLogger("logmarshal.producer")

# What storage._records writes (its batch header layout, section "encode"): kept equal by
# tests/logmarshal/test_batching.py, which compares bytes with storage.encode_batch.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_OVERHEAD = 61
_LOG_OVERHEAD = 12
_MAGIC = 2
_CRC_START = 21
_CRC = struct.Struct(">I")


def _varint(n: int) -> bytes:
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_LIMIT = 1 << 14
#: zigzag varint of 0.._LIMIT-1, and its length: a tuple lookup instead of a loop per field
_VARINT = tuple(_varint(n) for n in range(_LIMIT))
_VARINT_LEN = tuple(map(len, _VARINT))
_NULL = _varint(-1)
_BYTES_LIKE = (bytes, bytearray, memoryview)

_timestamps = attrgetter("timestamp")
_keys = attrgetter("key")
_values = attrgetter("value")
_headers = attrgetter("headers")


def as_bytes(obj: Any, what: str) -> bytes | None:
    """A record's ``what`` (key, value, header value) as bytes, or None; a TypeError that
    names the serializer to pass for anything else."""
    if obj is None or isinstance(obj, bytes):
        return obj
    if isinstance(obj, _BYTES_LIKE):
        return bytes(obj)
    raise TypeError(
        f"the {what} must be bytes or None, got {type(obj).__name__}; "
        f"pass a {what}_serializer (e.g. logmarshal.serializers.string_serializer)"
    )


def checked_headers(
    headers: Iterable[tuple[str, Any]] | Mapping[str, Any],
) -> tuple[Header, ...]:
    """A record's headers as ``(str, bytes | None)`` pairs, or a TypeError (a ValueError for
    a name with no UTF-8 form: :func:`storage.check_header_name`). A mapping is
    taken as its items (confluent-kafka takes a dict; its iteration was read as pairs)."""
    out = []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"a header is a (name, value) pair, got {pair!r}")
        name, value = pair
        if not isinstance(name, str):
            raise TypeError(f"header names are str, got {type(name).__name__}")
        check_header_name(name)
        out.append((name, as_bytes(value, "header value")))
    return tuple(out)


class RecordColumns(Sequence[NewRecord]):
    """Records as four parallel lists; a :class:`NewRecord` is built only on access.

    ``headers`` is None when no record has any (the usual case).
    """

    __slots__ = ("headers", "keys", "timestamps", "values")

    def __init__(
        self,
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[tuple[Header, ...]] | None = None,
    ) -> None:
        self.timestamps = timestamps
        self.keys = keys
        self.values = values
        self.headers = headers

    def __len__(self) -> int:
        return len(self.values)

    def _record(self, i: int) -> NewRecord:
        headers = self.headers[i] if self.headers is not None else ()
        return NewRecord(self.values[i], self.keys[i], headers, timestamp=self.timestamps[i])

    @overload
    def __getitem__(self, index: int) -> NewRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[NewRecord]: ...

    def __getitem__(self, index: int | slice) -> NewRecord | list[NewRecord]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("record index out of range")
        return self._record(index)

    def __iter__(self) -> Iterator[NewRecord]:
        return map(self._record, range(len(self)))

    def __repr__(self) -> str:
        return f"RecordColumns({len(self)} records)"


def columns_of(records: Sequence[NewRecord]) -> RecordColumns | None:
    """The columns of ``records`` (no copy for a RecordColumns), or None if any is not a
    NewRecord (``encode_batch`` then says which)."""
    if type(records) is RecordColumns:
        return records
    if set(map(type, records)) != {NewRecord}:
        return None
    headers = list(map(_headers, records))
    return RecordColumns(
        list(map(_timestamps, records)),
        list(map(_keys, records)),
        list(map(_values, records)),
        headers if any(headers) else None,
    )


def _lengths_and_parts(
    column: list[bytes | None],
) -> tuple[Any, Any, Any] | None:
    """(varint lengths, their sizes, payloads) of a key or value column; None: a slow case."""
    if None not in column:
        lengths = list(map(len, cast("list[bytes]", column)))  # (no None: checked above)
        if max(lengths) >= _LIMIT:
            return None
        return map(_VARINT.__getitem__, lengths), lengths, column
    if column.count(None) == len(column):
        return repeat(_NULL), repeat(1), repeat(b"")  # a null is its one-byte length, -1
    return None


def encode_plain(columns: RecordColumns) -> bytes | None:
    """One v2 batch of ``columns`` (base offset 0, CreateTime, uncompressed, no producer id),
    byte for byte what :func:`storage.encode_batch` writes; None when a record needs its slow
    path: headers, or a field that is neither bytes nor None, and without the C extension
    also a timestamp before the first, a length of 16 KiB or more, a mix of null and non-null
    keys or values."""
    if (
        _encode_plain_c is not None
        and columns.headers is None
        and type(columns.timestamps) is list
        and type(columns.keys) is list
        and type(columns.values) is list
    ):
        return _encode_plain_c(columns.timestamps, columns.keys, columns.values, crc32c.crc32c)
    return encode_plain_py(columns)


def encode_plain_py(columns: RecordColumns) -> bytes | None:
    """:func:`encode_plain` in Python: the reference, and what runs without the C extension."""
    n = len(columns.values)
    if n == 0 or n > _LIMIT or columns.headers is not None:
        return None
    timestamps = columns.timestamps
    first_ts = timestamps[0]
    max_ts = max(timestamps)
    if min(timestamps) < first_ts or max_ts - first_ts >= _LIMIT:
        return None
    keys = _lengths_and_parts(columns.keys)
    values = _lengths_and_parts(columns.values)
    if keys is None or values is None:
        return None
    key_varints, key_lengths, key_bytes = keys
    value_varints, value_lengths, value_bytes = values
    deltas = list(map(sub, timestamps, repeat(first_ts)))
    # body = attributes (1) + ts delta + offset delta + key length + key + value length +
    # value + header count (1); a null key or value is one byte (its length, -1), in
    # key_lengths / value_lengths already
    sizes = map(
        add,
        map(add, map(_VARINT_LEN.__getitem__, deltas), _VARINT_LEN[:n]),
        map(add, map(add, key_lengths, value_lengths), repeat(2)),
    )
    if None not in columns.keys:
        sizes = map(add, sizes, map(_VARINT_LEN.__getitem__, key_lengths))
    if None not in columns.values:
        sizes = map(add, sizes, map(_VARINT_LEN.__getitem__, value_lengths))
    body_sizes = list(sizes)
    if max(body_sizes) >= _LIMIT:
        return None
    payload = b"".join(
        map(
            b"".join,
            zip(
                map(_VARINT.__getitem__, body_sizes),
                repeat(b"\x00"),  # attributes
                map(_VARINT.__getitem__, deltas),
                _VARINT[:n],
                key_varints,
                key_bytes,
                value_varints,
                value_bytes,
                repeat(b"\x00"),  # header count
            ),
        )
    )
    buf = bytearray(_BATCH_OVERHEAD + len(payload))
    _BATCH_HEADER.pack_into(
        buf,
        0,
        0,
        len(buf) - _LOG_OVERHEAD,
        -1,
        _MAGIC,
        0,
        0,
        n - 1,
        first_ts,
        max_ts,
        -1,
        -1,
        -1,
        n,
    )
    buf[_BATCH_OVERHEAD:] = payload
    _CRC.pack_into(buf, 17, crc32c.crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


_Header = tuple[str, bytes | None]


class _Batch:
    """One partition's records on their way to a single ``Cluster.produce`` call (the
    Producer's batches for any cluster but the network one: logmarshal/producer.py)."""

    __slots__ = (
        "callbacks",
        "created",
        "done",
        "error",
        "failed",
        "headers",
        "keys",
        "partition",
        "result",
        "size",
        "timestamps",
        "topic",
        "untracked",
        "values",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.created = time.monotonic()
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple[_Header, ...]] | None = None
        #: (index in the batch, delivery callback) of the records sent with one
        self.callbacks: list[tuple[int, Callable[[Any, BaseException | None], None]]] | None = None
        self.size = 0
        self.untracked = 0  # records sent by send_nowait(): nobody asks for their outcome
        self.done = threading.Event()
        self.result: ProduceResult | None = None
        self.error: BaseException | None = None  # every record's: none was stored
        #: index -> error of the records that failed alone (a batch split, :meth:`send`)
        self.failed: dict[int, BaseException] | None = None

    def add_headers(self, index: int, headers: tuple[_Header, ...]) -> None:
        if self.headers is None:
            self.headers = [()] * index
        self.headers.append(headers)

    def send(self, produce: Callable[..., ProduceResult], durable: bool) -> None:
        """``produce`` (a cluster's) of the records as one batch: sets :attr:`result`, or
        :attr:`error` if none was stored.

        A batch of several records that the cluster refuses as too large (RecordTooLarge:
        the topic's ``max.message.bytes``, or ``segment.bytes``) is split, as Kafka's
        producer splits one refused with MESSAGE_TOO_LARGE (its Sender's completeBatch), so
        that only a record too large alone fails (:attr:`failed`, with the cluster's error)
        and the others are stored in the order they were sent: see :meth:`_split`. The
        usual batch is one call; only a refused one pays for the split."""
        records = RecordColumns(self.timestamps, self.keys, self.values, self.headers)
        try:
            self.result = produce(self.topic, self.partition, records, durable=durable)
        except RecordTooLarge as exc:
            if len(self.values) > 1:
                self._split(produce, durable, exc)
            else:
                self.error = exc
        except Exception as exc:  # every record of the batch learns why it was not stored
            self.error = exc

    def _split(self, produce: Callable[..., ProduceResult], durable: bool, why: Exception) -> None:
        """Send the records in halves, each once the one before it was answered (the earlier
        records first: a later record never lands before an earlier one), a half refused as
        too large halved again, down to a record alone. An error that is not about size
        stops the split: it is the error of every record not stored yet, as it would have
        been of the whole batch."""
        n = len(self.values)
        offsets = [-1] * n
        failed: dict[int, BaseException] = {}
        stop: Exception | None = None
        pending = [(n // 2, n), (0, n // 2)]  # a stack: the earliest records on top
        while pending:
            start, end = pending.pop()
            if stop is not None:
                failed.update(dict.fromkeys(range(start, end), stop))
                continue
            try:
                result = produce(
                    self.topic, self.partition, self._part(start, end), durable=durable
                )
            except RecordTooLarge as exc:
                if end - start == 1:
                    failed[start] = exc
                else:
                    middle = (start + end) // 2
                    pending += ((middle, end), (start, middle))
                continue
            except Exception as exc:
                stop = exc
                failed.update(dict.fromkeys(range(start, end), exc))
                continue
            offsets[start:end] = result.offsets
            if result.log_append_time >= 0:  # each part's own: kept as its records' timestamps
                self.timestamps[start:end] = [result.log_append_time] * (end - start)
        stored = [offset for offset in offsets if offset >= 0]
        log.warning(
            "produce to %s/%d: a batch of %d records was refused (%s); sent in parts: %d stored, "
            "%d failed%s",
            self.topic,
            self.partition,
            n,
            why,
            len(stored),
            len(failed),
            "" if stop is None else f", the split stopped by: {stop}",
        )
        self.failed = failed
        self.result = ProduceResult(
            self.topic,
            self.partition,
            min(stored, default=-1),
            max(stored, default=-1),
            record_offsets=tuple(offsets),
        )

    def _part(self, start: int, end: int) -> RecordColumns:
        headers = self.headers[start:end] if self.headers is not None else None
        return RecordColumns(
            self.timestamps[start:end],
            self.keys[start:end],
            self.values[start:end],
            headers if headers and any(headers) else None,
        )

    def outcome(self, index: int, timeout: float | None) -> tuple[str, int, int, int]:
        """Topic, partition, offset and timestamp of record ``index`` once stored (waiting up
        to ``timeout`` s for the batch's answer); the error that stopped it otherwise."""
        if timeout is not None:
            seconds("timeout", timeout, at_least=0)  # (nan: a timeout before any wait)
        if not self.done.wait(timeout):
            raise TimeoutError(f"the record was not stored within {timeout} s")
        if self.error is not None:
            raise self.error
        if self.failed and index in self.failed:
            raise self.failed[index]
        result = self.result
        assert result is not None
        offsets = result.record_offsets
        lat = result.log_append_time
        return (
            self.topic,
            self.partition,
            offsets[index] if offsets else result.base_offset + index,
            lat if lat >= 0 else self.timestamps[index],
        )

    def lost(self) -> tuple[int, BaseException] | None:
        """How many records sent by send_nowait() (:attr:`untracked`) failed, and an error
        of theirs; None if none did. After a split the batch does not know which of its
        records without a callback were send_nowait()'s (no mark is made per record as it is
        sent): each such record that failed counts, up to :attr:`untracked`, so that no
        failure of send_nowait()'s is missed (exact unless a batch mixes them with send()'s
        records that have no callback)."""
        if self.error is not None:
            return (self.untracked, self.error) if self.untracked else None
        if not self.failed or not self.untracked:
            return None
        called_back = {index for index, _ in self.callbacks or ()}
        unknown = sorted(index for index in self.failed if index not in called_back)
        if not unknown:
            return None
        return min(len(unknown), self.untracked), self.failed[unknown[0]]
