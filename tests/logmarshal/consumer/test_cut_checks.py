"""A partition's log cut below the group's position while no member read it: the start of a
member is checked against the leader epoch the offsets mirror committed with the position
(``consumer/cut_checks.py``, KIP-320). Here on an embedded cluster with a scripted leader and
Kafka's committed offsets in memory; on Apache Kafka: tests/kafka/test_data_unclean_election.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping

import pytest

from logmarshal.admin.mirror import KafkaOffsetSink, MirrorError, ReadInPart
from logmarshal.consumer import cut_checks
from logmarshal.consumer.cut_checks import ATTEMPTS, CutChecks
from logmarshal.consumer.fetcher import MemberFetcher
from logmarshal.consumer.mirror import OffsetMirror
from logmarshal.core import Fetch, Fetched, OutOfRange
from logmarshal.errors import NetworkError

from ..consumer_world import TOPIC, produce, wait_until

Key = tuple[str, int]
K = (TOPIC, 0)


class Leader:
    """Where each leader epoch's log ends now (``NetworkCluster.epoch_ends``'s place); the
    next ``failing`` partitions asked cannot be told."""

    def __init__(self, ends: Mapping[int, int]) -> None:
        self.ends = dict(ends)
        self.asked: list[tuple[str, int, int]] = []
        self.requests = 0
        self.failing = 0

    def __call__(self, topic: str, epochs: Mapping[int, int]) -> dict[int, int | Exception | None]:
        self.requests += 1
        out: dict[int, int | Exception | None] = {}
        for partition, epoch in epochs.items():
            self.asked.append((topic, partition, epoch))
            if self.failing:
                self.failing -= 1
                out[partition] = NetworkError("not the leader")
            else:
                out[partition] = self.ends.get(epoch)
        return out


@pytest.fixture(autouse=True)
def _short_pauses(monkeypatch) -> None:
    monkeypatch.setattr(cut_checks, "FIRST_PAUSE", 0.01)


@pytest.fixture
def fetcher_of(cluster):
    """A member's fetch thread over ``cluster`` (with a leader that says where epochs end, and
    a reader that says the epoch of the first record it read of each partition), its answers
    in ``.answered``; stopped after."""
    made: list[MemberFetcher] = []

    def make(
        committed: Mapping[Key, tuple[int, int | None]],
        leader: Leader,
        epochs: Mapping[Key, int],
    ) -> MemberFetcher:
        cluster.epoch_ends = leader  # (NetworkCluster.epoch_ends's place)
        answered: list = []
        fetcher = MemberFetcher(
            cluster,
            answered.extend,
            max_bytes=1 << 20,
            max_wait=0.05,
            name="logmarshal-consumer-fetch:test",
            committed_epochs=lambda keys: {k: committed[k] for k in keys if k in committed},
        )
        fetcher.answered = answered  # type: ignore[attr-defined]  # (the test's view)
        reader, firsts = fetcher._reader, {}
        poll = reader.poll

        def poll_and_note(timeout: float) -> list:
            reads = poll(timeout)
            for read in reads:
                if read.records:
                    firsts.setdefault((read.topic, read.partition), read.records[0].offset)
            return reads

        def first_read(topic: str, partition: int) -> tuple[int, int] | None:
            key = (topic, partition)  # (as a network reader tells it, once records came)
            return (firsts[key], epochs[key]) if key in firsts and key in epochs else None

        reader.poll, reader.first_read = poll_and_note, first_read
        made.append(fetcher)
        return fetcher

    yield make
    for fetcher in made:
        fetcher.stop()
        fetcher.thread.join(5)


def _fetched(fetcher, token: int) -> list[int]:
    return [
        r.offset
        for e in list(fetcher.answered)
        if isinstance(e, Fetched) and e.token == token
        for r in e.records
    ]


def _cuts(fetcher) -> list[tuple[int, int | None]]:
    return [(e.token, e.diverged) for e in list(fetcher.answered) if isinstance(e, OutOfRange)]


def _told_at_start(cluster, fetcher_of, records: int, committed: int, start: int):
    """A start at ``start`` of a log of ``records``, Kafka's committed offset ``committed``
    with epoch 7, the records read of epoch 9 and epoch 7's log ending at 3 now: the fetch
    from ``start`` is told the cut at 3, none of its records answered. (fetcher, leader)"""
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, records)
    leader = Leader({7: 3})
    fetcher = fetcher_of({K: (committed, 7)}, leader, {K: 9})
    fetcher.request(Fetch(1, TOPIC, 0, start))
    wait_until(lambda: _cuts(fetcher), what="the cut")
    assert _cuts(fetcher) == [(1, 3)] and _fetched(fetcher, 1) == []
    return fetcher, leader


def test_a_start_below_a_cut_is_told_before_any_record_and_the_cut_is_read(cluster, fetcher_of):
    """The mirror committed 8 with epoch 7; the records read from 8 are of epoch 9, and epoch
    7's log ends at 3 now: the fetch from 8 is told the cut (as the live reader tells one),
    none of its records answered, and the fetch from 3 reads on, unchecked."""
    fetcher, leader = _told_at_start(cluster, fetcher_of, records=10, committed=8, start=8)
    fetcher.request(Fetch(2, TOPIC, 0, 3))
    wait_until(lambda: _fetched(fetcher, 2), what="the records from the cut")
    assert _fetched(fetcher, 2)[0] == 3
    assert len(_cuts(fetcher)) == 1 and leader.asked == [(TOPIC, 0, 7)]


@pytest.mark.parametrize(
    ("committed", "epoch"),
    [
        ({K: (8, 7)}, 7),  # read under the committed epoch: the log holds what came before
        ({K: (5, 7)}, 9),  # the mirror had not caught up with the position: nothing to tell by
        ({K: (8, None)}, 9),  # no epoch committed (the admin's reset, an old member)
        ({}, 9),  # the group has no committed offset
    ],
    ids=["same-epoch", "behind", "no-epoch", "none"],
)
def test_a_start_with_nothing_to_ask_is_answered_and_asks_no_leader(
    cluster, fetcher_of, committed, epoch
):
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 10)
    leader = Leader({7: 3})
    fetcher = fetcher_of(committed, leader, {K: epoch})
    fetcher.request(Fetch(1, TOPIC, 0, 8))
    wait_until(lambda: len(_fetched(fetcher, 1)) == 2, what="the records")
    assert leader.asked == [] and _cuts(fetcher) == []


def test_an_epoch_whose_log_reaches_the_start_is_no_cut(cluster, fetcher_of):
    """Read under newer epochs: epoch 7 ends at 8 (a clean leader change there), epoch 9 at
    the log's end. Not cut: the records are answered, once asked."""
    cluster.create_topic(TOPIC, 2)
    produce(cluster, 0, 10)
    produce(cluster, 1, 10)
    leader = Leader({7: 8, 9: 10})
    fetcher = fetcher_of({K: (8, 7), (TOPIC, 1): (8, 9)}, leader, {K: 8, (TOPIC, 1): 10})
    fetcher.request(Fetch(1, TOPIC, 0, 8))
    fetcher.request(Fetch(2, TOPIC, 1, 8))
    wait_until(lambda: len(_fetched(fetcher, 1)) == 2 and len(_fetched(fetcher, 2)) == 2)
    assert sorted(leader.asked) == [(TOPIC, 0, 7), (TOPIC, 1, 9)] and _cuts(fetcher) == []


