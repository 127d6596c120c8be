"""The network connection's data reads through librdkafka: :class:`_Reader`, one
assign-only consumer for every partition a member holds (a Consumer's claims), and what the
one-partition reader (:mod:`.partition_reader`) shares with it. Assign-only: positions live
in ``__marshal``, and independent readers never move each other's."""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from ..cluster import Message, Read

try:
    from .._fastconsume import batch as _batch_c
    from .._fastconsume import layout_matches as _layout_matches
    from .._fastconsume import messages as _messages_c
except ImportError:  # the optional extension is not built: _messages in Python (slower)
    _batch_c = _layout_matches = _messages_c = None
try:
    from .._fastconsume import size as _size_c
except ImportError:  # not built, or built before size() was added
    _size_c = None
from ..errors import LogmarshalError, LogTruncated, OffsetOutOfRange
from .epochs import EpochEnd, EpochWatch
from .error_map import _map_error, _raise_from

log = logging.getLogger(__name__)

#: last stable offsets of partitions, each one's error apart (one ListOffsets request)
_LogEnds = Callable[[Sequence[tuple[str, int]], float], dict[tuple[str, int], int | Exception]]

#: records one fetch() returns at most. Building a Message costs ~0.5 us under the GIL, and
#: a long run of that in a consumer's fetch thread starves its poll() thread: with 1 MB
#: (~10,000 records) a call, a Consumer read 0.41 M msg/s, with ~1,000 records 0.58 M
#: (bench/consumer.py --network). Fewer records a call is allowed: fetch is "up to".
_FETCH_MAX_RECORDS = 1_000

# librdkafka's accessors as plain callables, for C-speed map()s over a batch
_ERROR = KafkaMessage.error
_PARTITION = KafkaMessage.partition
_TOPIC = KafkaMessage.topic


def _none_failed(errors: list[KafkaError | None]) -> bool:
    """Whether none of a batch's messages carries an error. By identity: a KafkaError
    compared with None (``==``, as ``list.count`` and ``in`` do) raises TypeError inside
    confluent-kafka's comparison, which CPython then reports as a SystemError, so a batch
    holding one error ended the read with that instead of the error it carried."""
    return all(error is None for error in errors)


