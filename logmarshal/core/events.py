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
    "LogEnds",
    "OutOfRange",
    "Poll",
    "Replayed",
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
    ``at_end``: it reached the log's end as last seen (the start-up replay is complete)."""

    cp: int
    offset: int
    at_end: bool = False


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
    (opaque to the core but for their offset, read with the core's ``offset_of``)."""

    token: int
    topic: str
    partition: int
    records: Sequence[Any]


@attrs.frozen
class OutOfRange:
    """A fetch ``token`` was refused: its offset is outside the log ``[start, end]``."""

    token: int
    topic: str
    partition: int
    start: int
    end: int


@attrs.frozen
class Bounds:
    """The answer to ``LookUp(token)``: the partition's log spans ``[start, end]``."""

    token: int
    topic: str
    partition: int
    start: int
    end: int


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
)