def test_starts_checked_together_ask_together():
    """The partitions of a topic whose checks are due together are asked in one request
    (a member starting 256 partitions asked them one by one: 2.9 s before the last)."""
    keys = [(TOPIC, p) for p in range(64)]
    leader = Leader({7: 3})
    gate = threading.Event()

    def committed(asked):
        assert gate.wait(10)
        return {k: (8, 7) for k in asked}

    checks, found = _checks(committed, leader)
    for key in keys:
        checks.check(key, 8)
    gate.set()
    wait_until(lambda: len(found) == 64, what="every cut")
    assert sorted(found) == [(k, 3) for k in keys]
    assert leader.requests <= 2  # (the first check may be read before the others are asked)
    checks.close()
    checks.join(5)


def test_records_wait_for_a_check_no_longer_than_the_hold(cluster, fetcher_of, monkeypatch):
    """A leader that never answers: the records are answered unchecked after the hold."""
    monkeypatch.setattr(cut_checks, "CHECK_HOLD", 0.3)
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 10)
    leader = Leader({7: 3})
    leader.failing = 1000
    fetcher = fetcher_of({K: (8, 7)}, leader, {K: 9})
    fetcher.request(Fetch(1, TOPIC, 0, 8))
    wait_until(lambda: len(_fetched(fetcher, 1)) == 2, what="the records, unchecked")
    assert leader.asked and _cuts(fetcher) == []


