"""What a member knows about one partition it holds, and the lease it holds it under.

The log decides ownership with append times; a member only knows when it *sent* a message.
Sending precedes appending, so an age measured from the send time over-estimates the log's
age of our claim: stopping at ``send + 2·HB - margin`` is always before anyone else's claim
can be accepted (``append + 2·HB``; docs/architecture.md, "Consumer algorithms": self-fencing).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

from .._commits import CommitTracker

__all__ = ["NAMING_DONE", "Held", "Lease"]

#: ``Held.naming_token`` once the log refused our NamingTenure (the tenure is not ours to
#: name, or has a name the replay shows): never asked again in this tenure
NAMING_DONE = -2


@attrs.define
class Lease:
    """``confirmed_sent``: send time of our newest message known to be accepted."""

    fence_after_ms: int
    confirmed_sent: int

    def renewed(self, sent_ms: int) -> None:
        """A message sent at ``sent_ms`` was accepted (late answers never shorten the lease)."""
        if sent_ms > self.confirmed_sent:
            self.confirmed_sent = sent_ms

    def expires_at(self) -> int:
        """First time at which we may no longer hand out."""
        return self.confirmed_sent + self.fence_after_ms

    def may_hand_out(self, now_ms: int) -> bool:
        return now_ms < self.expires_at()


@attrs.define
class Held:
    topic: str
    partition: int
    cp: int
    lease: Lease
    #: next data offset to fetch; None while the start is being looked up (no position)
    next_fetch: int | None
    #: last offset handed to user code
    handed_through: int
    #: AMO: last offset reserved by an accepted ClaimingMessages
    claimed_through: int
    #: AMO: last offset an accepted heartbeat carried after its reservation
    confirmed_through: int
    #: AMO: a poll found nothing confirmed to hand out here: reserve the next batch (only
    #: on demand, so a crash loses at most a batch somebody asked for)
    demand: bool = False
    #: the highest last_offset a heartbeat of ours carried (it may have landed)
    beaten_through: int = -1
    #: AMO: the first offset and the number (``HandOut.handout``) of the last batch handed
    #: out (None: none since the books started, by a claim, a seek or a reset): what may be
    #: given back (``MemberCore.give_back``) is its end, under its number
    handed_from: int | None = None
    handout: int | None = None
    #: the log end (high watermark) the last fetch's answer told, -1 if none did
    log_end: int = -1
    #: ALO: what user code committed; its contiguous position is what heartbeats carry
    tracker: CommitTracker | None = None
    buffer: deque[Any] = attrs.field(factory=deque)
    fetch_token: int | None = None
    #: no fetch before this time (0: none waiting): AMO waiting for the log to reach a
    #: position beyond its end, or bounds the edge could not read; the log is looked at
    #: again at a pace, not at every refusal's round trip
    fetch_after: int = 0
    heartbeat_token: int | None = None
    reserve_token: int | None = None
    #: AMO: the last offset of our reservation whose write's outcome we never learned: it is
    #: written again (with its heartbeat) before anything confirms it
    unknown_reservation: int | None = None
    lookup_token: int | None = None
    next_heartbeat: int = 0
    #: auto_offset_reset="error" and no usable position: (offset, start, end); nothing is handed out,
    #: and with no position at all (offset -1) nothing carrying one is written, until seek
    no_start: tuple[int, int, int] | None = None
    #: the group's resume offset when we adopted it (None: no position); where we start
    #: once the log's span is known
    group_start: int | None = None
    #: how we came to hold it (Assigned.how)
    how: str = "claimed"
    #: told the edge (Assigned): once the log has our first heartbeat with its position
    announced: bool = False
    #: release_if_behind: the lag seen last time
    lag_sample: int | None = None
    #: fencing epoch of this claim (MemberCore.epoch)
    epoch: int = -1
    #: the offset of our claim or restart takeover that began this tenure, as the verdict
    #: we read at it says (or the replay, for a claim we recovered): the tenure our version 6
    #: release names; None when the log names none (a world from an older snapshot)
    tenure: int | None = None
    #: capped at 9 or more, the NamingTenure (version 9) of a tenure without a name in
    #: flight (its token), or ``NAMING_DONE`` once refused: it is written once per tenure
    #: (again only if its outcome was never learned)
    naming_token: int | None = None
    #: taken back from an earlier instance of our client (restart recovery): that instance
    #: may hand out until its lease ends, so a release waits until then (else the next
    #: holder and the zombie would overlap)
    release_after: int = 0
    #: a task's claim (PROTOCOL.md "Tasks (version 3)"): the partitions read under it, one Held each for fetching
    #: and commits (their claim fields are unused); empty for a partition's claim
    sources: tuple[Held, ...] = attrs.field(default=(), repr=False, eq=False)
    #: on a task's source: the task's claim
    task: Held | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def naming_due(self) -> bool:
        """A tenure without a name, none asked for yet: name it (capped at 9 or more)."""
        return self.tenure is None and self.naming_token is None

    @property
    def reads(self) -> tuple[Held, ...]:
        """What is fetched and handed out under this claim: itself, or a task's sources."""
        return self.sources or (self,)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def unpositioned(self) -> bool:
        """We hold it but know no position to write (start unknown, or none under "error");
        a task: one of its sources."""
        if self.sources:
            return any(s.unpositioned for s in self.sources)
        return self.next_fetch is None or (self.no_start is not None and self.no_start[0] < 0)
