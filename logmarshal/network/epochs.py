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
        #: (next offset, leader epoch) after the last record read of each partition
        self._epochs: dict[Key, tuple[int, int]] = {}
        self._failures: dict[Key, int] = {}

    def assigned(self, key: Key, offset: int) -> None:
        """Reading starts again at ``offset``: past what was read, its epoch says nothing."""
        seen = self._epochs.get(key)
        if seen is not None and offset > seen[0]:
            del self._epochs[key]

    def forget(self, key: Key) -> None:
        self._epochs.pop(key, None)
        self._failures.pop(key, None)

    def read(
        self, key: Key, position: int | None, last: int | None, end: int
    ) -> int | Exception | None:
        """Records read from ``position``, the newest of leader epoch ``last``, ending
        before offset ``end``. The cut point when a newer epoch than the last records'
        shows the log was cut below ``position`` (the records are then not the log's); the
        failure to ask (they are read again); else None, and they are remembered.

        The newest epoch tells (the first records may be ones read again after a re-assign,
        of the old epoch); records without one (an old message format) leave nothing to tell
        by."""
        if self._epoch_end is None:
            return None
        if last is None:
            self.forget(key)
            return None
        seen = self._epochs.get(key)
        if seen is not None and last > seen[1]:
            cut = self.refused(key, position)
            if cut is not None:
                return cut
        self._epochs[key] = (end, last)
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
        del self._epochs[key]  # (what is read from the cut on starts it again)
        return end
