"""The network connection's one-partition reader, :class:`_PartitionReader`, through
librdkafka (:meth:`NetworkCluster.fetch` and :meth:`NetworkCluster.fetch_columns`).
Assign-only: positions live in ``__marshal``, and independent readers never move each
other's."""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..cluster import Columns, Message, PastMarkers
from ..errors import OffsetOutOfRange
from .error_map import _map_error, _raise_from
from .readers import (
    _ERROR,
    _FETCH_MAX_RECORDS,
    _STALL_TIMEOUT,
    _LogEnds,
    _messages,
    _none_failed,
)

__all__ = ["_PartitionReader"]

log = logging.getLogger(__name__)

_MAX_BATCH = 10_000  # records one fetch_columns() returns at most
_EMPTY_CHECK_WAIT = 10.0  # how long to wait for records the broker says exist
#: how long a one-partition reader waits, after a seek, for librdkafka's position to be
#: its new assignment's before a new consumer settles it (``_PartitionReader._stale``)
_STALE_POSITION_WAIT = 2.0


class _PartitionReader:
    """An assign-only consumer for one partition, with the records read ahead of the caller.
    ``log_ends``: last stable offsets (a read-committed reader's stall check; None: the high
    watermark is the end)."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        partition: int,
        log_ends: _LogEnds | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self._conf = conf
        self._log_ends = log_ends
        self._topic = topic
        self._partition = partition
        self._consumer: Consumer | None = None
        self._position: int | None = None  # next offset the consumer delivers
        # librdkafka's position before the last seek: after an assign, position() may still
        # answer it for a while (seen on Kafka 4.1); None once a record came or it was reset
        self._stale: int | None = None
        # offsets librdkafka passed without a record to hand out (markers, aborted records):
        # a read from inside them goes on from their end rather than seeking back into them
        self._no_records: tuple[int, int] | None = None
        self._pending: collections.deque[Any] = collections.deque()
        self.last_used = time.monotonic()
        self.renewals = 0  # librdkafka consumers replaced after a stall

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()
            self._consumer = None

    def _seek(self, offset: int) -> None:
        if self._consumer is None:
            self._consumer = Consumer(self._conf)
            self._stale = None
        else:
            self._stale = self._librdkafka_position(self._consumer)
        self._pending.clear()
        self._consumer.assign([TopicPartition(self._topic, self._partition, offset)])
        self._position = offset

    def _take(self, messages: list[Any]) -> None:
        if messages:
            self._stale = None  # librdkafka's position is the new assignment's now
        if _none_failed(list(map(_ERROR, messages))):
            self._pending.extend(messages)  # the usual case, in bulk
            return
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    self._out_of_range()
                raise _map_error(error, self._topic, self._partition)
            self._pending.append(m)

    def _out_of_range(self) -> None:
        assert self._consumer is not None
        offset = self._position if self._position is not None else -1
        tp = TopicPartition(self._topic, self._partition)
        low, high = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        self._position = None
        raise OffsetOutOfRange(offset, low, high)

    def _raw(
        self, offset: int, max_bytes: int, max_wait: float, max_records: int = _MAX_BATCH
    ) -> list[Any]:
        """librdkafka's messages from ``offset`` on (up to about ``max_bytes``)."""
        self.last_used = time.monotonic()
        head = self._pending[0].offset() if self._pending else self._position
        if head != offset and not self._passed(offset):
            self._seek(offset)
        consumer = self._consumer
        assert consumer is not None
        want = max(1, min(max_records, max_bytes // 64))
        if not self._pending:
            self._take(consumer.consume(want, 0))
        if not self._pending:
            if max_wait > 0:
                first = consumer.poll(max_wait)
                if first is not None:
                    self._take([first, *consumer.consume(want - 1, 0)])
            if not self._pending:
                self._wait_if_behind(consumer, offset, want)
        return self._take_pending(offset, max_bytes, max_records)

    def _skipped(self, consumer: Consumer, offset: int) -> int | None:
        """Nothing was handed out from ``offset``, yet librdkafka's position moved past it:
        what it passed holds no record to give (transaction markers; for a read-committed
        reader, aborted records too). Returns that position, now the reader's (records, if
        any, come from there: waiting for one at ``offset`` cost 10 s a read at a trailing
        marker, and a read up to the log end waited at it for good), or None."""
        position = self._fresh_position(consumer)
        if position is None or position <= offset:
            return None
        gap = self._no_records
        start = gap[0] if gap is not None and gap[0] <= offset <= gap[1] else offset
        self._position = position
        self._no_records = (start, position)
        return position

    def _passed(self, offset: int) -> bool:
        """Is ``offset`` among those passed without a record, and the reader where they
        end (nothing handed out since)? A read from there needs no seek back."""
        gap = self._no_records
        return (
            gap is not None
            and not self._pending
            and gap[0] <= offset < gap[1]
            and gap[1] == self._position
        )

    def _librdkafka_position(self, consumer: Consumer) -> int | None:
        try:
            (got,) = consumer.position([TopicPartition(self._topic, self._partition)])
        except (KafkaException, RuntimeError):
            return None  # (librdkafka reports its errors)
        return int(got.offset)

    def _fresh_position(self, consumer: Consumer) -> int | None:
        """librdkafka's position, if it is surely the current assignment's: None while it
        has none yet, or while it may still be the one from before the last seek (taken for
        this read's, it made a read from 0 skip every record of the log to its end)."""
        position = self._librdkafka_position(consumer)
        if position is None:
            return None
        if position < 0:  # none yet: the seek's reset has happened
            self._stale = None
            return None
        if position == self._stale:
            return None
        self._stale = None
        return position

    def _take_pending(self, offset: int, max_bytes: int, max_records: int) -> list[Any]:
        """The read-ahead from ``offset`` on, up to about ``max_bytes`` (values and keys)."""
        pending = self._pending
        if not pending:
            return []
        if pending[0].offset() < offset:  # only after a seek into read-ahead; offsets increase
            while pending and pending[0].offset() < offset:
                pending.popleft()
        # len() of a librdkafka message is its value's size: the whole read-ahead fits
        # unless it is large, and then the walk below counts keys too
        if len(pending) <= max_records and sum(map(len, pending)) <= max_bytes:
            out = list(pending)
            pending.clear()
        else:
            out = []
            size = 0
            while pending and len(out) < max_records:
                m = pending[0]
                value, key = m.value(), m.key()
                n = (len(value) if value else 0) + (len(key) if key else 0)
                if out and size + n > max_bytes:
                    break
                pending.popleft()
                size += n
                out.append(m)
        if out:
            self._position = out[-1].offset() + 1
        return out

    def fetch(self, offset: int, max_bytes: int, max_wait: float) -> list[Message]:
        raw = self._raw(offset, max_bytes, max_wait, _FETCH_MAX_RECORDS)
        return _messages(self._topic, self._partition, raw)[0] if raw else []

    def fetch_columns(self, offset: int, max_bytes: int, max_wait: float) -> Columns | PastMarkers:
        """The same records as four lists, without a ``Message`` per record, or
        :class:`PastMarkers` when librdkafka moved past offsets that hold no record."""
        raw = self._raw(offset, max_bytes, max_wait)
        if not raw and self._position is not None and self._position > offset:
            return PastMarkers(self._position)  # (``_skipped``)
        return (
            [m.offset() for m in raw],
            [m.timestamp()[1] for m in raw],
            [m.key() for m in raw],
            [m.value() for m in raw],
        )

    def _wait_if_behind(self, consumer: Consumer, offset: int, want: int) -> None:
        """Nothing arrived: if the broker holds records from ``offset``, wait for them.

        The embedded cluster returns stored records even with ``max_wait=0``; librdkafka
        fetches in the background, so without this a quick call could miss records.
        """
        tp = TopicPartition(self._topic, self._partition)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException as exc:
            raise _raise_from(exc, self._topic, self._partition) from None
        if not low <= offset <= high:
            self._position = None
            raise OffsetOutOfRange(offset, low, high)
        for renewed in (False, True):
            started = time.monotonic()
            while offset < high and not self._pending:
                past = self._skipped(consumer, offset)
                if past is not None:
                    # past markers (or aborted records): wait on for records after them,
                    # if the log holds more (a caller that stops at an answer of nothing,
                    # as the CLI's read, would miss them)
                    offset = past
                    continue
                waited = time.monotonic() - started
                if waited >= _EMPTY_CHECK_WAIT or (
                    self._stale is not None and waited >= _STALE_POSITION_WAIT
                ):
                    break
                first = consumer.poll(0.5)
                if first is not None:
                    self._take([first, *consumer.consume(want - 1, 0)])
            if renewed or self._pending or offset >= high:
                return
            if self._stale is not None:
                # its position may still be the last seek's (never reset, nothing came): a
                # new consumer has none, so where it stops is this read's
                log.debug(
                    "reader of %s/%d: librdkafka's position is still %d after the seek to %d;"
                    " a new consumer tells whether it passed markers",
                    self._topic,
                    self._partition,
                    self._stale,
                    offset,
                )
            elif self._stuck(consumer, offset, high):
                # librdkafka stopped fetching the partition (confluentinc/librdkafka#5153, as
                # ``_Reader._check_stalls`` finds for a member): a new consumer, once. An
                # empty answer below the log end was taken for the end by readers of ranges
                # (a streams restore rebuilt its store to an older commit)
                log.warning(
                    "reader of %s/%d: no records from offset %d in %.0f s while its log ends "
                    "at %d: librdkafka stopped fetching it; replacing its consumer",
                    self._topic,
                    self._partition,
                    offset,
                    _EMPTY_CHECK_WAIT,
                    high,
                )
                self.renewals += 1
            else:
                return
            self.close()
            self._seek(offset)
            assert self._consumer is not None
            consumer = self._consumer

    def _stuck(self, consumer: Consumer, offset: int, high: int) -> bool:
        """Does the log hold records past where librdkafka will fetch next? Not when it
        skipped control batches and aborted ones (its position is past them), nor, for a
        read-committed reader, when an open transaction holds them back: then the end is
        the last stable offset (one ListOffsets request), as the member reader's check."""
        key = (self._topic, self._partition)
        position = self._fresh_position(consumer)
        end: int | Exception = high
        if self._log_ends is not None:
            end = self._log_ends([key], _STALL_TIMEOUT).get(key, high)
        return isinstance(end, int) and end > max(offset, position or 0)
