"""Reading a partition up to a log end read earlier (a restore, an export): an answer of
"nothing yet" below that end is never taken for the end.

A network read can answer nothing below the log end: a broker slow to answer, a leader
moving, a librdkafka consumer that stopped fetching. Readers that stopped there rebuilt a
streams store to an older commit or to nothing, and cut an audit export short, without a
word (found by reading through a FaultyCluster's ``fetch_drop``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import RetriableError

log = logging.getLogger(__name__)

#: How long (s) a reader waits for records the partition held when the read began
RANGE_WAIT = 60.0
#: each read of that wait is a long poll of this (s), so late records are not spun on
_RANGE_POLL = 0.5

T = TypeVar("T")


def read_below(
    read: Callable[[float], T],
    where: str,
    offset: int,
    end: int,
    *,
    count: Callable[[Any], int] = len,
    wait: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``read(max_wait)`` of the records from ``offset`` on, where ``offset < end`` and
    ``end`` is a log end the caller read: its first answer that is not empty, waited for up
    to ``wait`` seconds (``RANGE_WAIT``, the default); RetriableError naming the range if
    none came. ``where``: the partition, as ``topic/partition``; ``count``: how many records
    an answer holds (``len``; columns count their first)."""
    wait = RANGE_WAIT if wait is None else wait
    deadline = clock() + wait
    empty = 0
    while True:
        got = read(_RANGE_POLL if empty else 0.0)
        if count(got):
            if empty:
                log.info("%s: records from offset %d came after %d empty answer(s)",
                         where, offset, empty)  # fmt: skip
            return got
        empty += 1
        if clock() >= deadline:
            raise RetriableError(
                f"{where}: no records from offset {offset} came in {wait:g} s, though the "
                f"log ended at {end} when the read began; the range [{offset}, {end}) is "
                "unread, and nothing read of it is used"
            )
