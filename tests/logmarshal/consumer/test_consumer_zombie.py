"""The stalled-holder bug (docs/protocol-notes.md): a member stopped (SIGSTOP) between its lease check and the hand-out gave out the
messages it had fetched before, after its claim could have lapsed. The core checks the lease
at the moment it hands out, with the time read just before; forced here by advancing the
manual clock past 2·HB right before a poll's step (the stop), before the replay shows
anything."""

from __future__ import annotations

from logmarshal.core import Poll

from ..consumer_world import TOPIC, drain, produce, wait_until


def _stop_before_the_hand_out(consumer, clock, seconds: float) -> None:
    original = consumer._step
    fired = []

    def stopped_then_step(event):
        if isinstance(event, Poll) and not fired:
            fired.append(True)
            clock.advance(seconds)  # the process was stopped right here
        return original(event)

    consumer._step = stopped_then_step


def test_alo_member_stopped_before_the_hand_out_gives_nothing_out(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 40)
    zombie = manual.consumer("z", batch_size=10)
    assert [m.offset for m in drain(zombie, 10, max_records=10)] == list(range(10))
    wait_until(lambda: zombie._core.buffered(TOPIC, 0) > 0, what="prefetched messages")
    _stop_before_the_hand_out(zombie, manual.clock, 2.5 * manual.hb)
    # one attempt, as the first poll after SIGCONT: the lease lapsed while it was stopped
    assert zombie.poll(0) == []
    assert zombie._core.buffered(TOPIC, 0), "the fetched messages were kept, not handed out"
