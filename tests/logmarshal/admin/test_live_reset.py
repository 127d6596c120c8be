"""Resetting a group while three members consume it (embedded cluster, one process)."""

from __future__ import annotations

import random
import time

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.admin import Plan, Target, execute, new_admin, plan_reset, read_coordination
from scenarios.common import wait_until
from scenarios.stages.thread_stage import ThreadMember

from .members import TOPIC, Producer, handed, member

HB = 0.3
PARTITIONS = 6
NEW = 10


def test_reset_a_live_group_resumes_exactly_at_the_new_positions(tmp_path) -> None:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        now = int(time.time() * 1000)
        for p in range(PARTITIONS):
            cluster.produce(TOPIC, p, [NewRecord(value=b"m", timestamp=now)] * 200)
        members: list[ThreadMember] = []
        producer = None
        try:
            members = [member(cluster, f"c{i}", HB) for i in range(3)]
            producer = Producer(cluster, PARTITIONS)
            assert wait_until(
                lambda: (
                    len(handed(members)) == PARTITIONS
                    and all(len(v) >= 30 for v in handed(members).values())
                ),
                15,
            ), "every partition being consumed"
            partitions = [(TOPIC, p) for p in range(PARTITIONS)]

            def positions() -> dict:
                view = read_coordination(cluster).view
                return {(t, p): view and view.resume_offset("g", t, p) for t, p in partitions}

            assert wait_until(lambda: all((c or 0) > 2 * NEW for c in positions().values()), 15), (
                "every partition's position to pass the reset target"
            )
            state = read_coordination(cluster)
            bounds = {
                k: (cluster.earliest_offset(*k), cluster.latest_offset(*k)) for k in partitions
            }
            current = {
                (t, p): state.view.resume_offset("g", t, p)
                for t, p in partitions  # type: ignore[union-attr]
            }
            assert all(c is not None and c > NEW for c in current.values()), current
            plan = plan_reset("g", partitions, current, bounds, Target("offset", NEW))
            admin = new_admin("admin@test", rng=random.Random(7))
            result = execute(cluster, state, plan, admin=admin, pause_ms=1500)
            written_at = time.time()
            assert result.ok, [w.describe_verdict() for w in result.rejected]
            assert len([w for w in result.written if w.kind == "release_group"]) == 4
            expiry = result.pause_until_ms / 1000

            # nothing is handed out during the pause once members had 2·HB to notice it
            assert wait_until(lambda: time.time() > expiry, 5), "the pause to end"
            quiet = [
                (x.partition, x.offset)
                for m in members
                for x in m.handed()
                if written_at + 2 * HB <= x.handed_at < expiry
            ]
            assert quiet == [], quiet[:5]

            assert wait_until(
                lambda: (
                    len(handed(members, since=expiry)) == PARTITIONS
                    and all(len(v) >= 5 for v in handed(members, since=expiry).values())
                ),
                10,
            ), "every partition being consumed again after the pause"
            after = handed(members, since=expiry)
            for p, offsets in sorted(after.items()):
                assert offsets[0] == NEW, (p, offsets[:10])
                seen = sorted(set(offsets))
                assert seen == list(range(NEW, NEW + len(seen))), (p, seen[:20])

            # no member is left believing it holds a partition the log gave someone else
            time.sleep(2 * HB)
            final = read_coordination(cluster)
            owners: dict[int, str] = {}
            for m in members:
                for topic, p in m.consumer.claims():
                    holder = final.view.holder("g", topic, p)  # type: ignore[union-attr]
                    assert holder == m.marshaler.identity, (m.client_id, p, holder)
                    assert p not in owners, (p, owners[p], m.client_id)
                    owners[p] = m.client_id
            assert sorted(owners) == list(range(PARTITIONS))
        finally:
            if producer is not None:
                producer.close()
            for m in members:
                m.close()


def test_a_pause_given_too_long_is_ended_early_by_a_short_one(tmp_path) -> None:
    """docs/admin.md: a later pause replaces the window of an earlier one, so an operator who
    paused a live group for an hour instead of a minute ends it by pausing it again for the
    shortest time it takes (2·HB): the members claim again at once after that."""
    hb = 0.3
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 2)
        m = member(cluster, "c0", hb)
        try:
            assert wait_until(lambda: len(m.consumer.claims()) == 2, 10), "claims"
            admin = new_admin("ops")
            hour = execute(
                cluster, read_coordination(cluster), Plan("g", ()), admin=admin, pause_ms=3_600_000
            )
            assert hour.ok
            assert wait_until(lambda: not m.consumer.claims(), 5), "the pause voids the claims"
            until = read_coordination(cluster).paused_until("g")
            assert until is not None and until > time.time() * 1000 + 3_500_000
            time.sleep(3 * hb)
            assert not m.consumer.claims()  # paused: nothing claimed
            short = execute(
                cluster,
                read_coordination(cluster),
                Plan("g", ()),
                admin=admin,
                pause_ms=int(2 * hb * 1000),
            )
            assert short.ok
            assert wait_until(lambda: len(m.consumer.claims()) == 2, 10), "claimed again"
            until = read_coordination(cluster).paused_until("g")
            assert until is not None and until <= time.time() * 1000  # the short one's end
        finally:
            m.close()
