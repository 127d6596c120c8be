"""The cyclic GC made to collect at every chance, for the tests of what the C helpers that
build Messages keep out of its sight (``logmarshal/_fastconsume.c``): one harness, so that
both Consumers' tests watch collections the same way."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator, Sized


@contextlib.contextmanager
def collections_seen(watched: Sized, collecting: bool) -> Iterator[list[int]]:
    """Yields the length ``watched`` had at the start of each collection this thread ran
    meanwhile (a thread left by another test may start one too: not counted), with the
    threshold at 1 (any allocation of a tracked object may start one) and the collector
    disabled unless ``collecting``; all restored on exit. The list free list is used up
    first, so that the call's first list is a new one, which counts."""
    seen: list[int] = []
    ours = threading.get_ident()

    def noted(phase: str, info: dict) -> None:
        if phase == "start" and threading.get_ident() == ours:
            seen.append(len(watched))

    thresholds, was = gc.get_threshold(), gc.isenabled()
    spare = [[] for _ in range(200)]
    gc.callbacks.append(noted)
    try:
        if not collecting:
            gc.disable()
        gc.set_threshold(1)
        yield seen
    finally:
        gc.callbacks.remove(noted)
        gc.set_threshold(*thresholds)
        if was:
            gc.enable()
        del spare
