"""What a Consumer tells its core is regained after a gap (an admin's reset seen since, its
pause over) answers that gap only (found by an attack on the live-gap rule; neither hole was
that rule's): a Resumed read before a second gap halted the same coordination partition
again, and a gap's Regained after the partition went back (rewound: nothing comes back
within the process).

First: a Resumed computed from the Regained of a first gap, fed after a second gap in the
same coordination partition halted it again.

``Consumer._drive`` (an admin's pause may end while the log is idle) does::

    regained = self._halts.regained()  # reads Marshaler.regained_after(cp): K
    if regained:
        self._feed_many(regained)  # Resumed(cp, K)

with no lock between the read and the feed. If the replay thread finds a second gap in that
coordination partition in between (``Tailer._gap``: a new Halt, a new Regained that trusts
nothing), ``Consumer._halted`` steps ``Halted`` (the core halts cp afresh: trusts nothing)
and then the driver's stale ``Resumed(cp, K)`` is stepped: the core trusts K again,
determined by records before the second gap, and claims (and hands out) partitions whose
lost records it never saw. The instance never wrote in that partition (the first gap was a
cold start's, the partition halted since), so the live-gap rule does not stop it. Now a
Resumed names the gap it answers (``Resumed.after``) and the core takes only the current
one's.

The interleaving is made deterministic: the test thread plays the driver's pass (its
``_halts.regained`` then its ``_feed_many``) and, between them, the replay's second gap; the
Marshaler's ``regained_after`` answers only that pass until then (the driver and the replay
thread read it first otherwise, as they may: either one is the first reader)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from logmarshal import Consumer, EmbeddedCluster, NewRecord
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.marshaler import Marshaler
from rationalizer import Heartbeat, ReleaseGroup, coordination_partition, encode
from rationalizer._partitioning import membership_partition

from ..consumer_world import wait_until

HB = 0.5
N = 4
GROUP = "g"
HOME = membership_partition(GROUP, N)
# a topic whose partition 0 is coordinated away from the group's membership partition (so
# the member's announcements never write there)
TOPIC = next(
    t for t in (f"events{i}" for i in range(100)) if coordination_partition(t, 0, N) != HOME
)
CP = coordination_partition(TOPIC, 0, N)
ADMIN = {"client_id": "adm", "instance_id": "1", "group_id": GROUP}


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as c:
        c.create_topic(
            COORDINATION_TOPIC, N, {"message.timestamp.type": "LogAppendTime", "retention.ms": -1}
        )
        c.create_topic(SNAPSHOT_TOPIC, N, {"retention.ms": -1})
        c.create_topic(TOPIC, 1)
        now = int(time.time() * 1000)
        c.produce(TOPIC, 0, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(100)])
        yield c


def _put(cluster: EmbeddedCluster, msg: object) -> None:
    key, value = encode(msg)  # type: ignore[arg-type]
    cluster.produce(
        COORDINATION_TOPIC, CP, [NewRecord(key=key, value=value, timestamp=int(time.time() * 1000))]
    )


def _filler(cluster: EmbeddedCluster) -> None:
    """A record of another group in CP: moves that replay's log time."""
    _put(cluster, ReleaseGroup(**{**ADMIN, "group_id": "other"}, msg_expire_time=1))


@pytest.fixture
def gapped(cluster) -> Iterator[Marshaler]:
    """A Marshaler whose replay of CP went past three records of another group."""
    with Marshaler(cluster, "c1", GROUP, HB, coordination_partitions=N, fetch_wait=0.05,
                   snapshot_records=None, snapshot_interval=None) as m:  # fmt: skip
        for _ in range(3):
            _filler(cluster)
        assert m.wait_caught_up(10)
        yield m


@pytest.fixture
def amo_consumer(gapped) -> Iterator[Callable[[], Consumer]]:
    """Builds AMO consumers of TOPIC on ``gapped``; each is closed before the Marshaler."""
    built: list[Consumer] = []

    def build() -> Consumer:
        built.append(Consumer(gapped, TOPIC, mode="amo", rebalance="none"))
        return built[-1]

    yield build
    for consumer in built:
        consumer.close()


def _reset(cluster: EmbeddedCluster) -> None:
    """The operator's reset of the group (``logmarshal group reset``): a ReleaseGroup and a
    position, then, once its pause is over, a record that moves CP's log time past it."""
    end = int(time.time() * 1000) + int(3 * HB * 1000)
    _put(cluster, ReleaseGroup(**ADMIN, msg_expire_time=end))
    beat = Heartbeat(**ADMIN, topic=TOPIC, partition=0, last_offset=49,
                     heartbeat_interval_ms=int(HB * 1000))  # fmt: skip
    _put(cluster, beat)
    time.sleep(3 * HB + 0.2)
    _filler(cluster)