_OFFSET_OF = KafkaMessage.offset
_TIMESTAMP = KafkaMessage.timestamp
_KEY = KafkaMessage.key
_VALUE = KafkaMessage.value
_HEADERS = KafkaMessage.headers
_SECOND = operator.itemgetter(1)
_M_KEY = operator.itemgetter(4)
_M_VALUE = operator.itemgetter(5)
#: _Reader: messages one consume() call takes at most. Small on purpose: librdkafka's
#: messages are turned into Messages and freed while they are still in the CPU's caches
#: (500 a call cost ~0.2 us a record to convert, 2,000 a call ~0.6 us), and the objects one
#: call allocates (a confluent-kafka Message, GC-tracked, and a Message each) stay under
#: the cyclic GC's youngest threshold (700): at 500 a call collections ran during nearly
#: every call and moved the messages alive then to older generations, which set off full
#: collections (916 young and 4 full per 500,000 records, against ~280 and none at 200;
#: 2026-11-29, 100 B records)
_CONSUME_BATCH = 200
#: _Reader: a partition read this far ahead of its wants (records, or bytes of keys and
#: values) stops being fetched until they catch up (what librdkafka hands over is out of
#: its queue's bounds). A librdkafka fetch answer carries up to max.partition.fetch.bytes
#: (1 MiB) of each partition at once, so a smaller bound would suspend partitions merely
#: for arriving in runs; and resuming costs a new fetch, which can wait behind a long poll
#: (fetch.wait.max.ms) of the partitions at their end, so it resumes at half the bound.
_AHEAD_MAX = 20_000
_AHEAD_MAX_BYTES = 2 * 1024 * 1024
#: _Reader: how long one wait inside librdkafka lasts (it cannot be woken, so a new want
#: waits up to this long); short while read-ahead is on hand (its want may come any
#: moment), long while every wanted partition is idle
_LIBRDKAFKA_SLICE = 0.05
_AHEAD_SLICE = 0.002
#: _Reader: ... and longer once no record came and no partition was newly wanted for
#: _IDLE_AFTER: each of librdkafka's waits costs about 0.15 ms of CPU with 256 partitions
#: assigned (0.40 % of a core at 20 a second, 0.11 % at 4; docs/performance.md, "Idle
#: member"), while a want that comes then (a new claim) or a stop waits up to this long
_IDLE_SLICE = 0.2
_IDLE_AFTER = 1.0
#: _Reader: records read ahead of a partition's wants that the reader takes from librdkafka
#: without being asked (below _AHEAD_MAX, where it stops fetching the partition)
_FILL_AHEAD = 4_000
#: _Reader: consume() calls (of _CONSUME_BATCH) at most before answering wants (a bound on
#: how long an answer waits for the read-ahead to fill)
_FILL_CONSUMES = 5
#: _Reader: records came from librdkafka this recently (s): they flow, and the reader waits
#: for wants in short slices to go on draining librdkafka's queue meanwhile
_FLOWING = 0.1
#: _Reader: a wanted partition that got no records for this long (s) is checked against its
#: log's end, and when the log holds records past the wanted offset the librdkafka consumer
#: is replaced. librdkafka can stop fetching an assigned partition after its leader's broker
#: restarts, for good (confluentinc/librdkafka#5153; a Kafka fault test saw a member get
#: nothing for 95 s); its users' remedy is a new consumer. At most one check a period, so
#: an idle member pays one ListOffsets request per period, whatever it holds
_STALL_AFTER = 15.0
#: _Reader: that check's ListOffsets timeout (s): the fetch loop waits for it
_STALL_TIMEOUT = 5.0


def _messages(topic: str, partition: int, raw: list[Any]) -> tuple[list[Message], int]:
    """librdkafka's messages as Messages, and the bytes of their keys and values: this runs
    for every record a network consumer reads. In C when the optional extension is built (``logmarshal/_fastconsume.c``), which
    also keeps them out of the cyclic GC's sight: they wait in read-ahead and buffers by
    the ten thousand, and as GC-tracked objects they made the collector traverse them again
    and again (a third of a network Consumer's CPU). Else with C-speed maps
    (``tuple.__new__``: no arity check, seven fields)."""
    if _messages_c is not None:
        return _messages_c(Message, topic, partition, raw)
    headers = list(map(_HEADERS, raw))
    records = list(
        map(
            functools.partial(tuple.__new__, Message),
            zip(
                itertools.repeat(topic),
                itertools.repeat(partition),
                map(_OFFSET_OF, raw),
                map(_SECOND, map(_TIMESTAMP, raw)),
                map(_KEY, raw),
                map(_VALUE, raw),
                [tuple(h) if h else () for h in headers] if any(headers) else itertools.repeat(()),
            ),
        )
    )
    return records, _size(records)


def _fields_readable() -> bool:
    """Whether ``_fastconsume.batch`` may read confluent-kafka's Message objects' fields
    directly (a struct that is not confluent-kafka's API): checked once, on Messages built by
    its own constructor with known fields, with and without key and headers."""
    if _layout_matches is None:
        return False
    topic, key, value = "logmarshal-layout-check", b"key", b"value"
    headers: list[tuple[str, str | bytes | None]] = [("h", b"1")]
    try:
        samples = [
            (
                KafkaMessage(
                    topic=topic, partition=3, offset=7, key=key, value=value, timestamp=(1, 99)
                ),
                topic,
                3,
                7,
                key,
                value,
                None,
                99,
            ),
            (
                KafkaMessage(
                    topic=topic,
                    partition=123_456,
                    offset=(1 << 40) + 5,
                    value=value,
                    headers=headers,
                    timestamp=(0, -1),
                ),
                topic,
                123_456,
                (1 << 40) + 5,
                None,
                value,
                headers,
                -1,
            ),
        ]
        return bool(_layout_matches(samples))
    except Exception as exc:  # a confluent-kafka whose Message cannot be built this way
        log.debug("confluent-kafka's Message fields are read through its methods: %s", exc)
        return False


