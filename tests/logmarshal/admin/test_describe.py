"""``describe_group``/``list_groups`` over scripted coordination logs with exact log times."""

from __future__ import annotations

import pytest

from logmarshal.admin import Status, describe_group, list_groups, read_coordination
from logmarshal.admin.errors import AdminError
from logmarshal.admin.reset import resolve_scope

from .conftest import BASE, TOPIC


def test_healthy_stalled_and_stopped_groups(scripted) -> None:
    cluster, s = scripted
    # in log-time order (the rationalizer clamps time, so the script must not go back):
    # healthy: a:1 consumes partition 0 to its end;
    # stalled: b:1 keeps heartbeating position 5 of partition 1 with 45 records waiting;
    # stopped: c:1 consumed a little of partition 2 and went silent at t=200.
    s.claim("a:1", 0, 0, group="healthy")
    s.claim("b:1", 1, 0, group="stalled")
    s.claim("c:1", 2, 0, group="stopped")
    for i, t in enumerate(range(100, 1000, 100)):
        s.beat("a:1", 0, min(10 * i + 9, 49), t, group="healthy")
        s.beat("b:1", 1, 4, t, group="stalled")
        if t <= 200:
            s.beat("c:1", 2, 10 * i + 9, t, group="stopped")
    state = read_coordination(cluster)
    now = BASE + 1000
    healthy = describe_group(cluster, state, "healthy", now)
    assert healthy.status is Status.OK
    p0 = next(p for p in healthy.partitions if p.partition == 0)
    assert (p0.client_id, p0.instance_id, p0.freshness) == ("a", "1", "fresh")
    assert (p0.last_offset, p0.position, p0.log_end, p0.lag) == (49, 50, 50, 0)
    assert p0.heartbeat_age_ms == 100
    # the group only ever touched partition 0; the others are listed without a position
    assert [(p.partition, p.position, p.status) for p in healthy.partitions[1:]] == [
        (1, None, None),
        (2, None, None),
    ]
    assert healthy.members == (("a", "1"),)

    stalled = describe_group(cluster, state, "stalled", now)
    p1 = next(p for p in stalled.partitions if p.partition == 1)
    assert (p1.position, p1.lag, p1.status) == (5, 45, Status.STALL)
    assert stalled.status is Status.STALL

    stopped = describe_group(cluster, state, "stopped", now)
    p2 = next(p for p in stopped.partitions if p.partition == 2)
    assert (p2.position, p2.lag, p2.freshness, p2.status) == (20, 30, "fresh", Status.OK)
    later = BASE + 2300  # 2.1 s after its last heartbeat, more than 2·HB (HB = 1 s)
    stopped = describe_group(cluster, state, "stopped", later)
    p2 = next(p for p in stopped.partitions if p.partition == 2)
    assert (p2.position, p2.lag, p2.freshness) == (20, 30, "stale")
    assert p2.status is Status.STOP and stopped.status is Status.STOP
    assert stopped.members == ()

    summaries = {g.group: g for g in list_groups(state, later)}
    assert sorted(summaries) == ["healthy", "stalled", "stopped"]
    assert (summaries["stalled"].owned, summaries["stalled"].known) == (1, 1)
    assert (summaries["stopped"].owned, summaries["stopped"].known) == (0, 1)
    assert summaries["stopped"].members == ()
    assert not any(g.paused for g in summaries.values())


def test_lag_uses_the_time_index_and_pause_is_reported(scripted) -> None:
    cluster, s = scripted
    # more records arrive while a:1 consumes: its lag never decreases -> WARN
    from logmarshal import NewRecord

    s.claim("a:1", 0, 0)
    for i, t in enumerate(range(100, 600, 100)):
        cluster.produce("events", 0, [NewRecord(value=b"x", timestamp=BASE + t - 1)] * 20)
        s.beat("a:1", 0, 49 + 10 * i, t)
    state = read_coordination(cluster)
    d = describe_group(cluster, state, "g", BASE + 600)
    p0 = d.partitions[0]
    assert p0.log_end == 150 and p0.position == 90 and p0.status is Status.WARN
    s.release_group("admin:x", 5000, 700)
    s.beat("admin:x", 0, 9, 710)
    state = read_coordination(cluster)
    d = describe_group(cluster, state, "g", BASE + 800)
    assert d.paused and d.paused_until_ms == BASE + 5000 and d.pause_admin == ("admin", "x")
    assert d.partitions[0].client_id is None and d.partitions[0].position == 10
    assert d.partitions[0].status is Status.REWIND


