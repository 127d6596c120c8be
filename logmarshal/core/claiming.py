"""Which partition a member bids for next."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import mmh3

from rationalizer import WorldState, coordination_partition

__all__ = ["next_claim"]


def next_claim(
    worlds: Sequence[WorldState],
    group: str,
    client_id: str,
    topics: Sequence[tuple[str, int]],
    busy: Collection[tuple[str, int]],
    now_ms: int,
) -> tuple[str, int] | None:
    """The first partition, in an order that starts at a point given by our client_id (so
    members do not all race for the same one), that the replay says is claimable at
    ``now_ms`` and that we neither hold nor are already bidding for."""
    all_parts = [(t, p) for t, n in topics for p in range(n)]
    start = mmh3.hash(client_id.encode(), 0, signed=False) % len(all_parts)
    for i in range(len(all_parts)):
        topic, p = all_parts[(start + i) % len(all_parts)]
        if (topic, p) in busy:
            continue
        world = worlds[coordination_partition(topic, p, len(worlds))]
        if world.claimable(group, topic, p, now_ms):
            return topic, p
    return None
