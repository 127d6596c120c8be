"""The lease of one held partition and self-fencing, as a pure value-holding object.

The log decides ownership with append times; a member only knows when it *sent* a message.
Sending precedes appending, so an age measured from the send time over-estimates the log's
age of our claim: stopping at ``send + 2·HB - margin`` is always before anyone else's claim
can be accepted (``append + 2·HB``).
"""

from __future__ import annotations

import attrs

__all__ = ["Lease"]


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
