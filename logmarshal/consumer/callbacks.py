"""The user's partition callbacks (``on_assigned``, ``on_revoked``, ``on_lost``): queued
where the core says so (under the consumer's lock, on whichever thread stepped it) and run
on the thread that polls, as Kafka's consumer runs its rebalance listener in ``poll``: a
callback that commits or seeks then never runs inside the core's step."""

from __future__ import annotations

import logging
import threading
from collections import deque

from .config import PartitionsCallback, TopicPartition

__all__ = ["PartitionCallbacks"]

log = logging.getLogger(__name__)


class PartitionCallbacks:
    """The callbacks a consumer was given, and the events queued for them."""

    def __init__(
        self,
        lock: threading.Lock | threading.Condition,
        name: str,
        *,
        on_assigned: PartitionsCallback | None,
        on_revoked: PartitionsCallback | None,
        on_lost: PartitionsCallback | None,
    ) -> None:
        self._lock = lock  # the consumer's: queued under it, taken under it
        self._name = name
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.on_lost = on_lost
        self._events: deque[tuple[str, TopicPartition]] = deque()

    def __bool__(self) -> bool:
        """Anything queued? (peeked without the lock: one queued later waits a turn)"""
        return bool(self._events)

    def queue(self, kind: str, key: TopicPartition) -> None:
        """Under the lock: ``key`` was ``kind`` (assigned, revoked, lost)."""
        if self._for(kind) is not None:
            self._events.append((kind, key))

    def deliver(self, closing: bool = False) -> None:
        """Run the queued callbacks in the calling thread, runs of one kind together (once
        ``closing``, no ``on_assigned``)."""
        while True:
            with self._lock:
                if not self._events:
                    return
                kind, key = self._events.popleft()
                keys = [key]
                while self._events and self._events[0][0] == kind:
                    keys.append(self._events.popleft()[1])
            callback = self._for(kind)
            if callback is not None and not (closing and kind == "assigned"):
                self.call(callback, sorted(keys))

    def call(self, callback: PartitionsCallback, keys: list[TopicPartition]) -> None:
        """One callback: what it raises is logged, never the consumer's failure."""
        try:
            callback(keys)
        except Exception:
            log.exception("%s: partition callback %r failed", self._name, callback)

    def _for(self, kind: str) -> PartitionsCallback | None:
        return {"assigned": self.on_assigned, "revoked": self.on_revoked, "lost": self.on_lost}[
            kind
        ]
