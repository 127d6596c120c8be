"""The broker's side of idempotent producers: producer ids and per-partition dedupe.

Producer ids are ``counter << 10 | broker id`` (so brokers of one cluster never hand out
the same id), with the counter reserved in blocks persisted in the data directory before
any id of a block is given out: ids are never reused after a restart, even after a crash.
A data directory without the file starts the counter at the wall clock in milliseconds,
above every id the earlier time-based scheme could have produced.

Each partition's :class:`storage._producers.ProducerStates` is built on the first
idempotent append by reading the stored batch headers (Kafka rebuilds it the same way on
recovery), then kept up to date by every append. Check, append and record happen under
one per-partition lock, so a retry arriving on another connection while the original is
being written cannot slip past the check.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from storage._errors import OffsetOutOfRange, StorageError
from storage._files import read_json, replace_durably
from storage._log import AppendInfo, PartitionLog
from storage._producers import ProducerStates, RetainedBatch, batch_identities
from storage._records import _validate_batches

__all__ = ["Idempotence", "ProducerIdAllocator", "has_producer_id"]

log = logging.getLogger(__name__)

_FILE = "producer-ids.json"
_BROKER_BITS = 10
_BLOCK = 1000
#: a producer id is ``counter << _BROKER_BITS | broker``, an int64
_COUNTER_MAX = (1 << (63 - _BROKER_BITS)) - 1
_SCAN_BYTES = 8 * 1024 * 1024
_PRODUCER_ID_AT = 43
#: Kafka's producer.id.expiration.ms: a producer idle this long on a partition is forgotten.
PRODUCER_ID_EXPIRATION_MS = 24 * 3600 * 1000
_EXPIRY_CHECK_MS = 60_000


def has_producer_id(records: bytes | memoryview | None) -> bool:
    """Does the first batch carry a producer id (idempotent producer)?"""
    if not records or len(records) < 61:
        return False
    return int.from_bytes(records[_PRODUCER_ID_AT : _PRODUCER_ID_AT + 8], "big", signed=True) >= 0


class ProducerIdAllocator:
    """Unique producer ids for one broker; thread-safe; a block is fsynced before use."""

    def __init__(self, directory: str | os.PathLike[str], broker_id: int) -> None:
        self._path = Path(directory) / _FILE
        self._broker = broker_id & ((1 << _BROKER_BITS) - 1)
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # first counter value not reserved yet

    def _reserved_end(self) -> int:
        try:
            raw = read_json(self._path)
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            counter = raw["next_counter"]
            if type(counter) is not int or not 0 <= counter <= _COUNTER_MAX - _BLOCK:
                raise ValueError(f"next_counter {counter!r} is not a producer id counter")
            return counter
        except FileNotFoundError:
            return int(time.time() * 1000)
        except (ValueError, KeyError) as exc:
            raise StorageError(f"{self._path} is unreadable: {exc}") from exc

    def _reserve(self) -> None:
        start = max(self._end, self._reserved_end())
        if start > _COUNTER_MAX - _BLOCK:
            raise StorageError(f"{self._path}: the producer ids are used up")
        end = start + _BLOCK
        replace_durably(self._path, json.dumps({"next_counter": end}).encode())
        self._next, self._end = start, end

    def next_id(self) -> int:
        """A producer id never handed out before by this data directory (blocking: may fsync)."""
        with self._lock:
            if self._next >= self._end:
                self._reserve()
            counter = self._next
            self._next += 1
        return counter << _BROKER_BITS | self._broker


class _PartitionState:
    __slots__ = ("expired_at", "lock", "states")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.states = ProducerStates()
        self.expired_at = 0


def _wall_ms() -> int:
    return int(time.time() * 1000)


class Idempotence:
    """Producer states of every partition of a broker, keyed by the open log object."""

    def __init__(
        self,
        *,
        clock: Callable[[], int] = _wall_ms,
        expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self._clock = clock
        self._expiration_ms = expiration_ms
        self._lock = threading.Lock()
        self._by_log: weakref.WeakKeyDictionary[PartitionLog, _PartitionState] = (
            weakref.WeakKeyDictionary()
        )

    def _state(self, plog: PartitionLog) -> _PartitionState:
        with self._lock:
            state = self._by_log.get(plog)
            if state is None:
                state = self._by_log[plog] = _PartitionState()
            return state

    def needs_load(self, plog: PartitionLog) -> bool:
        """True until the partition's state was rebuilt (then appending is cheap)."""
        state = self._by_log.get(plog)
        return state is None or not state.states.loaded

    def states(self, plog: PartitionLog) -> ProducerStates:
        """The partition's state, rebuilt if needed (for inspection and tests)."""
        state = self._state(plog)
        with state.lock:
            self._load(plog, state.states)
        return state.states

    @staticmethod
    def _load(plog: PartitionLog, states: ProducerStates) -> None:
        if states.loaded:
            return
        started = time.monotonic()
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            try:
                data = plog.read(offset, _SCAN_BYTES).data
            except OffsetOutOfRange as exc:  # retention moved the start while we read
                if exc.log_start_offset <= offset:
                    raise
                offset = exc.log_start_offset
                continue
            following = states.replay(data)
            if following <= offset:
                break
            offset = following
        states.loaded = True
        log.info(
            "%s/%d: producer state rebuilt from offsets %d-%d (%d producers) in %.3f s",
            plog.topic,
            plog.partition,
            plog.log_start_offset,
            end,
            len(states),
            time.monotonic() - started,
        )

    def append(
        self, plog: PartitionLog, records: bytes | memoryview, *, flush: bool
    ) -> tuple[AppendInfo | None, RetainedBatch | None]:
        """Append unless the batches retry a stored one: (info, None) or (None, original).

        Raises OutOfOrderSequence / InvalidProducerEpoch (nothing stored), or the append's
        own StorageError.
        """
        state = self._state(plog)
        with state.lock:
            self._load(plog, state.states)
            batches = list(batch_identities(records))
            duplicate = state.states.check(batches)
            if duplicate is not None:
                # A damaged copy must not be answered as if it were the stored original.
                _validate_batches(memoryview(records).cast("B"), plog.config.max_message_bytes)
                return None, duplicate.batch
            info = plog.append(records, flush=flush)
            now = self._clock()
            offset = info.base_offset
            for b in batches:
                state.states.record(b, offset, info.log_append_time, now)
                offset += b.last_offset_delta + 1
            if now - state.expired_at >= _EXPIRY_CHECK_MS:
                state.expired_at = now
                gone = state.states.expire(now, self._expiration_ms)
                if gone:
                    log.info("%s/%d: forgot %d idle producers", plog.topic, plog.partition, gone)
            return info, None
