"""The stalled-holder bug (docs/protocol-notes.md): a member stopped (SIGSTOP) between its lease check and the hand-out gave out the
messages it had fetched before, after its claim could have lapsed. The core checks the lease
at the moment it hands out, with the time read just before; forced here by advancing the
manual clock past 2·HB right before a poll's step (the stop), before the replay shows
anything."""

from __future__ import annotations

import time

from logmarshal import NewRecord
from logmarshal import _coordlog as coordlog
from logmarshal.core import Poll
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler

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


def test_a_stalled_member_catches_up_with_a_log_that_grows_at_every_look_up(
    manual, monkeypatch
) -> None:
    """After a stall the member waits for the replay to reach the log's ends (``CatchUp``).
    On a busy log with a replay that lags (a loaded machine, a Kafka leader away: the
    fault stage), ends looked up afresh every driver pass stayed ahead of the replay pass
    after pass, and the member handed out nothing for a minute. Forced here: the replay's
    answers come 60 ms late (longer than a driver pass's wait, its tick of 20 ms), and a
    record lands at each look-up of the end. The ends of one look-up are waited for until
    reached."""
    manual.cluster.create_topic(TOPIC, 1)
    marshaler = Marshaler(
        manual.cluster, "z", "g", manual.hb, fetch_wait=0.05, clock=manual.clock,
        coordination_partitions=1,
    )  # fmt: skip
    manual.marshalers.append(marshaler)
    member = manual.consumer(marshaler)
    produce(manual.cluster, 0, 10)
    assert [m.offset for m in drain(member, 10)] == list(range(10))

    fetch_many = coordlog.fetch_columns_many
    late = []

    def late_replay(*args, **kwargs):
        late.append(True)
        got = fetch_many(*args, **kwargs)
        time.sleep(0.06)
        return got

    monkeypatch.setattr(coordlog, "fetch_columns_many", late_replay)
    # the replay's long poll begun before is over: every answer from here on comes late
    wait_until(lambda: len(late) >= 2, what="the replay's late answers")
    cluster = manual.cluster
    latest = cluster.latest_offset
    looked_up = []

    def busy_log_end(topic: str, partition: int) -> int:
        if topic == COORDINATION_TOPIC:
            looked_up.append(partition)
            # another member's record lands as the end is looked up (bytes the replay
            # skips: only the log's end matters here)
            cluster.produce(COORDINATION_TOPIC, partition, [NewRecord(value=b"busy", timestamp=0)])
        return latest(topic, partition)

    monkeypatch.setattr(cluster, "latest_offset", busy_log_end)
    manual.clock.advance(2.5 * manual.hb)  # stopped longer than the lease
    wait_until(lambda: member._catch_up.wanted, what="the core's CatchUp")
    wait_until(
        lambda: not member._catch_up.wanted and not member._core._st.stalled,
        what="the catch-up after the stall",
    )
    # one look-up for the one CatchUp (a second only if a pass raced it): not one a pass
    assert 1 <= len(looked_up) <= 2, looked_up


def test_a_member_stopped_between_its_catch_up_and_its_step_catches_up_again(manual) -> None:
    """The driver reaches the ends it looked up, then steps the core with that answer; a
    process stopped in between wakes with ends from before its stall. Forced here by
    advancing the manual clock past 2·HB as the answer is reached (the stop): the core takes
    the answer as not ending the stall it then finds, and its catch-up waits for ends looked
    up after it (``Replayed.ends_at``)."""
    manual.cluster.create_topic(TOPIC, 1)
    member = manual.consumer("z")
    produce(manual.cluster, 0, 10)
    assert [m.offset for m in drain(member, 10)] == list(range(10))
    catching = member._catch_up
    reached = catching.reached
    answers: list[int] = []

    def stopped_once_reached(timeout: float):
        looked_at = reached(timeout)
        if looked_at is not None:
            answers.append(looked_at)
            if len(answers) == 1:
                manual.clock.advance(2.5 * manual.hb)  # the process was stopped right here
        return looked_at

    catching.reached = stopped_once_reached
    report = member._report_caught_up
    stalled_after = []

    def report_and_look(looked_at: int) -> None:
        report(looked_at)  # a Replayed(at_end=True, ends_at=looked_at) per coordination partition
        stalled_after.append(bool(member._core._st.stalled))

    member._report_caught_up = report_and_look
    manual.clock.advance(2.5 * manual.hb)  # a first stall: the core asks for a catch-up
    wait_until(lambda: len(stalled_after) >= 2, what="two catch-ups")
    # the answer from before the second stop left the member stalled; the next one ended it
    assert stalled_after[:2] == [True, False], stalled_after
    assert answers[1] > answers[0]
    produce(manual.cluster, 0, 5)
    assert [m.offset for m in drain(member, 5)] == list(range(10, 15))
