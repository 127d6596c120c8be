"""Regressions: a fenced instance stops writing, and "no position" stays "no position".

A fenced instance's close() used to write ReleasingPartition as fast as it could for
``verdict_timeout`` (5,845 records in 3 s, every one rejected FENCED): fencing is per
coordination partition, so the old instance still *looks* like the holder of a second
partition coordinated there, and a rejected release was simply written again.
"""

from __future__ import annotations

from logmarshal import _direct as direct
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import Effect

from ..consumer_world import TOPIC, drain, produce, wait_until


def _two_partitions_one_coordination_partition(marshaler, partitions: int) -> tuple[int, int, int]:
    by_cp: dict[int, list[int]] = {}
    for p in range(partitions):
        by_cp.setdefault(marshaler.coordination_partition(TOPIC, p), []).append(p)
    cp, ps = next((cp, ps) for cp, ps in sorted(by_cp.items()) if len(ps) >= 2)
    return cp, ps[0], ps[1]


def test_a_fenced_instance_writes_no_release_on_close(manual) -> None:
    manual.cluster.create_topic(TOPIC, 12)
    old = manual.consumer("a", verdict_timeout=0.5, greedy=True)
    cp, p, q = _two_partitions_one_coordination_partition(old.marshaler, 12)
    for part in (p, q):
        produce(manual.cluster, part, 3)
    wait_until(lambda: {(TOPIC, p), (TOPIC, q)} <= set(old.claims()), what="both claims")
    drain(old, 6)
    newer = manual.marshaler("a")  # the same client restarted elsewhere takes back p only
    verdict = direct.wait_verdict(newer, direct.heartbeat(newer, TOPIC, p, 2), 5)
    assert verdict is not None and verdict.effect is Effect.RESTART_TAKEOVER
    wait_until(lambda: old.fenced, what="the old instance to learn it is fenced")
    # q still names the old instance as holder in the replay, but it is fenced on cp
    assert old.marshaler.holder(TOPIC, q) == old.marshaler.identity
    before = manual.cluster.latest_offset(COORDINATION_TOPIC, cp)
    old.close()
    written = manual.cluster.latest_offset(COORDINATION_TOPIC, cp) - before
    assert written == 0, f"a fenced instance wrote {written} records on close"


def test_no_position_under_error_policy_writes_no_position(manual) -> None:
    """auto_offset_reset="error" raised NoPosition, but its claim heartbeat had already
    written position -1, so the next member (with "latest") started at 0 and got old data."""
    import pytest

    from logmarshal.consumer import NoPosition

    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 50)
    strict = manual.consumer("strict", auto_offset_reset="error")
    wait_until(lambda: strict.claims() == [(TOPIC, 0)], what="the claim")
    with pytest.raises(NoPosition):
        strict.poll(0.5)
    manual.clock.advance(1.5)  # heartbeat time comes and goes: still nothing to report
    with pytest.raises(NoPosition):
        strict.poll(0.5)
    state = strict.marshaler.partition_state(TOPIC, 0)
    assert state is not None and not state.has_position, "no position became a position"
    strict.close()  # a release would be a position too
    state = strict.marshaler.partition_state(TOPIC, 0)
    assert not state.has_position

    manual.clock.advance(2.5)  # the unrenewed claim lapses
    latest = manual.consumer("latest", auto_offset_reset="latest")
    wait_until(lambda: latest.claims() == [(TOPIC, 0)], what="the next member's claim")
    produce(manual.cluster, 0, 3)
    assert [m.offset for m in drain(latest, 3)] == [50, 51, 52]


def test_seek_gives_an_unpositioned_claim_its_position(manual) -> None:
    import pytest

    from logmarshal.consumer import NoPosition

    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 10)
    strict = manual.consumer("strict", auto_offset_reset="error")
    wait_until(lambda: strict.claims() == [(TOPIC, 0)], what="the claim")
    with pytest.raises(NoPosition):
        strict.poll(0.5)
    strict.seek(TOPIC, 0, 4)
    assert [m.offset for m in drain(strict, 6)] == [4, 5, 6, 7, 8, 9]
    manual.clock.advance(0.9)
    wait_until(
        lambda: strict.marshaler.resume_offset(TOPIC, 0) == 10, what="the position heartbeat"
    )
