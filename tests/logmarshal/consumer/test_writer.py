"""The coordination writer: a thread per coordination partition, or one for them all where
the cluster writes several partitions in one call (the embedded one)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest

from logmarshal import EmbeddedCluster
from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.consumer.writer import CoordinationWriter
from logmarshal.core import Write, WriteFailed, Written
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler
from rationalizer import AnnouncingMember
from rationalizer._codec import encode

HB = 1.0


def _write(token: int, cp: int) -> Write:
    key, value = encode(
        AnnouncingMember(
            client_id=f"c{token}",
            instance_id="i",
            group_id="g",
            topics=(("t", 1),),
            heartbeat_interval_ms=1000,
        )
    )
    return Write(token, cp, key, value, "announce")


class _Answers:
    """Every call of the writer's answer, each a list of answers."""

    def __init__(self) -> None:
        self.calls: list[list[Written | WriteFailed]] = []
        self.done = threading.Event()
        self.want = 0

    def __call__(self, answers: Sequence[Written | WriteFailed]) -> None:
        self.calls.append(list(answers))
        if sum(len(c) for c in self.calls) >= self.want:
            self.done.set()


@pytest.fixture
def marshaler(cluster) -> Iterator[Marshaler]:
    made = Marshaler(cluster, "a", "g", HB, fetch_wait=0.05)
    yield made
    made.close()


def _threads(name: str) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(f"{name}:write:"))


def test_together_one_thread_writes_every_partition_and_answers_at_once(cluster, marshaler) -> None:
    assert marshaler.writes_together  # the embedded cluster: a MultiProducer
    answers = _Answers()
    answers.want = 4
    writer = CoordinationWriter(marshaler, answers, "w1", together=True)
    try:
        assert _threads("w1") == ["w1:write:all"]
        ends = {cp: cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in (0, 3)}
        writer.write([_write(1, 0), _write(2, 3), _write(3, 0), _write(4, 3)])
        assert answers.done.wait(10)
        assert len(answers.calls) == 1, "one step's writes are answered in one call"
        got = {a.token: a for a in answers.calls[0]}
        assert all(type(a) is Written for a in got.values())
        # each partition's records in the order asked, one after the other
        assert [got[1].offset, got[3].offset] == [ends[0], ends[0] + 1]
        assert [got[2].offset, got[4].offset] == [ends[3], ends[3] + 1]
        values = [m.value for m in cluster.fetch(COORDINATION_TOPIC, 0, ends[0])]
        assert values == [_write(1, 0).value, _write(3, 0).value]
    finally:
        writer.stop(10)
    assert _threads("w1") == []


def test_together_a_failed_write_fails_its_own_tokens_only(cluster, marshaler) -> None:
    answers = _Answers()
    answers.want = 3
    writer = CoordinationWriter(marshaler, answers, "w2", together=True)
    try:
        # there is no coordination partition 99: its write fails, the others' land
        writer.write([_write(1, 0), _write(2, 99), _write(3, 5)])
        assert answers.done.wait(10)
    finally:
        writer.stop(10)
    kinds = {a.token: type(a) for call in answers.calls for a in call}
    assert kinds == {1: Written, 2: WriteFailed, 3: Written}


def test_together_behind_the_fault_injector_each_partition_meets_its_own_faults(
    tmp_path,
) -> None:
    """The scenarios' thread stage wraps each member's embedded cluster in a FaultyCluster,
    which offers ``produce_many`` too: one writer thread, and a write whose answer was lost
    (dropped) or that never reached the log (failed) fails only its own partition's tokens."""
    with EmbeddedCluster(tmp_path / "d", maintenance_interval=0) as inner:
        faulty = FaultyCluster(
            inner, FaultPlan(produce_fail=0.3, produce_drop=0.3, topics={COORDINATION_TOPIC})
        )
        marshaler = Marshaler(faulty, "a", "g", HB, fetch_wait=0.05)
        try:
            assert marshaler.writes_together
            answers = _Answers()
            answers.want = 40
            writer = CoordinationWriter(marshaler, answers, "w4", together=True)
            try:
                assert _threads("w4") == ["w4:write:all"]
                writer.write([_write(t, t % 8) for t in range(1, 41)])
                assert answers.done.wait(10)
            finally:
                writer.stop(10)
            got = {a.token: a for call in answers.calls for a in call}
            assert sorted(got) == list(range(1, 41))
            by_cp: dict[int, set[type]] = {}
            for token, answer in got.items():
                by_cp.setdefault(token % 8, set()).add(type(answer))
            assert all(len(kinds) == 1 for kinds in by_cp.values()), "a partition's write is one"
            assert {k for kinds in by_cp.values() for k in kinds} == {Written, WriteFailed}
        finally:
            marshaler.close()


class _Proxy:
    """A wrapper that forwards what it does not define (a user's, a test's): its class has
    no ``produce_many``, so every coordination write goes through its ``produce``."""

    def __init__(self, inner: EmbeddedCluster) -> None:
        self._inner = inner
        self.produced = 0

    def produce(self, *args, **kwargs):
        self.produced += 1
        return self._inner.produce(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_a_thread_per_partition_where_the_cluster_cannot_write_them_together(tmp_path) -> None:
    """A cluster whose class has no ``produce_many`` (a proxy that forwards the rest to an
    embedded cluster): a thread per coordination partition, each answering its own
    partition's writes, through the wrapper's ``produce``."""
    with EmbeddedCluster(tmp_path / "d", maintenance_interval=0) as inner:
        wrapped = _Proxy(inner)
        marshaler = Marshaler(wrapped, "a", "g", HB, fetch_wait=0.05)
        try:
            assert not marshaler.writes_together
            answers = _Answers()
            answers.want = 2
            writer = CoordinationWriter(marshaler, answers, "w3")
            try:
                assert len(_threads("w3")) == marshaler.coordination_partitions
                writer.write([_write(1, 0), _write(2, 3)])
                assert answers.done.wait(10)
            finally:
                writer.stop(10)
            assert sorted(len(c) for c in answers.calls) == [1, 1]  # an answer per partition
            assert wrapped.produced >= 2  # (and the replay's configuration announcements)
            assert {type(a) for c in answers.calls for a in c} == {Written}
            # write_records_many without produce_many: a write per partition, same answers
            record = (_write(5, 0).key, _write(5, 0).value)
            landed = marshaler.write_records_many({0: [record], 99: [record]})
            assert isinstance(landed[99], Exception)
            assert landed[0][0].coordination_partition == 0
        finally:
            marshaler.close()
