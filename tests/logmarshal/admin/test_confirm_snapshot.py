"""A reset confirms its records even when a member's snapshot already covers them (the
confirming replay then starts after them; the snapshot's verdict window still has theirs)."""

from __future__ import annotations

import time

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal._coordlog import ensure_coordination_topic, ensure_snapshot_topic, publish_snapshot
from logmarshal.admin.reset import WrittenRecord, _confirm
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import Effect, ReleaseGroup, WorldState, encode


def test_a_record_covered_by_a_snapshot_keeps_its_verdict(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "d", maintenance_interval=0) as cluster:
        ensure_coordination_topic(cluster, 1)
        ensure_snapshot_topic(cluster, 1)
        now = int(time.time() * 1000)
        msg = ReleaseGroup(
            client_id="admin", instance_id="a", group_id="g", msg_expire_time=now + 60_000
        )
        key, value = encode(msg)
        done = cluster.produce(COORDINATION_TOPIC, 0, [NewRecord(value, key=key, timestamp=now)])
        written = [WrittenRecord("release_group", 0, done.base_offset, done.log_append_time)]
        assert _confirm(cluster, written, None)[0].ok  # replayed: confirmed
        world = WorldState()
        for m in cluster.fetch(COORDINATION_TOPIC, 0, 0):
            world.apply(m.offset, m.timestamp, m.key, m.value)
        publish_snapshot(cluster, 0, world)
        (confirmed,) = _confirm(cluster, written, None)
        assert confirmed.verdict is not None and confirmed.verdict.effect is Effect.GROUP_PAUSED
