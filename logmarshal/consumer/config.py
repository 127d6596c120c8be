"""A Consumer's settings: their one list, their defaults and what each means
(:data:`DEFAULT_CONFIG`), and how they become the core's :class:`~logmarshal.core.CoreOptions`.

A setting has one name: the core's option of the same name, or, for one in seconds here
(``claim_interval``), the core's in whole milliseconds (``claim_interval_ms``). The core
validates and defaults what it decides with; a default here that the core derives is None.
"""

from __future__ import annotations

import operator
import random
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

import attrs

from .._seconds import A_YEAR
from .._seconds import seconds as check_seconds
from ..cluster import FETCH_MAX_BYTES
from ..core import CoreOptions
from ..core.options import (
    DEFAULT_AUTO_OFFSET_RESET,
    DEFAULT_BATCH_SIZE,
    DEFAULT_CLAIM_ENTIRE_TOPIC,
    DEFAULT_FAST_RECLAIM,
    DEFAULT_GREEDY,
    DEFAULT_MODE,
    DEFAULT_REBALANCE,
    DEFAULT_WEIGHT,
    PROTOCOL_VERSION,
)
from ..retry import RetryPolicy
from .mirror import MirrorSetting

if TYPE_CHECKING:
    from ..marshaler import Marshaler

__all__ = [
    "DEFAULT_CONFIG",
    "RENAMED",
    "ConsumerConfig",
    "check_edge_settings",
    "checked_max_records",
    "core_options",
    "partition_keys",
]

Mode = Literal["alo", "amo"]
OffsetReset = Literal["earliest", "latest", "error"]
TopicPartition = tuple[str, int]
PartitionsCallback = Callable[[list[TopicPartition]], None]
#: what a Consumer consumes: topic names, or a pattern matched in full
TopicSelection = str | Iterable[str] | re.Pattern[str]

#: The Consumer's settings, name -> default: the only list of them. HB is the Marshaler's
#: (``heartbeat_interval``); times are seconds.
DEFAULT_CONFIG: Final[Mapping[str, Any]] = MappingProxyType(
    {
        # "alo" (at least once: ``commit`` marks messages handled, in any order; heartbeats carry
        # the highest contiguous committed offset) or "amo" (at most once: a batch is reserved
        # with ClaimingMessages and confirmed by a heartbeat before the user sees it)
        "mode": DEFAULT_MODE,
        # the most messages one ``poll`` returns by default
        "batch_size": DEFAULT_BATCH_SIZE,
        # AMO (None: 4·batch_size): the most messages of a partition reserved (ClaimingMessages)
        # and not handed out yet. The next window is reserved while the current one is handed
        # out, so one coordination round trip covers several polls; at most this many are lost
        # to a crash, and a graceful ``close`` gives them back
        "max_reserved": None,
        # (None: ``max(2·batch_size, 500)``, in AMO at least ``max_reserved + batch_size``;
        # below 1 counts as 1) a held partition is fetched while fewer messages are buffered
        "prefetch": None,
        # (None: HB/4) how often claimable partitions are looked for (and patterns and
        # partition counts read again)
        "claim_interval": None,
        # how the group shares its partitions. "balanced": every member announces itself in the
        # log and all compute the same sticky, balanced target from it; a member over its share
        # releases exactly the partitions that move, one under it claims them. "none": claim
        # whatever is claimable, as Go Marshal does (a member that joins late waits for
        # partitions to be released). Or a callable (``logmarshal.core.assignment.Strategy``).
        # Every member of a group should use the same strategy
        "rebalance": DEFAULT_REBALANCE,
        # this member's relative share under "balanced"
        "weight": DEFAULT_WEIGHT,
        # cap on partitions held (topics, with ``claim_entire_topic``); None: no cap
        "max_claims": None,
        # ``{task name: source topics}`` (ALO only). Partition p of a task is one claim (one
        # coordination key, ``task name/p``) under which partition p of every source is read;
        # its heartbeats carry every source's position, and the target moves it as a unit.
        # Messages are those of the source partitions; ``claims()`` names the tasks. The
        # streams runner claims its co-partitioned sources this way
        "tasks": None,
        # (``rebalance="none"``) a claim pass takes as many partitions as allowed, not one
        "greedy": DEFAULT_GREEDY,
        # partition 0 stands for its topic: whoever wins it claims every partition of the
        # topic, the others leave the topic alone
        "claim_entire_topic": DEFAULT_CLAIM_ENTIRE_TOPIC,
        # (``rebalance="none"`` only) release the partition furthest behind when its lag
        # (messages not handed out yet) exceeds this and is not shrinking, but only while
        # another fresh member exists that could take it over; None disables
        "release_if_behind": None,
        # (None: 2·HB) how long a partition this consumer released while running is left for
        # others before it may claim it again
        "reclaim_cooldown": None,
        # where to start without a usable position (the group never consumed the partition, or
        # its position is outside the log): "earliest", "latest", or "error" (``poll`` raises
        # :class:`~logmarshal.errors.NoPosition` until ``seek``)
        "auto_offset_reset": DEFAULT_AUTO_OFFSET_RESET,
        # take back claims still fresh from a previous instance of our client_id (restart
        # recovery)
        "fast_reclaim": DEFAULT_FAST_RECLAIM,
        # (None: HB/4) we stop handing out when nothing of ours was accepted for
        # ``2·HB - fence_margin``
        "fence_margin": None,
        # the newest protocol version whose records this consumer writes, from 4. A replayer of
        # an older version stops at the first record of a later one, so during a rolling
        # upgrade from version N the upgraded consumers run with ``protocol_version=N`` until no
        # member of N is left, then without it (PROTOCOL.md, "Upgrading a running group")
        "protocol_version": PROTOCOL_VERSION,
        # what ``run`` does when the handler raises (None: ``RetryPolicy()``)
        "retry": None,
        # called in the thread that polls (or closes) with the partitions gained / lost. A
        # revocation is reported after the fact (the log decided it), except on ``close()``,
        # where it comes before the release so work in flight can commit
        "on_assigned": None,
        "on_revoked": None,
        # (as confluent-kafka's) partitions taken from us (another member's claim, a fence, a
        # lapsed lease) go here instead of ``on_revoked``, which then reports only what we gave
        # up ourselves: work in flight on a lost partition must not be committed
        "on_lost": None,
        # copy the positions our heartbeats carry, for the partitions we hold, into Kafka's
        # committed offsets of the group of the same name, at most once per HB, so Kafka's tools
        # show the group's offsets and lag (advisory: never read back). None: on when the
        # cluster is Apache Kafka over the network; True: on (an error where there is nothing to
        # mirror into); False: off; or a :class:`~logmarshal.consumer.mirror.GroupSink`. A live
        # Kafka consumer group of the same name is refused (``MirrorConflict``)
        "mirror_offsets": None,
        # the most bytes one fetch returns of one partition (Kafka's max.partition.fetch.bytes)
        "max_partition_fetch_bytes": FETCH_MAX_BYTES,
        # seconds: where the cluster offers no long-polling reader (a wrapper such as
        # FaultyCluster), how long an idle fetch loop waits before it fetches every wanted
        # partition again, so at most this much delivery latency; also how long a fetch of a
        # topic or partition not there yet waits to ask again (and, plus 5 s, how long ``close``
        # waits for its threads). Shorter than the Marshaler's
        # (0.5 s, a long poll answered as soon as records come): here it is latency, there only
        # idle cost. The embedded and network readers wake on records and do not use it
        "fetch_wait": 0.2,
        # (None: max(HB, 1 s)) how long a poll waits for a reserved batch's verdict, and
        # ``close`` for its releases' verdicts
        "verdict_timeout": None,
        # the randomness of retries' jitter (None: a fresh ``random.Random()``)
        "rng": None,
    }
)