#: confluent-kafka's Message fields are read in C (``_fastconsume.batch``) when this holds
_FIELDS_READABLE = _fields_readable()


def _size(records: Sequence[Message]) -> int:
    """Bytes of keys and values (what ``max_bytes`` counts): in C when built (a read-ahead
    answered in parts counts each part it hands out)."""
    if _size_c is not None:
        found = _size_c(records)
        if found is not None:
            return int(found)
    return sum(map(len, filter(None, map(_M_VALUE, records)))) + sum(
        map(len, filter(None, map(_M_KEY, records)))
    )


class _Reader:
    """:class:`~logmarshal.cluster.PartitionReader` over one assign-only librdkafka
    consumer for every partition a member reads (``incremental_assign`` /
    ``incremental_unassign`` as its claims change): librdkafka long-polls them all in one
    fetch request per broker, so idle partitions cost no Python at all.

    Messages librdkafka delivers for a partition without a want wait in a read-ahead; a
    partition whose read-ahead is full is unassigned until its wants catch up, then assigned
    again where they left off (exact, whatever librdkafka had fetched meanwhile).

    ``poll(0)`` never waits: a consumer's ``poll()`` may drive it on its own thread
    (:meth:`MemberFetcher.pump`)."""

    caller_pumps = True

    def __init__(
        self,
        conf: dict[str, Any],
        timeout: float,
        max_bytes: int,
        list_offsets: Callable[
            [Sequence[tuple[str, int]]], dict[tuple[str, int], tuple[int, int] | Exception]
        ],
        *,
        log_ends: _LogEnds,
        epoch_end: EpochEnd | None = None,
    ) -> None:
        self._conf = conf
        self._consumer = Consumer(conf)
        self._list_offsets = list_offsets
        self._epochs = EpochWatch(epoch_end)  # was the log cut under us (KIP-320)?
        self._cut_pending: set[tuple[str, int]] = set()  # its error from _cut_under, unanswered
        self._log_ends = log_ends
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._woken = False
        self._wanted: dict[tuple[str, int], int] = {}
        #: assigned partitions: the offset after the last message handed out (None: ask
        #: librdkafka to start again at the next want's offset)
        self._given: dict[tuple[str, int], int | None] = {}
        #: the next offset librdkafka should deliver (older ones are duplicates)
        self._next: dict[tuple[str, int], int] = {}
        #: records delivered for a partition and not handed out yet (as Messages), and
        #: the bytes of their keys and values
        self._ahead: dict[tuple[str, int], collections.deque[Message]] = {}
        self._ahead_bytes: dict[tuple[str, int], int] = {}
        self._errors: dict[tuple[str, int], Exception] = {}
        self._has: set[tuple[str, int]] = set()  # read-ahead or an error on hand
        self._suspended: set[tuple[str, int]] = set()  # unassigned: read-ahead full
        self._records_at = 0.0  # when librdkafka last gave records (time.monotonic)
        self._wanted_at = 0.0  # when a partition not read before was last wanted
        #: assigned partitions: when records last came for each, or it was (re)assigned or
        #: found at its log's end (the stall check's clock)
        self._fed_at: dict[tuple[str, int], float] = {}
        self._stall_checked_at = time.monotonic()
        self.renewals = 0  # librdkafka consumers replaced after a stall

    # -- the owner thread ---------------------------------------------------------------

    def want(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        if key not in self._given:
            self._wanted_at = time.monotonic()
            self._assign(key, offset)
        elif self._given[key] != offset:
            self._unassign(key)
            self._assign(key, offset)
        self._wanted[key] = offset

    def drop(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self._wanted.pop(key, None)
        self._epochs.forget(key)
        if key in self._given:
            self._unassign(key)

    def bounds(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int] | Exception]:
        """Two ListOffsets requests for all of ``keys`` (earliest, latest), not two each."""
        return self._list_offsets(keys)

    def epoch_of(self, topic: str, partition: int, offset: int) -> int | None:
        """(Any thread) the leader epoch of the record at ``offset`` as it was read, if known."""
        return self._epochs.epoch_of((topic, partition), offset)

    def first_read(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(Any thread) the offset and leader epoch of the first record read of the
        partition since it was wanted after a drop, if known."""
        return self._epochs.first_read((topic, partition))

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        try:
            return self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout, cached=False
            )
        except KafkaException as exc:
            raise _raise_from(exc, topic, partition) from None

    def _log_end(self, key: tuple[str, int]) -> int:
        """The high watermark librdkafka's last fetch answer told (no request), -1 if none."""
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        except KafkaException:
            return -1
        return high if high >= 0 else -1

    def _assign(self, key: tuple[str, int], offset: int) -> None:
        self._epochs.assigned(key, offset)
        self._consumer.incremental_assign([TopicPartition(key[0], key[1], offset)])
        self._given[key] = self._next[key] = offset
        self._fed_at[key] = time.monotonic()
        self._ahead[key] = collections.deque()
        self._ahead_bytes[key] = 0

    def _unassign(self, key: tuple[str, int]) -> None:
        if key not in self._suspended:
            self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])
        self._suspended.discard(key)
        self._cut_pending.discard(key)
        for table in (
            self._given,
            self._next,
            self._ahead,
            self._ahead_bytes,
            self._errors,
            self._fed_at,
        ):
            table.pop(key, None)
        self._has.discard(key)

    def poll(self, timeout: float) -> list[Read]:
        """Messages are taken from librdkafka only while a want has nothing read ahead
        (so the read-ahead stays small); a want answerable from the read-ahead is answered
        as soon as it comes."""
        deadline = time.monotonic() + timeout
        while True:
            self._fill()
            out = self._answers() if self._has else []
            starving = self._wanted.keys() - self._has
            if starving:
                self._take(self._consumer.consume(_CONSUME_BATCH, 0))
                if self._has:
                    out += self._answers()
                if time.monotonic() - self._stall_checked_at >= _STALL_AFTER:
                    self._check_stalls()
            consumer = self._consumer
            with self._cond:
                woken, self._woken = self._woken, False
            remaining = deadline - time.monotonic()
            if out or woken or remaining <= 0:
                return out
            if starving:
                # records can only come from librdkafka, whose wait cannot be woken: short
                # waits while read-ahead is on hand (its want may come any moment)
                first = consumer.poll(min(remaining, self._slice()))
                if first is not None:  # and what came with it
                    self._take([first, *consumer.consume(_CONSUME_BATCH - 1, 0)])
            else:
                # nothing wanted: wait for a want, in short waits while records flow and a
                # partition's read-ahead is below _FILL_AHEAD (to go on draining
                # librdkafka's queue); idle partitions wait as long as before
                flowing = time.monotonic() - self._records_at < _FLOWING
                slice_ = _AHEAD_SLICE if flowing and self._filling() else _LIBRDKAFKA_SLICE
                with self._cond:
                    if not self._woken:
                        self._cond.wait(min(remaining, slice_))

    def _check_stalls(self) -> None:
        """Replace the librdkafka consumer if a wanted partition got no records for
        ``_STALL_AFTER`` while its log holds records past the wanted offset (see there).
        One ListOffsets request for the partitions that waited that long, if any."""
        now = self._stall_checked_at = time.monotonic()
        waited = {
            key: offset
            for key, offset in self._wanted.items()
            if key not in self._has
            and key not in self._suspended
            and now - self._fed_at.get(key, now) >= _STALL_AFTER
        }
        if not waited:
            return
        try:
            ends = self._log_ends(list(waited), min(self._timeout, _STALL_TIMEOUT))
            # where librdkafka will fetch next: past the wanted offset after records it skips
            # (control batches, aborted ones), so a log ending in a transaction marker is no
            # stall
            positions = self._consumer.position([TopicPartition(t, p) for t, p in waited])
        except (KafkaException, LogmarshalError) as exc:
            # a check, not a read: it must not fail the poll, whose answers are taken already
            # (a node restarting, in CI on 2026-12-06); looked at again after _STALL_AFTER
            log.info("reader: cannot check for stalled partitions now (%s)", exc)
            return
        stalled = []
        for (key, offset), position in zip(waited.items(), positions, strict=True):
            end = ends.get(key)
            if isinstance(end, int) and end > max(offset, position.offset):
                stalled.append((key, offset, end))
            else:  # at its end (nothing to fetch), or unknown: librdkafka reports errors
                self._fed_at[key] = now
        if stalled:
            self._renew(stalled)

    def _renew(self, stalled: list[tuple[tuple[str, int], int, int]]) -> None:
        """A new librdkafka consumer, with every assigned partition assigned where its
        read-ahead ends (exact: nothing is read twice or skipped). ``stalled``: (partition,
        wanted offset, log end) of those that made it needed."""
        (topic, partition), offset, end = stalled[0]
        log.warning(
            "reader: %d wanted partition(s) got no records for %.0f s while their logs hold "
            "more (%s/%d wants offset %d, its log ends at %d): librdkafka stopped fetching "
            "them; replacing its consumer",
            len(stalled),
            _STALL_AFTER,
            topic,
            partition,
            offset,
            end,
        )
        old, self._consumer = self._consumer, Consumer(self._conf)
        self.renewals += 1
        with contextlib.suppress(KafkaException, RuntimeError):
            old.close()
        assigned = [
            TopicPartition(key[0], key[1], self._next[key])
            for key in self._given
            if key not in self._suspended
        ]
        if assigned:
            self._consumer.incremental_assign(assigned)
        now = time.monotonic()
        for key in self._fed_at:
            self._fed_at[key] = now

    def _slice(self) -> float:
        """How long the next wait inside librdkafka may last (it cannot be woken)."""
        if self._has:
            return _AHEAD_SLICE
        if time.monotonic() - max(self._records_at, self._wanted_at) < _IDLE_AFTER:
            return _LIBRDKAFKA_SLICE
        return _IDLE_SLICE

    def _fill(self) -> None:
        """Take what librdkafka has on hand (without waiting) while an assigned partition
        has less than ``_FILL_AHEAD`` records read ahead, wanted or not.

        Two reasons. An answer then carries up to ``_FETCH_MAX_RECORDS`` records rather
        than the few that came last: each answer wakes the consumer's poll() thread, and
        each wake costs this thread the GIL for a while. And librdkafka's queue keeps being
        drained while the consumer works through its buffers: a queue left full stops
        librdkafka's fetching (queued.min.messages) until it is drained and a backoff
        passed, and the consumer then waited for the broker (docs/performance.md,
        "Consumer")."""
        for _ in range(_FILL_CONSUMES):
            if not self._filling():
                return
            messages = self._consumer.consume(_CONSUME_BATCH, 0)
            if not messages:
                return
            self._take(messages)

    def _filling(self) -> bool:
        """Whether an assigned partition has less than ``_FILL_AHEAD`` records read ahead."""
        suspended = self._suspended
        return any(
            len(records) < _FILL_AHEAD and key not in suspended
            for key, records in self._ahead.items()
        )

    def _take(self, messages: list[Any]) -> None:
        if not messages:
            return
        self._records_at = time.monotonic()
        if _FIELDS_READABLE:  # the usual case, in C: one partition's records, no error
            first, last = messages[0], messages[-1]  # (_batch_c empties the list it converts)
            fast = _batch_c(Message, messages)
            if fast is not None:
                topic, partition, records, size = fast
                if not self._cut_under((topic, partition), first, last):
                    self._keep_records((topic, partition), records, size)
                return
        errors = list(map(_ERROR, messages))
        parts = list(map(_PARTITION, messages))
        topics = list(map(_TOPIC, messages))
        if (
            _none_failed(errors)
            and parts.count(parts[0]) == len(parts)
            and topics.count(topics[0]) == len(topics)
        ):
            self._keep((topics[0], parts[0]), messages)  # the usual case, in bulk
            return
        run: list[Any] = []
        run_key: tuple[str | None, int | None] = (None, None)  # (read once ``run`` has some)
        for m, error, topic, partition in zip(messages, errors, topics, parts, strict=True):
            if error is not None:
                self._error(m, error)
                continue
            key = (topic, partition)
            if key != run_key and run:
                self._keep(run_key, run)
                run = []
            run_key = key
            run.append(m)
        if run:
            self._keep(run_key, run)

    def _keep(self, where: tuple[str | None, int | None], messages: list[Any]) -> None:
        topic, partition = where
        assert topic is not None and partition is not None  # (a message without error has both)
        key = (topic, partition)
        expected = self._next.get(key)
        if expected is None:
            return  # dropped meanwhile
        if messages[0].offset() < expected:  # delivered again after an unassign
            messages = [m for m in messages if m.offset() >= expected]
            if not messages:
                return
        if self._cut_under(key, messages[0], messages[-1]):
            return
        records, size = _messages(key[0], key[1], messages)
        self._keep_records(key, records, size)

    def _keep_records(self, key: tuple[str, int], records: list[Message], size: int) -> None:
        """Put ``records`` (``size`` bytes of keys and values) in ``key``'s read-ahead."""
        expected = self._next.get(key)
        if expected is None:
            return  # dropped meanwhile
        if records[0].offset < expected:  # delivered again after an unassign
            records = [r for r in records if r.offset >= expected]
            if not records:
                return
            size = _size(records)
        ahead = self._ahead[key]
        ahead.extend(records)
        size = self._ahead_bytes[key] = self._ahead_bytes[key] + size
        self._fed_at[key] = self._records_at
        self._next[key] = records[-1].offset + 1
        self._has.add(key)
        if (len(ahead) > _AHEAD_MAX or size > _AHEAD_MAX_BYTES) and key not in self._suspended:
            self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])
            self._suspended.add(key)

    def _cut_under(self, key: tuple[str, int], first: KafkaMessage, last: KafkaMessage) -> bool:
        """Records of ``key`` from ``first`` to ``last``, read from its next offset: True when
        they show its log was cut below that offset (:mod:`.epochs`; the error is then
        ``key``'s and the records are dropped). librdkafka checks a leader change only while
        it fetches: not one met while the partition was unassigned (read-ahead full)."""
        if key not in self._next:
            return True  # dropped meanwhile: nothing of it is kept, nor its epochs remembered
        if key in self._cut_pending:
            # its cut told, or the ask failed, and not answered yet: what comes meanwhile is
            # dropped (the next want assigns again), not asked about at every batch: one
            # burst of batches spent every ask a failing leader is allowed
            return True
        position = self._next.get(key)
        end, start = last.offset(), first.offset()
        cut = self._epochs.read(
            key,
            position,
            last.leader_epoch(),
            -1 if end is None else end + 1,
            None if start is None else (start, first.leader_epoch()),
        )
        if cut is None:
            return False
        if isinstance(cut, int):
            given = self._given.get(key)
            at = given if given is not None else position if position is not None else cut
            self._errors[key] = self._truncated(key, at, cut)
        else:  # (not known: asked again when the records are read again)
            self._errors[key] = cut
        self._has.add(key)
        self._cut_pending.add(key)
        return True

    def _truncated(self, key: tuple[str, int], offset: int, cut: int) -> LogTruncated:
        """The cut told at ``offset``, with the bounds if they can be read: the cut is told
        whatever they are (the watch keeps the epoch only up to the cut: an error instead
        lost it for good)."""
        try:
            low, high = self._watermarks(*key)
        except Exception:
            low = high = -1
        return LogTruncated(offset, low, high, cut)

    def _error(self, message: Any, error: KafkaError) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            return
        topic, partition = message.topic(), message.partition()
        key = (topic, partition)
        if topic is None or key not in self._given:
            log.debug("reader: %s", error.str())  # a client-wide error: librdkafka retries
            return
        if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            # librdkafka's own KIP-320 check after a leader change ends here too, under
            # auto.offset.reset=error, its cut point in its text alone: then the cut point
            # is asked. Not on any refusal: a topic deleted and made again answers its new
            # log's end for the old epoch, taken for a cut (a helper's attack: its first
            # records skipped where "earliest" handed them out)
            truncated = "truncation" in error.str().lower()
            cut = self._epochs.refused(key, self._next.get(key)) if truncated else None
            if isinstance(cut, Exception):  # (not known: the fetch is asked again, and so it)
                self._errors[key] = cut
                self._has.add(key)
                return
            given = self._given[key]
            offset = -1 if given is None else given
            if isinstance(cut, int):
                self._errors[key] = self._truncated(key, offset, cut)
            else:
                try:
                    low, high = self._watermarks(topic, partition)
                except Exception as exc:
                    self._errors[key] = exc
                else:
                    self._errors[key] = OffsetOutOfRange(offset, low, high)
        else:
            self._errors[key] = _map_error(error, topic, partition)
        self._has.add(key)

    def _answers(self) -> list[Read]:
        out = []
        for key in list(self._has & self._wanted.keys()):
            offset = self._wanted.pop(key)
            error = self._errors.pop(key, None)
            if error is not None:
                self._cut_pending.discard(key)
                self._given[key] = None  # the next want assigns again
                if not self._ahead[key]:
                    self._has.discard(key)
                out.append(Read(key[0], key[1], offset, [], error))
                continue
            records = self._take_ahead(key, offset)
            if records:
                out.append(Read(key[0], key[1], offset, records, log_end=self._log_end(key)))
            else:
                self._wanted[key] = offset
        return out

    def _take_ahead(self, key: tuple[str, int], offset: int) -> list[Message]:
        ahead = self._ahead[key]
        if ahead and ahead[0].offset < offset:
            stale = []
            while ahead and ahead[0].offset < offset:
                stale.append(ahead.popleft())
            self._ahead_bytes[key] -= _size(stale)
        # up to _FETCH_MAX_RECORDS records and about max_bytes (at least one record)
        if len(ahead) <= _FETCH_MAX_RECORDS and self._ahead_bytes[key] <= self._max_bytes:
            out, size = list(ahead), self._ahead_bytes[key]  # all of it: the usual case
        else:
            out = list(itertools.islice(ahead, _FETCH_MAX_RECORDS))
            size = _size(out)
        if size > self._max_bytes:
            n, size = 0, 0
            for record in out:
                k, v = record.key, record.value
                more = (len(k) if k else 0) + (len(v) if v else 0)
                if n and size + more > self._max_bytes:
                    break
                n += 1
                size += more
            del out[n:]
        if len(out) == len(ahead):
            ahead.clear()
        else:
            # pop as many from the left, at C speed (a Message is never None)
            collections.deque(itertools.islice(iter(ahead.popleft, None), len(out)), maxlen=0)
        left = self._ahead_bytes[key] = self._ahead_bytes[key] - size
        if not ahead:
            self._has.discard(key)
        if not out:
            return []
        self._given[key] = out[-1].offset + 1
        if (
            key in self._suspended
            and len(ahead) <= _AHEAD_MAX // 2
            and left <= _AHEAD_MAX_BYTES // 2
        ):
            self._suspended.discard(key)
            resume = self._next[key]
            self._consumer.incremental_assign([TopicPartition(key[0], key[1], resume)])
            self._fed_at[key] = time.monotonic()
        return out

    def close(self) -> None:
        with contextlib.suppress(KafkaException, RuntimeError):
            self._consumer.close()

    # -- any thread -------------------------------------------------------------------

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()
