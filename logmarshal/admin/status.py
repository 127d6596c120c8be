"""Burrow-style partition and group status, computed from recent position records. Pure.

Burrow (LinkedIn's consumer lag checker) judges a partition by a sliding window of its
consumer's recent offset commits, each with the lag at that moment, instead of by a lag
threshold, because a lag number alone says nothing about whether the consumer is keeping up.
We apply its rules to the window of a partition's recent position records (holder
heartbeats and releases, admin position heartbeats), in Burrow's order:

0. The position is past the log end (lag below 0, as Kafka's consumer-groups tool shows
   it): **PAST_END**. The log was cut back or made again under the group, or a position was
   set past it. An ALO holder's claim starts where ``auto_offset_reset`` says; an AMO one
   waits for the log to reach the position, and the records appended meanwhile are never
   handed out.
1. Current lag 0: **OK**, whatever happened before.
2. The last position record is older than the stop threshold: **STOP** (heartbeats
   stopped). Burrow uses the window's own time span as the threshold because it does not
   know how often a consumer commits; logmarshal does (every holder declares its lease, HB),
   so the threshold is ``2·HB``: past it the claim is stale and anyone may take it.
3. Lag was 0 somewhere in the window: **OK**.
4. The position never moved across the window (at least two records): **STALL**.
5. The position went backwards somewhere in the window: **REWIND** (after a reset, until the
   window rolls over; often intended, always worth knowing).
6. Lag never decreased from one record to the next (at least two records): **WARN**.
7. Otherwise **OK**.

A group's status is its worst partition's, by :data:`SEVERITY`.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence

import attrs

__all__ = ["SEVERITY", "LagSample", "Status", "evaluate_partition", "worst"]


class Status(enum.Enum):
    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    STALL = "STALL"
    STOP = "STOP"
    PAST_END = "PAST_END"


#: Worse is larger: a position the log does not reach (PAST_END: records lost or read
#: again) is worse than nobody consuming (STOP), which is worse than a consumer stuck on a
#: message (STALL), a rewind (usually an admin's doing) or slow progress (WARN).
SEVERITY = {
    Status.OK: 0,
    Status.WARN: 1,
    Status.REWIND: 2,
    Status.STALL: 3,
    Status.STOP: 4,
    Status.PAST_END: 5,
}


@attrs.frozen
class LagSample:
    """A position record: log time, position (next offset to consume), lag at that time."""

    time_ms: int
    position: int
    lag: int


def evaluate_partition(
    window: Sequence[LagSample], current_lag: int, now_ms: int, stop_after_ms: int
) -> Status:
    """The status of one partition (rules in the module docstring).

    ``window`` is in log order, oldest first; ``current_lag`` is the lag now (log end now
    minus the current position, below 0 past the end); ``stop_after_ms`` is 2·HB of the
    partition's holder.
    """
    if current_lag < 0:
        return Status.PAST_END
    if current_lag == 0:
        return Status.OK
    if not window or now_ms - window[-1].time_ms > stop_after_ms:
        return Status.STOP
    if any(s.lag <= 0 for s in window):
        return Status.OK
    pairs = list(itertools.pairwise(window))
    if pairs and all(b.position == a.position for a, b in pairs):
        return Status.STALL
    if any(b.position < a.position for a, b in pairs):
        return Status.REWIND
    if pairs and all(b.lag >= a.lag for a, b in pairs):
        return Status.WARN
    return Status.OK


def worst(statuses: Iterable[Status]) -> Status:
    """The group's status: its worst partition's (OK for a group with no partitions)."""
    return max(statuses, key=SEVERITY.__getitem__, default=Status.OK)