def test_a_stale_resumed_after_a_second_gap_is_not_trusted(cluster, gapped, amo_consumer):
    m = gapped
    tail = m._tailer._tails[CP]
    # first gap: records 0..2 of CP "lost" before anything of this instance was written
    # (a cold start's: not live)
    m._tailer._gap(tail, 0, tail.next_offset)
    assert m.lost() == frozenset() and m.halts()[CP].why == "gap"

    # until the test's own pass, every other reader of regained (driver, replay thread)
    # sees nothing new: the test's pass is the first to see K
    armed = threading.Event()
    original_after = m.regained_after

    def regained_after(cp: int) -> tuple[int, frozenset]:
        if cp == CP and not armed.is_set():
            return -1, frozenset()
        return original_after(cp)

    m.regained_after = regained_after  # type: ignore[method-assign]
    consumer = amo_consumer()
    time.sleep(3 * HB)
    assert consumer.claims() == [] and not consumer.fenced

    # the operator's reset of the group, written after the first gap
    _reset(cluster)  # the pause is over in CP's log time
    wait_until(lambda: original_after(CP)[1] == {(TOPIC, 0)}, 5)
    assert CP not in m._wrote  # this instance never wrote in CP

    # the driver's pass: it reads K ...
    armed.set()
    resumed = consumer._halts.regained([CP])
    assert [tuple(r.keys) for r in resumed] == [((TOPIC, 0),)]
    # ... the replay thread finds a second gap in CP meanwhile (not live: never wrote
    # there), which halts CP afresh: its new Regained trusts nothing ...
    m._tailer._gap(tail, tail.next_offset, tail.next_offset + 5)
    assert m.halts()[CP].before > 0 and original_after(CP)[1] == frozenset()
    assert m.lost() == frozenset()
    # ... and the driver feeds what it read
    consumer._feed_many(resumed)
    m.regained_after = original_after  # type: ignore[method-assign]

    time.sleep(4 * HB)
    # the log determines nothing of CP again since the second gap: nothing may be
    # claimed there (the lost records may hold another member's claim of it)
    assert consumer.claims() == [], "claimed in a partition halted by a second gap"
    assert consumer._core.halted().get(CP) == frozenset(), (
        f"the core trusts partitions of CP after its second gap: {consumer._core.halted().get(CP)}"
    )


def test_a_rewind_after_a_regained_gap_is_not_resumed(cluster, gapped, amo_consumer):
    """No race: a gap, the operator's reset (the consumer takes the partition up again),
    then the same coordination partition goes back (a rewind: frozen, "not within the
    process", PROTOCOL.md). ``Tailer._rewound`` replaces the halt but keeps the gap's
    Regained, so ``Marshaler.regained(cp)`` still answers K; ``Consumer._halted`` reset what
    it told the core to nothing, so its next pass resumes K in the rewound partition, and the
    core writes there again (claims no verdict will ever answer: the replay is frozen)."""
    m = gapped
    tail = m._tailer._tails[CP]
    m._tailer._gap(tail, 0, tail.next_offset)  # a cold start's gap
    consumer = amo_consumer()
    time.sleep(2 * HB)
    assert consumer.claims() == []
    _reset(cluster)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], 10, "regained after the reset")
    # CP goes back: the log no longer holds what the replay applied from here on
    m._tailer._rewound(tail, tail.next_offset, tail.next_offset - 1, "(a test)")
    assert m.halts()[CP].why == "rewound"
    # nothing is regained in a rewound partition (the gap's Regained went with its halt);
    # the core would refuse it anyway now (the Resumed names the gap, not the rewind)
    assert m.regained_after(CP) == (-1, frozenset())
    wait_until(lambda: consumer.claims() == [], 5, "the rewind revoked the claim")
    ended = cluster.latest_offset(COORDINATION_TOPIC, CP)
    time.sleep(4 * HB)
    written = cluster.latest_offset(COORDINATION_TOPIC, CP) - ended
    assert written == 0, f"{written} records written to a rewound coordination partition"
    assert consumer._core.halted().get(CP) == frozenset(), (
        f"the core trusts {consumer._core.halted().get(CP)} in a rewound partition"
    )


# -- halts told to a core while its Consumer is being built (a third attack) -----------------
#
# ``Consumer.__init__`` listens for halts, then tells its core those found before it
# listened (``Halts.found``); the replay thread may meanwhile tell it a newer halt, or what is
# regained. Two orders left the group stuck for good, nothing said: (1) an older gap told
# after a newer one took the core's mark back to it, so every answer to the newer gap was
# dropped as stale (and counted as told, never sent again); (2) what is regained after a gap,
# stepped before the gap's Halted, found nothing halted and was lost (counted as told too).
# Both windows are microseconds wide; each is made deterministic by wrapping the Marshaler's
# read that opens it. The core now ignores a gap older than its mark, and the edge counts
# what is regained after a halt only once its core has that halt (``Halts.told``).


