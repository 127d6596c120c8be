"""A core that raises (a bug in logmarshal: by design it never does) stops its consumer as a
crash would, and says so to the caller. Before, the thread that stepped it died: the fetch
loop's, and the member went on heartbeating claims it no longer read (the group waited for
good); or the coordination writer's, and the member went silent while ``poll`` returned
nothing, with no error for its caller."""

from __future__ import annotations

import threading

import pytest

from logmarshal import ConsumerFailed
from logmarshal.core import Fetched, Written

from ..consumer_world import TOPIC, drain, produce, wait_passes, wait_until


class _Bug(Exception):
    """What the core raises here."""


def _failing_on(consumer, kind: type) -> list[object]:
    """From now on ``consumer``'s core raises when it is stepped with an event of ``kind``
    (alone, or among others); returns the events it failed on."""
    core = consumer._core
    step, step_many = core.step, core.step_many
    failed: list[object] = []

    def fail_if(events) -> None:
        for event in events:
            if isinstance(event, kind):
                failed.append(event)
                raise _Bug(f"stepped with {event!r}")

    def failing_step(now, event, **kwargs):
        fail_if([event])
        return step(now, event, **kwargs)

    def failing_step_many(now, events, **kwargs):
        events = list(events)
        fail_if(events)
        return step_many(now, events, **kwargs)

    core.step, core.step_many = failing_step, failing_step_many
    return failed


def _fails(consumer) -> ConsumerFailed:
    """The error ``poll`` raises once the consumer failed (within a bound)."""
    raised: list[ConsumerFailed] = []

    def polled() -> bool:
        try:
            consumer.poll(0)
        except ConsumerFailed as exc:
            raised.append(exc)
        return bool(raised)

    wait_until(polled, what="poll() raising ConsumerFailed")
    return raised[0]


def _advance_beside(manual, consumer, seconds: float) -> None:
    """Advance the clock by ``seconds`` in quarter-HB steps, each after ``consumer``'s driver
    acted on the last (an alive member heartbeats on time all along)."""
    for _ in range(round(seconds / (manual.hb / 4))):
        manual.clock.advance(manual.hb / 4)
        if not consumer.closed:
            wait_passes(consumer, 2)


@pytest.mark.parametrize("kind", [Fetched, Written], ids=["fetch loop", "writer"])
def test_a_core_that_fails_stops_the_consumer_as_a_crash_would(manual, kind) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 5)
    a = manual.consumer("a")
    assert [m.offset for m in drain(a, 5)] == list(range(5))
    failed = _failing_on(a, kind)
    produce(manual.cluster, 0, 5)  # fetched (and committed, then written) by a
    if kind is Written:
        manual.clock.advance(manual.hb)  # a heartbeat is due: written, then answered
    error = _fails(a)
    assert failed and isinstance(error.__cause__, _Bug)
    assert "as a crash would" in str(error)
    wait_until(lambda: a.closed, what="a closing itself")
    with pytest.raises(ConsumerFailed):  # and keeps saying why, not "closed"
        a.poll(0)
    # a's claim goes stale, as after a crash: another member takes the partition over (while
    # a heartbeat its claim from the other threads, this never came)
    _advance_beside(manual, a, 3 * manual.hb)
    b = manual.consumer("b")
    wait_until(lambda: b.claims() == [(TOPIC, 0)], what="b's takeover")
    handed = [m.offset for m in drain(b, 5)]
    if handed[0] == 0:  # (ALO: a failed before a heartbeat carried its commits of 0..4)
        handed += [m.offset for m in drain(b, 5)]
    assert handed[-5:] == list(range(5, 10))


def test_a_core_that_fails_ends_run_with_the_error(manual) -> None:
    """``run()`` ends on ClosedError quietly (another thread closed the consumer); a failed
    consumer's run ends with ConsumerFailed instead, so a worker running it learns."""
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 5)
    a = manual.consumer("a")
    assert [m.offset for m in drain(a, 5)] == list(range(5))
    _failing_on(a, Fetched)
    produce(manual.cluster, 0, 5)
    stop = threading.Event()
    bound = threading.Timer(10, stop.set)  # (a run that never fails ends, and fails below)
    bound.start()
    try:
        with pytest.raises(ConsumerFailed):
            a.run(lambda message: None, poll_timeout=0.05, stop=stop)
    finally:
        bound.cancel()
