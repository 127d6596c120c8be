"""Answers about the data log: fetched records, a position outside the log, a new claim's span.

A position outside the log never abandons the claim: the reset policy moves it (as Kafka
applies ``auto.offset.reset``), except that AMO never moves below what the log reserved
(PROTOCOL.md "Version 4: at-most-once enforced by the log").
"""

from __future__ import annotations

import logging

from .actions import Action
from .events import Bounds, Fetched, OutOfRange
from .held import Held
from .holding import announce
from .state import MemberState, me, read

__all__ = ["move", "on_bounds", "on_fetched", "on_out_of_range"]

log = logging.getLogger(__name__)


def on_fetched(st: MemberState, event: Fetched) -> None:
    """Buffer fetched records (those from the offset asked for on)."""
    held = read(st, event.topic, event.partition)
    if held is None or held.fetch_token != event.token:
        return  # dropped or moved while it was fetched
    held.fetch_token = None
    if event.log_end >= 0:
        held.log_end = event.log_end
    records = event.records
    if not records or held.next_fetch is None:
        return
    offset_of = st.offset_of
    start = held.next_fetch
    if offset_of(records[0]) < start:  # the log may answer from before the offset asked
        records = [r for r in records if offset_of(r) >= start]
        if not records:
            return
    held.buffer.extend(records)
    held.next_fetch = offset_of(records[-1]) + 1
    held.fetch_after = 0


def on_out_of_range(st: MemberState, now: int, event: OutOfRange, out: list[Action]) -> None:
    """Apply the reset policy to a position outside the log (never abandon the claim)."""
    held = read(st, event.topic, event.partition)
    if held is None or held.fetch_token != event.token or held.next_fetch is None:
        return
    held.fetch_token = None
    offset = held.next_fetch
    if event.diverged is not None and event.diverged < offset and st.cut_told:
        _diverged(st, held, event.diverged)
        return
    if event.start < 0 or event.end < 0:
        # bounds unknown (the edge could not read them: network/fetch_client._bound): no
        # reset on them (ALO went to offset -1, a heartbeat of -2 the log's codec refuses);
        # fetch again a little later, as AMO waiting beyond the end does
        _look_again_later(st, held, now)
        return
    if event.start <= offset <= event.end:
        # the log holds the position: its bounds were read after the fetch was refused (the
        # edge asks for them then) and it grew meanwhile, or the refused fetch was a read-
        # ahead's, past our position (network/readers.py). Fetch again: a reset now could go
        # back below what was handed out (AMO) or skip what was not (ALO, "latest"); under
        # "error" there is nothing to raise
        return
    buffer = held.buffer
    if buffer and offset > event.end and st.offset_of(buffer[0]) <= event.end:
        # a read-ahead fetch refused past the end while our position (the first record read
        # and not handed out) is still in the log: only the tail we read ahead was cut. Keep
        # what the log still holds and fetch on from its end (a reset made "latest" skip the
        # rest and "earliest" go back to the log start). Also when that first record is below
        # the log start: read before retention passed it (an ALO reset forward keeps those),
        # it is handed out as the rest, and what we read from the log start on is in the log
        # (a reset jumped past it, or dropped what was read)
        while buffer and st.offset_of(buffer[-1]) >= event.end:
            buffer.pop()
        held.next_fetch = event.end
        return
    reset = st.options.auto_offset_reset
    if reset == "error":
        held.no_start = (offset, event.start, event.end)  # a poll raises until seek()
        return
    target = event.start if reset == "earliest" else event.end
    if st.options.mode == "amo" and offset > event.end and target <= held.claimed_through:
        # beyond the log's end (a log deleted and made again): offsets up to claimed_through
        # may have been handed out already, so wait for the log to grow. Below its start
        # (retention, or a seek there) the target is above what was handed out: move on.
        # Said once per wait (a refusal comes back at every look)
        if not held.fetch_after:
            log.error(
                "%s: %s/%d position %d is beyond the log end %d; AMO waits for the log to "
                "reach it (set the position with the admin to move back)",
                me(st),
                held.topic,
                held.partition,
                offset,
                event.end,
            )
        _look_again_later(st, held, now)
        return
    log.warning(
        "%s: %s/%d position %d is outside the log (%d..%d); resetting to the %s offset %d",
        me(st),
        held.topic,
        held.partition,
        offset,
        event.start,
        event.end,
        reset,
        target,
    )
    if st.options.mode != "amo" and target >= offset:
        # ALO forward (below the log start): what was read before the log start passed it
        # is still handed out, as Kafka's consumer, which fetches only at its position,
        # hands out what it read; fetch on from the target
        held.next_fetch = target
        return
    move(st, held, target)


