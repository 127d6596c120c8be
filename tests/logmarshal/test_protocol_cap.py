"""A member's ``protocol_version`` cap: what it writes during a rolling upgrade.

A replayer of version N stops at the first record of a later version, so the members of a
new release that run beside members of version N write only what N reads (PROTOCOL.md,
"Upgrading a running group"). Each cap's records are read back from ``__marshal``."""

from __future__ import annotations

import pytest

from logmarshal import EmbeddedCluster
from logmarshal._coordlog import COORDINATION_TOPIC, records_from_cluster
from logmarshal.consumer import Consumer
from logmarshal.core.options import CoreOptions
from logmarshal.marshaler import Marshaler
from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    ReleasingPartition,
    decode,
)

from .consumer_world import TOPIC, drain, produce, wait_until


def _written(cluster: EmbeddedCluster) -> list[object]:
    """Every coordination record of the group, decoded, in each partition's order."""
    out = []
    for _, records in records_from_cluster(cluster, COORDINATION_TOPIC):
        for _, _, key, value in records:
            message = decode(key, value)
            if getattr(message, "group_id", None) == "g":
                out.append(message)
    return out


@pytest.mark.parametrize(
    ("cap", "claim", "release"),
    [(None, 6, 6), (9, 6, 6), (8, 6, 6), (7, 6, 6), (6, 6, 6), (5, 5, 1), (4, 1, 1)],
)
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_a_capped_member_writes_only_what_its_version_reads(tmp_path, cap, claim, release, mode):
    kwargs = {} if cap is None else {"protocol_version": cap}
    with EmbeddedCluster(tmp_path / "c") as cluster:
        cluster.create_topic(TOPIC, 2)
        produce(cluster, 0, 4)
        produce(cluster, 1, 4)
        marshaler = Marshaler(cluster, "m", "g", 0.2)
        try:
            consumer = Consumer(marshaler, TOPIC, mode=mode, **kwargs)
            got = drain(consumer, 8, timeout=15)
            assert sorted((m.partition, m.offset) for m in got) == [
                (p, o) for p in (0, 1) for o in range(4)
            ]
            consumer.close()  # releases both partitions
            wait_until(lambda: sum(isinstance(m, ReleasingPartition) for m in _written(cluster)) >= 2,
                       timeout=10, what="the releases in the log")  # fmt: skip
        finally:
            marshaler.close()
        written = _written(cluster)
    claims = [m for m in written if isinstance(m, ClaimingPartition)]
    releases = [m for m in written if isinstance(m, ReleasingPartition)]
    assert claims and {m.version for m in claims} == {claim}
    assert releases and {m.version for m in releases} == {release}
    assert all((m.tenure is None) == (release == 1) for m in releases)
    if mode == "amo":  # reservations stay version 4's, which every capped version reads
        reservations = [m for m in written if isinstance(m, ClaimingMessages)]
        assert reservations and {m.version for m in reservations} == {4}
    # heartbeats: one MemberHeartbeat per coordination partition from cap 7 on (every
    # partition's tenure has a name: a version 6 claim began it), version 1 below
    beats = [m for m in written if isinstance(m, MemberHeartbeat)]
    plain = [m for m in written if isinstance(m, Heartbeat)]
    if (cap or 9) >= 7:
        assert beats and not plain
        assert {e[:2] for m in beats for e in m.entries} == {(TOPIC, 0), (TOPIC, 1)}
    else:
        assert plain and not beats
    # nothing the capped version cannot read: every record's version byte is at most the cap
    newest = max(m.version for m in written)
    assert newest <= min(cap or 9, 7)  # no task here: nothing of version 8; every tenure
    # named by its claim: nothing to name (version 9)


@pytest.mark.parametrize("bad", [3, 10, "6", 5.0, None])
def test_a_cap_outside_the_versions_this_release_writes_is_refused(bad):
    with pytest.raises(ValueError, match="protocol_version must be an int from 4 to 9"):
        CoreOptions(
            group_id="g", client_id="c", instance_id="i", topics=(("t", 1),),
            coordination_partitions=1, heartbeat_interval_ms=100, protocol_version=bad,
        )  # fmt: skip
