"""Contiguous-commit tracking for at-least-once consumption.

Users may finish messages out of order (a worker pool), but a heartbeat's ``last_offset``
promises that *everything* up to it is handled. So the position only advances over an
unbroken run of committed offsets; one slow message holds it back, and a crash then
repeats from that message rather than skipping it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

__all__ = ["CommitTracker"]


class CommitTracker:
    """Handed-out and committed offsets of one claimed partition. Not thread-safe.

    Offsets are handed out in increasing order (gaps allowed, as in compacted topics).
    :attr:`position` is the largest offset ``p`` such that every handed-out offset ``<= p``
    is committed; it starts at ``last_offset`` (the position the claim resumed from).
    """

    def __init__(self, last_offset: int) -> None:
        self._position = last_offset
        self._last_handed = last_offset
        self._order: deque[int] = deque()  # handed out, oldest first, not yet passed
        self._outstanding: set[int] = set()  # handed out and not yet committed

    @property
    def position(self) -> int:
        return self._position

    @property
    def last_handed_out(self) -> int:
        return self._last_handed

    @property
    def outstanding(self) -> int:
        """How many handed-out messages are not committed yet."""
        return len(self._outstanding)

    def handed_out(self, offset: int) -> None:
        if offset <= self._last_handed:
            raise ValueError(
                f"offset {offset} handed out after {self._last_handed}: offsets must increase"
            )
        self._last_handed = offset
        self._order.append(offset)
        self._outstanding.add(offset)

    def handed_out_many(self, offsets: Sequence[int]) -> None:
        """:meth:`handed_out` for a batch the caller keeps in increasing order (its buffer
        is), in bulk: the hot path checks only where the batch starts and ends."""
        if not offsets:
            return
        if offsets[0] <= self._last_handed or offsets[-1] < offsets[0]:
            raise ValueError(
                f"offsets {offsets[0]}..{offsets[-1]} handed out after {self._last_handed}: "
                "offsets must increase"
            )
        self._last_handed = offsets[-1]
        self._order.extend(offsets)
        self._outstanding.update(offsets)

    def commit_many(self, offsets: Iterable[int]) -> int:
        """:meth:`commit` for many offsets; returns how many were outstanding."""
        outstanding = self._outstanding
        before = len(outstanding)
        outstanding.difference_update(offsets)
        done = before - len(outstanding)
        if done:
            order = self._order
            if not outstanding:  # everything handed out is committed: the usual case
                self._position = order[-1]
                order.clear()
            else:
                while order[0] not in outstanding:
                    self._position = order.popleft()
        return done

    def commit(self, offset: int) -> bool:
        """Mark ``offset`` handled; False if it was not outstanding (unknown or repeated)."""
        if offset not in self._outstanding:
            return False
        self._outstanding.remove(offset)
        order = self._order
        while order and order[0] not in self._outstanding:
            self._position = order.popleft()
        return True

    def __repr__(self) -> str:
        return (
            f"CommitTracker(position={self._position}, last_handed_out={self._last_handed}, "
            f"outstanding={len(self._outstanding)})"
        )
