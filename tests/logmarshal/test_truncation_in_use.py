"""Issue 36, item 1 (with issue 33 item 1): every replay configuration in use bounds the
truncation, not only those that published.

The shape of tests/logmarshal/test_gap_refusal.py, with the announcements in place: group
``ga`` (no admin key) publishes snapshots and truncates ``__marshal``; group ``gb`` has an
admin key (another replay configuration) and its running member ``b1`` holds both partitions
of ``events`` in AMO.

- gb's members publish nothing: b1's announcement of its configuration keeps ga's truncator
  at (0, 0) however many snapshots ga publishes; a new gb member b2 cold-starts from the
  log's start, agrees with b1, is not halted, and takes the partitions over from where b1
  released them when b1 stops: no offset handed out by both.
- gb's members may publish: b1 sees ga's snapshots cover more than gb's and publishes gb's
  own, so ga's truncation goes on, up to what gb's snapshots cover and past b1's claims;
  b2 starts from gb's own snapshot, with the same outcome.

Without the announcements (``Tailer._announce_config`` patched out) the same schedule is
test_gap_refusal.py: b2 refuses the tail (a ``gap`` halt), and with the refusal patched out
too it hands out what b1 handed out. The last test here checks the announcement alone is
what makes the difference in this file's schedule.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal import _coordlog as coordlog
from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal._tailer import Tailer
from logmarshal.marshaler import Marshaler
from logmarshal.metrics import MarshalerMetrics
from rationalizer import PROTOCOL_VERSION
from rationalizer._snapshot_record import config_fingerprint, parse_snapshot_record
from scenarios.common import wait_until
from tests.logmarshal.test_gap_refusal import KEYS, SMALL_SEGMENTS, _Reader

pytestmark = pytest.mark.slow

GB = config_fingerprint(["gb"], PROTOCOL_VERSION)


class _PublishingReader(_Reader):
    """A gb member that publishes snapshots (a point every 20 records, or 1 s)."""

    def __init__(
        self, cluster: EmbeddedCluster, name: str, metrics: MarshalerMetrics | None = None
    ) -> None:
        original = Marshaler.__init__

        def publishing(self, *args, **kw):  # type: ignore[no-untyped-def]
            kw.update(snapshot_records=20, snapshot_interval=1.0)
            original(self, *args, **kw)

        Marshaler.__init__ = publishing  # type: ignore[method-assign]
        try:
            super().__init__(cluster, name, metrics)
        finally:
            Marshaler.__init__ = original  # type: ignore[method-assign]


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    """test_gap_refusal's cluster, with room for bigger snapshots: here ``__marshal`` may
    not be truncated for a while, and every world keeps the verdicts of its window."""
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as c:
        c.create_topic(
            COORDINATION_TOPIC, 1, {**SMALL_SEGMENTS, "message.timestamp.type": "LogAppendTime"}
        )
        c.create_topic(
            SNAPSHOT_TOPIC,
            1,
            {**SMALL_SEGMENTS, "segment.bytes": 1 << 20, "max.message.bytes": 1 << 20},
        )
        c.create_topic("events", 2)
        for p in range(2):
            for start in range(0, 4000, 1000):
                now = int(time.time() * 1000)
                c.produce(
                    "events",
                    p,
                    [NewRecord(value=b"%d" % (start + i), timestamp=now) for i in range(1000)],
                )
        yield c


def _ga(cluster: EmbeddedCluster) -> Marshaler:
    ga = Marshaler(
        cluster,
        "a1",
        "ga",
        1.0,
        coordination_partitions=1,
        snapshot_records=20,
        snapshot_interval=None,
        fetch_wait=0.05,
    )
    v = direct.wait_verdict(ga, direct.claim_partition(ga, "other", 0), 5)
    assert v is not None and v.accepted
    return ga


def _ga_snapshots(cluster: EmbeddedCluster) -> list[int]:
    out = []
    for _, key, value in coordlog.read_snapshots(cluster, 0):
        if key is not None and key.startswith(b"0/-@") and not key.endswith(b"/live"):
            out.append(parse_snapshot_record(key, value).covered)
    return out


def _handover(cluster: EmbeddedCluster, b1: _Reader, metrics: MarshalerMetrics) -> _Reader:
    """b2 cold-starts beside b1, agrees with it, and takes over when b1 stops."""
    b2 = _Reader(cluster, "b2", metrics)
    assert b2.marshaler.wait_caught_up(10) and b1.marshaler.wait_caught_up(10)
    assert b2.marshaler.halts() == {}
    for p in range(2):
        assert b2.marshaler.holder("events", p) == b1.marshaler.identity
    before = len(b1.handed)
    assert wait_until(lambda: len(b1.handed) >= before + 50, 20)
    assert b2.handed == []  # b1 holds both; b2 waits
    b1.close()  # releases both
    assert wait_until(lambda: {p for p, _ in b2.handed} == {0, 1}, 20)
    assert b2.marshaler.halts() == {}
    assert metrics.registry.get_sample_value(
        "logmarshal_marshaler_halts_total",
        {"group": "gb", "client_id": "b2", "coordination_partition": "0", "why": "gap"},
    ) in (None, 0.0)
    # b2 goes on where b1 stopped, without a hole bigger than b1's unhanded reservation
    for p in range(2):
        last = max(o for q, o in b1.handed if q == p)
        first = min(o for q, o in b2.handed if q == p)
        assert last < first <= last + 1 + 10, (p, last, first)
    assert not set(b1.handed) & set(b2.handed)
    return b2


def test_an_announced_configuration_without_snapshots_holds_truncation(cluster) -> None:
    b1 = _Reader(cluster, "b1")
    assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 20)
    live = coordlog.configs_in_use(0, coordlog.read_snapshots(cluster, 0), int(time.time() * 1000))
    assert GB in live
    ga = _ga(cluster)
    b2 = None
    try:
        for n in range(200):
            direct.wait_verdict(ga, direct.heartbeat(ga, "other", 0, n), 5)
        # ga published every 20 records and kept trying to truncate: nothing went
        assert len(_ga_snapshots(cluster)) >= 5
        assert coordlog.truncation_bounds(0, coordlog.read_snapshots(cluster, 0)) == (0, 0)
        assert cluster.earliest_offset(COORDINATION_TOPIC, 0) == 0
        b2 = _handover(cluster, b1, MarshalerMetrics())
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()


def test_a_configuration_that_lacks_snapshots_publishes_its_own(cluster, caplog) -> None:
    caplog.set_level(logging.INFO, logger="logmarshal._tailer")
    # ga first: b1 publishes and truncates on its own, so a configuration that starts after
    # b1's first truncation finds a prefix gone with no snapshot of its own and halts (the
    # cold-start refusal, as PROTOCOL.md says; met once in the day's four full runs)
    ga = _ga(cluster)
    b1 = b2 = None
    try:
        b1 = _PublishingReader(cluster, "b1")
        assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 20)
        claimed_by = cluster.latest_offset(COORDINATION_TOPIC, 0)
        n = 0
        deadline = time.monotonic() + 30
        while cluster.earliest_offset(COORDINATION_TOPIC, 0) <= claimed_by + 5:
            # b1 looks every second (its snapshot interval) whether gb lags ga
            assert time.monotonic() < deadline, "truncation never passed b1's claims"
            direct.wait_verdict(ga, direct.heartbeat(ga, "other", 0, n), 5)
            n += 1
            time.sleep(0.005)
        assert b1.marshaler.halts() == {}
        earliest = cluster.earliest_offset(COORDINATION_TOPIC, 0)
        own, _ = coordlog.own_snapshots(0, coordlog.read_snapshots(cluster, 0), KEYS)
        assert len(own) == coordlog.KEEP_SNAPSHOTS
        # truncation never went past what gb's own older snapshot covers
        assert earliest <= own[-1][0] + 1
        # gb's snapshots are b1's: at its own snapshot points, or because ga's covered more
        # ("this replay configuration has ... publishing one"), whichever came first
        caplog.clear()
        b2 = _handover(cluster, b1, MarshalerMetrics())
        assert any(
            r.getMessage().startswith("__marshal/0: starting from the snapshot covering")
            and r.threadName.startswith("logmarshal-tail:gb:b2")
            for r in caplog.records
        )
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()


def test_without_the_announcement_the_same_schedule_opens_the_gap(cluster, monkeypatch):
    monkeypatch.setattr(Tailer, "_announce_config", lambda self, tail, starting=False: None)
    b1 = _Reader(cluster, "b1")
    assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 20)
    ga = _ga(cluster)
    b2 = None
    try:
        for n in range(200):
            direct.wait_verdict(ga, direct.heartbeat(ga, "other", 0, n), 5)
        assert cluster.earliest_offset(COORDINATION_TOPIC, 0) > 0
        assert not [
            k
            for _, k, _ in coordlog.read_snapshots(cluster, 0)
            if k is not None and k.endswith(b"/live")
        ]
        b2 = _Reader(cluster, "b2")
        assert wait_until(lambda: 0 in b2.marshaler.halts(), 10)
        assert b2.marshaler.halts()[0].why == "gap"
        assert SNAPSHOT_TOPIC in cluster.topics()
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()
