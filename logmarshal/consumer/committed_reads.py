"""Kafka's committed offsets of a group, read off the member's fetch thread, until they answer.

A partition the coordination log has no position for starts at the Kafka group's committed
offset, where it has one (``core/fetching.on_bounds``). Reading it (OffsetFetch) can take
seconds (a coordinator moving, a transactional commit still pending: 10 s) or fail. Read on
the fetch thread, it held up every other partition of the member for that long; and a
failed read applied ``auto_offset_reset``, which a Kafka consumer never does for a read that
failed (only for a group with no offset), so an AMO group whose ``__marshal`` was made again
handed its records out again after one failed read. Here the reads run on a thread of their
own and are retried, with a growing pause, until they answer; the fetch thread parks the
look-ups that wait for them and goes on with the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ..admin.mirror import ReadInPart

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: the pause after a failed read, doubling up to the most
FIRST_PAUSE = 0.2
MOST_PAUSE = 5.0
#: a read failing again is said at most this often (seconds)
SAY_EVERY = 30.0


class CommittedReads:
    """Asks for keys, answers them later: ``answered`` is called (on the read thread) with
    the keys whose answer is ready; :meth:`take` gives each answer once."""

    def __init__(
        self,
        read: Callable[[Sequence[Key]], Mapping[Key, int]],
        answered: Callable[[Sequence[Key]], None],
        name: str,
    ) -> None:
        self._read = read
        self._answered = answered
        self._name = name
        self._lock = threading.Lock()
        self._pending: set[Key] = set()
        self._answers: dict[Key, int | None] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()  # closed (set under the lock)
        self._thread: threading.Thread | None = None

    def ask(self, keys: Sequence[Key]) -> None:
        """Read ``keys``' committed offsets (those not answered or asked already)."""
        with self._lock:
            if self._stop.is_set():
                return
            ready = [k for k in keys if k in self._answers]
            self._pending.update(k for k in keys if k not in self._answers)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"{self._name}-committed", daemon=True
                )
                self._thread.start()
        self._wake.set()
        if ready:  # (answered after the asker last looked: it is told now)
            self._answered(ready)

    def take(self, key: Key) -> tuple[bool, int | None]:
        """(True, the committed next offset or None when the group has none) once answered,
        then forgotten (a later start reads again); (False, None) before."""
        with self._lock:
            if key not in self._answers:
                return False, None
            return True, self._answers.pop(key)

    def forget(self, key: Key) -> None:
        """``key`` is not wanted any more (dropped): no answer is kept for it."""
        with self._lock:
            self._pending.discard(key)
            self._answers.pop(key, None)

    def close(self) -> None:
        """Stop reading; a read in flight is not waited for (its answer is dropped)."""
        with self._lock:
            self._stop.set()
            self._pending.clear()
        self._wake.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the read thread to end (after :meth:`close`)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        pause, failing_since, said_at = FIRST_PAUSE, 0.0, 0.0
        while True:
            self._wake.wait()
            with self._lock:
                self._wake.clear()
                if self._stop.is_set():
                    return
                keys = sorted(self._pending)
            if not keys:
                continue
            error: Exception | None = None
            try:
                found, failed = dict(self._read(keys)), []
            except ReadInPart as exc:  # (the answered ones start; the others are read again)
                found, failed, error = exc.found, sorted(exc.failed), exc
            except Exception as exc:  # (read again: a failed read is no answer, as in Kafka)
                found, failed, error = {}, keys, exc
            if failed:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - said_at >= SAY_EVERY:
                    said_at = now
                    shown = ", ".join(f"{t}/{p}" for t, p in failed[:5])
                    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
                    log.warning(
                        "%s: cannot read the Kafka group's committed offsets of %s%s (they "
                        "start once it answers; failing for %.0f s, tried again in %.1f s): %s",
                        self._name,
                        shown,
                        more,
                        now - failing_since,
                        pause,
                        error,
                    )
            elif failing_since:
                log.info("%s: the Kafka group's committed offsets are read again", self._name)
                pause, failing_since, said_at = FIRST_PAUSE, 0.0, 0.0
            refused = set(failed)
            with self._lock:
                if self._stop.is_set():
                    return
                done = [k for k in keys if k in self._pending and k not in refused]
                for key in done:
                    self._pending.discard(key)
                    self._answers[key] = found.get(key)
            if done:
                self._answered(done)
            if failed:
                if self._stop.wait(pause):
                    return
                pause = min(pause * 2, MOST_PAUSE)
                self._wake.set()  # (the refused keys are still pending)
