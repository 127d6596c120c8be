"""What a ``WorldState`` is made of (PROTOCOL.md, "Time and freshness", "State").

The bottom of the replay: the mutable records of one partition and one member, the
freshness classifier they are judged with, the sentinels of "no time" and "no position",
and :class:`WorldImage`, the world's contents as its snapshot reads and restores them. The
rules, the membership fold, the snapshot format and the world all build on this module, and
it imports none of them (only ``messages`` and ``verdict``), so their imports run one way:
``rules``, ``membership`` and ``snapshot`` import ``state``; ``world`` imports all four.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Mapping

import attrs

from ._messages import Positions
from ._verdict import Reason, Verdict

__all__ = [
    "FRESH",
    "NO_POSITION",
    "NO_TIME",
    "STALE",
    "UNKNOWN",
    "MemberState",
    "PartitionEntry",
    "Sender",
    "WorldImage",
    "fence_key",
    "freshness",
    "stale_from",
]

FRESH = "fresh"
UNKNOWN = "unknown"
STALE = "stale"

#: ``now`` before any record was applied.
NO_TIME = -(2**63)

#: :attr:`PartitionEntry.last` of a partition no record ever gave a position (a claim alone
#: gives none); "no position" and "position -1" differ (docs/architecture.md, "Invariants").
NO_POSITION = -2

#: ``(client_id, instance_id)`` of a record's sender.
Sender = tuple[str, str]


def freshness(age: int, hb: int) -> str:
    """PROTOCOL.md "Time and freshness": a claim whose holder's last accepted message is
    ``age`` ms old, judged with the holder's own heartbeat interval ``hb``, is FRESH if
    ``age < hb``, UNKNOWN if ``hb <= age <= 2·hb``, STALE if ``age > 2·hb``.

    The one classifier: every rule and query that asks how fresh a holder is asks here."""
    if age < hb:
        return FRESH
    if age <= 2 * hb:
        return UNKNOWN
    return STALE


def stale_from(beat: int, hb: int) -> int:
    """The first log time at which :func:`freshness` calls a claim renewed at ``beat`` with
    lease ``hb`` STALE (so claimable by others): ``freshness(t - beat, hb) is STALE`` exactly
    when ``t >= stale_from(beat, hb)``. Its inverse, kept beside it (tested against it)."""
    return beat + 2 * hb + 1


def fence_key(client_id: str, instance_id: str) -> str:
    """Injective string form of an instance (str hashes are cached, tuples' are not): the key
    of a world's fenced instances."""
    return f"{len(client_id)}:{client_id}{instance_id}"


class PartitionEntry:
    """Mutable state of one (group, topic, partition) inside a world; ``PartitionState`` is
    its read-only copy.

    ``hb`` is the holder's heartbeat interval as its last accepted ClaimingPartition or
    Heartbeat declared it; 0 exactly when there is no holder.

    ``last`` is :data:`NO_POSITION` (-2) until an accepted record sets a position (Heartbeat,
    ReleasingPartition, ClaimingMessages, admin POSITION_SET; never a claim), and -1..2^63-1
    from then on. Keeping "has a position" in ``last`` costs the heartbeat paths nothing:
    they store ``last`` anyway. While there is no position, ``claimed`` is -1.

    ``positions`` is a task's position vector (version 3: HeartbeatingTask, ReleasingTask
    set it, and ``last`` to its scalar ``task_last_offset``); None otherwise: every other
    record that sets a position clears it, a claim or a ReleaseGroup keeps it.

    ``floor`` is the position the current tenure started from (``rules.tenure_floor``, set
    by an accepted claim or restart takeover, None without a holder or without a position):
    a release gives back nothing below it (version 4, property b).

    ``fenced_until`` is the first log time at which a lease the log took away early is over:
    a holder fenced by a restart takeover, or voided by a ReleaseGroup, may hand out until
    then by its own clock, so a version 5 claim is refused before it (version 5, property
    e; ``stale_from`` of the removed holder's last beat and lease). :data:`NO_TIME` when no
    lease was taken away.

    ``tenure`` is the log offset of the accepted claim or restart takeover that began the
    holder's tenure (version 6: a version 6 release names it); -1 without a holder, or when
    the world was restored from a snapshot older than version 6, which did not hold it.

    ``last_holder`` is, while nobody holds the partition, the holder whose named tenure
    (``tenure``) ended last: by its release (it ended at ``beat``, which the release set),
    or voided by a ReleaseGroup at log time ``voided_at`` (None for a release). None while
    held, when no named tenure ended since the last claim (a tenure begun by a version 1 or
    5 claim has no name: a log a version 5 replayer reads leaves the state it did), or when
    the world was restored from a snapshot older than version 6, which did not hold it
    (unknown). Audit only: no rule reads it, so it never changes a verdict; it lets an
    audit that starts from a snapshot name the failover the next claim makes (version 6).
    """

    __slots__ = (
        "beat",
        "claimed",
        "fenced_until",
        "floor",
        "group",
        "hb",
        "holder",
        "last",
        "last_holder",
        "partition",
        "positions",
        "tenure",
        "topic",
        "voided_at",
    )

    def __init__(
        self,
        group: str,
        topic: str,
        partition: int,
        holder: Sender | None,
        beat: int,
        last: int = NO_POSITION,
        claimed: int = -1,
        hb: int = 0,
        positions: Positions | None = None,
        floor: int | None = None,
        fenced_until: int = NO_TIME,
        tenure: int = -1,
        last_holder: Sender | None = None,
        voided_at: int | None = None,
    ) -> None:
        self.tenure = tenure
        self.last_holder = last_holder
        self.voided_at = voided_at
        self.floor = floor
        self.fenced_until = fenced_until
        self.group = group
        self.topic = topic
        self.partition = partition
        self.holder = holder
        self.beat = beat
        self.last = last
        self.claimed = claimed
        self.hb = hb
        self.positions = positions


class MemberState:
    """Mutable membership entry of one client_id in one group inside a world (version 2);
    ``membership.Member`` is its read-only view."""

    __slots__ = (
        "entire_topic",
        "hb",
        "instance",
        "last",
        "max_claims",
        "since",
        "topics",
        "version",
        "weight",
    )

    def __init__(
        self,
        instance: str,
        since: int,
        last: int,
        hb: int,
        weight: int,
        max_claims: int,
        entire_topic: bool,
        topics: tuple[tuple[str, int], ...],
        version: int = 2,
    ) -> None:
        self.version = version
        self.instance = instance
        self.since = since
        self.last = last
        self.hb = hb
        self.weight = weight
        self.max_claims = max_claims
        self.entire_topic = entire_topic
        self.topics = topics

    def stale(self, now: int) -> bool:
        """Older than twice its own heartbeat interval: gone (the claims' staleness rule)."""
        return freshness(now - self.last, self.hb) is STALE


@attrs.frozen
class WorldImage:
    """Everything a world's snapshot holds (PROTOCOL.md, "Snapshots"): what
    ``WorldState.image`` gives the snapshot writer and ``WorldState.from_image`` takes back
    from the snapshot reader, so the format never reaches into the world's private fields.

    Not copies: the containers are the world's own (or, restored, become its own). Read an
    image before the world applies more records, and hand a restored one to one world only.
    Admin keys, the identity caches and ``ownership_epoch`` are not part of it (keys are
    configuration; the others start anew).
    """

    verdict_window: int
    #: offset of the last applied record, -1 before any
    applied_through: int
    #: the clamped log time of the last applied record (:data:`NO_TIME` before any)
    now: int
    #: rejected records by reason, since the beginning of the log
    rejections: Mapping[Reason, int]
    #: the fenced instances, in any order
    fenced: Collection[Sender]
    #: group -> (end of its pause window, the pausing admin): only windows still open at
    #: ``now`` (a world may keep ended ones until the group's next record)
    pauses: Mapping[str, tuple[int, Sender]]
    #: every partition's entry, in any order (a restore keeps the order it is given)
    partitions: Collection[PartitionEntry]
    #: group -> client_id -> its membership entry, stale ones included (a world keeps them
    #: until the group's next membership record drops them)
    members: dict[str, dict[str, MemberState]]
    #: offsets of the verdicts in the window, ascending, and the verdicts themselves
    verdict_offsets: array
    verdicts: list[Verdict]
    #: group -> (offset, version) of the record of a protocol version to come that halted
    #: it (version 6)
    halted_groups: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
