"""Shared fixtures: an injectable clock and a data directory per test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import DataDir, NewRecord, encode_batch


class FakeClock:
    """A settable epoch-ms clock, so rolling and retention never depend on wall time."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def datadir(tmp_path: Path, clock: FakeClock) -> Iterator[DataDir]:
    dd = DataDir(tmp_path / "data", clock=clock)
    try:
        yield dd
    finally:
        dd.close()


def batch(values: list[bytes], ts: int = 1_700_000_000_000, key: bytes | None = None) -> bytes:
    """One encoded batch of the given values, all with timestamp ts."""
    return encode_batch([NewRecord(v, key=key, timestamp=ts) for v in values])
