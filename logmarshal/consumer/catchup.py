"""The edge's answer to the core's ``CatchUp`` (after a stall, and the start-up replay): wait
until the replay of every coordination partition reached the log's end as looked up after
the core asked.

The ends are looked up once per ask and waited for across the driver's passes. Looked up
afresh each pass, on a busy log with slow look-ups and a lagging replay (a loaded machine,
a Kafka leader away) they stayed ahead of the replay pass after pass, and the member handed
out nothing until the log went quiet.
"""

from __future__ import annotations

import threading

from ..marshaler import Marshaler

__all__ = ["CatchingUp"]


class CatchingUp:
    """Whether a catch-up is wanted (:attr:`wanted`) and how far it has to go."""

    def __init__(self, marshaler: Marshaler) -> None:
        self._marshaler = marshaler
        self._lock = threading.Lock()
        self._asked = 0  # asks so far
        self._ends: tuple[int, dict[int, int]] | None = None  # (asks then, the log's ends)
        #: set by :meth:`ask`, cleared once :meth:`reached` says so
        self.wanted = threading.Event()

    def ask(self) -> None:
        """The core asked (``CatchUp``): ends looked up from now on count, not earlier ones."""
        with self._lock:
            self._asked += 1
            self.wanted.set()

    def reached(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the replay to reach the ends of the last ask (looked up
        now if not yet: raises what the look-up raises). True once, then not :attr:`wanted`
        until asked again; False if the core asked again meanwhile (its ends come next)."""
        with self._lock:
            asked, ends = self._asked, self._ends
        if ends is None or ends[0] != asked:
            ends = (asked, self._marshaler.log_ends())
            with self._lock:
                self._ends = ends
        if not self._marshaler.wait_reached(ends[1], timeout):
            return False
        with self._lock:
            if self._asked != ends[0]:
                return False
            self.wanted.clear()
            self._ends = None
        return True
