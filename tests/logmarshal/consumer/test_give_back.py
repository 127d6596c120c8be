"""AMO: what a poll handed out and never reached user code goes back (``Consumer.run`` when
its handler fails for good or is stopped, a ``for message in consumer`` loop left early),
for a later poll or, released by the close, for the next holder. Before, it was lost as a
crash loses the reserved window, though the close was graceful."""

from __future__ import annotations

import gc
import random
import threading
import time

import pytest

from logmarshal.admin import Target, execute, new_admin, plan_reset, read_coordination
from logmarshal.marshaler import Marshaler
from logmarshal.metrics import MarshalerMetrics
from logmarshal.retry import HandlerFailed, RetryPolicy

from ..consumer_world import TOPIC, drain, produce, wait_until


def _ready(realtime, client: str, count: int, **kwargs):
    """A topic of one partition holding ``count`` records, and an AMO consumer of it that
    holds it with all of them fetched."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, count)
    consumer = realtime.consumer(client, mode="amo", batch_size=count, **kwargs)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    return consumer


def test_a_handler_that_fails_for_good_gives_the_rest_of_its_batch_to_the_next_holder(
    realtime,
) -> None:
    consumer = _ready(realtime, "a", 10, retry=RetryPolicy(max_attempts=2, backoff=0.0))
    seen: list[int] = []

    def handler(message) -> None:
        seen.append(message.offset)
        if message.offset == 2:
            raise ValueError("poison")

    with pytest.raises(HandlerFailed) as failed:
        consumer.run(handler)
    assert failed.value.message.offset == 2 and consumer.closed
    assert seen == [0, 1, 2, 2]  # (two attempts on the poisoned one)
    # the failed message was handed to the handler: consumed, at most once; the rest went
    # back with the release (before: last_offset 9, 3..9 lost)
    state = realtime.marshalers[0].partition_state(TOPIC, 0)
    assert state is not None and state.holder is None and state.last_offset == 2
    successor = realtime.consumer("b", mode="amo")
    assert [m.offset for m in drain(successor, 7)] == list(range(3, 10))


def test_a_stop_during_a_retry_gives_the_rest_back_to_the_next_poll(realtime) -> None:
    policy = RetryPolicy(max_attempts=3, backoff=30.0, jitter=0.0)
    consumer = _ready(realtime, "a", 10, retry=policy)
    stop = threading.Event()
    seen: list[int] = []

    def handler(message) -> None:
        seen.append(message.offset)
        if message.offset == 2:
            threading.Timer(0.2, stop.set).start()  # during the 30 s backoff
            raise ValueError("poison")

    started = time.monotonic()
    assert consumer.run(handler, stop=stop) == 2
    assert time.monotonic() - started < 20 and seen == [0, 1, 2]
    # 2 reached the handler (at most once: not again); 3..9 did not: the same consumer
    # hands them out again
    assert [m.offset for m in drain(consumer, 7)] == list(range(3, 10))
    assert consumer.poll(0.3) == []


def test_a_loop_over_the_consumer_left_early_gives_the_rest_back(realtime) -> None:
    consumer = _ready(realtime, "a", 10)
    seen = []
    for message in consumer:
        seen.append(message.offset)
        if message.offset == 3:
            break
    assert seen == [0, 1, 2, 3]
    assert [m.offset for m in drain(consumer, 6)] == list(range(4, 10))


def test_messages_given_back_are_counted_handed_out_once(realtime) -> None:
    """The metrics counted a message given back and polled again twice (each poll's batch
    whole): a loop left after 4 of 10 showed 16 handed out."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 10)
    metrics = MarshalerMetrics()
    marshaler = Marshaler(realtime.cluster, "a", "g", realtime.hb, metrics=metrics)
    realtime.marshalers.append(marshaler)
    consumer = realtime.consumer(marshaler, mode="amo", batch_size=10)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    for message in consumer:
        if message.offset == 3:
            break
    assert [m.offset for m in drain(consumer, 6)] == list(range(4, 10))
    labels = {"group": "g", "client_id": "a", "topic": TOPIC, "mode": "amo"}
    assert metrics.registry.get_sample_value("logmarshal_consumer_messages_total", labels) == 10


