"""The user's partition callbacks (``on_assigned``, ``on_revoked``, ``on_lost``): queued
where the core says so (under the consumer's lock, on whichever thread stepped it) and run
on the thread that polls, as Kafka's consumer runs its rebalance listener in ``poll``: a
callback that commits or seeks then never runs inside the core's step."""

from __future__ import annotations

import logging
import threading
from collections import deque

from .config import PartitionsCallback, TopicPartition

__all__ = ["PartitionCallbacks", "PollLock"]

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
        #: what a callback called by close() raised that is no Exception (KeyboardInterrupt,
        #: SystemExit): raised once the close is done (it left a half-closed consumer that
        #: went on heartbeating its claims, and a second close() did nothing)
        self.deferred: BaseException | None = None

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

    def call(
        self, callback: PartitionsCallback, keys: list[TopicPartition], closing: bool = False
    ) -> None:
        """One callback: what it raises is logged, never the consumer's failure (``closing``:
        nor its close's, :attr:`deferred`)."""
        try:
            callback(keys)
        except Exception:
            log.exception("%s: partition callback %r failed", self._name, callback)
        except BaseException as exc:
            if not closing:
                raise
            log.warning("%s: partition callback %r raised %r", self._name, callback, exc)
            self.deferred = self.deferred or exc

    def raise_deferred(self) -> None:
        exc, self.deferred = self.deferred, None
        if exc is not None:
            raise exc

    def _for(self, kind: str) -> PartitionsCallback | None:
        return {"assigned": self.on_assigned, "revoked": self.on_revoked, "lost": self.on_lost}[
            kind
        ]


class PollLock:
    """The lock a poll holds, also while it runs the partition callbacks: a poll from one
    of them (on the same thread) is refused, where it waited for itself for good."""

    __slots__ = ("_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            if self._owner == threading.get_ident():
                raise RuntimeError(
                    "poll() from a partition callback (on_assigned, on_revoked, on_lost), "
                    "which a poll runs: poll once it has returned"
                )
            self._lock.acquire()
        self._owner = threading.get_ident()

    def __exit__(self, *exc: object) -> None:
        self._owner = None
        self._lock.release()