#: old name -> the setting's name: taken with a DeprecationWarning (kafka-python style)
RENAMED: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Kafka's fetch.max.bytes bounds a whole fetch request; this bounds one partition's
        "fetch_max_bytes": "max_partition_fetch_bytes",
    }
)


class ConsumerConfig(TypedDict, total=False):
    """The types of :data:`DEFAULT_CONFIG`'s settings (and of the old names in
    :data:`RENAMED`), for a type checker; tests hold the two lists equal."""

    mode: Mode
    batch_size: int
    max_reserved: int | None
    prefetch: int | None
    claim_interval: float | None
    rebalance: str | Callable[..., Any]
    weight: int
    max_claims: int | None
    tasks: Mapping[str, Iterable[str]] | None
    greedy: bool
    claim_entire_topic: bool
    release_if_behind: int | None
    reclaim_cooldown: float | None
    auto_offset_reset: OffsetReset
    fast_reclaim: bool
    fence_margin: float | None
    protocol_version: int
    retry: RetryPolicy | None
    on_assigned: PartitionsCallback | None
    on_revoked: PartitionsCallback | None
    on_lost: PartitionsCallback | None
    mirror_offsets: MirrorSetting
    max_partition_fetch_bytes: int
    fetch_wait: float
    verdict_timeout: float | None
    rng: random.Random | None
    fetch_max_bytes: int  # deprecated: max_partition_fetch_bytes


def _ms(seconds: float | None, name: str) -> int | None:
    """A setting in seconds as CoreOptions takes it: whole ms (None: the core's default);
    the core checks its range, this that it is a number of seconds at all."""
    if seconds is None:
        return None
    return round(check_seconds(name, seconds, at_least=-A_YEAR) * 1000)  # (nan, inf: no ms)


_CALLBACKS = ("on_assigned", "on_revoked", "on_lost")


