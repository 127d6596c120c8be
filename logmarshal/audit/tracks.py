"""What the audit's fold knows of each partition: its claims, one :class:`Interval` each,
and its :class:`Track` (the open claim, the one that ended last, where its position was set).

State only: :class:`.replay.PartitionAudit` changes it as the world's verdicts say, and the
columnar fold (:mod:`.columnar`) shares it.
"""

from __future__ import annotations

from rationalizer import PartitionState

__all__ = ["Interval", "Track", "ended_before"]


class Interval:
    """One holder's claim on one partition, from the record that granted it to its end."""

    __slots__ = (
        "client",
        "end_ms",
        "end_offset",
        "end_position",
        "end_reason",
        "hb_ms",
        "instance",
        "last_ms",
        "max_gap",
        "max_gap_end",
        "msgs",
        "start_cause",
        "start_ms",
        "start_offset",
        "start_position",
    )

    def __init__(
        self,
        client: str,
        instance: str,
        start_ms: int,
        start_offset: int,
        start_cause: str,
        start_position: int | None,
        hb_ms: int,
    ) -> None:
        self.client = client
        self.instance = instance
        self.start_ms = start_ms
        self.start_offset = start_offset
        self.start_cause = start_cause
        self.start_position = start_position
        self.hb_ms = hb_ms
        self.last_ms = start_ms
        self.msgs = 1
        self.max_gap: int | None = None
        self.max_gap_end: int | None = None
        self.end_ms: int | None = None
        self.end_offset: int | None = None
        self.end_reason = "open"
        self.end_position: int | None = None


def ended_before(s: PartitionState) -> Interval:
    """The claim of ``s.last_holder`` that ended before the history (a genesis snapshot):
    only what the failover row reads, its holder, last accepted message, end and reason.
    Never an ownership row (its start is unknown): that row is the full history's."""
    assert s.last_holder is not None and s.last_holder_end_ms is not None
    c = Interval(*s.last_holder, s.last_beat, -1, "snapshot", None, 0)
    c.last_ms = s.last_beat  # a release's own time; else the voided holder's last message
    c.end_ms = s.last_holder_end_ms
    c.end_reason = "group_reset" if s.last_holder_voided else "released"
    return c


class Track:
    """What the fold knows of one (group, topic, partition) of this coordination partition."""

    __slots__ = (
        "claimed_ref",
        "ended",
        "floor",
        "group",
        "key",
        "last_ref",
        "lost",
        "n_late",
        "n_messages",
        "n_renewed",
        "open",
        "partition",
        "topic",
    )

    def __init__(self, key: bytes, group: str, topic: str, partition: int) -> None:
        self.key = key
        self.group = group
        self.topic = topic
        self.partition = partition
        self.open: Interval | None = None
        #: the last claim that ended, until a successor starts (it makes the failover row)
        self.ended: Interval | None = None
        #: values of the accepted records that last set last_offset / claimed_through; both
        #: None exactly while the partition has no position (a claim alone sets none)
        #: the accepted record that set the position (bytes), or a MemberHeartbeat entry's
        #: position itself (an int: the entry has no bytes of its own)
        self.last_ref: bytes | int | None = None
        self.claimed_ref: bytes | None = None
        #: the open claim's tenure floor (PROTOCOL.md "Version 4", property b): its release
        #: gives nothing back below it
        self.floor: int | None = None
        #: (client, instance) -> log time it lost this partition
        self.lost: dict[tuple[str, str], int] = {}
        self.n_renewed = 0
        self.n_late = 0
        self.n_messages = 0
