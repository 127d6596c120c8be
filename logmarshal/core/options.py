"""What a member core is configured with: frozen and validated once, never a mode flag soup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from rationalizer._messages import (
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_WEIGHT,
    PROTOCOL_VERSION,
    valid_id,
    valid_topic,
)

#: sources of one task: a HeartbeatingTask carries at most this many positions
MAX_TASK_SOURCES = 64

__all__ = [
    "DEFAULT_AUTO_OFFSET_RESET",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CLAIM_ENTIRE_TOPIC",
    "DEFAULT_FAST_RECLAIM",
    "DEFAULT_GREEDY",
    "DEFAULT_MODE",
    "DEFAULT_REBALANCE",
    "DEFAULT_RESERVED_BATCHES",
    "DEFAULT_WEIGHT",
    "MIN_PREFETCH",
    "UNLIMITED_CLAIMS",
    "CoreOptions",
]


#: where a member's settings come from, when not given (the defaults a ``Consumer`` shows:
#: ``Consumer.DEFAULT_CONFIG`` takes them from here)
DEFAULT_MODE: Final = "alo"
DEFAULT_BATCH_SIZE: Final = 100
DEFAULT_AUTO_OFFSET_RESET: Final = "earliest"
DEFAULT_REBALANCE: Final = "balanced"
DEFAULT_WEIGHT: Final = 1
DEFAULT_GREEDY: Final = False
DEFAULT_CLAIM_ENTIRE_TOPIC: Final = False
DEFAULT_FAST_RECLAIM: Final = True
#: the oldest protocol version a member of this release can write for (its membership
#: announcements are version 4's): the lowest ``protocol_version``
OLDEST_PROTOCOL_VERSION: Final = 4
#: ``max_claims`` when not capped
UNLIMITED_CLAIMS: Final = 1 << 30
#: ``prefetch`` when not given: at least this many records, and at least two batches
MIN_PREFETCH: Final = 500
#: ``max_reserved`` when not given, in batches: enough that one coordination round trip
#: covers several polls, few enough that a crash loses little (AMO)
DEFAULT_RESERVED_BATCHES: Final = 4


def _named(attribute: attrs.Attribute[Any]) -> str:
    """The name a caller writes for an option (a ``Consumer``'s setting in seconds ``x`` is
    this class's ``x_ms``; every other setting has the same name in both)."""
    return attribute.alias or attribute.name


def _quarter_hb(heartbeat_ms: int) -> int:
    """HB/4 in whole ms, rounded as the Consumer always derived it from HB in seconds
    (``round(HB_s / 4 * 1000)``), so these defaults keep every millisecond they had."""
    return round(heartbeat_ms / 4000 * 1000)


def _int(attribute: attrs.Attribute[Any], value: object, lowest: int) -> None:
    if type(value) is not int:
        raise TypeError(f"{_named(attribute)} must be an int, got {value!r}")
    if value < lowest:
        raise ValueError(f"{_named(attribute)} must be at least {lowest}, got {value!r}")


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    _int(attribute, value, 1)


def _none_or_at_least_zero(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _int(attribute, value, 0)


def _none_or_positive(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _int(attribute, value, 1)


def _none_or_int(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not int:
        raise TypeError(f"{_named(attribute)} must be an int or None, got {value!r}")


def _protocol_version(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or not OLDEST_PROTOCOL_VERSION <= value <= PROTOCOL_VERSION:
        raise ValueError(
            f"protocol_version must be an int from {OLDEST_PROTOCOL_VERSION} to "
            f"{PROTOCOL_VERSION} (the versions this release can write for), got {value!r}"
        )


def _one_of(*choices: str) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in choices:
            said = ", ".join(f'"{c}"' for c in choices[:-1]) + f' or "{choices[-1]}"'
            raise ValueError(f"{_named(attribute)} must be {said}, got {value!r}")

    return check


def _at_least_one(value: int | None) -> int | None:
    """A prefetch below one record would never fetch: it is taken as one."""
    return value if value is None or type(value) is not int else max(1, value)


def _unlimited_if_none(value: int | None) -> int:
    """``max_claims=None`` is no cap."""
    return UNLIMITED_CLAIMS if value is None else value


def _ident(_inst: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not valid_id(value):
        raise ValueError(f"{attribute.name} must be a non-empty id string, got {value!r}")


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
        raise ValueError(
            f"{_named(attribute)} must be an int in [1, {MAX_HEARTBEAT_INTERVAL_MS}] ms, "
            f"got {value!r}"
        )


@attrs.frozen(kw_only=True)
class CoreOptions:
    """One member's configuration: the one place its settings are validated and defaulted.

    Every setting has one name: a :class:`~logmarshal.Consumer` setting is passed here under
    its own name, and one in seconds (``claim_interval``) as whole milliseconds of the
    injected clock under its name with ``_ms`` (``claim_interval_ms``); HB is the
    Marshaler's ``heartbeat_interval``. A setting given as None takes a default derived from
    others, and reading it gives that value: ``fence_margin_ms`` and ``claim_interval_ms``
    HB/4, ``reclaim_cooldown_ms`` 2·HB, ``prefetch`` ``max(2·batch_size, 500)`` (AMO: at
    least ``max_reserved + batch_size``), ``max_reserved`` 4·batch_size, ``max_claims``
    unlimited. What each setting means is said once, in ``Consumer.DEFAULT_CONFIG``.

    ``topics`` pairs each subscribed topic with its partition count as first known (0: not
    known yet); the edge reports changes with a ``Topics`` event (patterns, growth).
    ``release_attempts`` (no Consumer setting): how many times a graceful close writes a
    ReleasingPartition whose outcome is unknown.
    """

    group_id: str = attrs.field(validator=_ident)
    client_id: str = attrs.field(validator=_ident)
    instance_id: str = attrs.field(validator=_ident)
    topics: tuple[tuple[str, int], ...] = attrs.field(validator=_topics)
    coordination_partitions: int = attrs.field(validator=_positive)
    mode: str = attrs.field(default=DEFAULT_MODE, validator=_one_of("alo", "amo"))
    heartbeat_interval_ms: int = attrs.field(validator=_heartbeat)
    _fence_margin_ms: int | None = attrs.field(default=None, validator=_none_or_int)
    max_claims: int = attrs.field(
        default=UNLIMITED_CLAIMS, converter=_unlimited_if_none, validator=_positive
    )
    batch_size: int = attrs.field(default=DEFAULT_BATCH_SIZE, validator=_positive)
    _max_reserved: int | None = attrs.field(default=None, validator=_none_or_positive)
    _claim_interval_ms: int | None = attrs.field(default=None, validator=_none_or_at_least_zero)
    release_attempts: int = attrs.field(default=3, validator=_positive)
    auto_offset_reset: str = attrs.field(
        default=DEFAULT_AUTO_OFFSET_RESET, validator=_one_of("earliest", "latest", "error")
    )
    greedy: bool = DEFAULT_GREEDY
    claim_entire_topic: bool = DEFAULT_CLAIM_ENTIRE_TOPIC
    release_if_behind: int | None = attrs.field(default=None, validator=_none_or_at_least_zero)
    _reclaim_cooldown_ms: int | None = attrs.field(default=None, validator=_none_or_at_least_zero)
    fast_reclaim: bool = DEFAULT_FAST_RECLAIM
    #: below 1 counts as 1
    _prefetch: int | None = attrs.field(
        default=None, converter=_at_least_one, validator=_none_or_int
    )
    rebalance: str | Callable[..., Any] = attrs.field(
        default=DEFAULT_REBALANCE, validator=_strategy
    )
    weight: int = attrs.field(default=DEFAULT_WEIGHT, validator=_weight)
    #: ``(task topic, source topics)``, sorted. The task topic is a name in ``__marshal``
    #: only; it is subscribed like a topic in ``topics`` (with the sources' partition count),
    #: so claiming and the target treat a task as a partition (docs/streams.md).
    tasks: tuple[tuple[str, tuple[str, ...]], ...] = attrs.field(default=(), validator=_tasks)
    protocol_version: int = attrs.field(default=PROTOCOL_VERSION, validator=_protocol_version)

    def __attrs_post_init__(self) -> None:
        margin = self.fence_margin_ms
        if not 0 <= margin < 2 * self.heartbeat_interval_ms:
            raise ValueError(
                f"fence_margin_ms must be in [0, 2·HB) = "
                f"[0, {2 * self.heartbeat_interval_ms}) ms, got {margin} ms"
            )
        if self.tasks:
            if self.mode != "alo":
                raise ValueError("tasks are consumed at least once (mode alo), not at most once")
            if self.claim_entire_topic:
                raise ValueError("tasks cannot be claimed with claim_entire_topic")
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
    def fence_margin_ms(self) -> int:
        """The member stops handing out a partition when none of its messages for it was
        accepted for ``2·HB - fence_margin_ms`` after it was *sent* (None: HB/4)."""
        if self._fence_margin_ms is None:
            return _quarter_hb(self.heartbeat_interval_ms)
        return self._fence_margin_ms

    @property
    def claim_interval_ms(self) -> int:
        """How often a member looks for claimable partitions (None: HB/4)."""
        if self._claim_interval_ms is None:
            return _quarter_hb(self.heartbeat_interval_ms)
        return self._claim_interval_ms

    @property
    def reclaim_cooldown_ms(self) -> int:
        """How long a partition this member gave up while running is left to others
        (None: 2·HB)."""
        if self._reclaim_cooldown_ms is None:
            return 2 * self.heartbeat_interval_ms
        return self._reclaim_cooldown_ms

    @property
    def prefetch(self) -> int:
        """Fetch more while fewer than this many records are buffered."""
        if self._prefetch is None:
            if self.mode == "amo":
                # the reserved window waits in the buffer: room for it and a batch more to
                # reserve, or the window is only as large as what happens to be buffered
                return max(2 * self.batch_size, MIN_PREFETCH, self.max_reserved + self.batch_size)
            return max(2 * self.batch_size, MIN_PREFETCH)
        return self._prefetch

    @property
    def max_reserved(self) -> int:
        """AMO: the reservation window of a partition (reserved, not handed out yet;
        None: ``DEFAULT_RESERVED_BATCHES`` batches). ALO reserves nothing."""
        if self._max_reserved is None:
            return DEFAULT_RESERVED_BATCHES * self.batch_size
        return self._max_reserved

    @property
    def announce_every_ms(self) -> int:
        """How often the member announces itself: a third of HB, so it stays a member
        (2·HB) through a lost announcement or two."""
        return max(1, self.heartbeat_interval_ms // 3)

    @property
    def drain_ms(self) -> int:
        """ALO: how long a partition the target moves away waits for the commits of what was
        handed out before it is released anyway (the rest is then delivered again)."""
        return max(1, self.heartbeat_interval_ms // 2)

    @property
    def fence_after_ms(self) -> int:
        """Age (from sending our newest accepted message) at which we stop handing out."""
        return 2 * self.heartbeat_interval_ms - self.fence_margin_ms