def check_edge_settings(config: Mapping[str, Any]) -> None:
    """The settings the Consumer's edge uses itself (the core checks its own), refused at
    construction (TypeError, ValueError): a callback that is not callable failed later on a
    background thread, ``fetch_wait=inf`` was an OverflowError, a ``mirror_offsets`` string
    an AttributeError."""
    for name in _CALLBACKS:
        if config[name] is not None and not callable(config[name]):
            raise TypeError(f"{name} must be callable or None, got {config[name]!r}")
    for name in ("fetch_wait", "verdict_timeout"):
        value = config[name]
        if value is None and name == "verdict_timeout":
            continue
        check_seconds(name, value, above=0)
    if config["retry"] is not None and not isinstance(config["retry"], RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy or None, got {config['retry']!r}")
    mirror = config["mirror_offsets"]
    if not (mirror is None or isinstance(mirror, bool) or callable(getattr(mirror, "live", None))):
        raise TypeError(f"mirror_offsets must be None, True, False or a GroupSink, got {mirror!r}")
    rng = config["rng"]  # (rng=5 failed at run()'s first retry, the consumer left open)
    if rng is not None and not callable(getattr(rng, "uniform", None)):
        raise TypeError(f"rng must be a random.Random or None, got {rng!r}")


def checked_max_records(value: Any) -> int:
    """``poll(max_records=...)``: an int of at least 1 (2.5 got past a check of ``< 1`` and
    failed the consumer's core: ConsumerFailed, its claims not released)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"max_records must be an int or None, got {value!r}")
    if operator.index(value) < 1:
        raise ValueError(f"max_records must be at least 1, got {value}")
    return operator.index(value)


def core_options(
    marshaler: Marshaler,
    config: Mapping[str, Any],
    topics: tuple[tuple[str, int], ...],
    tasks: Mapping[str, tuple[str, ...]],
) -> CoreOptions:
    """The core's options: every setting under its own name, or in ms under its name with
    ``_ms``; the member's identity and HB are the Marshaler's."""
    given: dict[str, Any] = {}
    for field in attrs.fields(CoreOptions):
        name = field.alias or field.name
        if name in config:
            given[name] = config[name]
        elif name.endswith("_ms") and name[:-3] in config:
            given[name] = _ms(config[name[:-3]], name[:-3])
    given["tasks"] = tuple(sorted(tasks.items()))
    return CoreOptions(
        group_id=marshaler.group_id,
        client_id=marshaler.client_id,
        instance_id=marshaler.instance_id,
        topics=topics,
        coordination_partitions=marshaler.coordination_partitions,
        heartbeat_interval_ms=marshaler.heartbeat_interval_ms,
        **given,
    )


def partition_keys(
    partitions: Iterable[object],
    topics: tuple[str, ...],
    counts: Mapping[str, int],
    count_now: Callable[[str], int],
) -> list[TopicPartition]:
    """The keys ``pause`` and ``resume`` name: a partition number of a consumer of one topic
    (``topics``), or a ``(topic, partition)`` pair of a topic or task it claims (``counts``,
    name -> partition count at its last look, ``count_now`` when that is too few). Raises
    TypeError for what is neither and ValueError for what is none of its partitions, before
    anything is paused: Kafka raises for a partition not assigned; claims move here without
    the caller, so one of its partitions that another member holds now is taken."""
    out = []
    for item in partitions:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            topic, number = item
        elif len(topics) == 1 and not isinstance(item, tuple | str):
            topic, number = topics[0], item
        elif isinstance(item, int) and not isinstance(item, bool):
            raise ValueError(
                "this consumer reads several topics: name partitions as (topic, partition)"
            )
        else:
            number = None
        if isinstance(number, bool) or not hasattr(number, "__index__"):
            raise TypeError(f"a partition is an int or a (topic, partition) pair, got {item!r}")
        number = operator.index(number)
        if topic not in counts:
            raise ValueError(
                f"{topic!r} is not a topic this consumer reads ({', '.join(sorted(counts))})"
            )
        n = counts[topic]
        if number >= n:
            n = max(n, count_now(topic))  # grown since the last look
        if not 0 <= number < n:
            raise ValueError(f"{topic} has {n} partitions, not {number}")
        out.append((topic, number))
    return out


def task_sources(tasks: Mapping[str, str | Iterable[str]] | None) -> dict[str, tuple[str, ...]]:
    """The ``tasks`` setting: task name -> its source topics, sorted, each once."""
    return {
        name: tuple(sorted(set([sources] if isinstance(sources, str) else sources)))
        for name, sources in (tasks or {}).items()
    }


def topic_names(topics: str | Iterable[str], tasks: Mapping[str, Any]) -> tuple[str, ...]:
    """The topics a Consumer names (not a pattern): in order, each once; some topic or
    task is needed."""
    names = (topics,) if isinstance(topics, str) else tuple(dict.fromkeys(topics))
    if not names and not tasks:
        raise ValueError("a consumer needs at least one topic (or a pattern, or tasks)")
    return names
