"""Consumer options and flows beyond the core: late verdicts, ReleaseGroup, growth, regex,
whole-topic claims, release_if_behind and its cooldown, offset reset, pause/resume, lag,
callbacks, the handler retry policy and dead letters."""

from __future__ import annotations

import re
import threading
import time

import pytest

from logmarshal import NewRecord
from logmarshal import _direct as direct
from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.admin import Target, execute, new_admin, plan_reset, read_coordination
from logmarshal.consumer import Consumer, NoPosition
from logmarshal.consumer.catchup import CatchingUp
from logmarshal.errors import ClosedError, NetworkError, RecordTooLarge
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler
from logmarshal.retry import HandlerFailed, RetryPolicy
from rationalizer import Effect, Heartbeat, MemberHeartbeat, ReleaseGroup, decode, encode

from ..consumer_world import (
    TOPIC,
    World,
    drain,
    no_threads_left,
    produce,
    wait_passes,
    wait_until,
)

# -- verdicts that come too late ---------------------------------------------------------------


class _LostHeartbeat(Marshaler):
    """The first heartbeat after a claim fails to reach the log (its verdict is unknown)."""

    #: write_records is what this gates: a writer thread per coordination partition calls it
    writes_together = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failures = 1

    def write_records(self, cp: int, records):
        if (
            any(isinstance(decode(*r), Heartbeat | MemberHeartbeat) for r in records)
            and self.failures
        ):
            self.failures -= 1
            raise OSError("connection reset")
        return super().write_records(cp, records)


