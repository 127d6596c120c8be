"""Restart recovery: which claims a restarted client takes back, and where it resumes.

The resume position must be read from the replay *after* the takeover heartbeat's verdict,
not before it is sent: until the takeover lands the old instance is the fresh holder and may
still reserve (AMO ClaimingMessages) and hand out a batch. Everything it did before the
takeover precedes the takeover in log order, so the replay at the takeover's verdict
includes it; everything after is rejected as fenced (issue 10: offsets 100..199 were handed
out twice by the old and the new instance when the position was read before).
"""

from __future__ import annotations

from rationalizer import FRESH, Claim, WorldState

__all__ = ["resume_after_takeover", "resume_task_after_takeover", "takeover_candidates"]


def takeover_candidates(
    world: WorldState, group: str, client_id: str, instance_id: str, now_ms: int
) -> list[Claim]:
    """Claims of our client_id held by another instance that are still fresh at ``now_ms``
    (a stale one is claimed the ordinary way)."""
    return [
        c
        for c in world.claims_of(group, client_id)
        if c.instance_id != instance_id
        and world.freshness(group, c.topic, c.partition, now_ms) == FRESH
    ]


def resume_after_takeover(
    world: WorldState, group: str, topic: str, partition: int, read_before: int, *, reread: bool
) -> int:
    """Where the new instance resumes once its takeover was accepted.

    ``read_before`` is the resume offset read when the takeover was sent. ``reread=False``
    reproduces the bug of issue 10 (for the simulator's experiment only).
    """
    if not reread:
        return read_before
    now = world.resume_offset(group, topic, partition)
    return read_before if now is None else max(now, read_before)


def resume_task_after_takeover(
    world: WorldState,
    group: str,
    topic: str,
    partition: int,
    read_before: dict[str, int],
    *,
    reread: bool,
) -> dict[str, int]:
    """:func:`resume_after_takeover` of a task: per source, the later of the two readings."""
    if not reread:
        return dict(read_before)
    now = world.resume_positions(group, topic, partition) or {}
    return {t: max(read_before.get(t, o), o) for t, o in {**read_before, **now}.items()}
