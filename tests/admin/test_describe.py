"""``describe_group``/``list_groups`` over scripted coordination logs with exact log times."""

from __future__ import annotations

from logmarshal.admin import Status, describe_group, list_groups, read_coordination

from .conftest import BASE


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
