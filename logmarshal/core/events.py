"""Events a member core is fed; each carries the time it happens at (the core reads no clock)."""

from __future__ import annotations

import attrs

__all__ = ["Close", "Event", "Fetched", "Replayed", "Tick", "WriteFailed", "Written"]


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
    """A fetch ``token`` of (topic, partition) returned these ``(offset, value)`` records."""

    token: int
    topic: str
    partition: int
    records: tuple[tuple[int, bytes], ...]


@attrs.frozen
class Close:
    """The user asked for a graceful close: release every partition."""


Event = Tick | Replayed | Written | WriteFailed | Fetched | Close
