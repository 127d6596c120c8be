"""Issue 10: a member stopped (SIGSTOP) between its lease check and the hand-out gave out the
messages it had fetched before, after its claim could have lapsed. Forced here by advancing the
manual clock past 2·HB exactly between the two (the stop), before the replay shows anything."""

from __future__ import annotations

from .consumer_world import TOPIC, drain, produce, wait_until


def _stop_between_check_and_hand_out(consumer, clock, seconds: float, method: str) -> None:
    original = getattr(consumer, method)
    fired = []

    def stopped_then_take(claim, limit):
        if not fired:
            fired.append(True)
            clock.advance(seconds)  # the process was stopped right here
        return original(claim, limit)

    setattr(consumer, method, stopped_then_take)


def test_alo_member_stopped_before_the_hand_out_gives_nothing_out(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 40)
    zombie = manual.consumer("z", batch_size=10)
    assert [m.offset for m in drain(zombie, 10, max_records=10)] == list(range(10))
    wait_until(lambda: len(zombie._claims[(TOPIC, 0)].buffer) > 0, what="prefetched messages")
    _stop_between_check_and_hand_out(zombie, manual.clock, 2.5 * manual.hb, "_take_alo")
    # one attempt, as the first poll after SIGCONT: the lease lapsed while it was stopped
    assert zombie.poll(0) == []
    assert zombie._claims[(TOPIC, 0)].buffer, "the fetched messages were kept, not handed out"