def test_members_target_and_balance_follow_the_rebalancing(scripted) -> None:
    """Announced members (protocol version 2) are listed with their target and what they
    hold, also while they hold nothing; balance is the target against the holders."""
    from tests.logmarshal.audit.logs import RebalanceStory

    cluster, s = scripted
    story = RebalanceStory(s)

    # c has just joined: it is a member, but has no share of the target yet
    story.run(1010)
    d = describe_group(cluster, read_coordination(cluster), "g", BASE + 1010)
    views = {m.client_id: m for m in d.member_views}
    assert sorted(views) == ["a", "c"] and d.members == (("a", "1"), ("c", "1"))
    a, c = views["a"], views["c"]
    assert (a.counted, c.counted) == (True, False)
    assert (c.since_ms, c.last_seen_ms, c.current, c.target) == (BASE + 1000, BASE + 1000, (), ())
    assert a.target == (("events", 0), ("events", 1), ("events", 2)) == a.current
    assert (c.topics, c.weight, c.heartbeat_interval_ms, c.announced) == (
        (("events", 3),),
        1,
        1000,
        True,
    )
    assert d.balanced is True and d.to_move == ()

    # b has settled (counted at 2400), a still holds what is now b's share
    story.run(2405)
    d = describe_group(cluster, read_coordination(cluster), "g", BASE + 2405)
    views = {m.client_id: m for m in d.member_views}
    assert {k: (v.target, v.current) for k, v in views.items()} == {
        "a": ((("events", 0),), (("events", 0), ("events", 1))),
        "b": ((("events", 1),), ()),
        "c": ((("events", 2),), (("events", 2),)),
    }
    assert d.balanced is False and d.to_move == (("events", 1),)
    summaries = {g.group: g for g in list_groups(read_coordination(cluster), BASE + 2405)}
    assert len(summaries["g"].members) == 3  # b holds nothing and is counted all the same

    # a protocol version 1 holder in another group: a member as before, not announced
    s.claim("old:1", 0, 2405, group="legacy")
    s.beat("old:1", 0, 5, 2405, group="legacy")
    story.run(2700)
    state = read_coordination(cluster)
    d = describe_group(cluster, state, "g", BASE + 2700)
    assert d.balanced is True and [m.current for m in d.member_views] == [
        (("events", 0),),
        (("events", 1),),
        (("events", 2),),
    ]
    legacy = describe_group(cluster, state, "legacy", BASE + 2700)
    assert [(m.client_id, m.announced, m.current) for m in legacy.member_views] == [
        ("old", False, (("events", 0),))
    ]
    assert legacy.balanced is None and legacy.members == (("old", "1"),)

    # c left, b crashed (its membership expired at 5301, a took its partition over), the
    # topic grew to 4 partitions: a alone, holding all four
    story.run(5300)  # b's last announcement was at 3300: still a member at 5300 ...
    assert [m.client_id for m in read_coordination(cluster).members("g", BASE + 5300)] == [
        "a",
        "b",
    ]
    story.run(story.END)  # ... and gone from 5301 on
    state = read_coordination(cluster)
    d = describe_group(cluster, state, "g", BASE + story.END)
    assert [(m.client_id, m.current) for m in d.member_views] == [
        ("a", tuple(("events", p) for p in range(4)))
    ]
    assert d.member_views[0].target == d.member_views[0].current and d.balanced is True
    assert [p.partition for p in d.partitions] == [0, 1, 2, 3]
    counts = {g.group: len(g.members) for g in list_groups(state, BASE + story.END)}
    assert counts == {"g": 1, "legacy": 0}  # old:1 stopped beating long ago: not fresh


def test_a_group_known_only_by_its_members_is_listed(scripted) -> None:
    cluster, s = scripted
    s.announce("x:1", 0, group="idle")
    s.announce("x:1", 300, group="idle")
    state = read_coordination(cluster)
    assert "idle" in state.groups
    d = describe_group(cluster, state, "idle", BASE + 400)
    (x,) = d.member_views
    # it subscribes to events (3 partitions): its target is all three, it holds none
    assert (x.client_id, x.counted, len(x.target), x.current) == ("x", True, 3, ())
    assert d.balanced is False and len(d.to_move) == 3
    assert [p.partition for p in d.partitions] == [0, 1, 2]
    assert [(g.group, len(g.members)) for g in list_groups(state, BASE + 400)] == [("idle", 1)]