def test_a_claim_whose_first_heartbeat_got_no_verdict_is_kept_and_confirmed(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    marshaler = realtime.marshaler("a", cls=_LostHeartbeat)
    consumer = realtime.consumer(marshaler)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    assert marshaler.failures == 0
    assert [m.offset for m in drain(consumer, 5)] == list(range(5))


def test_a_claim_whose_answer_was_lost_is_found_and_adopted(cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 3)
    # every write's answer is lost for the first claim (the record lands, the client errs)
    faulty = FaultyCluster(cluster, FaultPlan(produce_drop=1.0, topics={COORDINATION_TOPIC}))
    marshaler = Marshaler(faulty, "a", "g", 0.3, fetch_wait=0.05)
    consumer = Consumer(marshaler, TOPIC)
    try:
        wait_until(lambda: marshaler.is_holder(TOPIC, 0), what="the claim in the log")
        faulty.plan = FaultPlan()  # answers get through again
        wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the orphan adopted")
        assert [m.offset for m in drain(consumer, 3)] == [0, 1, 2]
    finally:
        consumer.close()
        marshaler.close()
    assert faulty.injected()["drop"] >= 1
    no_threads_left()


# -- ReleaseGroup ------------------------------------------------------------------------------


def _release_group(world: World, admin: Marshaler, expire_ms: int) -> None:
    key, value = encode(
        ReleaseGroup(
            client_id=admin.client_id,
            instance_id=admin.instance_id,
            group_id="g",
            msg_expire_time=expire_ms,
        )
    )
    now = world.clock.time_ms()
    for cp in range(admin.coordination_partitions):
        world.cluster.produce(
            COORDINATION_TOPIC, cp, [NewRecord(value=value, key=key, timestamp=now)], durable=True
        )


def test_release_group_drops_claims_waits_and_resumes_from_the_admins_position(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 30)
    revoked: list[list] = []
    consumer = manual.consumer("a", on_revoked=revoked.append)
    assert [m.offset for m in drain(consumer, 5)] == list(range(5))
    admin = manual.marshaler("admin")
    assert admin.wait_caught_up(5)
    _release_group(manual, admin, manual.clock.time_ms() + 3_000)
    wait_until(lambda: consumer.claims() == [], what="the claim voided")
    verdict = direct.wait_verdict(admin, direct.heartbeat(admin, TOPIC, 0, 19), 5)
    assert verdict is not None and verdict.effect is Effect.POSITION_SET
    assert consumer.poll(0.1) == []  # revocation delivered here, in the polling thread
    assert revoked == [[(TOPIC, 0)]]
    manual.clock.advance(1.0)
    wait_passes(consumer)
    assert consumer.claims() == []  # still paused: no claim is even tried
    manual.clock.advance(2.5)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim after the pause")
    assert [m.offset for m in drain(consumer, 10)] == list(range(20, 30))


# -- what is consumed --------------------------------------------------------------------------


def test_partitions_added_while_running_are_claimed(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 2)
    consumer = realtime.consumer("a", greedy=True)
    wait_until(lambda: len(consumer.claims()) == 2, what="two claims")
    realtime.cluster.add_partitions(TOPIC, 4)
    wait_until(lambda: len(consumer.claims()) == 4, what="the new partitions")
    produce(realtime.cluster, 3, 2)
    assert [(m.partition, m.offset) for m in drain(consumer, 2)] == [(3, 0), (3, 1)]


def test_a_topic_regex_picks_up_matching_topics_as_they_appear(realtime) -> None:
    cluster = realtime.cluster
    cluster.create_topic("orders-eu", 1)
    cluster.create_topic("other", 1)
    marshaler = realtime.marshaler("a")
    consumer = Consumer(marshaler, re.compile(r"orders-.*"), greedy=True)
    realtime.consumers.append(consumer)
    wait_until(lambda: consumer.claims() == [("orders-eu", 0)], what="the first topic")
    cluster.create_topic("orders-us", 2)
    wait_until(lambda: len(consumer.claims()) == 3, what="the new topic")
    assert all(t.startswith("orders-") for t, _ in consumer.claims())
    assert COORDINATION_TOPIC not in consumer.topics


def test_a_match_all_pattern_leaves_internal_topics_alone(realtime) -> None:
    cluster = realtime.cluster
    cluster.create_topic("orders", 1)
    cluster.create_topic("__internal", 1)  # like __marshal_snapshots: never a data topic
    marshaler = realtime.marshaler("a")
    consumer = Consumer(marshaler, re.compile(r".*"), greedy=True)
    realtime.consumers.append(consumer)
    wait_until(lambda: consumer.claims() == [("orders", 0)], what="the data topic")
    assert consumer.topics == ("orders",)


def _handed_out(consumers, topic, seconds):
    """Poll ``consumers`` (AMO: handing out is committing) for ``seconds``; how often each
    offset of ``topic`` was handed out."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            for message in consumer.poll(0.02):
                if message.topic == topic:
                    seen[message.offset] = seen.get(message.offset, 0) + 1
    return seen


def test_a_pattern_never_grows_into_a_topic_another_consumer_of_its_marshaler_reads(
    realtime, caplog
) -> None:
    """Found by an attack: ``Marshaler.attach`` checked the topics of a Marshaler's consumers
    once, so a pattern that matched a topic created later (one another consumer of the same
    Marshaler was made for) took it too: the two write as one instance, each took the other's
    claim and reservations for its own, and AMO handed out hundreds of offsets twice."""
    cluster = realtime.cluster
    cluster.create_topic("ev1", 1)
    marshaler = realtime.marshaler("a")
    named = Consumer(marshaler, "evX", mode="amo", greedy=True)  # evX does not exist yet
    realtime.consumers.append(named)
    pattern = Consumer(marshaler, re.compile(r"ev.*"), mode="amo", greedy=True)
    realtime.consumers.append(pattern)
    wait_until(lambda: pattern.claims() == [("ev1", 0)], what="the pattern's first topic")
    cluster.create_topic("evX", 1)
    now = int(time.time() * 1000)
    cluster.produce("evX", 0, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(300)])
    wait_until(lambda: named.claims() == [("evX", 0)], what="evX claimed by its consumer")
    seen = _handed_out([named, pattern], "evX", 4 * realtime.hb)
    assert pattern.topics == ("ev1",) and pattern.claims() == [("ev1", 0)]
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 1 and "matches ['evX']" in said[0], said  # once, not every pass
    assert sorted(seen) == list(range(300)) and set(seen.values()) == {1}, {
        o: n for o, n in seen.items() if n > 1
    }


def test_two_patterns_of_one_marshaler_never_both_take_a_new_topic(realtime) -> None:
    cluster = realtime.cluster
    cluster.create_topic("a1", 1)
    cluster.create_topic("b1", 1)
    marshaler = realtime.marshaler("a")
    first = Consumer(marshaler, re.compile(r"a.*|new"), greedy=True)
    second = Consumer(marshaler, re.compile(r"b.*|new"), greedy=True)
    realtime.consumers += [first, second]
    wait_until(lambda: first.claims() and second.claims(), what="each its first topic")
    cluster.create_topic("new", 2)
    wait_until(
        lambda: len(first.claims()) + len(second.claims()) == 4, what="the new topic claimed"
    )
    time.sleep(3 * realtime.hb)  # passes of both patterns: neither takes the other's
    assert ("new" in first.topics) != ("new" in second.topics), (first.topics, second.topics)
    assert len(first.claims()) + len(second.claims()) == 4


def _fill(cluster, topic, count):
    now = int(time.time() * 1000)
    cluster.produce(topic, 0, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(count)])


def test_a_consumer_of_a_topic_another_consumer_reads_through_tasks_is_refused(realtime) -> None:
    """A second attack: ``attach`` compared with the others' topics, not their tasks'
    sources, so a plain consumer of a task's source was accepted (every record of it handed
    out twice); refused now, and the refused consumer leaves no thread running (the
    fixture's teardown looks), since it attaches before it starts any."""
    for name in ("src", "other", "x"):
        realtime.cluster.create_topic(name, 1)
    marshaler = realtime.marshaler("a")
    realtime.consumers.append(Consumer(marshaler, "x"))
    with pytest.raises(ValueError, match=r"already has a consumer of \['x'\]"):
        Consumer(marshaler, "x")  # (it started two threads before it was refused)
    realtime.consumers.append(Consumer(marshaler, (), tasks={"job": ["other", "src"]}))
    with pytest.raises(ValueError, match=r"already has a consumer of \['src'\]"):
        Consumer(marshaler, "src")
    with pytest.raises(ValueError, match=r"already has a consumer of \['other'\]"):
        Consumer(marshaler, ["y", "other"])


def test_a_pattern_leaves_out_the_tasks_sources_of_its_marshaler_and_its_own(realtime) -> None:
    """A pattern built after a task consumer claimed the task's source before its first pass
    left it out, and one that grew into its own tasks' source subscribed to it as well as
    the task (which then went unclaimed): a pattern now never takes a task's source."""
    cluster = realtime.cluster
    for name in ("src", "other", "s1"):
        cluster.create_topic(name, 1)
    _fill(cluster, "src", 50)
    marshaler = realtime.marshaler("a")
    tasks = Consumer(marshaler, (), tasks={"job": ["other", "src"]}, greedy=True)
    realtime.consumers.append(tasks)
    wait_until(lambda: tasks.claims() == [("job", 0)], what="the task")
    pattern = Consumer(marshaler, re.compile(r"s.*"), greedy=True)
    realtime.consumers.append(pattern)
    assert pattern.topics == ("s1",)
    seen = _handed_out([tasks, pattern], "src", 3 * realtime.hb)
    assert sorted(seen) == list(range(50)) and set(seen.values()) == {1}
    assert pattern.claims() == [("s1", 0)]
    # its own tasks' source, created after it
    own = Consumer(realtime.marshaler("b"), re.compile(r"t.*"), tasks={"job2": ["tsrc"]},
                   greedy=True)  # fmt: skip
    realtime.consumers.append(own)
    cluster.create_topic("t1", 1)
    wait_until(lambda: own.claims() == [("t1", 0)], what="t1")
    cluster.create_topic("tsrc", 1)
    wait_until(lambda: ("job2", 0) in own.claims(), what="the task of a source created later")
    assert own.topics == ("t1",)


def test_a_named_consumer_attached_as_a_pattern_takes_its_topic_is_refused(realtime) -> None:
    """The registry is written under the Marshaler's lock when a pattern takes a topic, not
    when the consumer stores its topics after: a named consumer attached in between is
    refused (it was accepted, and the two held the partition at once)."""
    cluster = realtime.cluster
    cluster.create_topic("ev1", 1)
    marshaler = realtime.marshaler("a")
    pattern = Consumer(marshaler, re.compile(r"ev.*"), mode="amo", greedy=True)
    realtime.consumers.append(pattern)
    wait_until(lambda: pattern.claims() == [("ev1", 0)], what="ev1")
    refused: list[BaseException | None] = []
    take = marshaler.take_topics

    def take_then_attach(consumer, matched, sources=()):
        free = take(consumer, matched, sources)
        if "evX" in free and not refused:  # before the pattern's consumer stores it
            try:
                realtime.consumers.append(Consumer(marshaler, "evX", mode="amo"))
                refused.append(None)
            except ValueError as exc:
                refused.append(exc)
        return free

    marshaler.take_topics = take_then_attach  # type: ignore[method-assign]
    cluster.create_topic("evX", 1)
    wait_until(lambda: refused, what="the named consumer tried")
    assert isinstance(refused[0], ValueError), "accepted while the pattern took evX"
    wait_until(lambda: ("evX", 0) in pattern.claims(), what="evX claimed by the pattern")


def test_a_task_is_a_name_no_other_consumer_of_its_marshaler_may_have(realtime) -> None:
    """A third attack: a task's name is its claims' key (``job/0``), and was not reserved:
    a consumer of topic ``job`` and one with task ``job`` on one Marshaler both held
    ``job/0`` as one instance, each heartbeating its own topic's position there; so did two
    tasks of one name with different sources. Topics, tasks and sources are one namespace."""
    for name in ("job", "src", "a1", "b1"):
        realtime.cluster.create_topic(name, 1)
    marshaler = realtime.marshaler("a")
    realtime.consumers.append(Consumer(marshaler, "job"))
    with pytest.raises(ValueError, match=r"already has a consumer of \['job'\]"):
        Consumer(marshaler, (), tasks={"job": ["src"]})
    realtime.consumers.append(Consumer(marshaler, (), tasks={"task": ["a1"]}))
    with pytest.raises(ValueError, match=r"already has a consumer of \['task'\]"):
        Consumer(marshaler, (), tasks={"task": ["b1"]})
    with pytest.raises(ValueError, match=r"already has a consumer of \['task'\]"):
        Consumer(marshaler, "task")


def test_a_consumer_whose_construction_fails_gives_its_topics_back(realtime, monkeypatch) -> None:
    """A constructor that raised after reserving (its fetcher refused, say) left the consumer
    reserved for good (its topic refused to everyone after) and its writer running."""
    import logmarshal.consumer.consumer as module

    realtime.cluster.create_topic("x", 1)
    marshaler = realtime.marshaler("a")

    def broken(*args, **kwargs):
        raise OSError("cannot open a reader")

    with monkeypatch.context() as patched:
        patched.setattr(module, "MemberFetcher", broken)
        with pytest.raises(OSError):
            Consumer(marshaler, "x")
    realtime.consumers.append(Consumer(marshaler, "x"))  # free again (and no thread left)


@pytest.mark.parametrize("when", ["reserved", "running"])
def test_a_marshaler_closed_while_a_consumer_is_built_closes_it(realtime, when) -> None:
    """``Marshaler.close`` while a Consumer of it is built: it closed a consumer that had
    attached but had no driver yet (AttributeError: the Marshaler never closed), or missed
    one that attached after it looked (left running on a stopped replay). A consumer now
    reserves its names first and attaches once it runs; none attaches after close began."""
    realtime.cluster.create_topic("x", 1)
    marshaler = realtime.marshaler("a")
    step = "reserve" if when == "reserved" else "attach"
    real = getattr(marshaler, step)
    errors: list[BaseException] = []

    def then_close(*args, **kwargs):
        out = real(*args, **kwargs)
        closer = threading.Thread(target=lambda: _closing(marshaler, errors))
        closer.start()
        closer.join(15)
        return out

    setattr(marshaler, step, then_close)
    built = None
    try:
        built = Consumer(marshaler, "x")
    except ClosedError:
        assert when == "reserved"  # refused at attach: it had started, and was closed
    assert errors == [] and marshaler.closed
    assert built is None or built.closed


def _closing(marshaler, errors):
    try:
        marshaler.close()
    except BaseException as exc:
        errors.append(exc)


def test_claim_entire_topic_gives_each_member_whole_topics(realtime) -> None:
    for name in ("t1", "t2"):
        realtime.cluster.create_topic(name, 3)
    members = []
    for client in ("a", "b"):
        consumer = Consumer(
            realtime.marshaler(client), ["t1", "t2"], claim_entire_topic=True, max_claims=1
        )
        realtime.consumers.append(consumer)
        members.append(consumer)

    def whole_topics() -> bool:
        views = [consumer.claims() for consumer in members]
        return all(len(v) == 3 and len({t for t, _ in v}) == 1 for v in views)

    wait_until(whole_topics, what="each member holding one whole topic")
    assert {members[0].claims()[0][0], members[1].claims()[0][0]} == {"t1", "t2"}


# -- release_if_behind and the cooldown (Marshal #61, zorkian#41) ------------------------------


def test_release_if_behind_only_with_another_fresh_member_and_then_cools_down(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 3)
    slow = realtime.consumer(
        "slow", greedy=True, max_claims=2, release_if_behind=10, rebalance="none"
    )
    wait_until(lambda: len(slow.claims()) == 2, what="the slow member's claims")
    for _, p in slow.claims():
        produce(realtime.cluster, p, 50)  # never polled: it falls behind and stays behind
    time.sleep(realtime.hb * 3)
    assert len(slow.claims()) == 2  # nobody else is alive: it keeps them (zorkian#41)
    helper = realtime.consumer("helper", rebalance="none")
    wait_until(lambda: len(slow.claims()) == 1, timeout=5, what="a release")
    released = ({(TOPIC, p) for p in range(3)} - set(slow.claims())) - {(TOPIC, 2)}
    wait_until(lambda: len(helper.claims()) >= 2, what="the helper taking it over")
    assert set(helper.claims()) >= released
    assert slow.position(TOPIC, next(iter(released))[1]) is None  # not reclaimed (cooldown)


def test_release_if_behind_is_refused_under_a_target(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    with pytest.raises(ValueError, match='release_if_behind needs rebalance="none"'):
        Consumer(realtime.marshaler("a"), TOPIC, release_if_behind=10)


def test_a_released_partition_is_not_reclaimed_during_the_cooldown(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    consumer = realtime.consumer("a", reclaim_cooldown=1.0)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    consumer._give_up((TOPIC, 0), "test")
    assert consumer.claims() == []
    time.sleep(0.5)
    assert consumer.claims() == []  # claimable, but cooling down
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], timeout=3, what="the reclaim")


# -- positions ---------------------------------------------------------------------------------


def test_latest_starts_a_new_group_at_the_end(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    consumer = realtime.consumer("a", auto_offset_reset="latest")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    assert consumer.poll(0.1) == []
    produce(realtime.cluster, 0, 2)
    assert [m.offset for m in drain(consumer, 2)] == [5, 6]


def test_latest_records_where_it_starts_so_a_successor_resumes_there(realtime) -> None:
    """A claim records no position; the first heartbeat after it carries the start chosen
    by the reset policy minus one, so the log (not each member's policy) says where the group
    is: on an empty log, "latest" is offset 0, and messages produced before the next member
    claims are not skipped by that member's "latest"."""
    realtime.cluster.create_topic(TOPIC, 1)
    first = realtime.consumer("a", auto_offset_reset="latest")
    wait_until(lambda: first.claims() == [(TOPIC, 0)], what="the claim")
    state = first.marshaler.partition_state(TOPIC, 0)
    assert state.has_position and state.last_offset == -1
    assert first.marshaler.resume_offset(TOPIC, 0) == 0
    first.close()
    produce(realtime.cluster, 0, 3)
    second = realtime.consumer("b", auto_offset_reset="latest")
    wait_until(lambda: second.claims() == [(TOPIC, 0)], what="the second claim")
    assert [m.offset for m in drain(second, 3)] == [0, 1, 2]


def test_a_claim_alone_is_no_position_for_latest(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    other = realtime.marshaler("other")  # claims, then dies before its first heartbeat
    assert direct.wait_verdict(other, direct.claim_partition(other, TOPIC, 0), 5).accepted
    consumer = realtime.consumer("a", auto_offset_reset="latest")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the stale takeover")
    assert consumer.marshaler.resume_offset(TOPIC, 0) == 5
    produce(realtime.cluster, 0, 1)
    assert [m.offset for m in drain(consumer, 1)] == [5]


def test_a_reset_to_earliest_is_honoured_under_latest(realtime) -> None:
    """``group reset --to-earliest`` on a log starting at 0 writes last_offset = -1: a
    position ("resume at 0"), not the absence of one, so "latest" must not apply."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    first = realtime.consumer("a", auto_offset_reset="latest")
    wait_until(lambda: first.claims() == [(TOPIC, 0)], what="the claim")
    assert first.marshaler.resume_offset(TOPIC, 0) == 5
    first.close()
    state = read_coordination(realtime.cluster)
    key = (TOPIC, 0)
    plan = plan_reset("g", [key], {key: 5}, {key: (0, 5)}, Target("earliest"))
    assert [(r.current, r.new) for r in plan.rows] == [(5, 0)]
    result = execute(realtime.cluster, state, plan, admin=new_admin("admin@t"), pause_ms=700)
    assert result.ok, [w.describe_verdict() for w in result.rejected]
    consumer = realtime.consumer("b", auto_offset_reset="latest")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], timeout=10, what="the claim after")
    assert [m.offset for m in drain(consumer, 5)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("policy", "start"), [("earliest", 0), ("latest", 5)])
def test_a_position_beyond_the_log_applies_the_policy_at_once(realtime, policy, start) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    admin = realtime.marshaler("admin")
    assert direct.wait_verdict(admin, direct.claim_partition(admin, TOPIC, 0), 5) is not None
    assert direct.wait_verdict(admin, direct.release_partition(admin, TOPIC, 0, 99), 5) is not None
    consumer = realtime.consumer("a", auto_offset_reset=policy)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    # the first heartbeat already carries the reset position
    assert consumer.marshaler.partition_state(TOPIC, 0).last_offset == start - 1
    produce(realtime.cluster, 0, 2)
    assert [m.offset for m in drain(consumer, 7 - start)] == list(range(start, 7))


def test_error_raises_without_a_position_until_seek(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    consumer = realtime.consumer("a", auto_offset_reset="error")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    with pytest.raises(NoPosition, match="no position"):
        consumer.poll(1.0)
    consumer.seek(TOPIC, 0, 3)
    assert [m.offset for m in drain(consumer, 2)] == [3, 4]


def test_error_raises_for_a_position_beyond_the_log(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    admin = realtime.marshaler("admin")
    assert direct.wait_verdict(admin, direct.claim_partition(admin, TOPIC, 0), 5) is not None
    assert direct.wait_verdict(admin, direct.release_partition(admin, TOPIC, 0, 99), 5) is not None
    consumer = realtime.consumer("a", auto_offset_reset="error")
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    with pytest.raises(NoPosition, match="outside the log"):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            consumer.poll(0.1)


# -- pause, lag, callbacks ---------------------------------------------------------------------


def test_pause_and_resume_a_partition(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 2)
    produce(realtime.cluster, 0, 3)
    produce(realtime.cluster, 1, 3)
    consumer = realtime.consumer("a", greedy=True)
    wait_until(lambda: len(consumer.claims()) == 2, what="both claims")
    consumer.pause(0)
    assert consumer.paused() == [(TOPIC, 0)]
    assert {m.partition for m in drain(consumer, 3)} == {1}
    assert consumer.poll(0.2) == []
    consumer.resume((TOPIC, 0))
    assert [m.offset for m in drain(consumer, 3)] == [0, 1, 2]


def test_lag_counts_what_is_not_committed(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 10)
    consumer = realtime.consumer("a")
    handed = drain(consumer, 4, commit=False)
    consumer.commit(handed[0])
    consumer.commit(handed[1])
    assert consumer.lag() == {(TOPIC, 0): 8}


def test_callbacks_run_in_the_polling_thread_and_before_the_release(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 3)
    calls: list[tuple[str, list, str]] = []
    consumer = realtime.consumer(
        "a",
        on_assigned=lambda ps: calls.append(("assigned", ps, threading.current_thread().name)),
        on_revoked=lambda ps: calls.append(
            ("revoked", ps, str(consumer.marshaler.holder(TOPIC, 0) is not None))
        ),
    )
    handed = drain(consumer, 3, commit=False)
    assert calls[0] == ("assigned", [(TOPIC, 0)], threading.current_thread().name)
    for message in handed:
        consumer.commit(message)
    consumer.close()
    assert calls[-1] == ("revoked", [(TOPIC, 0)], "True")  # still held while it runs
    state = realtime.marshalers[0].partition_state(TOPIC, 0)
    assert state is not None and state.holder is None and state.last_offset == 2


# -- handler retry policy ----------------------------------------------------------------------


def test_a_failing_handler_is_retried_in_place_keeping_order(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 5)
    consumer = realtime.consumer("a", retry=RetryPolicy(max_attempts=3, backoff=0.01))
    seen: list[int] = []
    failures = {2: 2}

    def handler(message) -> None:
        seen.append(message.offset)
        if failures.get(message.offset, 0):
            failures[message.offset] -= 1
            raise RuntimeError("flaky")

    assert consumer.run(handler, max_messages=5) == 5
    assert seen == [0, 1, 2, 2, 2, 3, 4]
    assert consumer.position(TOPIC, 0) == 4


def test_a_message_that_keeps_failing_goes_to_the_dead_letter_topic(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 4)
    policy = RetryPolicy(max_attempts=2, backoff=0.0, dead_letter_topic="events.dlq")
    consumer = realtime.consumer("a", retry=policy)

    def handler(message) -> None:
        if message.offset == 1:
            raise ValueError("poison")

    assert consumer.run(handler, max_messages=4) == 4
    assert consumer.position(TOPIC, 0) == 3
    [dead] = realtime.cluster.fetch("events.dlq", 0, 0)
    assert dead.value == b"0-1"
    headers = dict(dead.headers)
    assert headers["logmarshal.offset"] == b"1" and b"poison" in headers["logmarshal.error"]


def test_a_dead_letter_write_that_fails_for_a_while_is_retried(realtime, monkeypatch) -> None:
    """The dead-letter topic's broker restarting (NetworkError): the write was not retried,
    and the error escaped run() with the consumer open, holding its partitions and handing
    out nothing (an attack on 2026-12-06). It is retried with the policy's backoff."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 3)
    real, failures = realtime.cluster.produce, [2]

    def restarting(topic, *args, **kwargs):
        if topic == "events.dlq" and failures[0]:
            failures[0] -= 1
            raise NetworkError("no acknowledgement within 30 s")
        return real(topic, *args, **kwargs)

    monkeypatch.setattr(realtime.cluster, "produce", restarting)
    policy = RetryPolicy(max_attempts=2, backoff=0.0, dead_letter_topic="events.dlq")
    consumer = realtime.consumer("a", retry=policy)

    def handler(message) -> None:
        if message.offset == 1:
            raise ValueError("poison")

    assert consumer.run(handler, max_messages=3) == 3
    assert failures == [0] and not consumer.closed
    assert [m.value for m in realtime.cluster.fetch("events.dlq", 0, 0)] == [b"0-1"]
    assert consumer.position(TOPIC, 0) == 2


def test_a_dead_letter_write_refused_for_good_closes_the_consumer(realtime, monkeypatch) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 3)
    real = realtime.cluster.produce

    def refusing(topic, *args, **kwargs):
        if topic == "events.dlq":
            raise RecordTooLarge("the message is over the topic's max.message.bytes")
        return real(topic, *args, **kwargs)

    monkeypatch.setattr(realtime.cluster, "produce", refusing)
    policy = RetryPolicy(max_attempts=1, dead_letter_topic="events.dlq")
    consumer = realtime.consumer("a", retry=policy)

    def handler(message) -> None:
        if message.offset == 1:
            raise ValueError("poison")

    with pytest.raises(RecordTooLarge):
        consumer.run(handler)
    assert consumer.closed  # (it stayed open, holding events/0)
    state = realtime.marshalers[0].partition_state(TOPIC, 0)
    assert state is not None and state.holder is None and state.last_offset == 0


def test_a_start_up_that_fails_unexpectedly_is_retried(realtime, monkeypatch) -> None:
    """A failure other than the retriable ones while the driver waited to catch up (a
    librdkafka call on a consumer closed under it raises RuntimeError) stopped the driver
    thread: the member never caught up and never claimed (a helper's attack, 2026-12-06)."""
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 3)
    real, failures = CatchingUp.reached, [1]

    def failing_once(self, timeout):
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("Consumer closed")
        return real(self, timeout)

    monkeypatch.setattr(CatchingUp, "reached", failing_once)
    consumer = realtime.consumer("a")
    got: list[int] = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        got += [m.offset for m in consumer.poll(0.2)]
    assert failures == [0] and got == [0, 1, 2]


def test_without_a_dead_letter_topic_the_consumer_stops_before_the_failed_message(
    realtime,
) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    produce(realtime.cluster, 0, 4)
    consumer = realtime.consumer("a", retry=RetryPolicy(max_attempts=2, backoff=0.0))

    def handler(message) -> None:
        if message.offset == 2:
            raise ValueError("poison")

    with pytest.raises(HandlerFailed) as failed:
        consumer.run(handler)
    assert failed.value.message.offset == 2 and failed.value.attempts == 2
    assert consumer.closed
    state = realtime.marshalers[0].partition_state(TOPIC, 0)
    assert state is not None and state.holder is None and state.last_offset == 1


def test_retry_policy_backoff_grows_and_is_capped() -> None:
    import random

    policy = RetryPolicy(backoff=0.1, multiplier=2.0, max_backoff=0.3, jitter=0.0)
    rng = random.Random(0)
    assert [policy.delay(n, rng) for n in (1, 2, 3, 4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# -- fetching and AMO under faults -------------------------------------------------------------


def test_partitions_are_read_by_one_fetch_loop_and_each_stays_in_order(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 4)
    for p in range(4):
        produce(realtime.cluster, p, 50)
    consumer = realtime.consumer("a", greedy=True, batch_size=7)
    wait_until(lambda: len(consumer.claims()) == 4, what="four claims")
    got = drain(consumer, 200)
    for p in range(4):
        assert [m.offset for m in got if m.partition == p] == list(range(50))
    # one fetch loop per member (docs/architecture.md, "Consumer core"), not one per partition
    fetchers = [t for t in threading.enumerate() if t.name.startswith("logmarshal-consumer-fetch")]
    assert len(fetchers) == 1


def test_amo_under_lost_answers_never_hands_a_message_out_twice(cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 60)
    plan = FaultPlan(produce_drop=0.2, produce_fail=0.1, topics={COORDINATION_TOPIC})
    faulty = FaultyCluster(cluster, plan, seed=3)
    marshaler = Marshaler(faulty, "a", "g", 0.3, fetch_wait=0.05)
    consumer = Consumer(marshaler, TOPIC, mode="amo", batch_size=4)
    try:
        got = drain(consumer, 60, commit=False, timeout=15, max_records=4)
    finally:
        consumer.close()
        marshaler.close()
    offsets = [m.offset for m in got]
    assert offsets == sorted(set(offsets)) == list(range(60))
    assert faulty.injected()["drop"] > 0
    no_threads_left()


def test_rejects_bad_options(realtime) -> None:
    realtime.cluster.create_topic(TOPIC, 1)
    marshaler = realtime.marshaler("a")
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(marshaler, TOPIC, auto_offset_reset="none")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="release_if_behind"):
        Consumer(marshaler, TOPIC, release_if_behind=-1)
