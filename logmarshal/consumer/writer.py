"""Coordination writes for a consumer core: one thread per coordination partition.

Writes to one coordination partition keep their order (a heartbeat never overtakes the
reservation before it), and a partition whose broker is down holds up only its own writes:
claims coordinated elsewhere keep heartbeating (a single writer once blocked them all).
What one step of the core asks for a partition (a heartbeat pass) goes in one call, and
its answers come back together.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence

from ..core import Write, WriteFailed, Written
from ..errors import ClosedError
from ..marshaler import Marshaler

__all__ = ["CoordinationWriter"]

log = logging.getLogger(__name__)

_STOP = None
#: the most records one write carries
MAX_BATCH = 512

Item = list[tuple[int, bytes, bytes]]


class CoordinationWriter:
    """Carries ``Write`` actions out; answers each with ``Written`` or ``WriteFailed``."""

    def __init__(
        self,
        marshaler: Marshaler,
        answer: Callable[[Sequence[Written | WriteFailed]], None],
        name: str,
    ) -> None:
        self._marshaler = marshaler
        self._answer = answer
        self._name = name
        self._queues: dict[int, queue.SimpleQueue[Item | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False
        # every coordination partition's thread from the start: a member's threads are the
        # same whatever it holds
        for cp in range(marshaler.coordination_partitions):
            self._queue(cp)

    def _queue(self, cp: int) -> queue.SimpleQueue[Item | None]:
        """Under the lock (or before any other thread): ``cp``'s queue and thread."""
        q = self._queues.get(cp)
        if q is None:
            q = self._queues[cp] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._run, args=(cp, q), name=f"{self._name}:write:{cp}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return q

    def write(self, writes: Sequence[Write]) -> None:
        """Queue ``writes`` (in order); each partition's share goes out as one call."""
        by_cp: dict[int, Item] = {}
        for w in writes:
            by_cp.setdefault(w.cp, []).append((w.token, w.key, w.value))
        for cp, item in by_cp.items():
            with self._lock:
                if self._stopped:
                    return  # closed: nothing more is written, and nobody waits for an answer
                q = self._queue(cp)
            q.put(item)

    def _run(self, cp: int, q: queue.SimpleQueue[Item | None]) -> None:
        while True:
            item = q.get()
            batch: Item = []
            while item is not _STOP:
                batch.extend(item)
                if len(batch) >= MAX_BATCH or q.empty():
                    break
                item = q.get()
            for start in range(0, len(batch), MAX_BATCH):
                self._send(cp, batch[start : start + MAX_BATCH])
            if item is _STOP:
                return

    def _send(self, cp: int, batch: Item) -> None:
        """What queued up meanwhile goes in one call: in order, one flush."""
        try:
            written = self._marshaler.write_records(cp, [(k, v) for _, k, v in batch])
        except ClosedError:
            written = None
        except Exception as exc:
            log.info("%s: coordination write to %d failed: %s", self._name, cp, exc)
            written = None
        self._answer(
            [
                WriteFailed(token) if written is None else Written(token, written[i].offset)
                for i, (token, _, _) in enumerate(batch)
            ]
        )

    def stop(self, timeout: float | None) -> None:
        """Stop after the writes queued so far."""
        with self._lock:
            self._stopped = True
            for q in self._queues.values():
                q.put(_STOP)
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
