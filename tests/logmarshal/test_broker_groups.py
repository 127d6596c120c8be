"""MarshalGroupView: __marshal replayed in place for the broker's group APIs."""

from __future__ import annotations

from logmarshal._broker_groups import MarshalGroupView
from logmarshal.marshaler import COORDINATION_TOPIC
from rationalizer import ClaimingPartition, Heartbeat, coordination_partition, encode
from storage import DataDir, NewRecord, TopicConfig, encode_batch

N_COORD = 4


def claim(client, instance, group, p, hb=1_000):
    return ClaimingPartition(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic="t",
        partition=p,
        heartbeat_interval_ms=hb,
    )


def beat(client, instance, group, p, last, hb=1_000):
    return Heartbeat(
        client_id=client,
        instance_id=instance,
        group_id=group,
        topic="t",
        partition=p,
        last_offset=last,
        heartbeat_interval_ms=hb,
    )


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def write(d: DataDir, message, timestamp_ms: int) -> None:
    key, value = encode(message)
    cp = coordination_partition(message.topic, message.partition, N_COORD)
    d.partition(COORDINATION_TOPIC, cp).append(
        encode_batch([NewRecord(value, key=key, timestamp=timestamp_ms)])
    )


def test_groups_members_and_positions_follow_the_log(tmp_path):
    clock = Clock(0)
    with DataDir(tmp_path / "d", clock=clock) as d:
        view = MarshalGroupView(d, clock=clock)
        assert view.group_ids() == [] and view.group("g") is None  # no __marshal yet
        d.create_topic(COORDINATION_TOPIC, N_COORD, TopicConfig(timestamp_type="LogAppendTime"))
        clock.ms = 1_000
        for p in (0, 1):
            write(d, claim("c1", "i1", "g", p), 1_000)
        write(d, beat("c1", "i1", "g", 0, 41), 1_000)
        write(d, claim("c2", "i9", "h", 0), 1_000)
        assert view.group_ids() == ["g", "h"]
        snap = view.group("g")
        assert snap is not None and snap.state == "Stable"
        (member,) = snap.members
        assert (member.client_id, member.member_id) == ("c1", "c1/i1")
        assert member.assignment == (("t", (0, 1)),)
        # only partition 0 has a position (a claim alone sets none)
        assert dict(snap.positions) == {("t", 0): 42}
        assert snap.topics == ("t",)
        # incremental: a later heartbeat moves the position
        clock.ms = 1_500
        write(d, beat("c1", "i1", "g", 0, 99), 1_500)
        assert dict(view.group("g").positions) == {("t", 0): 100}
        # once the holder is no longer fresh it is no member; positions remain
        clock.ms = 5_000
        snap = view.group("g")
        assert snap.members == () and snap.state == "Empty"
        assert dict(snap.positions) == {("t", 0): 100}
        assert view.group("nope") is None


def test_announced_members_are_members_even_holding_nothing(tmp_path):
    from rationalizer import AnnouncingMember, membership_partition

    clock = Clock(1_000)
    with DataDir(tmp_path / "d", clock=clock) as d:
        d.create_topic(COORDINATION_TOPIC, N_COORD, TopicConfig(timestamp_type="LogAppendTime"))
        view = MarshalGroupView(d, clock=clock)
        write(d, claim("c1", "i1", "g", 0), 1_000)
        idle = AnnouncingMember(
            client_id="c2",
            instance_id="i2",
            group_id="g",
            topics=(("t", 2),),
            heartbeat_interval_ms=1_000,
        )
        key, value = encode(idle)
        d.partition(COORDINATION_TOPIC, membership_partition("g", N_COORD)).append(
            encode_batch([NewRecord(value, key=key, timestamp=1_000)])
        )
        snap = view.group("g")
        assert [(m.member_id, m.assignment) for m in snap.members] == [
            ("c1/i1", (("t", (0,)),)),
            ("c2/i2", ()),
        ]
        clock.ms = 3_001  # the announcement is stale after 2·HB: no longer a member
        assert [m.member_id for m in view.group("g").members] == []


def test_a_truncation_between_the_start_and_the_read_is_read_again(tmp_path, monkeypatch):
    """DeleteRecords that lands after the view read the log start and before it read the
    records: the read meets OFFSET_OUT_OF_RANGE, and the view reads again from the new start
    instead of failing the query (the broker answered it COORDINATOR_NOT_AVAILABLE; noted by
    the attack on the exact log start, 2026-12-04)."""
    clock = Clock(1_000)
    with DataDir(tmp_path / "d", clock=clock) as d:
        d.create_topic(COORDINATION_TOPIC, N_COORD, TopicConfig(timestamp_type="LogAppendTime"))
        view = MarshalGroupView(d, clock=clock)
        write(d, claim("c1", "i1", "g", 0), 1_000)
        assert view.group_ids() == ["g"]
        cp = coordination_partition("t", 0, N_COORD)
        plog = d.partition(COORDINATION_TOPIC, cp)
        write(d, beat("c1", "i1", "g", 0, 41), 1_000)  # read by nobody before it goes
        end = plog.log_end_offset
        read = plog.read
        truncated = []

        def read_after_a_truncation(offset: int, *args, **kwargs):
            if not truncated:
                truncated.append(plog.delete_before(end))
            return read(offset, *args, **kwargs)

        monkeypatch.setattr(plog, "read", read_after_a_truncation)
        write(d, claim("c2", "i2", "g", 2), 1_000)  # past the truncation, in the same cp
        assert coordination_partition("t", 2, N_COORD) == cp
        snap = view.group("g")
        assert truncated == [end]
        assert snap is not None
        assert [m.member_id for m in snap.members] == ["c2/i2"]  # c1's claim went with it
