from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from logmarshal import EmbeddedCluster
from logmarshal import _direct as direct
from logmarshal.clock import ManualClock
from logmarshal.errors import ClosedError
from logmarshal.marshaler import (
    COORDINATION_TOPIC,
    CoordinationTopicError,
    Marshaler,
)
from rationalizer import Effect, Reason, coordination_partition
from tests.storage.corruptions import CORRUPTIONS

HB = 1.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make(cluster) -> Iterator[Callable[..., Marshaler]]:
    """Marshalers on the test's cluster, all closed (threads joined) at teardown."""
    made: list[Marshaler] = []

    def factory(client_id: str = "a", **kwargs) -> Marshaler:
        kwargs.setdefault("fetch_wait", 0.05)
        marshaler = Marshaler(cluster, client_id, kwargs.pop("group_id", "g"), HB, **kwargs)
        made.append(marshaler)
        return marshaler

    yield factory
    for marshaler in made:
        marshaler.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-tail")]


def test_creates_the_coordination_topic_with_log_append_time(cluster, make) -> None:
    marshaler = make(coordination_partitions=4)
    description = cluster.describe_topic(COORDINATION_TOPIC)
    assert description.partitions == 4 == marshaler.coordination_partitions
    assert description.config["message.timestamp.type"] == "LogAppendTime"
    assert description.config["flush.messages"] == "1"


def test_an_existing_coordination_topic_keeps_its_partition_count(cluster, make) -> None:
    make(coordination_partitions=4)
    later = make("b", coordination_partitions=8)
    assert later.coordination_partitions == 4
    assert cluster.partitions(COORDINATION_TOPIC) == 4


def test_refuses_a_create_time_coordination_topic(cluster) -> None:
    cluster.create_topic(COORDINATION_TOPIC, 8)  # CreateTime, Kafka's default
    with pytest.raises(CoordinationTopicError, match="LogAppendTime"):
        Marshaler(cluster, "a", "g", HB)
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-tail")]


def test_read_your_writes_gives_the_verdict_of_our_own_record(make) -> None:
    a, b = make("a"), make("b")
    written = direct.claim_partition(a, "events", 3)
    assert written.coordination_partition == coordination_partition("events", 3, 8)
    verdict = direct.wait_verdict(a, written, timeout=5)
    assert verdict is not None and verdict.effect is Effect.CLAIMED
    assert a.holder("events", 3) == a.identity
    assert a.is_holder("events", 3)

    lost = direct.wait_verdict(b, direct.claim_partition(b, "events", 3), timeout=5)
    assert lost is not None and not lost.accepted and lost.reason is Reason.STILL_OWNED

    beat = direct.wait_verdict(a, direct.heartbeat(a, "events", 3, 41), timeout=5)
    assert beat is not None and beat.accepted
    assert a.resume_offset("events", 3) == 42  # visible as soon as the verdict is
    assert [(c.topic, c.partition) for c in a.claims()] == [("events", 3)]
    assert b.claims() == [] and [c.partition for c in b.claims("a")] == [3]


def test_instance_id_comes_from_the_injected_random_source(make) -> None:
    expected = f"{random.Random(7).getrandbits(64):016x}"
    assert make("a", rng=random.Random(7)).instance_id == expected
    assert make("b").instance_id != make("c").instance_id


def test_a_new_marshaler_replays_what_was_written_before(make) -> None:
    first = make("a")
    landed = direct.claim_partition(first, "events", 0)
    assert direct.wait_verdict(first, landed, timeout=5) is not None
    direct.wait_verdict(first, direct.heartbeat(first, "events", 0, 9), timeout=5)
    first.close()
    second = make("b")
    assert second.wait_caught_up(timeout=5)
    assert second.holder("events", 0) == first.identity
    assert second.resume_offset("events", 0) == 10


def test_freshness_is_predicted_with_the_injected_clock(tmp_path, clock) -> None:
    with EmbeddedCluster(tmp_path / "d", clock=clock.time_ms, maintenance_interval=0) as cluster:
        marshaler = Marshaler(cluster, "a", "g", HB, clock=clock, fetch_wait=0.05)
        try:
            landed = direct.claim_partition(marshaler, "t", 0)
            assert direct.wait_verdict(marshaler, landed, 5) is not None
            assert marshaler.freshness("t", 0) == "fresh"
            assert not marshaler.claimable("t", 0)
            clock.advance(1.5 * HB)
            assert marshaler.freshness("t", 0) == "unknown"
            clock.advance(HB)
            assert marshaler.freshness("t", 0) == "stale"
            assert marshaler.claimable("t", 0)
        finally:
            marshaler.close()


def test_close_stops_replay_and_writes(make) -> None:
    marshaler = make()
    marshaler.close()
    assert marshaler.closed
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-tail")]
    with pytest.raises(ClosedError):
        direct.claim_partition(marshaler, "events", 0)
    assert not marshaler.wait_applied(0, 0, timeout=0.1)


def test_close_wakes_the_replays_long_polls(cluster, make) -> None:
    """The embedded cluster's fetches wake on close (FetchWaker): a close does not wait out
    ``fetch_wait`` (it took 0.5 s at the default, here it would take 30)."""
    marshaler = make(fetch_wait=30.0)
    assert marshaler.wait_caught_up(timeout=10)
    keys = [(COORDINATION_TOPIC, cp) for cp in range(marshaler.coordination_partitions)]
    deadline = time.monotonic() + 10
    while not all(cluster._watchers.get(key) for key in keys):  # the replay's long poll
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    marshaler.close()
    assert time.monotonic() - t0 < 15
    assert not [t for t in threading.enumerate() if t.name.startswith("logmarshal-tail")]


def test_rejects_bad_arguments(cluster) -> None:
    with pytest.raises(ValueError, match="client_id"):
        Marshaler(cluster, "", "g", HB)
    with pytest.raises(ValueError, match="heartbeat_interval"):
        Marshaler(cluster, "a", "g", 0)


def test_replay_skips_a_corrupt_stored_batch_and_keeps_going(cluster, make, caplog) -> None:
    """A corrupt batch in ``__marshal`` (disk damage behind a valid CRC, an older
    writer) is counted, logged and skipped; the records after it are still applied."""
    first = make("a")
    landed = direct.claim_partition(first, "events", 0)
    assert direct.wait_verdict(first, landed, timeout=5) is not None
    cp = first.coordination_partition("events", 0)
    plog = cluster._dir.partition(COORDINATION_TOPIC, cp)
    plog.validate_records = False  # store what a validating broker would refuse
    try:
        plog.append(CORRUPTIONS["record length beyond the batch"][0]())
    finally:
        plog.validate_records = True
    direct.wait_verdict(first, direct.heartbeat(first, "events", 0, 9), timeout=5)
    second = make("b")
    assert second.wait_caught_up(timeout=5)
    assert second.resume_offset("events", 0) == 10  # the heartbeat after the damage counted
    assert second.holder("events", 0) == first.identity
    assert second.skipped_batches == 1
    assert "is corrupt" in caplog.text and "skipped" in caplog.text
