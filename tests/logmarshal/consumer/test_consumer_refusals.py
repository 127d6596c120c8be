"""Calls a Consumer cannot carry out are refused with an error that says why: after
``close`` (``ClosedError``, as ``poll`` raises; ``seek`` said "not held" and ``commit``
returned False), and ``pause``/``resume`` of what is no partition of it (silently
remembered, or truncated from a float)."""

from __future__ import annotations

import re

import pytest

from logmarshal.errors import ClosedError

from ..consumer_world import TOPIC, drain, produce, wait_until


def test_seek_commit_pause_and_resume_after_close_raise_closed_error(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    consumer = realtime.consumer("a")
    handed = drain(consumer, 3, commit=False)
    consumer.commit(handed[0])
    consumer.close()
    calls = {
        "seek": lambda: consumer.seek(TOPIC, 0, 1),
        "commit": lambda: consumer.commit(handed[1]),
        "pause": lambda: consumer.pause(0),
        "resume": lambda: consumer.resume(0),
    }
    for name, call in calls.items():
        with pytest.raises(ClosedError, match=rf"{name}\(\) on a closed consumer"):
            call()
    # what was committed before the close is what the release carried
    follower = realtime.consumer("b")
    assert [m.offset for m in drain(follower, 4)] == [1, 2, 3, 4]


def test_a_commit_in_on_revoked_during_close_still_counts(realtime) -> None:
    """close() calls on_revoked before it releases, for the commits a handler makes there
    (Kafka's rebalance listener): they are not refused as after a close."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    handed: list = []
    outcome: list = []

    def revoked(_partitions) -> None:
        outcome.append(consumer.commit(*handed))

    consumer = realtime.consumer("a", on_revoked=revoked)
    handed.extend(drain(consumer, 3, commit=False))
    consumer.close()
    assert outcome == [True]
    follower = realtime.consumer("b")
    assert [m.offset for m in drain(follower, 2)] == [3, 4]


@pytest.mark.parametrize(
    ("partition", "error", "says"),
    [
        (99, ValueError, "events has 2 partitions"),
        (-1, ValueError, "events has 2 partitions"),
        ((TOPIC, 2), ValueError, "events has 2 partitions"),
        (("other", 0), ValueError, "'other' is not a topic this consumer reads"),
        (1.5, TypeError, "a partition is an int or a (topic, partition) pair"),
        ("1", TypeError, "a partition is an int or a (topic, partition) pair"),
        (True, TypeError, "a partition is an int or a (topic, partition) pair"),
        (None, TypeError, "a partition is an int or a (topic, partition) pair"),
        ((TOPIC, "0"), TypeError, "a partition is an int or a (topic, partition) pair"),
        ((TOPIC, 0, 1), TypeError, "a partition is an int or a (topic, partition) pair"),
    ],
)
def test_pause_and_resume_refuse_what_is_no_partition_of_the_consumer(
    realtime, partition, error, says
) -> None:
    """Kafka's pause of a partition not assigned raises; ``pause(99)`` was kept silently
    (and ``pause(1.5)`` paused partition 1). Nothing is paused by a refused call."""
    realtime.cluster.create_topic(TOPIC, 2)
    consumer = realtime.consumer("a", greedy=True)
    wait_until(lambda: len(consumer.claims()) == 2, what="both claims")
    for call in (consumer.pause, consumer.resume):
        with pytest.raises(error, match=re.escape(says)):
            call(0, partition)
        assert consumer.paused() == []


def test_a_partition_not_held_now_may_be_paused_for_when_it_is(realtime) -> None:
    """Claims move without the caller: a partition of the topic that another member holds
    now is paused for when this one holds it (not an error that a claim in flight races)."""
    realtime.cluster.create_topic(TOPIC, 2)
    consumer = realtime.consumer("a", max_claims=1)
    wait_until(lambda: len(consumer.claims()) == 1, what="one claim")
    (held,) = consumer.claims()
    other = 1 - held[1]
    consumer.pause(other)
    assert consumer.paused() == [(TOPIC, other)]
    consumer.resume((TOPIC, other))
    assert consumer.paused() == []


@pytest.mark.parametrize(
    ("settings", "raised", "says"),
    [
        ({"on_assigned": 5}, TypeError, "on_assigned must be callable"),
        ({"on_lost": "f"}, TypeError, "on_lost must be callable"),
        (
            {"fetch_wait": float("inf")},
            ValueError,
            "fetch_wait must be seconds above 0 and at most a year",
        ),
        ({"fetch_wait": "1"}, TypeError, "fetch_wait must be seconds"),
        ({"claim_interval": float("nan")}, ValueError, "claim_interval must be seconds"),
        ({"fence_margin": float("nan")}, ValueError, "fence_margin must be seconds"),
        # (its ms overflowed round(): an OverflowError)
        ({"claim_interval": -1e306}, ValueError, "must be seconds within a year either way"),
        ({"mirror_offsets": "yes"}, TypeError, "mirror_offsets must be None, True, False"),
        ({"retry": 3}, TypeError, "retry must be a RetryPolicy"),
    ],
)
def test_settings_of_the_wrong_kind_are_refused_at_construction(
    realtime, settings, raised, says
) -> None:
    """Found by an attack on the API: a callback that is not callable failed later on a
    background thread; ``fetch_wait=inf`` was an OverflowError, ``claim_interval=nan`` a
    "cannot convert float NaN", ``mirror_offsets="yes"`` an AttributeError. No consumer of
    the group is left running (its names are free again)."""
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = realtime.marshaler("a")
    with pytest.raises(raised, match=re.escape(says)):
        realtime.consumer(marshaler, **settings)
    realtime.consumer(marshaler).close()


def test_calls_of_the_wrong_kind_are_refused_where_they_are_made(realtime) -> None:
    """``Consumer(None)`` was an AttributeError, ``poll(timeout="1")`` an unsupported
    operand, and ``run(5)`` waited on an empty topic, then failed every message."""
    from logmarshal import Consumer

    realtime.cluster.create_topic(TOPIC, 1)
    with pytest.raises(TypeError, match="needs a Marshaler"):
        Consumer(None, TOPIC)
    consumer = realtime.consumer("a")
    with pytest.raises(TypeError, match="timeout must be seconds"):
        consumer.poll(timeout="1")
    with pytest.raises(ValueError, match="timeout must be seconds, got nan"):
        consumer.poll(timeout=float("nan"))
    with pytest.raises(ValueError, match="timeout must be seconds, got an int of 2001 bits"):
        consumer.poll(timeout=2**2000)  # (was an OverflowError of the deadline's sum)
    with pytest.raises(TypeError, match="handler must be callable"):
        consumer.run(5)


def test_a_poll_from_a_partition_callback_is_refused_not_waited_for(realtime) -> None:
    """A poll runs the partition callbacks holding its lock: a poll from one of them waited
    for itself for good (the thread never returned, even after close). An attack on the
    consumer's API, 2026-12-06."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    raised: list = []

    def assigned(_partitions) -> None:
        try:
            consumer.poll(0.1)
        except RuntimeError as exc:
            raised.append(exc)

    consumer = realtime.consumer("a", on_assigned=assigned)
    assert [m.offset for m in drain(consumer, 5)] == list(range(5))
    assert len(raised) == 1 and "from a partition callback" in str(raised[0])


def test_bad_arguments_are_the_callers_errors_and_the_consumer_goes_on(realtime) -> None:
    """``poll(max_records=2.5)`` got past a check of ``< 1`` and failed the core
    (ConsumerFailed, nothing released); ``seek`` past int64 was taken and failed the core at
    the next heartbeat (AMO: at close, its window lost); ``close(timeout=nan)`` raised half
    way, leaving a consumer that went on heartbeating its claims while a second close did
    nothing; ``rng=5`` failed at run()'s first retry. An attack on the API, 2026-12-06."""
    import random

    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 10)
    consumer = realtime.consumer("a", mode="amo")
    assert [m.offset for m in drain(consumer, 2)] == [0, 1]
    for value, error in ((2.5, TypeError), (True, TypeError), ("3", TypeError), (0, ValueError)):
        with pytest.raises(error, match="max_records"):
            consumer.poll(0, max_records=value)
    with pytest.raises(ValueError, match="largest offset"):
        consumer.seek(TOPIC, 0, 2**63)
    for timeout in (float("nan"), "5", -1):
        with pytest.raises((TypeError, ValueError), match="timeout"):
            consumer.close(timeout=timeout)
    batch = consumer.poll(5, max_records=1)  # (still open, and its core sound)
    assert [m.offset for m in batch] == [2]
    consumer.close()
    follower = realtime.consumer("b", mode="amo")  # released at once: what was not handed out
    assert [m.offset for m in drain(follower, 7)] == list(range(3, 10))
    with pytest.raises(TypeError, match="rng must be"):
        realtime.consumer("c", rng=5)
    realtime.consumer("d", rng=random.Random(1)).close()


def test_an_on_revoked_raising_keyboard_interrupt_in_close_still_closes(realtime) -> None:
    """An ``on_revoked`` that raised KeyboardInterrupt (or SystemExit) during close left a
    half-closed consumer: its threads went on heartbeating its claims, nobody else got
    them, and a second close() did nothing. The close finishes now (the claims released),
    then raises it."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)

    def revoked(_partitions) -> None:
        raise KeyboardInterrupt

    consumer = realtime.consumer("a", on_revoked=revoked)
    handed = drain(consumer, 2, commit=False)
    consumer.commit(*handed)
    with pytest.raises(KeyboardInterrupt):
        consumer.close()
    assert consumer._finished.is_set()  # (the core closed: its releases were answered)
    follower = realtime.consumer("b")
    assert [m.offset for m in drain(follower, 3)] == [2, 3, 4]
