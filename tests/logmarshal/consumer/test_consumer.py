from __future__ import annotations

import threading
import time

import pytest

from logmarshal import EmbeddedCluster, Message
from logmarshal import _direct as direct
from logmarshal.clock import ManualClock
from logmarshal.consumer import Consumer
from logmarshal.errors import ClosedError
from logmarshal.marshaler import Marshaler
from rationalizer import Effect, Heartbeat, MemberHeartbeat, decode

from ..consumer_world import (
    TOPIC,
    drain,
    holders,
    no_threads_left,
    produce,
    wait_passes,
    wait_until,
)


def test_two_consumers_split_the_partitions_with_one_holder_each(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 4)
    a = realtime.consumer("a", max_claims=2)
    b = realtime.consumer("b", max_claims=2)
    wait_until(lambda: len(a.claims()) == 2 and len(b.claims()) == 2, what="both hold two")
    assert set(a.claims()).isdisjoint(b.claims())
    observer = realtime.marshaler("observer")
    assert observer.wait_caught_up(5)
    owners = holders(observer, 4)
    for topic, p in a.claims():
        assert owners[p] == a.marshaler.identity, (topic, p)
    for topic, p in b.claims():
        assert owners[p] == b.marshaler.identity, (topic, p)


def test_a_consumer_on_an_empty_partition_waits_then_sees_new_messages(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    consumer = realtime.consumer("a")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    assert consumer.poll(0.1) == []
    produce(realtime.cluster, 0, 3)
    assert [m.offset for m in drain(consumer, 3)] == [0, 1, 2]


def test_poll_after_close_raises(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    consumer = realtime.consumer("a")
    consumer.close()
    with pytest.raises(ClosedError):
        consumer.poll()
    assert list(consumer) == []


# -- at least once -----------------------------------------------------------------------------


def test_clean_close_hands_off_exactly_at_the_committed_position(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 30)
    first = realtime.consumer("a")
    handled = drain(first, 12)
    assert [m.offset for m in handled] == list(range(12))
    first.close()  # flushes commits and releases at offset 11

    second = realtime.consumer("b")
    rest = drain(second, 18)
    assert [m.offset for m in rest] == list(range(12, 30))  # 0 lost, 0 repeated
    assert second.poll(0.1) == []


def test_alo_survivor_takes_over_a_stale_claim_and_nothing_is_lost(manual) -> None:
    manual.cluster.create_topic(TOPIC, 2)
    for p in range(2):
        produce(manual.cluster, p, 40)
    victim = manual.consumer("a", greedy=True)
    wait_until(lambda: len(victim.claims()) == 2, what="the victim's claims")
    handled: list[Message] = drain(victim, 30, max_records=10)
    assert {m.partition for m in handled} == {0, 1}
    # heartbeats (due within 0.8 HB) record the committed positions in the log
    committed = {p: max(m.offset for m in handled if m.partition == p) for p in range(2)}
    manual.clock.advance(0.9)
    wait_until(
        lambda: all(victim.marshaler.resume_offset(TOPIC, p) == committed[p] + 1 for p in range(2)),
        what="the victim's heartbeats",
    )
    victim.close(release=False)  # an abrupt stop: nobody releases
    victim.marshaler.close()

    survivor = manual.consumer("b", greedy=True)
    wait_passes(survivor)  # its claim passes had the chance to (wrongly) claim
    assert survivor.claims() == []  # still fresh: not claimable
    manual.clock.advance(2.5)  # now stale by the log's clock, and a claim pass is due
    wait_until(lambda: len(survivor.claims()) == 2, what="the takeover")
    observer = survivor.marshaler
    for p in range(2):
        state = observer.partition_state(TOPIC, p)
        assert state is not None and state.holder == observer.identity
    rest = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        batch = survivor.poll(0.1)
        if not batch and rest:
            break
        for m in batch:
            survivor.commit(m)
        rest += batch
    # resumed right after each committed position: everything handled, nothing twice here
    assert {(m.partition, m.offset) for m in handled + rest} == {
        (p, o) for p in range(2) for o in range(40)
    }
    assert len(handled) + len(rest) == 80


def test_out_of_order_commits_heartbeat_the_contiguous_offset(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 10)
    consumer = manual.consumer("a")
    messages = drain(consumer, 10, commit=False)
    for i in (0, 1, 2, 5, 6, 9):
        assert consumer.commit(messages[i])
    assert not consumer.commit(messages[5])  # repeated: changes nothing
    assert consumer.position(TOPIC, 0) == 2
    manual.clock.advance(0.9)
    wait_until(lambda: consumer.marshaler.resume_offset(TOPIC, 0) == 3, what="heartbeat 2")
    for i in (4, 3):
        consumer.commit(messages[i])
    assert consumer.position(TOPIC, 0) == 6
    manual.clock.advance(0.9)
    wait_until(lambda: consumer.marshaler.resume_offset(TOPIC, 0) == 7, what="heartbeat 6")
    consumer.close()  # the release carries the contiguous offset too
    state = manual.marshalers[0].partition_state(TOPIC, 0)
    assert state is not None and state.holder is None and state.last_offset == 6


# -- at most once ------------------------------------------------------------------------------


def test_amo_never_hands_a_message_out_twice_across_an_abrupt_stop(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 40)
    first = manual.consumer("a", mode="amo", batch_size=5)  # a window of 4 batches: 20
    got_first = drain(first, 15, commit=False)
    state = first.marshaler.partition_state(TOPIC, 0)
    assert state is not None and state.claimed_through >= 14  # reserved before handed out
    first.close(release=False)
    first.marshaler.close()

    second = manual.consumer("b", mode="amo", batch_size=5)
    manual.clock.advance(2.5)
    got_second = drain(second, 1, commit=False)
    start = got_second[0].offset  # after everything the first reserved (ahead of its polls)
    assert 15 <= start <= 15 + 20  # the abrupt stop lost at most the reserved window
    got_second += drain(second, 40 - start - 1, commit=False)
    assert second.poll(0.1) == []
    first_offsets = [m.offset for m in got_first]
    second_offsets = [m.offset for m in got_second]
    assert set(first_offsets).isdisjoint(second_offsets)
    assert sorted(first_offsets + second_offsets) == list(range(15)) + list(range(start, 40))
    assert not second.commit(got_second[0])  # AMO: handing out is committing


def test_amo_clean_close_and_successor(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 20)
    first = realtime.consumer("a", mode="amo", batch_size=4)
    got = drain(first, 8, commit=False)
    first.close()
    second = realtime.consumer("b", mode="amo", batch_size=4)
    got += drain(second, 12, commit=False)
    assert [m.offset for m in got] == list(range(20))


# -- fencing and recovery ----------------------------------------------------------------------


def test_stops_handing_out_as_soon_as_the_replay_says_the_claim_is_lost(tmp_path) -> None:
    log_clock = ManualClock()  # drives log-append time
    client_clock = ManualClock()  # the consumer's predictions: frozen, so it never beats
    with EmbeddedCluster(tmp_path / "d", clock=log_clock.time_ms, maintenance_interval=0) as cl:
        cl.create_topic(TOPIC, 1)
        produce(cl, 0, 50)
        victim_m = Marshaler(cl, "a", "g", 1.0, clock=client_clock, fetch_wait=0.05)
        intruder = Marshaler(cl, "x", "g", 1.0, clock=log_clock, fetch_wait=0.05)
        victim = Consumer(victim_m, TOPIC)
        try:
            wait_until(lambda: victim.claims() == [(TOPIC, 0)], what="the claim")
            handed = drain(victim, 5, commit=False)
            log_clock.advance(2.5)  # the victim's claim is stale in log time
            verdict = direct.wait_verdict(intruder, direct.claim_partition(intruder, TOPIC, 0), 5)
            assert verdict is not None and verdict.effect is Effect.TOOK_OVER_STALE
            wait_until(lambda: victim.claims() == [], what="the victim to notice")
            assert victim.poll(0.1) == []
            assert not victim.commit(handed[0])
        finally:
            victim.close()
            intruder.close()
            victim_m.close()
    no_threads_left()


class _GatedMarshaler(Marshaler):
    """Heartbeats block while the gate is shut: a consumer whose writes cannot get through."""

    #: write_records is what this gates: a writer thread per coordination partition calls it
    writes_together = False

    #: block every write, announcements too (cut off from the log), not only heartbeats
    every_write = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()

    def write_records(self, cp: int, records):
        gated = self.every_write or any(
            isinstance(decode(*r), Heartbeat | MemberHeartbeat) for r in records
        )
        if gated and not self.gate.is_set():
            self.blocked.set()
            self.gate.wait(10)
        return super().write_records(cp, records)


class _CutOffMarshaler(_GatedMarshaler):
    """Every write blocks while the gate is shut: its member drops out of the group too."""

    every_write = True


def test_self_fences_without_an_accepted_message_for_two_heartbeats(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 50)
    marshaler = manual.marshaler("a", cls=_GatedMarshaler)
    consumer = manual.consumer(marshaler)
    try:
        assert len(drain(consumer, 10, max_records=10)) == 10
        marshaler.gate.clear()
        manual.clock.advance(1.8)  # past 2*HB - margin (1.75 s) since the last accepted beat
        assert marshaler.blocked.wait(5)  # its heartbeat is stuck
        assert consumer.poll(0.2) == []  # 40 messages are there, but it must not hand out
        assert consumer.claims() == [(TOPIC, 0)]  # it does not know it lost anything
    finally:
        marshaler.gate.set()
    # the late heartbeat is accepted (nobody claimed meanwhile): handing out resumes
    assert [m.offset for m in drain(consumer, 5)] == list(range(10, 15))


def test_fast_reclaim_takes_back_fresh_claims_with_a_new_instance(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 20)
    old = manual.consumer("a")
    drain(old, 7)
    manual.clock.advance(0.9)
    wait_until(lambda: old.marshaler.resume_offset(TOPIC, 0) == 7, what="old's heartbeat")
    old.close(release=False)  # a restart: claims left behind, still fresh
    old.marshaler.close()

    new = manual.consumer("a")  # same client_id, new instance
    wait_until(lambda: new.claims() == [(TOPIC, 0)], what="the reclaim")
    assert new.marshaler.instance_id != old.marshaler.instance_id
    assert new.marshaler.holder(TOPIC, 0) == new.marshaler.identity
    assert [m.offset for m in drain(new, 13)] == list(range(7, 20))


def test_an_instance_fenced_by_a_restart_of_its_client_stops(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 20)
    old = manual.consumer("a")  # still running: a paused process, not a dead one
    drain(old, 3)
    newer = manual.marshaler("a")  # the same client restarted elsewhere
    verdict = direct.wait_verdict(newer, direct.heartbeat(newer, TOPIC, 0, 2), 5)
    assert verdict is not None and verdict.effect is Effect.RESTART_TAKEOVER
    wait_until(lambda: old.fenced and old.claims() == [], what="the old instance to stop")
    assert old.poll(0.1) == []


def test_a_position_beyond_the_log_end_is_reset_not_abandoned(realtime) -> None:
    # Marshal #35: a stored offset past the end made the Go consumer drop the claim forever
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    admin = realtime.marshaler("admin")
    assert direct.wait_verdict(admin, direct.claim_partition(admin, TOPIC, 0), 5) is not None
    assert direct.wait_verdict(admin, direct.release_partition(admin, TOPIC, 0, 99), 5) is not None
    consumer = realtime.consumer("a", auto_offset_reset="earliest")
    assert [m.offset for m in drain(consumer, 5)] == [0, 1, 2, 3, 4]
    assert consumer.claims() == [(TOPIC, 0)]


def test_commit_of_a_whole_batch_moves_the_heartbeated_position(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 20)
    consumer = manual.consumer("a")
    wait_until(lambda: consumer.claims(), what="the claim")
    batch = drain(consumer, 12, commit=False, max_records=12)
    assert consumer.uncommitted() == {(TOPIC, 0): 12}
    assert consumer.commit(*batch[5:]) is True  # out of order: held back by 0..4
    assert consumer.position(TOPIC, 0) == -1
    assert consumer.commit(*batch[:5], *batch[:5]) is True  # repeats count once
    assert consumer.position(TOPIC, 0) == 11 and consumer.uncommitted() == {(TOPIC, 0): 0}
    assert consumer.commit(*batch) is False  # nothing outstanding any more
    assert consumer.commit() is False


def test_lost_partitions_go_to_on_lost_not_on_revoked(manual) -> None:
    """Assigned / revoked / lost are kept apart (as confluent-kafka's on_lost): a partition
    another member took over while our heartbeats could not get through is lost, not given
    up. Every write of ``a`` hangs (cut off from the log): were its announcements to get
    through, it would stay a member the target counts (docs/rebalancing.md, "Known gaps")."""
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 5)
    seen: dict[str, list] = {"assigned": [], "revoked": [], "lost": []}
    marshaler = manual.marshaler("a", cls=_CutOffMarshaler)
    a = manual.consumer(
        marshaler,
        on_assigned=seen["assigned"].extend,
        on_revoked=seen["revoked"].extend,
        on_lost=seen["lost"].extend,
    )
    assert [m.offset for m in drain(a, 5)] == list(range(5))
    assert seen["assigned"] == [(TOPIC, 0)]
    marshaler.gate.clear()  # a's heartbeats hang: its claim goes stale in the log
    manual.clock.advance(2 * manual.hb + 0.1)
    b = manual.consumer("b")
    wait_until(lambda: b.claims() == [(TOPIC, 0)], what="b's takeover")
    wait_until(lambda: a.claims() == [], what="a's replay showing b")
    a.poll(0)  # callbacks run in the polling thread
    assert seen["lost"] == [(TOPIC, 0)]
    assert seen["revoked"] == []
    marshaler.gate.set()


class _DeadCoordinationPartition(Marshaler):
    """Writes to one coordination partition hang while the gate is shut (its broker died)."""

    #: write_records is what this gates: a writer thread per coordination partition calls it
    writes_together = False

    def __init__(self, *args, dead_cp: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.dead_cp = dead_cp
        self.gate = threading.Event()
        self.gate.set()

    def write_records(self, cp: int, records):
        if cp == self.dead_cp and not self.gate.is_set():
            self.gate.wait(10)
        return super().write_records(cp, records)


def test_a_dead_coordination_partition_stops_only_its_own_claims(manual) -> None:
    """Claims coordinated on a dead and a live broker once stopped everything (one manager
    thread blocked heartbeating the unreachable one). Partitions 0 and 1 of the topic
    are coordinated on __marshal partitions 0 and 6: with 0 unreachable, partition 1 keeps
    heartbeating and handing out; partition 0 stops at its lease."""
    manual.cluster.create_topic(TOPIC, 2)
    produce(manual.cluster, 0, 5)
    produce(manual.cluster, 1, 5)
    marshaler = manual.marshaler(
        "a", cls=lambda *a, **k: _DeadCoordinationPartition(*a, dead_cp=0, **k)
    )
    consumer = manual.consumer(marshaler, greedy=True)
    try:
        assert len(drain(consumer, 10)) == 10
        marshaler.gate.clear()
        for _ in range(8):  # 2.4 s of log time: past 2·HB since partition 0's last beat
            manual.clock.advance(0.3)
            wait_until(
                lambda: (
                    marshaler.partition_state(TOPIC, 1).last_beat >= manual.clock.time_ms() - 1000
                ),
                what="partition 1 heartbeated within the last HB",
            )
        produce(manual.cluster, 0, 5)
        produce(manual.cluster, 1, 5)
        got = drain(consumer, 5)
        assert {(m.partition, m.offset) for m in got} == {(1, o) for o in range(5, 10)}
        assert consumer.poll(0.2) == []  # partition 0's lease lapsed: nothing of it
    finally:
        marshaler.gate.set()
