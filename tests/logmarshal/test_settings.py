"""One owner per setting: the Consumer converts its seconds once and builds CoreOptions, which
alone validates and holds the defaults; the Marshaler owns HB (seconds in, milliseconds out).
"""

from __future__ import annotations

import inspect
import threading

import attrs
import pytest

from logmarshal import Consumer, Marshaler
from logmarshal.consumer.config import ConsumerConfig, core_options
from logmarshal.core import CoreOptions
from logmarshal.core.options import MIN_PREFETCH, UNLIMITED_CLAIMS
from logmarshal.marshaler import MarshalerConfig

from .consumer_world import TOPIC

REQUIRED = {
    "group_id": "g",
    "client_id": "c",
    "instance_id": "i",
    "topics": (("t", 1),),
    "coordination_partitions": 1,
    "heartbeat_interval_ms": 1000,
}


def test_the_core_defaults_are_the_ones_a_consumer_shows() -> None:
    o = CoreOptions(**REQUIRED)
    assert (o.mode, o.batch_size, o.auto_offset_reset, o.rebalance, o.weight) == (
        "alo",
        100,
        "earliest",
        "balanced",
        1,
    )
    assert (o.greedy, o.claim_entire_topic, o.fast_reclaim) == (False, False, True)
    assert o.max_claims == UNLIMITED_CLAIMS
    assert o.prefetch == MIN_PREFETCH == max(2 * o.batch_size, 500)
    assert CoreOptions(**REQUIRED, batch_size=300).prefetch == 600
    assert (o.claim_interval_ms, o.fence_margin_ms, o.reclaim_cooldown_ms) == (250, 250, 2000)
    assert CoreOptions(**REQUIRED, max_claims=None).max_claims == UNLIMITED_CLAIMS
    assert CoreOptions(**REQUIRED, prefetch=0).prefetch == 1  # as the Consumer took it


def test_quarter_hb_defaults_keep_the_milliseconds_the_consumer_derived() -> None:
    """HB/4 was computed from HB in seconds: ``round(HB_s / 4 * 1000)`` (float rounding
    included, e.g. HB 2006 ms gives 502, where ``round(2006 / 4)`` gives 501)."""
    for hb_ms in (*range(1, 5000), 2006, 8002, 3_600_000):
        o = CoreOptions(**{**REQUIRED, "heartbeat_interval_ms": hb_ms})
        old = round((hb_ms / 1000.0) / 4 * 1000)
        assert o.claim_interval_ms == old
        if old < 2 * hb_ms:
            assert o.fence_margin_ms == old


def test_the_consumer_converts_seconds_once_and_hands_over(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = realtime.marshaler("a")
    assert marshaler.heartbeat_interval_ms == 300 and marshaler.heartbeat_interval == 0.3
    default = realtime.consumer(marshaler)._core.options
    assert default.heartbeat_interval_ms == 300
    assert (default.batch_size, default.prefetch) == (100, 500)
    assert (default.claim_interval_ms, default.fence_margin_ms, default.reclaim_cooldown_ms) == (
        75,
        75,
        600,
    )
    given = realtime.consumer(
        "b",
        batch_size=400,
        claim_interval=0.05,
        fence_margin=0.1,
        reclaim_cooldown=1.5,
        prefetch=7,
        max_claims=3,
    )._core.options
    assert (given.batch_size, given.prefetch, given.max_claims) == (400, 7, 3)
    assert (given.claim_interval_ms, given.fence_margin_ms, given.reclaim_cooldown_ms) == (
        50,
        100,
        1500,
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"mode": "exactly-once"}, ValueError, 'mode must be "alo" or "amo"'),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": "10"}, TypeError, "batch_size"),
        ({"max_claims": 0}, ValueError, "max_claims"),
        ({"auto_offset_reset": "none"}, ValueError, "auto_offset_reset"),
        ({"release_if_behind": -1}, ValueError, "release_if_behind"),
        ({"fence_margin": 0.6}, ValueError, r"fence_margin_ms .* \[0, 600\) ms"),
        ({"claim_interval": -1.0}, ValueError, "claim_interval_ms"),
        ({"reclaim_cooldown": -1.0}, ValueError, "reclaim_cooldown_ms"),
        ({"weight": 0}, ValueError, "weight"),
        ({"batch": 10}, TypeError, r"no setting 'batch' \(did you mean batch_size\?\)"),
    ],
)
def test_bad_options_are_refused_naming_the_consumer_argument(
    realtime, kwargs, error, says
) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = realtime.marshaler("a")
    with pytest.raises(error, match=says):
        Consumer(marshaler, TOPIC, **kwargs)
    # nothing was attached or started: a good consumer of the topic still can be
    realtime.consumer(marshaler)


