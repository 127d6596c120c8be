"""Actions a member core asks its edge to carry out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = [
    "Action",
    "Assigned",
    "CatchUp",
    "Closed",
    "Fetch",
    "HandOut",
    "LookUp",
    "NoStart",
    "Revoke",
    "Write",
]


@attrs.frozen
class CatchUp:
    """After a stall: replay every coordination partition up to its end as the log shows it
    now, then answer with ``Replayed(cp, applied, at_end=True)`` for each (docs/architecture.md,
    "At-most-once, enforced by the log": the member acts on nothing it remembers before)."""


@attrs.frozen
class Write:
    """Produce ``(key, value)`` to coordination partition ``cp``; answer with
    ``Written(token, offset)`` or ``WriteFailed(token)``."""

    token: int
    cp: int
    key: bytes
    value: bytes
    #: what it is, for traces ("claim", "heartbeat", "takeover", "reserve", "release")
    kind: str


@attrs.frozen
class Fetch:
    """Fetch data of (topic, partition) from ``offset``; answer with ``Fetched(token, ...)``."""

    token: int
    topic: str
    partition: int
    offset: int


@attrs.frozen
class LookUp:
    """Find where (topic, partition)'s log starts and ends; answer with ``Bounds(token, ...)``
    (the group has no position there and the reset policy needs one of them).
    ``unpositioned``: the log has no position for it: the answer also carries Kafka's
    committed offset of the group, where the edge can read one (``Bounds.committed``)."""

    token: int
    topic: str
    partition: int
    unpositioned: bool = False


@attrs.frozen
class HandOut:
    """Give these records of (topic, partition) to user code (the answer to a ``Poll``).
    ``handout`` numbers it among this member's hand-outs: what of it never reached user code
    may be given back under that number (``MemberCore.give_back``, AMO)."""

    topic: str
    partition: int
    records: Sequence[Any]
    handout: int = 0


@attrs.frozen
class Assigned:
    """We hold (topic, partition) and resume at ``start`` (None: not known yet). ``how``:
    claimed, failover (took over a stale holder), recovered (a claim of ours whose answer we
    missed) or took_back (restart recovery)."""

    topic: str
    partition: int
    how: str
    start: int | None


@attrs.frozen
class NoStart:
    """Under ``auto_offset_reset="error"``: (topic, partition) has no usable position (``offset`` -1: none
    at all; else outside the log ``[start, end]``). Nothing of it is handed out until seek."""

    topic: str
    partition: int
    offset: int
    start: int
    end: int


@attrs.frozen
class Revoke:
    """Stop handing out (topic, partition). ``lost`` (as confluent-kafka's ``on_lost``): it
    was taken from us (fenced, displaced, lease lapsed); otherwise we gave it up."""

    topic: str
    partition: int
    lost: bool
    why: str
    #: a task's claim: the source partitions it read (their fetches stop too)
    sources: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class Closed:
    """A graceful close finished: every release was resolved (accepted, rejected or given up)."""


Action = Write | Fetch | LookUp | HandOut | Assigned | NoStart | Revoke | Closed | CatchUp