def _diverged(st: MemberState, held: Held, at: int) -> None:
    """The log was cut at ``at``, below what ``held`` fetched, and written on (an unclean
    leader election): what was read from ``at`` on is not in the log. Before, the bounds
    held the offset again once the log grew back, and the member fetched on from it: the
    records written at ``at`` and after since the cut were skipped, ALO too, without a word.

    What was read and not handed out from ``at`` on is dropped. If nothing handed out was cut
    (only a read-ahead), reading goes on from ``at``. Else ALO goes back to ``at`` (Kafka's
    consumer resets to the divergence point): what was written there since is handed out;
    what was handed out there before is gone with the cut. AMO hands no offset out twice: it
    goes on from its position, and what was written below it since the cut is not handed out."""
    buffer = held.buffer
    offset_of = st.offset_of
    assert held.next_fetch is not None
    position = offset_of(buffer[0]) if buffer else held.next_fetch  # first not handed out
    if position <= at:
        while buffer and offset_of(buffer[-1]) >= at:
            buffer.pop()
        held.next_fetch = at
        held.fetch_after = 0
        log.warning(
            "%s: %s/%d: the log was cut at %d and written on (an unclean leader election?); "
            "what was read ahead from there is read again",
            me(st), held.topic, held.partition, at,
        )  # fmt: skip
        return
    lost = f"{at}..{position - 1}"
    if st.options.mode != "amo":
        # (a start's check may tell the cut after this member handed out records written
        # since it: those are in the log, and handed out again; only what was handed out
        # before the cut is gone)
        log.error(
            "%s: %s/%d: the log was cut at %d, below the position %d, and written on (an "
            "unclean leader election?): handing out again from %d what the log holds there "
            "now; whatever of %s was handed out before the cut is gone",
            me(st), held.topic, held.partition, at, position, at, lost,
        )  # fmt: skip
        move(st, held, at)
        return
    log.error(
        "%s: %s/%d: the log was cut at %d, below the position %d, and written on (an unclean "
        "leader election?): the records written at %s since are not handed out (AMO hands no "
        "offset out twice)",
        me(st), held.topic, held.partition, at, position, lost,
    )  # fmt: skip
    buffer.clear()
    held.next_fetch = position
    held.fetch_after = 0


def on_bounds(st: MemberState, now: int, event: Bounds, out: list[Action]) -> None:
    """The log's span for a new claim: start at the group's position if it is inside the
    log (or, where the log has none, at Kafka's committed offset of the group if the edge
    read one), else where the reset policy says (as Kafka applies ``auto.offset.reset`` to a
    group without a committed offset and to one whose offset is out of range)."""
    held = read(st, event.topic, event.partition)
    if held is None or held.lookup_token != event.token:
        return
    held.lookup_token = None
    position, reset = held.group_start, st.options.auto_offset_reset
    if position is None and event.committed is not None:
        # the log has none, Kafka's group offsets have one: a group moving from Kafka's
        # consumer groups, or a __marshal deleted and made again (its members' mirrored
        # offsets), resumes there, as a Kafka consumer resumes at its committed offset
        log.info(
            "%s: %s/%d has no position in the coordination log; starting at the Kafka "
            "group's committed offset %d",
            me(st),
            held.topic,
            held.partition,
            event.committed,
        )
        position = event.committed
    start: int
    if position is not None and (
        event.start <= position <= event.end or (position > event.end and st.options.mode == "amo")
    ):
        # inside the log; AMO cannot move below what the log reserved: past the end it waits
        # for the log to reach the position
        start = position
    elif reset == "error":
        offset = -1 if position is None else position
        start = 0 if position is None else position
        held.no_start = (offset, event.start, event.end)
    else:
        start = event.start if reset == "earliest" else event.end
    start_books(st, held, start - 1)
    held.buffer.clear()  # (nothing read before the start was known is handed out)
    held.fetch_token = None
    held.next_fetch = start
    claim = held.task or held
    claim.next_heartbeat = now  # the log learns where this claim really starts
    if claim.unpositioned and all(s.lookup_token is None for s in claim.reads):
        # no position under "error": nothing to heartbeat until seek()
        announce(claim, out)


def _look_again_later(st: MemberState, held: Held, now: int) -> None:
    """No fetch of ``held`` before HB/4 from ``now`` (its heartbeat passes act on it then):
    a refusal comes back at once, so fetching again at each would spin."""
    held.fetch_after = now + max(1, st.options.heartbeat_interval_ms // 4)


def start_books(st: MemberState, held: Held, last_offset: int) -> None:
    """A read's first position, where the log has none yet or has ``last_offset``: nothing
    beyond it reserved, confirmed or handed out (the next heartbeat carries it)."""
    held.claimed_through = held.confirmed_through = last_offset
    st.delivery.start(held, last_offset)


def move(st: MemberState, held: Held, offset: int) -> None:
    """Jump a held partition to ``offset``; nothing before it will be handed out."""
    if held.next_fetch is None:
        st.delivery.start(held, offset - 1)
    else:
        st.delivery.seek(held, offset)
    held.buffer.clear()
    held.next_fetch = offset
    held.fetch_after = 0
    held.fetch_token = None  # an answer to a fetch from the old offset is ignored