def test_only_a_new_start_is_checked(cluster, fetcher_of):
    """Fetches after the first (the member reading on) ask nothing; a partition dropped and
    claimed again is checked again."""
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 10)
    leader = Leader({7: 10})
    fetcher = fetcher_of({K: (2, 7)}, leader, {K: 8})
    fetcher.request(Fetch(1, TOPIC, 0, 2))
    wait_until(lambda: _fetched(fetcher, 1), what="the records")
    fetcher.request(Fetch(2, TOPIC, 0, 10))
    produce(cluster, 0, 1)
    wait_until(lambda: _fetched(fetcher, 2), what="the next records")
    assert len(leader.asked) == 1
    fetcher.drop([K])
    fetcher.request(Fetch(3, TOPIC, 0, 2))
    wait_until(lambda: len(leader.asked) == 2, what="the second claim's check")


def test_an_idle_start_holds_its_first_records_whenever_they_come(cluster, fetcher_of, monkeypatch):
    """A start at its log's end reads nothing for longer than the hold; the records that
    come later still wait for the check, and the cut is told before any is answered (the
    hold ran from the claim, and its check waited for records it was never told of: the
    cut was never told, 500 records skipped on Apache Kafka; an attack on 766b7cb)."""
    monkeypatch.setattr(cut_checks, "CHECK_HOLD", 0.3)
    cluster.create_topic(TOPIC, 1)
    produce(cluster, 0, 10)
    leader = Leader({7: 3})
    fetcher = fetcher_of({K: (10, 7)}, leader, {K: 9})
    fetcher.request(Fetch(1, TOPIC, 0, 10))
    wait_until(lambda: K in fetcher._starts.checks._waiting, what="the check waiting")
    threading.Event().wait(0.6)  # (past the hold, had it run from the claim)
    produce(cluster, 0, 2)
    wait_until(lambda: _cuts(fetcher), what="the cut")
    assert _cuts(fetcher) == [(1, 3)] and _fetched(fetcher, 1) == []


def test_a_start_the_reset_moved_below_the_committed_offset_is_checked(cluster, fetcher_of):
    """The group's position (15) lay past the cut log's end: "latest" starts the claim at
    the end (12). Kafka's committed offset is above the start: the first records, of a newer
    epoch, are checked too, and the cut (3) told (the records from 3 to 12 were skipped)."""
    _told_at_start(cluster, fetcher_of, records=14, committed=15, start=12)


def _checks(
    committed, leader: Leader, first=lambda key: (8, 9)
) -> tuple[CutChecks, list[tuple[Key, int | None]]]:
    """Checks over ``committed`` and ``leader``; the answers told, as (key, cut), in
    ``.numbers`` the checks' numbers."""
    found: list[tuple[Key, int | None]] = []
    lock = threading.Lock()

    def tell(key: Key, number: int, cut: int | None) -> None:
        with lock:
            found.append((key, cut))
            checks.numbers.append(number)

    checks = CutChecks(committed, leader, first, tell, "test")
    checks.numbers = []  # type: ignore[attr-defined]  # (the test's view)
    return checks, found


def test_a_leader_that_cannot_say_is_asked_again_then_given_up(caplog):
    leader = Leader({7: 3})
    leader.failing = 2
    checks, found = _checks(lambda keys: {k: (8, 7) for k in keys}, leader)
    checks.check(K, 8)
    wait_until(lambda: found, what="the cut, at the third ask")
    assert found == [(K, 3)] and len(leader.asked) == 3
    leader.failing = ATTEMPTS
    with caplog.at_level(logging.WARNING, logger="logmarshal.consumer.cut_checks"):
        checks.check((TOPIC, 1), 8)
        wait_until(lambda: checks.given_up == 1, what="the check given up")
    assert "cannot tell whether its log was cut below 8" in caplog.text
    assert found[1:] == [((TOPIC, 1), None)]
    checks.close()
    checks.join(5)


def test_a_committed_read_refused_in_part_checks_the_answered_and_retries_the_rest():
    reads: list[list[Key]] = []

    def committed(keys: Iterable[Key]) -> dict[Key, tuple[int, int | None]]:
        keys = list(keys)
        reads.append(keys)
        if len(reads) == 1:
            raise ReadInPart("pending transaction", {K: 8}, [(TOPIC, 1)], {K: 7})
        return {k: (8, 7) for k in keys}

    checks, found = _checks(committed, Leader({7: 3}))
    checks.check(K, 8)
    checks.check((TOPIC, 1), 8)
    wait_until(lambda: len(found) == 2, what="both cuts")
    assert sorted(found) == [(K, 3), ((TOPIC, 1), 3)]
    assert reads[-1] == [(TOPIC, 1)]
    checks.close()
    checks.join(5)


