"""The clock a Marshaler and its consumers use to *predict*, never to decide.

Ownership is decided by replaying the coordination log with the log's own timestamps. A
client's clock only answers "is a heartbeat due?", "may this partition be claimable yet?"
and "must I stop handing out before my claim could lapse?". It is injected so tests can
move time by hand instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall time (epoch seconds) for comparing with log timestamps, monotonic time for ages."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


@attrs.frozen
class SystemClock:
    """The process's real clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that only moves when told to; thread-safe.

    ``time_ms`` fits ``EmbeddedCluster(clock=...)``, so one ManualClock can drive both the
    log-append timestamps (the decisions) and a Marshaler's predictions.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._start = start
        self._now = start

    def time(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._now - self._start

    def time_ms(self) -> int:
        with self._lock:
            return round(self._now * 1000)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go backwards, got {seconds}")
        with self._lock:
            self._now += seconds

    def __repr__(self) -> str:
        return f"ManualClock({self.time()!r})"
