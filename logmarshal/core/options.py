"""What a member core is configured with: frozen and validated once, never a mode flag soup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from rationalizer.messages import MAX_HEARTBEAT_INTERVAL_MS, MAX_WEIGHT, valid_id, valid_topic

#: sources of one task: a HeartbeatingTask carries at most this many positions
MAX_TASK_SOURCES = 64

__all__ = ["CoreOptions"]


def _ident(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not valid_id(value):
        raise ValueError(f"{attribute.name} must be a non-empty id string, got {value!r}")


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _topics(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise ValueError(f"{attribute.name} must be a tuple of (topic, partitions)")
    for item in value:
        ok = (
            isinstance(item, tuple)
            and len(item) == 2
            and valid_topic(item[0])
            and type(item[1]) is int
            and item[1] >= 0
        )
        if not ok:
            raise ValueError(f"{attribute.name}: bad entry {item!r}")


def _tasks(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise ValueError(f"{attribute.name} must be a tuple of (task topic, source topics)")
    seen: set[str] = set()
    for item in value:
        ok = (
            isinstance(item, tuple)
            and len(item) == 2
            and valid_topic(item[0])
            and isinstance(item[1], tuple)
            and 1 <= len(item[1]) <= MAX_TASK_SOURCES
            and all(valid_topic(t) for t in item[1])
            and list(item[1]) == sorted(set(item[1]))
        )
        if not ok:
            raise ValueError(
                f"{attribute.name}: bad entry {item!r} (a task topic and its source topics, "
                f"sorted, unique, 1..{MAX_TASK_SOURCES})"
            )
        names = {item[0], *item[1]}
        if names & seen or item[0] in item[1]:
            raise ValueError(
                f"{attribute.name}: {sorted(names & seen) or item[0]} named twice (a topic is "
                "read by one task, and a task's name is not a source)"
            )
        seen |= names


def _strategy(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("balanced", "none") and not callable(value):
        raise ValueError(
            f'{attribute.name} must be "balanced", "none" or a callable, got {value!r}'
        )


def _weight(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or not 1 <= value <= MAX_WEIGHT:
        raise ValueError(f"{attribute.name} must be an int in [1, {MAX_WEIGHT}], got {value!r}")


def _heartbeat(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or not 1 <= value <= MAX_HEARTBEAT_INTERVAL_MS:
        raise ValueError(f"{attribute.name} must be an int in [1, {MAX_HEARTBEAT_INTERVAL_MS}] ms")


@attrs.frozen(kw_only=True)
class CoreOptions:
    """One member's configuration. Times are milliseconds of the injected clock.

    ``fence_margin_ms`` (default HB/4): the member stops handing out a partition when none
    of its messages for it was accepted for ``2·HB - fence_margin_ms`` after it was *sent*.
    ``topics`` pairs each subscribed topic with its partition count as first known (0: not
    known yet); the edge reports changes with a ``Topics`` event (patterns, growth).
    """

    group_id: str = attrs.field(validator=_ident)
    client_id: str = attrs.field(validator=_ident)
    instance_id: str = attrs.field(validator=_ident)
    topics: tuple[tuple[str, int], ...] = attrs.field(validator=_topics)
    coordination_partitions: int = attrs.field(validator=_positive)
    mode: str = attrs.field(validator=attrs.validators.in_(("alo", "amo")))
    heartbeat_ms: int = attrs.field(validator=_heartbeat)
    fence_margin_ms: int | None = None
    max_claims: int = attrs.field(default=1 << 30, validator=_positive)
    batch: int = attrs.field(default=50, validator=_positive)
    #: how often a member looks for claimable partitions
    claim_every_ms: int = attrs.field(default=0)
    #: how many times a graceful close writes a ReleasingPartition whose outcome is unknown
    release_attempts: int = attrs.field(default=3, validator=_positive)
    #: where to start without a usable position: "earliest", "latest" or "error"
    reset: str = attrs.field(
        default="earliest", validator=attrs.validators.in_(("earliest", "latest", "error"))
    )
    #: a claim pass takes as many partitions as allowed, not one
    greedy: bool = False
    #: partition 0 stands for its topic: whoever holds it claims the whole topic
    entire_topic: bool = False
    #: give up the partition furthest behind when its lag exceeds this and is not shrinking
    release_if_behind: int | None = None
    #: how long a partition this member gave up while running is left to others
    cooldown_ms: int | None = None
    #: take back fresh claims of a previous instance of our client_id (restart recovery)
    fast_reclaim: bool = True
    #: fetch more while fewer than this many records are buffered (default: ``batch``)
    prefetch: int | None = None
    #: how the group shares its partitions: "balanced" (the sticky balanced target every
    #: member computes from the log), "none" (claim whatever is claimable, as Go Marshal
    #: does) or a callable (``logmarshal.core.assignment.Strategy``)
    rebalance: str | Callable[..., Any] = attrs.field(default="balanced", validator=_strategy)
    #: this member's relative share under "balanced"
    weight: int = attrs.field(default=1, validator=_weight)
    #: tasks (issue 14): ``(task topic, source topics)``. Partition p of a task topic is one
    #: claim (HeartbeatingTask carries every source's position) under which partition p of
    #: each source topic is fetched and handed out. The task topic is a name in
    #: ``__marshal`` only; it is subscribed like a topic in ``topics`` (with the sources'
    #: partition count), so claiming and the target treat a task as a partition.
    tasks: tuple[tuple[str, tuple[str, ...]], ...] = attrs.field(default=(), validator=_tasks)

    def __attrs_post_init__(self) -> None:
        margin = self.margin_ms
        if not 0 <= margin < 2 * self.heartbeat_ms:
            raise ValueError(f"fence_margin_ms must be in [0, 2*HB), got {margin}")
        if type(self.claim_every_ms) is not int or self.claim_every_ms < 0:
            raise ValueError("claim_every_ms must be an int >= 0")
        if self.release_if_behind is not None and self.release_if_behind < 0:
            raise ValueError("release_if_behind must be >= 0 (or None)")
        if self.cooldown_ms is not None and self.cooldown_ms < 0:
            raise ValueError("cooldown_ms must be >= 0 (or None)")
        if self.prefetch is not None and self.prefetch < 1:
            raise ValueError("prefetch must be >= 1 (or None)")
        if self.tasks:
            if self.mode != "alo":
                raise ValueError("tasks are consumed at least once (mode alo), not at most once")
            if self.entire_topic:
                raise ValueError("tasks cannot be claimed with entire_topic")
            plain = {t for t, _ in self.topics} - {t for t, _ in self.tasks}
            sources = {s for _, srcs in self.tasks for s in srcs}
            if plain & sources:
                raise ValueError(
                    f"{sorted(plain & sources)} is both subscribed and a task's source: "
                    "a topic is read either as partitions or under tasks"
                )
        if self.release_if_behind is not None and self.rebalance != "none":
            raise ValueError(
                'release_if_behind needs rebalance="none": under a target, the partition it '
                "gives up is the one the target gives back to it"
            )

    @property
    def announce_every_ms(self) -> int:
        """How often the member announces itself: a third of HB, so it stays a member
        (2·HB) through a lost announcement or two."""
        return max(1, self.heartbeat_ms // 3)

    @property
    def drain_ms(self) -> int:
        """ALO: how long a partition the target moves away waits for the commits of what was
        handed out before it is released anyway (the rest is then delivered again)."""
        return max(1, self.heartbeat_ms // 2)

    @property
    def margin_ms(self) -> int:
        return self.heartbeat_ms // 4 if self.fence_margin_ms is None else self.fence_margin_ms

    @property
    def reclaim_cooldown_ms(self) -> int:
        return 2 * self.heartbeat_ms if self.cooldown_ms is None else self.cooldown_ms

    @property
    def prefetch_records(self) -> int:
        return self.batch if self.prefetch is None else self.prefetch

    @property
    def fence_after_ms(self) -> int:
        """Age (from sending our newest accepted message) at which we stop handing out."""
        return 2 * self.heartbeat_ms - self.margin_ms