def test_a_check_waits_for_the_first_records_then_goes_on():
    """An idle partition (nothing read yet) waits, asking nothing, until records are seen."""
    firsts: dict[Key, tuple[int, int]] = {}
    leader = Leader({7: 3})
    checks, found = _checks(lambda keys: {K: (8, 7)}, leader, firsts.get)
    checks.check(K, 8)
    wait_until(lambda: K in checks._waiting, what="the check waiting")
    assert leader.asked == [] and found == []
    firsts[K] = (8, 9)
    checks.seen(K)
    wait_until(lambda: found, what="the cut")
    assert found == [(K, 3)]
    checks.close()
    checks.join(5)


def test_a_check_in_flight_does_not_answer_the_next_claim_at_the_same_offset():
    """A round finds the partition not cut (its first records of the committed epoch), then
    waits on a slow leader of another topic; meanwhile the partition is dropped, its log
    cut, and claimed again at the same offset. That round's "not cut" was taken for the new
    claim's, whose records were then neither held nor checked (a review of 1a771f0)."""
    other = ("b", 0)
    firsts = {K: (8, 7), other: (8, 9)}
    leader, asking, gate = Leader({7: 3}), threading.Event(), threading.Event()

    def slow(topic, epochs):
        if topic == "b":
            asking.set()
            assert gate.wait(10)
        return leader(topic, epochs)

    checks, found = _checks(lambda keys: {k: (8, 7) for k in keys}, slow, firsts.get)
    first = checks.check(K, 8)
    checks.check(other, 8)
    assert asking.wait(10)  # (K found not cut; the round waits on b's leader)
    checks.forget(K)  # (dropped; its log cut; claimed again at 8, read under epoch 9)
    firsts[K] = (8, 9)
    second = checks.check(K, 8)
    gate.set()
    wait_until(lambda: len(found) == 2, what="both answers")
    checks.close()
    checks.join(5)
    told = dict(zip(checks.numbers, found, strict=True))
    assert first not in told and told[second] == (K, 3), told


def test_a_check_forgotten_is_not_told():
    gate = threading.Event()

    def committed(keys):
        assert gate.wait(10)
        return {K: (8, 7)}

    checks, found = _checks(committed, Leader({7: 3}))
    checks.check(K, 8)
    checks.forget(K)
    gate.set()
    checks.close()
    checks.join(5)
    assert found == []


class _Sink(KafkaOffsetSink):
    """A KafkaOffsetSink that keeps its commits, and Kafka's committed offsets (no Kafka);
    its offsets cannot be read while ``down``."""

    def __init__(self, kafka: dict) -> None:
        self.commits: list[tuple[dict, dict | None]] = []
        self.kafka = kafka
        self.down = False

    def commit(self, group, offsets, epochs=None) -> None:
        self.commits.append((dict(offsets), None if epochs is None else dict(epochs)))

    def committed_epochs(self, group, keys):
        if self.down:
            raise MirrorError("the coordinator is away")
        return {k: self.kafka[k] for k in keys if k in self.kafka}


def test_the_mirror_commits_the_epoch_of_the_record_before_each_position():
    """With each position, the epoch of the record before it as read. A claim's position
    not read there yet (its epoch unknown) erased the epoch its last holder committed with
    that same offset, and the next start was not checked (an attack on 766b7cb): where
    Kafka has the same offset, its epoch is committed again; a position Kafka has another
    offset for goes without one; one whose Kafka offset cannot be read waits."""
    p1, p2, p3 = K, (TOPIC, 1), (TOPIC, 2)
    sink = _Sink({p2: (4, 2), p3: (7, 5)})
    epochs = {(p1, 9): 7}
    positions = {p1: 10, p2: 4, p3: 9}
    mirror = OffsetMirror(
        "g",
        sink,
        lambda: positions,
        interval=1.0,
        clock=lambda: 0.0,
        epoch_of=lambda key, offset: epochs.get((key, offset)),
    )
    sink.down = True
    assert mirror.mirror_once() == 1
    assert sink.commits == [({p1: 10}, {p1: 7})] and mirror.failures == 1  # (said, counted)
    sink.down = False
    assert mirror.mirror_once(force=True) == 2
    assert sink.commits[1] == ({p2: 4, p3: 9}, {p2: 2})
    positions[p2] = 6  # (moved by a seek, nothing read: mirrored, without an epoch)
    assert mirror.mirror_once(force=True) == 1
    assert sink.commits[2] == ({p2: 6}, {})
    p4 = (TOPIC, 4)
    positions[p4], sink.down = 3, True  # the last pass (closing) commits it, without one
    assert mirror.mirror_once(force=True) == 1
    assert sink.commits[3] == ({p4: 3}, {})
