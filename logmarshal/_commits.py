"""Contiguous-commit tracking for at-least-once consumption.

Users may finish messages out of order (a worker pool), but a heartbeat's ``last_offset``
promises that *everything* up to it is handled. So the position only advances over an
unbroken run of committed offsets; one slow message holds it back, and a crash then
repeats from that message rather than skipping it.

The books are kept by runs, not by offsets: each batch handed out is one run, a range
``first..last`` while its offsets are contiguous (the usual case; a list of them otherwise,
as in compacted topics), with a set of its outstanding offsets only once a commit leaves a
hole in it. A polled batch committed whole, or messages committed in order, cost the books
a few operations per batch or per call, not a set entry per offset (docs/performance.md,
"Consumer").
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Sequence

__all__ = ["CommitTracker"]


class _Run:
    """Offsets handed out together, in increasing order, not yet passed by the position:
    ``first..last`` (``offsets`` None: every one of them) or the ``offsets`` deque (gaps).
    ``left``: None while every one of them is outstanding, else the outstanding ones (those
    not in it are committed and wait for an earlier one)."""

    __slots__ = ("first", "last", "left", "offsets")

    def __init__(self, first: int, last: int, offsets: deque[int] | None) -> None:
        self.first = first
        self.last = last
        self.offsets = offsets
        self.left: set[int] | None = None

    def outstanding(self) -> set[int]:
        """The outstanding offsets as a set (made on the first commit out of order)."""
        if self.left is None:
            self.left = (
                set(range(self.first, self.last + 1)) if self.offsets is None else set(self.offsets)
            )
        return self.left


class CommitTracker:
    """Handed-out and committed offsets of one claimed partition. Not thread-safe.

    Offsets are handed out in increasing order (gaps allowed, as in compacted topics).
    :attr:`position` is the largest offset ``p`` such that every handed-out offset ``<= p``
    is committed; it starts at ``last_offset`` (the position the claim resumed from).
    """

    def __init__(self, last_offset: int) -> None:
        self._position = last_offset
        self._last_handed = last_offset
        # runs not passed yet, oldest first, from index _head on (popped by moving _head);
        # _lasts[i] is _runs[i].last, for bisect
        self._runs: list[_Run] = []
        self._lasts: list[int] = []
        self._head = 0
        self._outstanding = 0

    @property
    def position(self) -> int:
        return self._position

    @property
    def last_handed_out(self) -> int:
        return self._last_handed

    @property
    def outstanding(self) -> int:
        """How many handed-out messages are not committed yet."""
        return self._outstanding

    def handed_out(self, offset: int) -> None:
        if offset <= self._last_handed:
            raise ValueError(
                f"offset {offset} handed out after {self._last_handed}: offsets must increase"
            )
        self._last_handed = offset
        self._outstanding += 1
        runs = self._runs
        if len(runs) > self._head:
            tail = runs[-1]
            if tail.offsets is None and tail.left is None and offset == tail.last + 1:
                tail.last = self._lasts[-1] = offset  # the tail run grows by one
                return
        runs.append(_Run(offset, offset, None))
        self._lasts.append(offset)

    def handed_out_many(self, offsets: Sequence[int]) -> None:
        """:meth:`handed_out` for a batch the caller keeps in increasing order (its buffer
        is), in bulk: the hot path checks only where the batch starts and ends."""
        if not offsets:
            return
        first, last, n = offsets[0], offsets[-1], len(offsets)
        if first <= self._last_handed or last < first:
            raise ValueError(
                f"offsets {first}..{last} handed out after {self._last_handed}: "
                "offsets must increase"
            )
        self._last_handed = last
        self._outstanding += n
        self._runs.append(_Run(first, last, None if last - first + 1 == n else deque(offsets)))
        self._lasts.append(last)

    def commit_many(self, offsets: Iterable[int]) -> int:
        """:meth:`commit` for many offsets; returns how many were outstanding."""
        offs = offsets if type(offsets) is list else list(offsets)
        if not offs:
            return 0
        if self._head < len(self._runs):
            run = self._runs[self._head]
            first = offs[0]
            # the usual call: a polled batch, in order, from where the position stands
            if run.left is None and first == run.first and offs[-1] <= run.last:
                n = len(offs)
                if run.offsets is None:
                    if offs[-1] - first + 1 == n and offs == list(range(first, first + n)):
                        self._passed(run, run.first + n - 1, n)
                        return n
                elif n <= len(run.offsets) and offs == list(run.offsets)[:n]:
                    for _ in range(n - 1):
                        run.offsets.popleft()
                    self._passed(run, run.offsets.popleft(), n)
                    return n
        return sum(map(self.commit, offs))

    def commit(self, offset: int) -> bool:
        """Mark ``offset`` handled; False if it was not outstanding (unknown or repeated)."""
        runs = self._runs
        i = bisect.bisect_left(self._lasts, offset, self._head)
        if i == len(runs):
            return False
        run = runs[i]
        if offset < run.first:
            return False  # passed already, or never handed out
        if run.left is None:
            if run.offsets is None:
                if i == self._head and offset == run.first:  # in order: passed at once
                    self._passed(run, run.first, 1)
                    return True
            elif offset not in run.offsets:
                return False  # a gap: never handed out
            elif i == self._head and offset == run.offsets[0]:
                self._passed(run, run.offsets.popleft(), 1)
                return True
        left = run.outstanding()
        if offset not in left:
            return False
        left.remove(offset)
        self._outstanding -= 1
        if i == self._head:
            self._advance()
        return True

    def rewind(self, target: int) -> None:
        """Offsets from ``target`` on will be handed out again (a seek back): forget them as
        handed out. What was handed out below ``target`` stays outstanding, so the position
        passes it only once it is committed; a position at or past ``target`` moves back to
        ``target - 1``."""
        if target > self._last_handed:
            return
        runs, lasts, outstanding = [], [], 0
        for run in self._runs[self._head :]:
            if run.first >= target:
                continue  # wholly handed out again
            if run.last >= target:
                if run.offsets is not None:
                    run.offsets = deque(o for o in run.offsets if o < target)
                    run.last = run.offsets[-1]  # (run.first, below target, is its first)
                else:
                    run.last = target - 1
                if run.left is not None:
                    run.left = {o for o in run.left if o < target}
            runs.append(run)
            lasts.append(run.last)
            if run.left is not None:
                outstanding += len(run.left)
            else:
                outstanding += run.last - run.first + 1 if run.offsets is None else len(run.offsets)
        self._runs, self._lasts, self._head = runs, lasts, 0
        self._outstanding = outstanding
        self._last_handed = target - 1
        self._position = min(self._position, target - 1)
        self._advance()  # a head run whose outstanding offsets were all at or past target

    def _passed(self, run: _Run, through: int, n: int) -> None:
        """``n`` offsets at the front of the head ``run``, through ``through``, committed
        while all of them were outstanding: the position passes them. ``through`` is always
        one of our own ints, never the caller's offset: a commit of an offset equal to it
        but of another type (a numpy integer, True, 5.0, in a Message built by hand) was
        stored as the position, and the next heartbeat failed the consumer's core."""
        self._outstanding -= n
        self._position = through
        if through == run.last:
            self._pop()
            self._advance()
        elif run.offsets is None:
            run.first = through + 1
        else:
            run.first = run.offsets[0]

    def _advance(self) -> None:
        """Move the position over what is committed at the front of the head runs."""
        runs = self._runs
        while self._head < len(runs):
            run = runs[self._head]
            left = run.left
            if left is None:
                return  # its first offset is outstanding
            if run.offsets is None:
                first = run.first
                while first <= run.last and first not in left:
                    first += 1
                if first > run.first:
                    self._position = first - 1
                    run.first = first
                if first <= run.last:
                    return
            else:
                order = run.offsets
                while order and order[0] not in left:
                    self._position = order.popleft()
                if order:
                    run.first = order[0]
                    return
            self._pop()

    def _pop(self) -> None:
        """Forget the head run (every offset of it passed)."""
        self._head += 1
        if self._head == len(self._runs):
            self._runs.clear()
            self._lasts.clear()
            self._head = 0
        elif self._head >= 64 and self._head * 2 >= len(self._runs):
            del self._runs[: self._head]
            del self._lasts[: self._head]
            self._head = 0

    def __repr__(self) -> str:
        return (
            f"CommitTracker(position={self._position}, last_handed_out={self._last_handed}, "
            f"outstanding={self._outstanding})"
        )
