"""Which partitions a member may bid for, read from the replay."""

from __future__ import annotations

from rationalizer import WorldState

__all__ = ["stale_at"]


def stale_at(world: WorldState, group: str, key: tuple[str, int]) -> int | None:
    """Log time from which ``key``'s holder is stale (claimable by others); None if held by
    nobody or unknown."""
    state = world.partition_state(group, key[0], key[1])
    if state is None or state.holder is None or not state.heartbeat_interval_ms:
        return None
    return state.last_beat + 2 * state.heartbeat_interval_ms + 1