# -- one list of settings per class (kafka-python's DEFAULT_CONFIG) ---------------------------


def _core_names() -> set[str]:
    return {f.alias or f.name for f in attrs.fields(CoreOptions)}


def test_every_consumer_setting_of_the_core_has_the_core_name_and_default() -> None:
    """A setting the core decides with is the core's option of the same name (in seconds:
    the core's ``_ms`` one), and the Consumer's default builds the core's defaults."""
    core = _core_names()
    shared = {n for n in Consumer.DEFAULT_CONFIG if n in core or f"{n}_ms" in core}
    assert shared == {
        "mode", "batch_size", "max_reserved", "prefetch", "claim_interval", "rebalance",
        "weight", "max_claims", "tasks", "greedy", "claim_entire_topic", "release_if_behind",
        "reclaim_cooldown", "auto_offset_reset", "fast_reclaim", "fence_margin",
        "protocol_version",
    }  # fmt: skip
    # the core's options no Consumer setting gives: the member's identity, its topics, HB
    # (the Marshaler's), and one the core alone knows
    assert core - {n for s in shared for n in (s, f"{s}_ms")} == {
        "group_id", "client_id", "instance_id", "topics", "coordination_partitions",
        "heartbeat_interval_ms", "release_attempts",
    }  # fmt: skip
    defaults = dict(Consumer.DEFAULT_CONFIG)
    built = core_options(_FakeMarshaler(), defaults, REQUIRED["topics"], {})
    assert built == CoreOptions(**REQUIRED)


class _FakeMarshaler:
    """What core_options reads of a Marshaler: identity and HB."""

    group_id, client_id, instance_id = "g", "c", "i"
    coordination_partitions = 1
    heartbeat_interval_ms = 1000


def _accepted(cls: type, config: type) -> set[str]:
    return set(config.__annotations__) - set(cls.RENAMED)


def test_default_config_keys_are_what_each_class_accepts() -> None:
    """DEFAULT_CONFIG is the one list: its keys are the keyword settings the class's type
    says it takes (besides the renamed ones), and nothing else is a keyword of it."""
    assert _accepted(Consumer, ConsumerConfig) == set(Consumer.DEFAULT_CONFIG)
    assert _accepted(Marshaler, MarshalerConfig) == set(Marshaler.DEFAULT_CONFIG)
    assert set(Consumer.RENAMED.values()) <= set(Consumer.DEFAULT_CONFIG)
    assert set(Marshaler.RENAMED.values()) <= set(Marshaler.DEFAULT_CONFIG)
    consumer_params = inspect.signature(Consumer).parameters
    assert [p.kind for p in consumer_params.values()][-1] is inspect.Parameter.VAR_KEYWORD
    assert set(consumer_params) == {"marshaler", "topics", "configs"}
    marshaler_params = inspect.signature(Marshaler).parameters
    assert set(marshaler_params) == {
        "cluster", "client_id", "group_id", "heartbeat_interval",
        "_check_rewind", "_announce", "configs",
    }  # fmt: skip
    # both MappingProxyType: a default cannot be changed by whoever reads it
    with pytest.raises(TypeError):
        Consumer.DEFAULT_CONFIG["batch_size"] = 1  # type: ignore[index]  # read-only on purpose
    with pytest.raises(TypeError):
        Marshaler.DEFAULT_CONFIG["fetch_wait"] = 1.0  # type: ignore[index]  # read-only on purpose