def test_an_older_gap_told_after_a_newer_one_leaves_the_core_on_the_newer(
    cluster, gapped, amo_consumer
):
    m = gapped
    tail = m._tailer._tails[CP]
    m._tailer._gap(tail, 0, 2)  # gap 1 (a cold start's: not live)
    found = m.halts

    def halts():
        told = found()  # the new Consumer's Halts.found reads gap 1 ...
        m.halts = found  # type: ignore[method-assign]
        m._tailer._gap(tail, 2, tail.next_offset)  # ... the replay finds gap 2 (told) ...
        return told  # ... and then the constructor tells gap 1

    m.halts = halts  # type: ignore[method-assign]
    consumer = amo_consumer()
    assert m.halts()[CP].before == 2 and m.lost() == frozenset()
    assert consumer._core.halted() == {CP: frozenset()}
    _reset(cluster)  # the operator's reset, after gap 2
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], 10,
               "the consumer claims what the reset after gap 2 determined again")  # fmt: skip


def test_what_is_regained_before_the_core_has_the_gap_is_told_after(cluster, gapped, amo_consumer):
    m = gapped
    tail = m._tailer._tails[CP]
    m._tailer._gap(tail, 0, tail.next_offset)  # a cold start's gap, not live
    _reset(cluster)
    wait_until(lambda: m.regained(CP) == {(TOPIC, 0)}, 5, "the tailer regains it")
    lost = m.lost
    calls = []

    def racing_lost():
        calls.append(1)
        if len(calls) == 2:  # the constructor's Halts.halted, before its Halted is stepped
            built = m._halt_listeners[-1].__self__
            built._replayed([(CP, tail.next_offset - 1)])  # the replay thread's chunk
        return lost()

    m.lost = racing_lost  # type: ignore[method-assign]
    consumer = amo_consumer()
    assert len(calls) >= 2, "the race was not played"
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], 10,
               "the consumer claims what the reset determined again")  # fmt: skip


def test_a_gap_found_after_a_rewind_leaves_the_replay_frozen(gapped):
    """A write's check may find the rewind (``mark_written``, on a writer's thread) while the
    replay thread is finding a gap: the gap used to replace the rewound halt and unfreeze the
    replay, so the partition could be regained within the process."""
    m = gapped
    tail = m._tailer._tails[CP]
    end = tail.next_offset
    m._tailer._rewound(tail, end, end - 1, "the record this process wrote is not there")
    m._tailer._gap(tail, end, end + 5)
    assert m.halts()[CP].why == "rewound" and m.regained_after(CP) == (-1, frozenset())


def test_a_gap_told_while_what_is_regained_is_read_is_not_written_over(
    cluster, gapped, amo_consumer, caplog
):
    """A second attack: ``Halts.regained`` read the halt told, then the Marshaler, and wrote
    back the halt it had read, over a newer one told meanwhile; every pass after took the
    newer gap's answer for new (a Resumed and a warning line each driver pass and replay
    chunk, for good)."""
    m = gapped
    tail = m._tailer._tails[CP]
    m._tailer._gap(tail, 0, tail.next_offset)  # gap 1: a cold start's, not live
    original_after = m.regained_after
    test_thread = threading.get_ident()
    played = threading.Event()

    def regained_after(cp: int) -> tuple[int, frozenset]:
        if cp != CP:
            return original_after(cp)
        if threading.get_ident() != test_thread:
            return -1, frozenset()  # the test's pass is the first to read what is regained
        got = original_after(cp)
        if not played.is_set():
            played.set()
            end = tail.next_offset  # the replay finds gap 2 now: stepped and told
            m._tailer._gap(tail, end - 1, end)
        return got

    m.regained_after = regained_after  # type: ignore[method-assign]
    consumer = amo_consumer()
    time.sleep(2 * HB)
    _reset(cluster)  # the operator's reset after gap 1
    wait_until(lambda: original_after(CP)[1] == {(TOPIC, 0)}, 5, "regained after gap 1")
    consumer._feed_many(consumer._halts.regained([CP]))  # the driver's pass (gap 2 inside)
    assert played.is_set() and consumer._core.halted() == {CP: frozenset()}
    m.regained_after = original_after  # type: ignore[method-assign]
    _reset(cluster)  # the operator's reset after gap 2
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], 10, "regained after gap 2")
    caplog.clear()
    time.sleep(2 * HB)
    said = [r.getMessage() for r in caplog.records if "determines" in r.getMessage()]
    assert said == [], f"{len(said)} lines in {2 * HB} s: {said[:1]}"
