"""A data partition's ``__marshal`` partition (docs/architecture.md, "The coordination log")."""

from __future__ import annotations

import mmh3

__all__ = ["coordination_partition", "membership_partition"]


def coordination_partition(topic: str, partition: int, n: int) -> int:
    """``mmh3.hash(f"{topic}/{partition}".encode(), 0, signed=False) % n``.

    Kafka topic names cannot contain '/', so the hashed key is unambiguous. Every replayer,
    producer and the audit must agree on this, so it is spelled out byte for byte.
    """
    if type(n) is not int or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if type(partition) is not int or partition < 0:
        raise ValueError(f"partition must be a non-negative int, got {partition!r}")
    return mmh3.hash(f"{topic}/{partition}".encode(), 0, signed=False) % n


def membership_partition(group_id: str, n: int) -> int:
    """``mmh3.hash(group_id.encode(), 0, signed=False) % n``: the one ``__marshal`` partition
    that carries a group's membership records (PROTOCOL.md, "Membership"), so one world
    holds the whole membership of a group and every replayer folds it in one order."""
    if type(n) is not int or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if type(group_id) is not str or not group_id:
        raise ValueError(f"group_id must be a non-empty str, got {group_id!r}")
    return mmh3.hash(group_id.encode("utf-8"), 0, signed=False) % n
