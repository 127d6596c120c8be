"""Which partitions a member may bid for, read from the replay."""

from __future__ import annotations

from rationalizer import WorldState
from rationalizer.rules import stale_from

__all__ = ["stale_at"]


def stale_at(world: WorldState, group: str, key: tuple[str, int]) -> int | None:
    """Log time from which ``key``'s holder is stale (claimable by others); None if held by
    nobody or unknown."""
    state = world.partition_state(group, key[0], key[1])
    if state is None or state.holder is None or not state.heartbeat_interval_ms:
        return None
    return stale_from(state.last_beat, state.heartbeat_interval_ms)
