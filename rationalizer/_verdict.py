"""Verdicts: what replay decided for each coordination record, and why."""

from __future__ import annotations

import enum
from types import MappingProxyType

import attrs

__all__ = ["Effect", "Reason", "Verdict"]


class Reason(enum.Enum):
    """Why a record was rejected (the audit counts these)."""

    STILL_OWNED = "still_owned"  # claim lost a race / the partition is held by a live holder
    NOT_HOLDER = "not_holder"  # heartbeat, release or claim-messages without holding the claim
    FENCED = "fenced"  # sender instance was replaced by a restart of its client
    GROUP_PAUSED = "group_paused"  # group is inside a ReleaseGroup window
    OFFSET_REGRESSION = "offset_regression"  # ClaimingMessages below claimed_through
    INVALID_RECORD = "invalid_record"  # undecodable, unknown version or type
    # group has an admin key: ReleaseGroup or pausing admin's heartbeat without a valid tag,
    # or a tagged ReleaseGroup whose window had already ended at its log time (a replay)
    UNAUTHENTICATED = "unauthenticated"
    # version 6: the record's group was halted by a well-formed record of a protocol version
    # to come (that record included): its rules are unknown here, so nothing of the group is
    # judged any more (WorldState.halted_groups)
    GROUP_HALTED = "group_halted"


class Effect(enum.Enum):
    """What an accepted record changed (lets the audit explain every ownership change)."""

    CLAIMED = "claimed"  # unheld partition claimed
    TOOK_OVER_STALE = "took_over_stale"  # stale holder displaced (previous_holder)
    RESTART_TAKEOVER = "restart_takeover"  # new instance of the holder's client; old one fenced
    RENEWED = "renewed"  # heartbeat of the holder within 2*HB
    RENEWED_LATE = "renewed_late"  # heartbeat of a stale holder nobody displaced
    RELEASED = "released"
    MESSAGES_CLAIMED = "messages_claimed"
    GROUP_PAUSED = "group_paused"  # ReleaseGroup: claims voided (voided), group paused
    POSITION_SET = "position_set"  # pausing admin's heartbeat set the position
    JOINED = "joined"  # v2: a client_id became a member of the group
    ANNOUNCED = "announced"  # v2: a member renewed its announcement
    LEFT = "left"  # v2: a member left the group gracefully
    NAMED = "named"  # v9: the holder named its tenure (NamingTenure; property j)


@attrs.frozen(slots=True)
class Verdict:
    """Outcome of one record.

    ``previous_holder`` is the (client_id, instance_id) displaced by TOOK_OVER_STALE or
    fenced by RESTART_TAKEOVER; ``voided`` lists ``(topic, partition, client_id,
    instance_id)`` of the claims a ReleaseGroup voided, sorted. ``entries``: a version 7
    MemberHeartbeat's verdict per entry, in entry order (empty for every other record);
    the verdict itself then sums them up for readers of whole records: accepted (RENEWED)
    if every entry was, else the first rejected entry's rejection. A snapshot keeps only
    that sum (PROTOCOL.md, "Version 7"), so ``entries`` take no part in equality: a
    restored world's verdict equals the one it was made from.
    """

    accepted: bool
    reason: Reason | None = None
    effect: Effect | None = None
    previous_holder: tuple[str, str] | None = None
    voided: tuple[tuple[str, int, str, str], ...] = ()
    entries: tuple[Verdict, ...] = attrs.field(default=(), eq=False)


def of_entries(entries: tuple[Verdict, ...]) -> Verdict:
    """A MemberHeartbeat's verdict: its entries' verdicts, summed up (see :class:`Verdict`)."""
    for v in entries:
        if not v.accepted:
            return Verdict(False, reason=v.reason, entries=entries)
    return Verdict(True, effect=Effect.RENEWED, entries=entries)


# Shared instances for the common outcomes: verdicts are immutable, so replay never
# allocates one for a heartbeat or a rejection.
REJECTED = MappingProxyType({r: Verdict(False, reason=r) for r in Reason})
ACCEPTED = MappingProxyType({e: Verdict(True, effect=e) for e in Effect})