def test_every_setting_in_default_config_is_taken(realtime) -> None:
    """Each key is accepted, and its default given explicitly changes nothing."""
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = Marshaler(
        realtime.cluster, "a", "g", 0.3, **{**Marshaler.DEFAULT_CONFIG, "fetch_wait": 0.05}
    )
    realtime.marshalers.append(marshaler)
    explicit = realtime.consumer(marshaler, **Consumer.DEFAULT_CONFIG)
    implicit = realtime.consumer("b")
    assert dict(explicit._config) == dict(implicit._config) == dict(Consumer.DEFAULT_CONFIG)
    assert explicit._core.options == attrs.evolve(
        implicit._core.options, client_id="a", instance_id=marshaler.instance_id
    )


@pytest.mark.parametrize("cls", ["Consumer", "Marshaler"])
def test_an_unknown_setting_is_refused_in_one_line_listing_the_known_ones(realtime, cls) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    with pytest.raises(TypeError) as refused:
        if cls == "Consumer":
            Consumer(realtime.marshaler("a"), TOPIC, reset="latest")
        else:
            Marshaler(realtime.cluster, "a", "g", 0.3, fetch_wait=0.05, heartbeat=1.0)
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"{cls} has no setting ")
    known = said.split("; its settings are ", 1)[1].split(", ")
    owner = Consumer if cls == "Consumer" else Marshaler
    assert known == sorted(owner.DEFAULT_CONFIG)


def test_an_old_name_works_and_warns_once(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    with pytest.warns(DeprecationWarning) as caught:
        marshaler = Marshaler(realtime.cluster, "a", "g", 0.3, fetch_wait=0.05,
                              fetch_max_bytes=4096)  # fmt: skip
    realtime.marshalers.append(marshaler)
    assert [str(w.message) for w in caught] == [
        "Marshaler(fetch_max_bytes=...) is deprecated: the setting is now called "
        "max_partition_fetch_bytes"
    ]
    assert caught[0].filename == __file__  # it points at the caller's line
    assert marshaler._tailer._max_partition_fetch_bytes == 4096
    with pytest.warns(DeprecationWarning) as caught:
        consumer = realtime.consumer(marshaler, fetch_max_bytes=2048)
    assert len(caught) == 1 and "max_partition_fetch_bytes" in str(caught[0].message)
    assert consumer._config["max_partition_fetch_bytes"] == 2048
    with pytest.raises(TypeError, match="give only max_partition_fetch_bytes"):
        Consumer(marshaler, "other", fetch_max_bytes=1, max_partition_fetch_bytes=2)


def test_fetch_wait_has_one_name_and_a_default_each() -> None:
    """The Consumer's fetch_wait is latency where it is used (a reader that polls), the
    Marshaler's a long poll's bound (idle cost only): their DEFAULT_CONFIG says so."""
    assert (Consumer.DEFAULT_CONFIG["fetch_wait"], Marshaler.DEFAULT_CONFIG["fetch_wait"]) == (
        0.2,
        0.5,
    )


class _Reader:
    """Not a Consumer: anything with ``topics`` and ``close`` attaches."""

    def __init__(self, *topics: str) -> None:
        self.topics = topics
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def test_a_consumer_attaches_through_the_public_protocol(cluster) -> None:
    marshaler = Marshaler(cluster, "a", "g", 1.0, fetch_wait=0.05)
    first, second = _Reader("x", "y"), _Reader("z")
    marshaler.attach(first, first.topics)
    with pytest.raises(ValueError, match=r"already has a consumer of \['y'\]"):
        marshaler.attach(_Reader("y"), ["y"])
    marshaler.attach(second, second.topics)
    marshaler.detach(second)
    marshaler.close()
    assert first.closed.is_set() and not second.closed.is_set()
