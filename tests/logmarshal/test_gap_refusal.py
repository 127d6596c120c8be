"""Issue 36, item 2: a cold start that finds the coordination log's prefix gone and no valid
snapshot of its own key configuration covering it refuses to act on that world.

Group ``ga`` (no admin key) publishes snapshots and truncates ``__marshal`` (the defaults
scaled down: a snapshot every 20 records, 2 KiB segments); group ``gb`` has an admin key, so
its members replay under another key configuration, and none of its members publishes. gb's
member ``b1`` holds both partitions of ``events`` in AMO since before the truncation. Then
the truncation moves the log start past b1's claims and a new gb member ``b2`` starts: the
only snapshots are ``ga``'s configuration's, which b2 must not restore (PROTOCOL.md,
"Bounded coordination log"), so its replay of the tail misses b1's claims.

- With the refusal: b2 logs one error line naming the partition, the lost offsets and the
  recovery path, counts ``logmarshal_marshaler_halts_total{why="gap"}``, and hands out
  nothing (so no offset is handed out by both).
- Without it (the exact check, ``Tailer._gap``, patched out): b2's world shows the
  partitions unheld (b1's heartbeats are ``NOT_HOLDER`` there), b2 claims them, starts at
  the reset policy's offset and hands out what b1 handed out.
- After an admin reset of ``gb`` written after the gap (ReleaseGroup and a position per
  partition, tagged with gb's key), once its pause is over, b2 takes up the partitions the
  admin positioned and hands out from there: nothing twice (PROTOCOL.md, "A coordination
  log that loses records").

Every test here runs without the announcements of replay configurations (issue 36 item 1,
``Tailer._announce_config`` patched out): with them, b1's announcement keeps ga's truncator
from deleting anything gb needs and the gap never opens
(tests/logmarshal/test_truncation_in_use.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from logmarshal import Consumer, EmbeddedCluster, NewRecord
from logmarshal import _direct as direct
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal._tailer import Tailer
from logmarshal.marshaler import Marshaler
from logmarshal.metrics import MarshalerMetrics
from rationalizer import Heartbeat, ReleaseGroup, encode, sign
from scenarios.common import wait_until

pytestmark = pytest.mark.slow

SMALL_SEGMENTS = {"segment.bytes": 2048, "retention.ms": -1, "flush.messages": 1}
KEY = bytes(range(32))
KEYS = {"gb": KEY}
HB = 0.5


class _Reader:
    """A gb member: a Marshaler with gb's key and an AMO Consumer of ``events``, polled by a
    thread that keeps every offset handed out."""

    def __init__(
        self, cluster: EmbeddedCluster, name: str, metrics: MarshalerMetrics | None = None
    ) -> None:
        self.marshaler = Marshaler(
            cluster,
            name,
            "gb",
            HB,
            coordination_partitions=1,
            admin_keys=KEYS,
            snapshot_records=None,
            snapshot_interval=None,
            fetch_wait=0.05,
            metrics=metrics,
        )
        self.consumer = Consumer(
            self.marshaler,
            "events",
            mode="amo",
            batch_size=10,
            max_reserved=10,
            rebalance="none",
        )
        self.handed: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poll-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.poll(0.05):
                self.handed.append((m.partition, m.offset))
            self._stop.wait(0.05)  # slow: the group lives long enough to be truncated under

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close(timeout=5)
        self.marshaler.close(timeout=5)


@pytest.fixture(autouse=True)
def _unannounced(monkeypatch) -> None:
    """Without fix 1: no replayer announces its configuration."""
    monkeypatch.setattr(Tailer, "_announce_config", lambda self, tail, starting=False: None)


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as c:
        c.create_topic(
            COORDINATION_TOPIC, 1, {**SMALL_SEGMENTS, "message.timestamp.type": "LogAppendTime"}
        )
        c.create_topic(SNAPSHOT_TOPIC, 1, {**SMALL_SEGMENTS, "max.message.bytes": 1 << 20})
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


def _truncated_past_b1(cluster: EmbeddedCluster) -> tuple[_Reader, Marshaler, int]:
    """b1 claims both partitions, then ga's traffic makes ga publish and truncate until the
    log starts after b1's claims. Returns b1, ga's member and the log start."""
    b1 = _Reader(cluster, "b1")
    assert wait_until(lambda: {p for p, _ in b1.handed} == {0, 1}, 20)
    claimed_by = cluster.latest_offset(COORDINATION_TOPIC, 0)
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
    n = 0
    while cluster.earliest_offset(COORDINATION_TOPIC, 0) <= claimed_by + 5:
        assert n < 2000, "ga's truncation never passed b1's claims"
        direct.wait_verdict(ga, direct.heartbeat(ga, "other", 0, n), 5)
        n += 1
    return b1, ga, cluster.earliest_offset(COORDINATION_TOPIC, 0)


def _halt_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and "deleted before this replay" in r.getMessage()
    ]


def test_a_cold_start_without_a_snapshot_of_its_own_refuses_the_tail(cluster, caplog) -> None:
    caplog.set_level(logging.WARNING)
    b1, ga, earliest = _truncated_past_b1(cluster)
    metrics = MarshalerMetrics()
    b2 = None
    try:
        caplog.clear()
        b2 = _Reader(cluster, "b2", metrics)
        # b1 goes on; b2 has had time to claim (claim passes every HB/2) and hand out
        before = len(b1.handed)
        assert wait_until(lambda: len(b1.handed) >= before + 100, 20)
        time.sleep(4 * HB)
        halts = b2.marshaler.halts()
        assert set(halts) == {0} and halts[0].why == "gap", halts
        assert halts[0].after == earliest
        lines = _halt_lines(caplog)
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"__marshal/0: records 0..{earliest - 1} were deleted")
        assert "group reset" in lines[0] and "bounded-log.md" in lines[0]
        assert (
            metrics.registry.get_sample_value(
                "logmarshal_marshaler_halts_total",
                {"group": "gb", "client_id": "b2", "coordination_partition": "0", "why": "gap"},
            )
            == 1.0
        )
        assert b2.handed == []
        assert b2.consumer.claims() == []
        assert not set(b1.handed) & set(b2.handed)
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()


def test_without_the_refusal_the_tail_hands_out_twice(cluster, monkeypatch) -> None:
    monkeypatch.setattr(Tailer, "_gap", lambda self, tail, offset, earliest: None)
    b1, ga, _ = _truncated_past_b1(cluster)
    b2 = None
    try:
        b2 = _Reader(cluster, "b2")
        reader = b2
        assert wait_until(lambda: len(reader.handed) >= 50, 20), "b2 never handed out"
        assert reader.marshaler.halts() == {}
        twice = set(b1.handed) & set(reader.handed)
        assert twice, (sorted(b1.handed)[:5], sorted(reader.handed)[:5])
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()


def test_after_an_admin_reset_past_the_gap_the_halted_member_resumes(cluster, caplog) -> None:
    caplog.set_level(logging.WARNING)
    b1, ga, _ = _truncated_past_b1(cluster)
    b2 = None
    try:
        b2 = _Reader(cluster, "b2")
        assert wait_until(lambda: 0 in b2.marshaler.halts(), 10)
        # the operator's reset of gb (what `logmarshal group reset gb --to-latest --execute`
        # writes): a ReleaseGroup tagged with gb's key, pausing 2·HB+, and one tagged
        # position heartbeat per partition, past everything b1 handed out
        pause_ms = int(4 * HB * 1000)
        expiry = int(time.time() * 1000) + pause_ms
        admin = {"client_id": "admin", "instance_id": "r1", "group_id": "gb"}
        release = sign(ReleaseGroup(**admin, msg_expire_time=expiry), KEY)
        cluster.produce(COORDINATION_TOPIC, 0, [_record(release)])
        assert b1.marshaler.wait_caught_up(5)
        positions = {p: max((o for q, o in b1.handed if q == p), default=-1) + 50 for p in range(2)}
        for p, pos in positions.items():
            beat = sign(
                Heartbeat(
                    **admin,
                    topic="events",
                    partition=p,
                    last_offset=pos,
                    heartbeat_interval_ms=int(HB * 1000),
                ),
                KEY,
            )
            cluster.produce(COORDINATION_TOPIC, 0, [_record(beat)])
        # b1 stops (its claims were voided): after the pause b2 alone takes up what the
        # admin positioned, from there
        b1.close()
        assert b2.handed == []
        assert wait_until(lambda: bool(b2.marshaler.regained(0)), pause_ms / 1000 + 10)
        assert b2.marshaler.regained(0) == {("events", 0), ("events", 1)}
        assert wait_until(lambda: {p for p, _ in b2.handed} == {0, 1}, 20)
        assert all(o > positions[p] for p, o in b2.handed)
        assert not set(b1.handed) & set(b2.handed)
    finally:
        for m in (b2, b1):
            if m is not None:
                m.close()
        ga.close()


def _record(msg: object) -> NewRecord:
    """A coordination message as a record (its log time is the log's: LogAppendTime)."""
    key, value = encode(msg)  # type: ignore[arg-type]
    return NewRecord(value=value, key=key, timestamp=int(time.time() * 1000))
