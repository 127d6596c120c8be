"""Issue 10 regressions: a fenced instance stops writing, and "no position" stays "no position".

A fenced instance's close() used to write ReleasingPartition as fast as it could for
``verdict_timeout`` (5,845 records in 3 s, every one rejected FENCED): fencing is per
coordination partition, so the old instance still *looks* like the holder of a second
partition coordinated there, and a rejected release was simply written again.
"""

from __future__ import annotations

from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import Effect

from .consumer_world import TOPIC, drain, produce, wait_until


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
    verdict = newer.wait_verdict(newer.heartbeat(TOPIC, p, 2), 5)
    assert verdict is not None and verdict.effect is Effect.RESTART_TAKEOVER
    wait_until(lambda: old.fenced, what="the old instance to learn it is fenced")
    # q still names the old instance as holder in the replay, but it is fenced on cp
    assert old.marshaler.holder(TOPIC, q) == old.marshaler.identity
    before = manual.cluster.latest_offset(COORDINATION_TOPIC, cp)
    old.close()
    written = manual.cluster.latest_offset(COORDINATION_TOPIC, cp) - before
    assert written == 0, f"a fenced instance wrote {written} records on close"
