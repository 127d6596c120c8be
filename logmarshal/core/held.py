"""What a member knows about one partition it holds."""

from __future__ import annotations

from collections import deque

import attrs

from .lease import Lease

__all__ = ["Held"]


@attrs.define
class Held:
    topic: str
    partition: int
    cp: int
    lease: Lease
    #: next data offset to fetch
    next_fetch: int
    #: last offset handed to user code (ALO: treated as handled, so it is the position)
    handed_through: int
    #: AMO: last offset reserved by an accepted ClaimingMessages
    claimed_through: int
    #: AMO: last offset an accepted heartbeat carried after its reservation
    confirmed_through: int
    buffer: deque[tuple[int, bytes]] = attrs.field(factory=deque)
    fetch_token: int | None = None
    heartbeat_token: int | None = None
    reserve_token: int | None = None
    next_heartbeat: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)