def test_only_the_end_of_the_last_batch_goes_back(realtime) -> None:
    consumer = _ready(realtime, "a", 10)
    first = consumer.poll(5.0)
    first_handout = consumer._handout
    produce(realtime.cluster, 0, 4)
    second = drain(consumer, 14 - len(first))
    second_handout = consumer._handout
    assert [m.offset for m in first + second] == list(range(14))
    # a batch handed out before the last one may have reached user code: refused (and
    # said); so are the last one's first records, and its end under another number
    consumer._give_back(first[-1:], first_handout)
    consumer._give_back(second[-1:], first_handout)
    consumer._give_back(second[:1], second_handout)
    assert consumer.poll(0.3) == []
    consumer._give_back(second[-2:], second_handout)
    consumer._give_back(second[-2:], second_handout)  # once: the second is refused
    assert [m.offset for m in drain(consumer, 2)] == [12, 13]
    assert consumer.poll(0.3) == []


def test_alo_gives_nothing_back(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 3)
    consumer = realtime.consumer("a", batch_size=3)
    batch = drain(consumer, 3)
    consumer._give_back(batch[1:], consumer._handout)  # (not committed: delivered again)
    assert consumer.poll(0.3) == [] and not consumer._returned


# -- schedules an attack found (2026-12-07) ----------------------------------------------------


def test_an_old_loop_closed_after_a_reset_gives_nothing_back(realtime) -> None:
    """A ``for`` loop's generator kept past an admin reset to 0: the new tenure hands 0..9
    out again (the reset's own), and only then is the old generator closed: its 1..9, the
    same offsets as the new batch's end, are not given back (it is another hand-out)."""
    consumer = _ready(realtime, "a", 10)
    it = iter(consumer)
    assert next(it).offset == 0  # 1..9 stay in the suspended generator
    key = (TOPIC, 0)
    state = read_coordination(realtime.cluster)
    start = {key: state.view.resume_offset("g", *key)}
    plan = plan_reset("g", [key], start, {key: (0, 10)}, Target("offset", 0))
    admin = new_admin("ops", rng=random.Random(1))
    assert execute(realtime.cluster, state, plan, admin=admin, pause_ms=1000).ok
    wait_until(lambda: not consumer.claims(), 5, "the pause voids the claim")
    wait_until(lambda: consumer.claims() == [key], 10, "claimed again after the pause")
    assert [m.offset for m in drain(consumer, 10)] == list(range(10))
    it.close()
    assert consumer.poll(0.5) == []  # (before: 1..9 a second time)


def test_a_loop_collected_by_a_thread_holding_the_lock_gives_back_later(realtime) -> None:
    """The garbage collector closes a generator in whatever thread allocates, the driver in
    the middle of a core step included: the give-back is queued, not taken there (before:
    that thread waited on the lock it held, for good)."""
    consumer = _ready(realtime, "a", 10)

    class Cycle:
        pass

    cycle = Cycle()
    cycle.me = cycle  # type: ignore[attr-defined]
    cycle.it = iter(consumer)  # type: ignore[attr-defined]
    assert next(cycle.it).offset == 0  # type: ignore[attr-defined]
    del cycle
    done = threading.Event()

    def collect_under_the_lock() -> None:
        with consumer._cond:
            gc.collect()
        done.set()

    threading.Thread(target=collect_under_the_lock, daemon=True).start()
    assert done.wait(5)
    assert [m.offset for m in drain(consumer, 9)] == list(range(1, 10))


def test_a_seek_past_the_rest_of_the_batch_stays(realtime) -> None:
    """A handler that seeks past the rest of its batch, then fails for good: what it sought
    past is not given back (before: released below it, the next holder was handed it)."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 12)
    policy = RetryPolicy(max_attempts=1, backoff=0.0)
    consumer = realtime.consumer("a", mode="amo", batch_size=10, retry=policy)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")

    def handler(message) -> None:
        if message.offset == 2:
            consumer.seek(TOPIC, 0, 10)  # skip 3..9
            raise ValueError("poison")

    with pytest.raises(HandlerFailed):
        consumer.run(handler)
    successor = realtime.consumer("b", mode="amo")
    assert [m.offset for m in drain(successor, 2)] == [10, 11]
