"""Whole-group questions over the N WorldStates of the ``__marshal`` partitions."""

from __future__ import annotations

from collections.abc import Sequence

from ._partitioning import coordination_partition
from ._world import Claim, PartitionState, WorldState

__all__ = ["GroupView"]


class GroupView:
    """Routes per-partition questions to the world that coordinates the partition and
    merges per-world answers. Worlds may be replayed to different points; each answer is
    as of what each world has applied."""

    def __init__(self, worlds: Sequence[WorldState]) -> None:
        if not worlds:
            raise ValueError("a GroupView needs at least one WorldState")
        self._worlds = tuple(worlds)

    @property
    def n(self) -> int:
        return len(self._worlds)

    @property
    def worlds(self) -> tuple[WorldState, ...]:
        return self._worlds

    def world_for(self, topic: str, partition: int) -> WorldState:
        return self._worlds[coordination_partition(topic, partition, len(self._worlds))]

    def holder(self, group: str, topic: str, partition: int) -> tuple[str, str] | None:
        return self.world_for(topic, partition).holder(group, topic, partition)

    def freshness(self, group: str, topic: str, partition: int, now_ms: int) -> str | None:
        return self.world_for(topic, partition).freshness(group, topic, partition, now_ms)

    def claimable(self, group: str, topic: str, partition: int, now_ms: int) -> bool:
        return self.world_for(topic, partition).claimable(group, topic, partition, now_ms)

    def resume_offset(self, group: str, topic: str, partition: int) -> int | None:
        return self.world_for(topic, partition).resume_offset(group, topic, partition)

    def resume_positions(self, group: str, topic: str, partition: int) -> dict[str, int] | None:
        """A task's ``{source topic: next offset}`` (see ``WorldState.resume_positions``)."""
        return self.world_for(topic, partition).resume_positions(group, topic, partition)

    def claims_of(self, group: str, client_id: str) -> list[Claim]:
        """Claims of every instance of ``client_id`` in ``group`` across all worlds."""
        out = [c for w in self._worlds for c in w.claims_of(group, client_id)]
        return sorted(out, key=lambda c: (c.topic, c.partition))

    def claimable_partitions(
        self, group: str, partitions: Sequence[tuple[str, int]], now_ms: int
    ) -> list[tuple[str, int]]:
        """Those of ``partitions`` that could be claimed at ``now_ms``."""
        return [(t, p) for t, p in partitions if self.claimable(group, t, p, now_ms)]

    def partitions(self, group: str) -> list[PartitionState]:
        out = [s for w in self._worlds for s in w.partitions(group)]
        return sorted(out, key=lambda s: (s.topic, s.partition))

    def paused_until(self, group: str) -> int | None:
        """Latest pause end any world reports (ReleaseGroup is written to every world, but
        worlds may be replayed to different points)."""
        ends = [e for w in self._worlds if (e := w.paused_until(group)) is not None]
        return max(ends) if ends else None

    def fully_paused(self, group: str) -> bool:
        """True when every world has seen the group's pause and is still inside it."""
        return all(w.paused_until(group) is not None for w in self._worlds)
