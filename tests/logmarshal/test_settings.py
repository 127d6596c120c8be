"""One owner per setting: the Consumer converts its seconds once and builds CoreOptions, which
alone validates and holds the defaults; the Marshaler owns HB (seconds in, milliseconds out).
"""

from __future__ import annotations

import threading

import pytest

from logmarshal import Consumer, Marshaler
from logmarshal.core import CoreOptions
from logmarshal.core.options import MIN_PREFETCH, UNLIMITED_CLAIMS

from .consumer_world import TOPIC

REQUIRED = {
    "group_id": "g",
    "client_id": "c",
    "instance_id": "i",
    "topics": (("t", 1),),
    "coordination_partitions": 1,
    "heartbeat_ms": 1000,
}


def test_the_core_defaults_are_the_ones_a_consumer_shows() -> None:
    o = CoreOptions(**REQUIRED)
    assert (o.mode, o.batch, o.reset, o.rebalance, o.weight) == (
        "alo",
        100,
        "earliest",
        "balanced",
        1,
    )
    assert (o.greedy, o.entire_topic, o.fast_reclaim) == (False, False, True)
    assert o.max_claims == UNLIMITED_CLAIMS
    assert o.prefetch_records == MIN_PREFETCH == max(2 * o.batch, 500)
    assert CoreOptions(**REQUIRED, batch=300).prefetch_records == 600
    assert (o.claim_every_ms, o.margin_ms, o.reclaim_cooldown_ms) == (250, 250, 2000)
    assert CoreOptions(**REQUIRED, max_claims=None).max_claims == UNLIMITED_CLAIMS
    assert CoreOptions(**REQUIRED, prefetch=0).prefetch_records == 1  # as the Consumer took it


def test_quarter_hb_defaults_keep_the_milliseconds_the_consumer_derived() -> None:
    """HB/4 was computed from HB in seconds: ``round(HB_s / 4 * 1000)`` (float rounding
    included, e.g. HB 2006 ms gives 502, where ``round(2006 / 4)`` gives 501)."""
    for hb_ms in (*range(1, 5000), 2006, 8002, 3_600_000):
        o = CoreOptions(**{**REQUIRED, "heartbeat_ms": hb_ms})
        old = round((hb_ms / 1000.0) / 4 * 1000)
        assert o.claim_every_ms == old
        if old < 2 * hb_ms:
            assert o.margin_ms == old


def test_the_consumer_converts_seconds_once_and_hands_over(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = realtime.marshaler("a")
    assert marshaler.heartbeat_interval_ms == 300 and marshaler.heartbeat_interval == 0.3
    default = realtime.consumer(marshaler)._core.options
    assert default.heartbeat_ms == 300
    assert (default.batch, default.prefetch_records) == (100, 500)
    assert (default.claim_every_ms, default.margin_ms, default.reclaim_cooldown_ms) == (75, 75, 600)
    given = realtime.consumer(
        "b",
        batch_size=400,
        claim_interval=0.05,
        fence_margin=0.1,
        reclaim_cooldown=1.5,
        prefetch=7,
        max_claims=3,
    )._core.options
    assert (given.batch, given.prefetch_records, given.max_claims) == (400, 7, 3)
    assert (given.claim_every_ms, given.margin_ms, given.reclaim_cooldown_ms) == (50, 100, 1500)


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"mode": "exactly-once"}, ValueError, 'mode must be "alo" or "amo"'),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": "10"}, TypeError, "batch_size"),
        ({"max_claims": 0}, ValueError, "max_claims"),
        ({"auto_offset_reset": "none"}, ValueError, "auto_offset_reset"),
        ({"release_if_behind": -1}, ValueError, "release_if_behind"),
        ({"fence_margin": 0.6}, ValueError, r"fence_margin .* \[0, 600\) ms"),
        ({"claim_interval": -1.0}, ValueError, "claim_interval"),
        ({"reclaim_cooldown": -1.0}, ValueError, "reclaim_cooldown"),
        ({"weight": 0}, ValueError, "weight"),
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
