"""The edge's answer to the core's ``CatchUp`` (after a stall, and the start-up replay): wait
until the replay of every coordination partition reached the log's end as looked up after
the core asked.

The ends are looked up once per ask and waited for across the driver's passes. Looked up
afresh each pass, on a busy log with slow look-ups and a lagging replay (a loaded machine,
a Kafka leader away) they stayed ahead of the replay pass after pass, and the member handed
out nothing until the log went quiet.

The answer says when its ends were looked up (``Replayed.ends_at``): the process can stop
between reaching them and the core's step, and ends from before a stall answer no catch-up
after it (the core asks again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..core import Replayed
from ..errors import RETRIABLE, ClosedError
from ..marshaler import Marshaler

__all__ = ["CatchingUp"]

log = logging.getLogger(__name__)


class CatchingUp:
    """Asks (from any thread) and how far the one thread that answers them has to go."""

    def __init__(self, marshaler: Marshaler, clock: Callable[[], int]) -> None:
        self._marshaler = marshaler
        self._clock = clock  # the core's (ms)
        self._lock = threading.Lock()
        self._asked = 0  # asks so far
        self._answered = 0  # the asks :meth:`reached` answered
        # (asks when looked up, when, the log's ends then): the answering thread's alone
        self._ends: tuple[int, int, dict[int, int]] | None = None

    @property
    def wanted(self) -> bool:
        """Is an ask not answered yet?"""
        return self._asked != self._answered

    def ask(self) -> None:
        """The core asked (``CatchUp``): ends looked up from now on count, not earlier ones."""
        with self._lock:
            self._asked += 1

    def reached(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` for the replay to reach the ends of the last ask (looked up
        now if not yet: raises what the look-up raises). Once reached, when (the clock) those
        ends were looked up, and not :attr:`wanted` until asked again; None if not reached,
        or if the core asked again meanwhile (its ends come next)."""
        with self._lock:
            asked = self._asked
        if self._ends is None or self._ends[0] != asked:
            looked_at = self._clock()  # before: a stall before the look-up makes it older
            self._ends = (asked, looked_at, self._marshaler.log_ends())
        ends = self._ends
        if not self._marshaler.wait_reached(ends[2], timeout):
            return None
        with self._lock:
            if self._asked != ends[0]:
                return None
            self._answered = ends[0]
        self._ends = None
        return ends[1]

    def again(self, tick: float, name: str) -> int | None:
        """A driver pass's wait (a tick) for the catch-up the core asked for (ticks go on):
        when the ends reached were looked up, or None."""
        try:
            return self.reached(tick)
        except RETRIABLE as exc:
            log.warning("%s: cannot read the coordination log's end (%s); retrying", name, exc)
            return None

    def replayed(self, looked_at: int) -> list[Replayed]:
        """What tells the core the replay reached the log's ends looked up at ``looked_at``
        (at start-up, and when it asks after a stall: ``CatchUp``): one event per
        coordination partition, each stepped on its own."""
        worlds = self._marshaler.worlds()
        with self._marshaler.replay_paused():
            applied = [worlds[cp].applied_through for cp in range(len(worlds))]
        return [
            Replayed(cp, offset, at_end=True, ends_at=looked_at)
            for cp, offset in enumerate(applied)
        ]

    def first(self, stop: threading.Event, tick: float, name: str) -> int | None:
        """The driver's start-up: :meth:`reached` once the replay reached the log's ends,
        with look-ups that fail retried (the driver must live on, or nothing is ever handed
        out); None once ``stop`` is set or the log is closed."""
        backoff = tick
        while not stop.is_set():
            try:
                looked_at = self.reached(timeout=tick * 4)
                if looked_at is not None:
                    return looked_at
            except RETRIABLE as exc:
                # the log's end unknown for now (a topic just created, a leader away)
                log.warning("%s: cannot read the coordination log's end (%s); retrying",
                            name, exc)  # fmt: skip
                stop.wait(backoff)
                backoff = min(backoff * 2, 0.25)
            except ClosedError:
                return None
            except Exception:  # (it stopped the driver: the member never caught up)
                log.exception("%s: cannot read the log's end; retrying", name)
                stop.wait(1.0)
        return None
