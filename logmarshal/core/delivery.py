"""ALO and AMO as two delivery strategies (instead of branches on a mode).

Each answers three questions for a held partition: which position its heartbeat carries,
whether a reservation must be written before anything is handed out, and which buffered
records may be handed out once the lease and the replay allow it.
"""

from __future__ import annotations

from typing import Protocol

from .held import Held

__all__ = ["AtLeastOnce", "AtMostOnce", "Delivery", "delivery_for"]


class Delivery(Protocol):
    def position(self, held: Held) -> int:
        """``last_offset`` our heartbeats and release carry."""

    def to_reserve(self, held: Held, batch: int) -> int | None:
        """Offset a ClaimingMessages must reserve through before handing out, or None."""

    def take(self, held: Held, limit: int) -> list[tuple[int, bytes]]:
        """Pop what may be handed out now (the caller checked lease and replay)."""


class AtLeastOnce:
    """Hand out what was fetched; heartbeats carry what was handed out (and handled)."""

    def position(self, held: Held) -> int:
        return held.handed_through

    def to_reserve(self, held: Held, batch: int) -> int | None:
        return None

    def take(self, held: Held, limit: int) -> list[tuple[int, bytes]]:
        out = []
        while held.buffer and len(out) < limit:
            out.append(held.buffer.popleft())
        if out:
            held.handed_through = out[-1][0]
        return out


class AtMostOnce:
    """Reserve (ClaimingMessages), confirm with a heartbeat, only then hand out: a crash
    loses at most the reserved batch, nothing is handed out twice."""

    def position(self, held: Held) -> int:
        # reserved offsets count as consumed: a successor resumes after them anyway
        return held.claimed_through

    def to_reserve(self, held: Held, batch: int) -> int | None:
        if held.reserve_token is not None or held.confirmed_through < held.claimed_through:
            return None  # one reservation at a time, and only once the last is confirmed
        if any(off <= held.confirmed_through for off, _ in held.buffer):
            return None  # hand out the confirmed batch first
        fresh = [off for off, _ in held.buffer if off > held.claimed_through]
        if not fresh:
            return None
        return fresh[min(batch, len(fresh)) - 1]

    def take(self, held: Held, limit: int) -> list[tuple[int, bytes]]:
        out = []
        while held.buffer and len(out) < limit and held.buffer[0][0] <= held.confirmed_through:
            out.append(held.buffer.popleft())
        if out:
            held.handed_through = out[-1][0]
        return out


def delivery_for(mode: str) -> Delivery:
    return AtMostOnce() if mode == "amo" else AtLeastOnce()
