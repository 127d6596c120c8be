"""Issue 36 on Apache Kafka: every replay configuration in use bounds the truncation
(tests/logmarshal/test_truncation_in_use.py on logmarshal's own broker, PROTOCOL.md
"Bounded coordination log").

Group ``ga`` (no admin key) publishes snapshots and truncates ``__marshal`` with Kafka's
DeleteRecords; group ``gb`` (an admin key: another replay configuration) publishes none, and
its running member b1 holds both partitions of ``events`` in AMO. b1's announcement keeps
ga's truncation at nothing; a second gb member b2 cold-starts, agrees with b1, and takes the
partitions over where b1 released them: no offset handed out by both. Without the
announcements the same schedule lets ga truncate past b1's claims and b2 refuses the tail
(a ``gap`` halt)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from logmarshal import NewRecord
from logmarshal import _coordlog as coordlog
from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal._tailer import Tailer
from logmarshal.marshaler import Marshaler
from logmarshal.network import NetworkCluster
from scenarios.common import wait_until
from tests.kafka.test_marshal_topic import drop_topic
from tests.logmarshal.test_gap_refusal import _Reader

pytestmark = pytest.mark.kafka


@pytest.fixture
def cluster(bootstrap: str) -> Iterator[NetworkCluster]:
    """Fresh ``__marshal``, snapshot topic and ``events`` (the session's Kafka is shared)."""
    names = (COORDINATION_TOPIC, SNAPSHOT_TOPIC, "events")
    with NetworkCluster(bootstrap, timeout=30.0) as c:
        for name in names:
            drop_topic(c, name)
        c.create_topic("events", 2)
        for p in range(2):
            now = int(time.time() * 1000)
            c.produce("events", p, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(2000)])
        try:
            yield c
        finally:
            for name in names:
                drop_topic(c, name)


def _ga(cluster: NetworkCluster) -> Marshaler:
    ga = Marshaler(
        cluster,
        "a1",
        f"ga-{uuid.uuid4().hex[:6]}",
        1.0,
        coordination_partitions=1,
        snapshot_records=20,
        snapshot_interval=None,
        fetch_wait=0.05,
    )
    v = direct.wait_verdict(ga, direct.claim_partition(ga, "other", 0), 10)
    assert v is not None and v.accepted
    return ga


def _ga_traffic(ga: Marshaler, n: int) -> None:
    for i in range(n):
        v = direct.wait_verdict(ga, direct.heartbeat(ga, "other", 0, i), 10)
        assert v is not None and v.accepted


def test_an_announced_configuration_holds_kafka_truncation(cluster) -> None:
    b1 = _Reader(cluster, "b1")  # type: ignore[arg-type]
    ga = b2 = None
    try:
        assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 30)
        ga = _ga(cluster)
        _ga_traffic(ga, 120)
        snapshots = coordlog.read_snapshots(cluster, 0)
        assert (
            sum(
                1
                for _, k, _ in snapshots
                if k is not None and k.startswith(b"0/-@") and not k.endswith(b"/live")
            )
            >= coordlog.KEEP_SNAPSHOTS
        )
        assert coordlog.truncation_bounds(0, snapshots) == (0, 0)
        assert cluster.earliest_offset(COORDINATION_TOPIC, 0) == 0
        b2 = _Reader(cluster, "b2")  # type: ignore[arg-type]
        assert b2.marshaler.wait_caught_up(30) and b1.marshaler.wait_caught_up(30)
        assert b2.marshaler.halts() == {}
        for p in range(2):
            assert b2.marshaler.holder("events", p) == b1.marshaler.identity
        b1.close()  # releases both: b2 takes them over
        reader = b2
        assert wait_until(lambda: {p for p, _ in reader.handed} == {0, 1}, 30)
        assert reader.marshaler.halts() == {}
        assert not set(b1.handed) & set(reader.handed)
        for p in range(2):
            assert min(o for q, o in reader.handed if q == p) > max(
                o for q, o in b1.handed if q == p
            )
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        if ga is not None:
            ga.close()


def test_without_announcements_kafka_truncation_opens_the_gap(cluster, monkeypatch) -> None:
    monkeypatch.setattr(Tailer, "_announce_config", lambda self, tail, starting=False: None)
    b1 = _Reader(cluster, "b1")  # type: ignore[arg-type]
    ga = b2 = None
    try:
        assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 30)
        claimed_by = cluster.latest_offset(COORDINATION_TOPIC, 0)
        ga = _ga(cluster)
        deadline = time.monotonic() + 60
        while cluster.earliest_offset(COORDINATION_TOPIC, 0) <= claimed_by + 5:
            assert time.monotonic() < deadline, "ga's truncation never passed b1's claims"
            _ga_traffic(ga, 10)
        b2 = _Reader(cluster, "b2")  # type: ignore[arg-type]
        reader = b2
        assert wait_until(lambda: 0 in reader.marshaler.halts(), 30)
        assert reader.marshaler.halts()[0].why == "gap"
        assert reader.handed == []
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        if ga is not None:
            ga.close()