@pytest.mark.parametrize("version", [3, 8])
def test_a_task_key_shows_its_position_vector(scripted, version) -> None:
    """A task (protocol version 3) is one key whose heartbeats carry a vector: describe shows
    the scalar as last_offset with the vector beside it, status samples and the lease come
    from the task's heartbeats, and ``coord dump`` names the record types. A version 8
    heartbeat (naming the tenure of a version 6 claim) reads the same."""
    from logmarshal.cli.coord import dump_row
    from logmarshal.cli.group import _last_offset_text
    from rationalizer import ClaimingPartition, HeartbeatingTask, ReleasingTask

    cluster, s = scripted
    ids = {"client_id": "t", "instance_id": "1", "group_id": "tasks"}
    where = {"topic": "wc.task", "partition": 0}
    claim = ClaimingPartition(
        **ids, **where, heartbeat_interval_ms=1000, version=6 if version == 8 else 1
    )
    claimed_at = s.put(claim, 0)
    tenure = claimed_at if version == 8 else None  # (the tenure the claim began)
    ab = (("a", 12), ("b", 7))
    beat = HeartbeatingTask(**ids, **where, heartbeat_interval_ms=2000, positions=ab, tenure=tenure)
    assert beat.version == version
    s.put(beat, 100)
    dumped = []
    state = read_coordination(cluster, on_record=lambda rec: dumped.append(dump_row(rec)))
    assert state.lease_ms("tasks", "wc.task", 0) == 2000
    assert [x.position for x in state.samples("tasks", "wc.task", 0)] == [21]
    d = describe_group(cluster, state, "tasks", BASE + 200)
    (p,) = d.partitions
    assert (p.client_id, p.last_offset, p.position, p.positions, p.log_end) == (
        "t", 20, 21, ab, None,
    )  # fmt: skip
    assert _last_offset_text(p) == "20 (positions a:12,b:7)"
    # the task's lag: what follows its position in each source (a: 20 records, b: 10)
    from storage import NewRecord

    for topic, n in (("a", 20), ("b", 10)):
        cluster.create_topic(topic, 1)
        cluster.produce(topic, 0, [NewRecord(b"x", timestamp=BASE) for _ in range(n)])
    (p,) = describe_group(cluster, read_coordination(cluster), "tasks", BASE + 200).partitions
    assert p.lag == (20 - 13) + (10 - 8)
    row = dumped[-1]
    assert (row["type"], row["value"], row["positions"], row["reason"]) == (
        "heartbeating_task", 20, [["a", 12], ["b", 7]], "renewed",
    )  # fmt: skip
    s.put(ReleasingTask(**ids, **where, positions=(("a", 20), ("b", 7))), 300)
    state = read_coordination(cluster)
    (p,) = describe_group(cluster, state, "tasks", BASE + 400).partitions
    assert (p.client_id, p.last_offset, p.position, p.positions) == (
        None, 28, 29, (("a", 20), ("b", 7)),
    )  # fmt: skip
    # a:20 is past a's 20 records (offsets 0..19): the task is 1 past the end, b's backlog
    # aside (it said lag 2, no status)
    assert (p.lag, p.status) == (-1, Status.PAST_END)
    assert [x.source for x in state.samples("tasks", "wc.task", 0)] == ["heartbeat", "released"]
    # a reset cannot move a task's positions: refused, naming the tasks (it said "unknown
    # topic 'wc.task'" for --all-topics, and moved nothing, confirmed, for a source topic)
    for scope, every in (([], True), ([("a", None)], False)):
        with pytest.raises(AdminError, match=r"streams application's.*\(wc\.task\)"):
            resolve_scope(cluster, state, "tasks", scope, every)


def test_an_unheld_partition_shows_the_lease_the_log_keeps(scripted) -> None:
    """Protocol version 5: after a restart takeover and a release, nobody's claim is accepted
    until the fenced instance's lease is over; describe says until when, and why the
    partition stays unheld."""
    from logmarshal.cli.group import _fresh_text
    from rationalizer import ClaimingPartition, Heartbeat, ReleasingPartition

    cluster, s = scripted
    where = {"group_id": "g5", "topic": TOPIC, "partition": 0}
    old = {"client_id": "a", "instance_id": "2", **where}
    new = {"client_id": "a", "instance_id": "4", **where}
    s.put(ClaimingPartition(**new, heartbeat_interval_ms=1000, version=5), 0)
    s.put(Heartbeat(**new, last_offset=-1, heartbeat_interval_ms=1000), 100)
    s.put(Heartbeat(**old, last_offset=-1, heartbeat_interval_ms=1000), 200)  # takeover
    s.put(ReleasingPartition(**old, last_offset=-1), 300)
    state = read_coordination(cluster)
    (p,) = [
        x for x in describe_group(cluster, state, "g5", BASE + 400).partitions if x.partition == 0
    ]
    assert p.client_id is None and p.fenced_until_ms == BASE + 100 + 2001
    assert _fresh_text(p).startswith("fenced until ")
    (p,) = [
        x for x in describe_group(cluster, state, "g5", BASE + 2101).partitions if x.partition == 0
    ]
    assert p.fenced_until_ms is None and _fresh_text(p) == "-"


def test_version_6_claims_and_releases_are_read_for_lease_and_position(scripted) -> None:
    """A version 6 record starts with its envelope (PROTOCOL.md "Version 6"): the admin reads
    a claim's lease and a release's position by decoding it, not at version 1's places."""
    from rationalizer import ClaimingPartition, ReleasingPartition

    cluster, s = scripted
    ids = {"client_id": "c", "instance_id": "1", "group_id": "six"}
    where = {"topic": "t6", "partition": 0}
    s.put(ClaimingPartition(**ids, **where, heartbeat_interval_ms=1500, version=6), 0)
    state = read_coordination(cluster)
    assert state.lease_ms("six", "t6", 0) == 1500
    (tenure,) = [p.tenure for p in state.partitions("six")]
    s.put(ReleasingPartition(**ids, **where, last_offset=41, tenure=tenure), 100)
    state = read_coordination(cluster)
    assert [x.position for x in state.samples("six", "t6", 0)] == [42]
