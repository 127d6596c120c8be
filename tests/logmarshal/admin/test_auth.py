"""Authenticated admin: with an admin key, a forged ReleaseGroup changes nothing."""

from __future__ import annotations

import json
import os
import random
import time

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.admin import (
    AdminKeys,
    Target,
    execute,
    new_admin,
    plan_reset,
    read_coordination,
)
from logmarshal.admin.reader import CoordRecord
from logmarshal.cli.main import main
from rationalizer import Effect, Reason
from scenarios.common import wait_until
from scenarios.stages.thread_stage import ThreadMember

from .members import TOPIC, Producer, member

KEY = bytes(range(1, 33))
HB = 0.3


def verdicts_of(cluster, keys, written) -> list:
    """The verdicts replay with ``keys`` gives the ``written`` records, in their order."""
    seen: dict[tuple[int, int], CoordRecord] = {}

    def take(rec: CoordRecord) -> None:
        seen[(rec.coord_partition, rec.offset)] = rec

    read_coordination(cluster, admin_keys=keys, on_record=take)
    return [seen[(w.coord_partition, w.offset)].verdict for w in written]


def test_forged_release_group_changes_nothing_for_keyed_members(tmp_path) -> None:
    keys = AdminKeys({"g": KEY})
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 3)
        now = int(time.time() * 1000)
        for p in range(3):
            cluster.produce(TOPIC, p, [NewRecord(value=b"m", timestamp=now)] * 100)
        members: list[ThreadMember] = []
        producer = None
        try:
            members = [
                member(cluster, f"c{i}", HB, admin_keys=keys.for_group("g")) for i in range(2)
            ]
            producer = Producer(cluster, 3)
            parts = [(TOPIC, p) for p in range(3)]

            def positions() -> dict:
                view = read_coordination(cluster, admin_keys=keys).view
                return {k: view and view.resume_offset("g", *k) for k in parts}

            def settled() -> bool:
                """Positions past 20 and the partitions shared by both members (no hand-over
                still under way: a position can pass 20 under a first holder that then
                gives a partition to the second)."""
                held = [sorted(m.consumer.claims()) for m in members]
                shared = all(held) and sorted(k for h in held for k in h) == parts
                return shared and all((c or 0) > 20 for c in positions().values())

            assert wait_until(settled, 15)
            claims = {m.client_id: sorted(m.consumer.claims()) for m in members}
            assert sorted(k for v in claims.values() for k in v) == parts

            # a process without the key pauses and rewinds the group to 0
            rogue_state = read_coordination(cluster)  # it has no key: it cannot know better
            bounds = {k: (0, cluster.latest_offset(*k)) for k in parts}
            plan = plan_reset("g", parts, positions(), bounds, Target("offset", 0))
            forged = execute(
                cluster,
                rogue_state,
                plan,
                admin=new_admin("rogue", random.Random(1)),
                pause_ms=1000,
            )
            forged_at = time.time()
            assert forged.ok  # by its own, keyless, replay
            verdicts = verdicts_of(cluster, keys, forged.written)
            release = [
                v
                for v, w in zip(verdicts, forged.written, strict=True)
                if w.kind == "release_group"
            ]
            assert release and all(v.reason is Reason.UNAUTHENTICATED for v in release)
            positions_set = [
                v for v, w in zip(verdicts, forged.written, strict=True) if w.kind == "position"
            ]
            assert all(not v.accepted for v in positions_set)

            time.sleep(1.5)  # longer than the forged pause
            state = read_coordination(cluster, admin_keys=keys)
            assert state.paused_until("g") is None
            assert {m.client_id: sorted(m.consumer.claims()) for m in members} == claims
            rewound = [
                (x.partition, x.offset)
                for m in members
                for x in m.handed()
                if x.handed_at > forged_at and x.offset < 20
            ]
            assert rewound == [], rewound[:5]
            assert all((c or 0) > 20 for c in positions().values())

            # the real admin, with the key, is obeyed
            state = read_coordination(cluster, admin_keys=keys)
            real = execute(
                cluster,
                state,
                plan_reset("g", parts[:1], positions(), bounds, Target("offset", 5)),
                admin=new_admin("admin", random.Random(2)),
                pause_ms=1000,
                admin_keys=keys,
            )
            assert real.ok, [w.describe_verdict() for w in real.rejected]
            assert {w.verdict.effect for w in real.written} == {
                Effect.GROUP_PAUSED,
                Effect.POSITION_SET,
            }
            assert wait_until(lambda: not any(m.consumer.claims() for m in members), 2), (
                "claims dropped"
            )
        finally:
            if producer is not None:
                producer.close()
            for m in members:
                m.close()


def test_cli_tags_with_the_key_file_and_dump_shows_unauthenticated(tmp_path, capsys) -> None:
    data = tmp_path / "data"
    with EmbeddedCluster(data, maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 1)
        m = member(cluster, "c0", HB, admin_keys={"g": KEY})
        assert wait_until(lambda: m.consumer.claims(), 5), "a claim"
        m.close()
    key_file = tmp_path / "admin.keys"
    key_file.write_text(f"# admin keys\ng\t{KEY.hex()}\n")
    os.chmod(key_file, 0o600)
    base = ["--data-dir", str(data)]
    assert main([*base, "group", "pause", "g", "--for", "1s"]) == 0  # forged: no key
    assert (
        main([*base, "group", "pause", "g", "--for", "1s", "--admin-key-file", str(key_file)]) == 0
    )
    capsys.readouterr()
    assert (
        main([*base, "--json", "coord", "dump", "--group", "g", "--admin-key-file", str(key_file)])
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    groups = [
        (r["tagged"], r["verdict"], r["reason"]) for r in rows if r["type"] == "release_group"
    ]
    assert groups[:1] == [(False, "rejected", "unauthenticated")]
    assert (True, "accepted", "group_paused") in groups
    # a wrong key tags too, but whoever holds the right one rejects it
    wrong = tmp_path / "wrong.keys"
    wrong.write_text("g " + "ab" * 32 + "\n")
    os.chmod(wrong, 0o600)
    assert main([*base, "group", "pause", "g", "--for", "1s", "--admin-key-file", str(wrong)]) == 0
    capsys.readouterr()
    assert (
        main([*base, "--json", "coord", "dump", "--group", "g", "--admin-key-file", str(key_file)])
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    last = [r for r in rows if r["type"] == "release_group" and r["cp"] == 0][-1]
    assert (last["tagged"], last["verdict"], last["reason"]) == (
        True,
        "rejected",
        "unauthenticated",
    )
