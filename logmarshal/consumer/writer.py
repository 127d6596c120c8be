"""Coordination writes for a consumer core: one thread per coordination partition.

Writes to one coordination partition keep their order (a heartbeat never overtakes the
reservation before it), and a partition whose broker is down holds up only its own writes:
claims coordinated elsewhere keep heartbeating (a single writer once blocked them all).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from ..core import WriteFailed, Written
from ..errors import ClosedError
from ..marshaler import Marshaler

__all__ = ["CoordinationWriter"]

log = logging.getLogger(__name__)

_STOP = None
#: the most records one write carries
MAX_BATCH = 64


class CoordinationWriter:
    """Carries ``Write`` actions out; answers each with ``Written`` or ``WriteFailed``."""

    def __init__(
        self, marshaler: Marshaler, answer: Callable[[Written | WriteFailed], None], name: str
    ) -> None:
        self._marshaler = marshaler
        self._answer = answer
        self._name = name
        self._queues: dict[int, queue.SimpleQueue[tuple[int, bytes, bytes] | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False

    def write(self, token: int, cp: int, key: bytes, value: bytes) -> None:
        with self._lock:
            if self._stopped:
                return  # closed: nothing more is written, and nobody waits for an answer
            q = self._queues.get(cp)
            if q is None:
                q = self._queues[cp] = queue.SimpleQueue()
                thread = threading.Thread(
                    target=self._run, args=(cp, q), name=f"{self._name}:write:{cp}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        q.put((token, key, value))

    def _run(self, cp: int, q: queue.SimpleQueue[tuple[int, bytes, bytes] | None]) -> None:
        while True:
            item = q.get()
            batch: list[tuple[int, bytes, bytes]] = []
            while item is not _STOP:
                batch.append(item)
                if len(batch) >= MAX_BATCH or q.empty():
                    break
                item = q.get()
            if batch:
                self._send(cp, batch)
            if item is _STOP:
                return

    def _send(self, cp: int, batch: list[tuple[int, bytes, bytes]]) -> None:
        """What queued up meanwhile goes in one call: in order, one flush."""
        try:
            written = self._marshaler.write_records(cp, [(k, v) for _, k, v in batch])
        except ClosedError:
            written = None
        except Exception as exc:
            log.info("%s: coordination write to %d failed: %s", self._name, cp, exc)
            written = None
        for i, (token, _, _) in enumerate(batch):
            self._answer(WriteFailed(token) if written is None else Written(token, written[i].offset))

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
