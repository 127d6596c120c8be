"""Actions a member core asks its edge to carry out."""

from __future__ import annotations

import attrs

__all__ = ["Action", "Closed", "Fetch", "HandOut", "Revoke", "Write"]


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
class HandOut:
    """Give these ``(offset, value)`` records of (topic, partition) to user code."""

    topic: str
    partition: int
    records: tuple[tuple[int, bytes], ...]


@attrs.frozen
class Revoke:
    """Stop handing out (topic, partition). ``lost`` (as confluent-kafka's ``on_lost``): it
    was taken from us (fenced, displaced, lease lapsed); otherwise we gave it up."""

    topic: str
    partition: int
    lost: bool
    why: str


@attrs.frozen
class Closed:
    """A graceful close finished: every release was resolved (accepted, rejected or given up)."""


Action = Write | Fetch | HandOut | Revoke | Closed
