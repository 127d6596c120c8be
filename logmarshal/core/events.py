"""Events a member core is fed; each carries the time it happens at (the core reads no clock)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = [
    "Bounds",
    "Close",
    "Event",
    "Fetched",
    "Halted",
    "LogEnds",
    "OutOfRange",
    "Poll",
    "Replayed",
    "Resumed",
    "Tick",
    "Topics",
    "WriteFailed",
    "Written",
]


@attrs.frozen
class Tick:
    """Time is ``now``: heartbeats, lease expiry and claim passes are decided here."""


@attrs.frozen
class Replayed:
    """The replay of coordination partition ``cp`` reached ``offset`` (inclusive);
    ``at_end``: it reached the log's end as last seen (the start-up replay is complete);
    ``ends_at``: when (the core's clock) those ends were looked up, if before the step that
    takes it (None: as of that step). An edge that builds the answer, then steps it, can be
    stopped in between: ends looked up before a stall answer no catch-up after it."""

    cp: int
    offset: int
    at_end: bool = False
    ends_at: int | None = None


@attrs.frozen
class Halted:
    """The replay of coordination partition ``cp`` is no longer a fold of the log as it is
    (docs/bounded-log.md, "A coordination log that loses records"): ``why`` is ``rewound``
    (the log ends at ``after``, below ``before``, the next offset the replay would apply:
    records it applied are gone) or ``gap`` (records ``before..after-1`` were deleted
    before the replay applied them, and no snapshot covers them). Every group coordinated
    there stops: nothing of its partitions is claimed, heartbeated, released or handed out
    until :class:`Resumed` names it. ``live``: a ``gap`` found after this instance (a
    core of it, whichever: its Marshaler's) wrote to ``cp``; the instance stops (PROTOCOL.md,
    "A coordination log that loses records")."""

    cp: int
    before: int
    after: int
    why: str
    live: bool = False


@attrs.frozen
class Resumed:
    """After :class:`Halted`: the log the replay can see determines these partitions of our
    group again (an admin reset seen after the halt, its pause over: ``core.rewind``)."""

    cp: int
    keys: tuple[tuple[str, int], ...]
    #: the offset the gap these answer ended at (its :class:`Halted`'s ``after``): a
    #: Resumed read before a later halt of ``cp`` is stale and ignored (-1: any halt)
    after: int = -1


@attrs.frozen
class Written:
    """The write ``token`` landed at ``offset`` of its coordination partition."""

    token: int
    offset: int


@attrs.frozen
class WriteFailed:
    """The write ``token`` reported failure: it may or may not have landed."""

    token: int


@attrs.frozen
class Fetched:
    """A fetch ``token`` of (topic, partition) returned these records, in offset order
    (opaque to the core but for their offset, read with the core's ``offset_of``), and
    the partition's log end as the edge last knew it (its high watermark; -1 if unknown):
    AMO reserves up to it, not only what was fetched (``delivery.AtMostOnce.to_reserve``)."""

    token: int
    topic: str
    partition: int
    records: Sequence[Any]
    log_end: int = -1


@attrs.frozen
class OutOfRange:
    """A fetch ``token`` was refused: its offset is outside the log ``[start, end]``, or
    ``diverged`` says the log was cut at that offset below the fetch and written on (an
    unclean leader election, told by the leader epochs of what the edge read: KIP-320), so
    the records from there on are not those read before, whatever the bounds hold."""

    token: int
    topic: str
    partition: int
    start: int
    end: int
    diverged: int | None = None


@attrs.frozen
class Bounds:
    """The answer to ``LookUp(token)``: the partition's log spans ``[start, end]``;
    ``committed``: Kafka's committed offset (next offset) of the group there, asked for a
    partition the log has no position for, where the edge has one (the group's offsets
    mirrored on Apache Kafka, or those of a Kafka consumer group moving to Marshal)."""

    token: int
    topic: str
    partition: int
    start: int
    end: int
    committed: int | None = None


@attrs.frozen
class Poll:
    """User code asks for up to ``max_records`` records of one partition."""

    max_records: int


@attrs.frozen
class Topics:
    """The subscription as the edge sees it now: ``(topic, partition count)`` pairs (a
    pattern matched afresh, partitions added)."""

    topics: tuple[tuple[str, int], ...]


@attrs.frozen
class LogEnds:
    """Log end offsets of held partitions (for ``release_if_behind``)."""

    ends: tuple[tuple[tuple[str, int], int], ...]


@attrs.frozen
class Close:
    """The user asked to close: with ``release``, release every partition (graceful);
    without, just stop (the claims lapse, or a restart takes them back)."""

    release: bool = True


Event = (
    Tick
    | Replayed
    | Written
    | WriteFailed
    | Fetched
    | OutOfRange
    | Bounds
    | Poll
    | Topics
    | LogEnds
    | Close
    | Halted
    | Resumed
)
