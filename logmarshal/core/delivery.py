"""ALO and AMO as two delivery strategies (instead of branches on a mode).

Each answers four questions for a held partition: which position its heartbeats carry, which
its release carries, whether a reservation must be written before anything is handed out,
and which buffered records may be handed out once the lease and the replay allow it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._commits import CommitTracker
from .held import Held

__all__ = ["AtLeastOnce", "AtMostOnce", "Delivery", "delivery_for"]

OffsetOf = Callable[[Any], int]


class Delivery(Protocol):
    def position(self, held: Held) -> int:
        """``last_offset`` our heartbeats carry."""

    def release_position(self, held: Held) -> int:
        """``last_offset`` our ReleasingPartition carries."""

    def to_reserve(self, held: Held, window: int, offset_of: OffsetOf) -> int | None:
        """Offset the next ClaimingMessages reserves through (at most ``window`` records
        reserved and not handed out), or None."""

    def take(self, held: Held, limit: int, offset_of: OffsetOf) -> list[Any]:
        """Pop what may be handed out now (the caller checked lease and replay)."""

    def start(self, held: Held, last_offset: int) -> None:
        """(Re)start the books at ``last_offset`` (adopted, or a position looked up)."""

    def seek(self, held: Held, offset: int) -> None:
        """The books once a seek or a reset moved a positioned read to ``offset``."""


def _pop(held: Held, limit: int) -> list[Any]:
    buffer = held.buffer
    if len(buffer) <= limit:  # in bulk: the hot path of every consumer
        out = list(buffer)
        buffer.clear()
        return out
    # popleft ``limit`` times at C speed (iter(callable, sentinel): a record is never None)
    return list(itertools.islice(iter(buffer.popleft, None), limit))


class AtLeastOnce:
    """Hand out what was fetched; heartbeats carry the contiguous committed position."""

    def position(self, held: Held) -> int:
        assert held.tracker is not None
        return held.tracker.position

    def release_position(self, held: Held) -> int:
        return self.position(held)

    def to_reserve(self, held: Held, window: int, offset_of: OffsetOf) -> int | None:
        return None

    def take(self, held: Held, limit: int, offset_of: OffsetOf) -> list[Any]:
        out = _pop(held, limit)
        if out:
            assert held.tracker is not None
            held.tracker.handed_out_many(list(map(offset_of, out)))
            held.handed_through = offset_of(out[-1])
        return out

    def start(self, held: Held, last_offset: int) -> None:
        held.tracker = CommitTracker(last_offset)
        held.handed_through = last_offset

    def seek(self, held: Held, offset: int) -> None:
        # as Kafka's seek, nothing is committed by it: what was handed out and not committed
        # holds the position back until it is, wherever the target lies; what lies between
        # is passed with the next commit after the seek. Back to what was handed out, that
        # is forgotten as handed out (it is handed out again)
        if offset <= held.handed_through:
            assert held.tracker is not None
            held.tracker.rewind(offset)
            held.handed_through = offset - 1


class AtMostOnce:
    """Reserve (ClaimingMessages), confirm with a heartbeat, only then hand out: a crash
    loses at most the reserved window, nothing is handed out twice.

    The reservations run ahead: the next window is reserved while the confirmed one is
    handed out, so one coordination round trip covers several polls, and, where the edge
    told the log's end, ahead of the fetches (offsets the log holds, not yet read). Each
    starts where the previous one ended (PROTOCOL.md "Version 4", property c: the resume
    point once that one was accepted), so only one is in flight at a time."""

    def position(self, held: Held) -> int:
        # reserved offsets count as consumed: a successor resumes after them anyway; and
        # never below what a heartbeat of ours already recorded (one that went right behind
        # a reservation whose write failed): positions do not move back
        return max(held.claimed_through, held.beaten_through)

    def release_position(self, held: Held) -> int:
        # a graceful release gives back what was reserved but never handed out (the log
        # lowers claimed_through to it: PROTOCOL.md rule 6), so a clean close loses nothing
        return held.handed_through

    def to_reserve(self, held: Held, window: int, offset_of: OffsetOf) -> int | None:
        if not held.demand:
            return None  # reserved only when a poll asks: a crash loses no more than that
        if held.reserve_token is not None or held.confirmed_through < self.position(held):
            # one reservation at a time, and only once everything our records said is
            # confirmed: the next one starts at the resume point the log has confirmed (a
            # heartbeat of ours behind an unanswered reservation may have moved it: the next
            # heartbeat's verdict says where it is)
            return None
        buffer = held.buffer  # what was fetched and not handed out, in offset order
        if not buffer:
            return None
        # the window is the first ``window`` records not handed out: reserve through its
        # end, unless everything in it is reserved already (hand some out first)
        last = offset_of(buffer[min(window, len(buffer)) - 1])
        reserved = held.claimed_through - held.handed_through
        if held.log_end >= 0 and reserved <= window // 2:
            # ahead of what was fetched, up to the log's end (offsets: at most ``window``
            # records, fewer where offsets have gaps), once half the window is handed out:
            # a reader faster than its fetches still reserves a whole window per round trip
            # (a reservation of the buffer only covered what one fetch brought)
            last = max(last, min(held.handed_through + window, held.log_end - 1))
        return last if last > held.claimed_through else None

    def take(self, held: Held, limit: int, offset_of: OffsetOf) -> list[Any]:
        buffer = held.buffer
        if not buffer or offset_of(buffer[-1]) > held.confirmed_through:
            # the confirmed ones lead the buffer (offsets increase): a batch of them when the
            # batch's last one is (the usual case: the window is several batches), else
            # counted by bisection; then popped at C speed, not a test per record
            n = min(limit, len(buffer))
            if n and offset_of(buffer[n - 1]) > held.confirmed_through:
                n = bisect.bisect_right(buffer, held.confirmed_through, hi=n, key=offset_of)
            out = list(itertools.islice(iter(buffer.popleft, None), n))
        else:
            out = _pop(held, limit)
        if out:
            held.handed_from = offset_of(out[0])
            held.handed_through = offset_of(out[-1])
        return out

    def give_back(
        self,
        held: Held,
        records: Sequence[Any],
        handout: int,
        offset_of: OffsetOf,
        guard: bool = True,
    ) -> None:
        """``records``, the end of the last batch handed out, never reached user code: they
        lead the buffer again and count as not handed out (a release gives them back to the
        log, rule 6). They were reserved and confirmed: handed out again without a new
        reservation, and never twice to user code, since they were not once. Anything else
        may have reached user code: refused (``guard``: the simulator's experiment)."""
        offsets = [offset_of(r) for r in records]
        first, last = offsets[0], offsets[-1]
        if guard and (
            held.handed_from is None
            or held.handout != handout
            or first < held.handed_from
            or last != held.handed_through
            or any(b <= a for a, b in itertools.pairwise(offsets))
        ):
            raise ValueError(
                f"{held.topic}/{held.partition}: {first}..{last} of hand-out {handout} is not "
                f"the end of the last batch handed out (hand-out {held.handout}: "
                f"{held.handed_from}..{held.handed_through})"
            )
        held.buffer.extendleft(reversed(records))
        held.handed_through = first - 1

    def seek(self, held: Held, offset: int) -> None:
        self.start(held, offset - 1)

    def start(self, held: Held, last_offset: int) -> None:
        # only what was handed out moves (a seek or a reset only ever moves it forward):
        # what the log reserved stays what it is, so the next reservation starts at the
        # log's resume point (property c) and spans the records skipped, which are never
        # handed out. Raising ``claimed_through`` to the seek made that reservation name
        # the target, which the log refused, and the heartbeat behind it, accepted, moved
        # the position a window past the target (found by an attack, 2026-12-02). A new
        # claim's books are set where the log's position is (``fetching.on_bounds``)
        held.handed_through = last_offset
        # nothing handed out before is given back: a seek past it stays (found by an attack)
        held.handed_from = held.handout = None


def delivery_for(mode: str) -> Delivery:
    return AtMostOnce() if mode == "amo" else AtLeastOnce()
