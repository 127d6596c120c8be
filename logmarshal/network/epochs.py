"""KIP-320 for the member reader: was a data partition's log cut under it?

An unclean leader election cuts a partition's log and the new leader writes on from the
cut. Once the log grows back past a reader's position, its offset is in the log again and
nothing refuses the fetch: the records written between the cut and the position since are
skipped (measured on Apache Kafka 4.4: 500 of 800 records acknowledged after the election).
The leader epoch of each record tells it: the records a reader read up to its position were
written under an epoch whose log, on the leader now, must still reach that position
(OffsetForLeaderEpoch). librdkafka makes this check only while it fetches a partition, and
under ``auto.offset.reset=error`` it ends in an error that names the cut point in its text
alone; so the reader asks itself, whenever records come under a newer epoch than the last
ones it read, or librdkafka refuses a fetch for a truncation it found (an ordinary refusal
is not asked about: a topic deleted and made again answers its new log's end for the old
epoch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import LogmarshalError, NetworkError

__all__ = ["EpochEnd", "EpochWatch"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: (topic, partition, leader epoch) -> where that epoch's log ends on the leader now, or None
#: where it cannot be known (NetworkCluster.epoch_end)
EpochEnd = Callable[[str, int, int], "int | None"]


#: asks in a row that may fail for one partition before the watch gives up on what it read
#: (a leader that cannot answer: reading goes on unchecked rather than stop for good)
ASKS = 5


class EpochWatch:
    """Per partition, where the records read last end and their leader epoch."""

    def __init__(self, epoch_end: EpochEnd | None) -> None:
        self._epoch_end = epoch_end
        #: (next offset, leader epoch, since) after the last record read of each partition:
        #: the records read from offset ``since`` up to the next offset are of that epoch
        #: (one tuple: :meth:`epoch_of` reads it from the offsets mirror's thread)
        self._epochs: dict[Key, tuple[int, int, int]] = {}
        #: the same of the epoch before, where the last records read came under a newer
        #: one: a position still in the read-ahead's older stretch has its epoch known (the
        #: mirror committed none there, and erased the one committed with it: a review)
        self._older: dict[Key, tuple[int, int, int]] = {}
        #: (offset, leader epoch) of the first record read of each partition since it was
        #: last forgotten (a claim's first records: consumer/cut_checks.py)
        self._first: dict[Key, tuple[int, int]] = {}
        self._failures: dict[Key, int] = {}

    def assigned(self, key: Key, offset: int) -> None:
        """Reading starts again at ``offset``: past what was read, its epoch says nothing."""
        seen = self._epochs.get(key)
        if seen is not None and offset > seen[0]:
            del self._epochs[key]
            self._older.pop(key, None)

    def forget(self, key: Key) -> None:
        self._epochs.pop(key, None)
        self._older.pop(key, None)
        self._failures.pop(key, None)
        self._first.pop(key, None)

    def first_read(self, key: Key) -> tuple[int, int] | None:
        """(Any thread) the offset and leader epoch of the first record read of ``key``
        since it was last forgotten (dropped), where its epoch is known."""
        return self._first.get(key)

    def epoch_of(self, key: Key, offset: int) -> int | None:
        """The leader epoch of the record at ``offset`` as it was read, if it is known: the
        offsets mirror commits it with the position after it, for a later start to check
        (:mod:`logmarshal.consumer.cut_checks`)."""
        for seen in (self._epochs.get(key), self._older.get(key)):
            if seen is not None and seen[2] <= offset < seen[0]:
                return seen[1]
        return None

    def read(
        self,
        key: Key,
        position: int | None,
        last: int | None,
        end: int,
        first: tuple[int, int | None] | None = None,
    ) -> int | Exception | None:
        """Records read from ``position``, the newest of leader epoch ``last``, ending
        before offset ``end``; ``first``: the offset and epoch of the first of them, where
        known (which of them :meth:`epoch_of` can tell). The cut point when a newer epoch
        than the last records' shows the log was cut below ``position`` (the records are
        then not the log's); the failure to ask (they are read again); else None, and they
        are remembered.

        The newest epoch tells (the first records may be ones read again after a re-assign,
        of the old epoch); records without one (an old message format) leave nothing to tell
        by."""
        if self._epoch_end is None:
            return None
        if last is None:
            self.forget(key)
            return None
        if key not in self._first:
            if first is not None and first[1] is not None:
                self._first[key] = (first[0], first[1])
            elif end >= 1:  # (only the last record told)
                self._first[key] = (end - 1, last)
        seen = self._epochs.get(key)
        if seen is not None and last > seen[1]:
            cut = self.refused(key, position)
            if cut is not None:
                return cut
        # epochs grow with offsets: the same epoch at both ends is every record's between
        since = first[0] if first is not None and first[1] == last else end - 1
        lowest = first[0] if first is not None else position
        if seen is not None and seen[1] == last and lowest is not None and lowest <= seen[0]:
            since = min(since, seen[2])  # (the records read before, up to these)
        elif seen is not None and seen[1] != last:
            self._older[key] = seen
        self._epochs[key] = (end, last, since)
        return None

    def refused(self, key: Key, position: int | None) -> int | Exception | None:
        """Where the log was cut below ``position`` (librdkafka refused a fetch from it for
        a truncation, or records came under a newer epoch), the failure to ask its leader,
        or None: not cut, or nothing read at or past ``position`` to tell by."""
        seen = self._epochs.get(key)
        if seen is None or position is None or position > seen[0] or self._epoch_end is None:
            return None
        try:
            end = self._epoch_end(key[0], key[1], seen[1])
        except Exception as exc:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            if failures >= ASKS:
                log.error(
                    "%s/%d: cannot ask where leader epoch %d ends (%s), %d times: reading on "
                    "without telling whether the log was cut below %d",
                    key[0], key[1], seen[1], exc, failures, position,
                )  # fmt: skip
                self.forget(key)
                return None
            log.warning("%s/%d: cannot ask where leader epoch %d ends (%s); reading again",
                        key[0], key[1], seen[1], exc)  # fmt: skip
            return exc if isinstance(exc, LogmarshalError) else NetworkError(str(exc))
        self._failures.pop(key, None)
        if end is None or end >= position:
            return None
        # what was read up to the cut is still of that epoch: the first records read from
        # the cut on, of a newer one, ask again, and find a second cut made meanwhile below
        # this one (before, the watch started again from them and skipped what was written
        # from the second cut up to the first)
        self._epochs[key] = (end, seen[1], min(seen[2], end))
        self._older.pop(key, None)
        return end
