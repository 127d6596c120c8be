"""Protocol version 2: membership records, rules 8 and 9, and their snapshot (PROTOCOL.md,
"Record value, version 2" and "Membership")."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rationalizer import (
    AnnouncingMember,
    ClaimingPartition,
    DecodeError,
    Effect,
    Heartbeat,
    LeavingGroup,
    Reason,
    ReleaseGroup,
    WorldState,
    decode,
    encode,
    membership_partition,
)
from rationalizer import (
    _membership as membership,
)
from rationalizer._membership import settle_ms

PROTOCOL = Path(__file__).resolve().parents[2] / "PROTOCOL.md"
IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}

GOLDEN = [
    (
        AnnouncingMember(
            **IDS,
            topics=(("orders", 24), ("payments", 3)),
            heartbeat_interval_ms=3000,
            weight=2,
            max_claims=5,
        ),
        "67",
        "020600000bb800020000000500026331026931016702066f726465727318087061796d656e747303",
    ),
    (
        AnnouncingMember(**IDS, topics=(("t", 4),), heartbeat_interval_ms=1000, entire_topic=True),
        "67",
        "0206000003e800010000000001026331026931016701017404",
    ),
    (LeavingGroup(**IDS), "67", "02070263310269310167"),
]


@pytest.mark.parametrize(("msg", "key", "value"), GOLDEN)
def test_golden_vectors(msg, key, value):
    assert encode(msg) == (bytes.fromhex(key), bytes.fromhex(value))
    assert decode(bytes.fromhex(key), bytes.fromhex(value)) == msg


def test_golden_vectors_and_the_membership_partition_are_documented():
    text = PROTOCOL.read_text(encoding="utf-8")
    for _msg, key, value in GOLDEN:
        assert value in text and key in text
    for group, n, cp in (("g", 8, 6), ("orders-app", 8, 6), ("payments", 8, 4)):
        assert membership_partition(group, n) == cp
        assert f'`("{group}",{n})→{cp}`' in text


@pytest.mark.parametrize(
    "value",
    [
        "0206000003e800010000000002026331026931016701017404",  # unknown flag bit
        "0206000003e800000000000000026331026931016701017404",  # weight 0
        "020600000000000100000000000263310269310167",  # heartbeat interval 0 (and truncated)
        "0206000003e80001000000000002633102693101670201740401740a",  # topics not ascending
        "0206000003e8000100000000000263310269310167010174040000",  # trailing bytes
        "0206000003e80001000000000002633102693101678000",  # overlong varint count
        "02010000000000000029000003e8000263310269310167066f726465727303",  # v2 + a v1 type
        "02080263310269310167",  # unknown type
        "020702633102693101",  # truncated
    ],
)
def test_strict_decoding(value):
    with pytest.raises(DecodeError):
        decode(b"g", bytes.fromhex(value))


def test_the_key_must_be_the_group():
    _, value = encode(LeavingGroup(**IDS))
    with pytest.raises(DecodeError):
        decode(b"g/t/0", value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_any_bytes_after_a_version_2_header_decode_or_raise_decode_error(tail):
    for head in (b"\x02\x06", b"\x02\x07"):
        try:
            msg = decode(b"g", head + tail)
        except DecodeError:
            continue
        assert encode(msg) == (b"g", head + tail)  # only the canonical encoding decodes


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topics": (("b", 1), ("a", 1))},
        {"topics": (("a", 1), ("a", 2))},
        {"topics": (("bad/topic", 1),)},
        {"topics": (("a", -1),)},
        {"weight": 0},
        {"weight": 1001},
        {"max_claims": -1},
        {"entire_topic": 1},
        {"heartbeat_interval_ms": 0},
    ],
)
def test_invalid_announcements_cannot_be_built(kwargs):
    base = {"topics": (("t", 4),), "heartbeat_interval_ms": 1000}
    base.update(kwargs)
    with pytest.raises(ValueError):
        AnnouncingMember(**IDS, **base)


# -- rules 8 and 9 -------------------------------------------------------------------------------


class Log:
    def __init__(self) -> None:
        self.world = WorldState()
        self.offset = 0

    def put(self, t: int, msg):
        v = self.world.apply(self.offset, t, *encode(msg))
        self.offset += 1
        return v


def announce(client="c1", instance="i1", hb=1000, topics=(("t", 4),), **kw):
    return AnnouncingMember(
        client_id=client,
        instance_id=instance,
        group_id="g",
        topics=topics,
        heartbeat_interval_ms=hb,
        **kw,
    )


def test_a_member_joins_renews_and_counts_once_settled():
    log = Log()
    assert log.put(1000, announce()).effect is Effect.JOINED
    (m,) = log.world.members("g")
    assert (m.since, m.last) == (1000, 1000) and not m.counted(1000)
    assert log.put(1000 + settle_ms(1000) - 1, announce()).effect is Effect.ANNOUNCED
    assert not log.world.members("g")[0].counted(log.world.now)
    log.put(1000 + settle_ms(1000), announce(weight=3))
    (m,) = log.world.members("g")
    assert m.since == 1000 and m.counted(log.world.now) and m.weight == 3


def test_a_restart_under_the_same_client_id_keeps_since_and_a_stale_member_rejoins():
    log = Log()
    log.put(1000, announce())
    log.put(1500, announce(instance="i2"))  # a restart: the same member
    (m,) = log.world.members("g")
    assert (m.instance_id, m.since) == ("i2", 1000)
    assert log.world.members("g", 1500 + 2000) != []  # 2·HB old: still live
    assert log.world.members("g", 1500 + 2001) == []  # stale
    assert log.put(1500 + 2001, announce(instance="i3")).effect is Effect.JOINED
    assert log.world.members("g")[0].since == 3501


def test_leaving_is_for_the_member_instance_only():
    log = Log()
    log.put(1000, announce())
    v = log.put(1100, LeavingGroup(client_id="c1", instance_id="other", group_id="g"))
    assert not v.accepted and v.reason is Reason.NOT_HOLDER
    v = log.put(1100, LeavingGroup(client_id="c2", instance_id="i1", group_id="g"))
    assert v.reason is Reason.NOT_HOLDER
    assert log.put(1200, LeavingGroup(**IDS)).effect is Effect.LEFT
    assert log.world.members("g") == []
    assert log.world.rejections()[Reason.NOT_HOLDER] == 2


def test_a_fenced_instance_cannot_announce_and_pauses_do_not_apply():
    log = Log()
    claim = ClaimingPartition(**IDS, topic="t", partition=0, heartbeat_interval_ms=1000)
    log.put(1000, claim)
    log.put(1100, Heartbeat(**{**IDS, "instance_id": "i2"}, topic="t", partition=0,
                            last_offset=-1, heartbeat_interval_ms=1000))  # fmt: skip
    assert log.world.is_fenced("c1", "i1")
    assert log.put(1200, announce()).reason is Reason.FENCED
    pause = ReleaseGroup(client_id="admin", instance_id="a", group_id="g", msg_expire_time=9000)
    log.put(1300, pause)
    assert log.put(1400, announce(client="c2")).effect is Effect.JOINED  # during the pause
    assert [m.client_id for m in log.world.members("g")] == ["c2"]


def test_membership_records_never_change_ownership():
    a, b = Log(), Log()
    claim = ClaimingPartition(**IDS, topic="t", partition=0, heartbeat_interval_ms=1000)
    a.put(1000, claim)
    b.put(1000, claim)
    b.put(1001, announce(client="c9"))
    b.put(1002, LeavingGroup(client_id="c9", instance_id="i1", group_id="g"))
    assert a.world.partitions() == b.world.partitions()


# -- snapshots ---------------------------------------------------------------------------------


def test_snapshot_version_2_round_trips_and_version_1_stays_for_worlds_without_members():
    log = Log()
    log.put(1000, ClaimingPartition(**IDS, topic="t", partition=0, heartbeat_interval_ms=1000))
    v1 = log.world.to_bytes()
    assert v1[4] == 1
    log.put(1100, announce(topics=(("t", 4), ("u", 2)), entire_topic=True, max_claims=2))
    log.put(1200, announce(client="c2", weight=5))
    data = log.world.to_bytes()
    assert data[4] == 2
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.members("g") == log.world.members("g")
    log.put(1300, LeavingGroup(**IDS))
    log.put(1400, LeavingGroup(client_id="c2", instance_id="i1", group_id="g"))
    assert log.world.to_bytes()[4] == 1  # nobody left: written as version 1 again


_EVENTS = st.lists(
    st.tuples(
        st.integers(0, 3000),  # time step
        st.sampled_from(["c1", "c2", "c3"]),
        st.sampled_from(["i1", "i2"]),
        st.sampled_from(["announce", "announce", "leave", "claim"]),
        st.integers(1, 3),  # weight / partition count
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_EVENTS, st.integers(0, 40))
def test_restoring_a_snapshot_and_replaying_the_rest_equals_a_full_replay(events, cut):
    records = []
    t = 1000
    for step, client, instance, kind, n in events:
        t += step
        ids = {"client_id": client, "instance_id": instance, "group_id": "g"}
        if kind == "announce":
            msg = AnnouncingMember(**ids, topics=(("t", n),), heartbeat_interval_ms=500, weight=n)
        elif kind == "leave":
            msg = LeavingGroup(**ids)
        else:
            msg = ClaimingPartition(**ids, topic="t", partition=n, heartbeat_interval_ms=500)
        records.append((len(records), t, *encode(msg)))
    full = WorldState()
    verdicts = [full.apply(*r) for r in records]
    first = WorldState()
    cut = min(cut, len(records))
    for r in records[:cut]:
        first.apply(*r)
    resumed = WorldState.from_bytes(first.to_bytes())
    rest = [resumed.apply(*r) for r in records[cut:]]
    assert rest == verdicts[cut:]
    assert resumed.to_bytes() == full.to_bytes()
    assert resumed.members("g", t) == full.members("g", t)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 400),  # time step
            st.sampled_from(["a", "b", "c", "d"]),  # client
            st.sampled_from([1, 5, 40, 100]),  # hb (short ones expire between announcements)
            st.booleans(),  # leave instead of announce
        ),
        max_size=60,
    )
)
def test_the_expiry_bound_only_skips_scans_that_would_drop_nobody(ops):
    """Membership with the world's expiry bound equals membership that looks at every member
    at every announcement (an empty bound forces the scan): same verdicts, same flags, same
    members."""
    bounded: dict = {}
    bound: dict[str, int] = {}
    scanned: dict = {}
    now = 0
    for step, client, hb, leaving in ops:
        now += step
        if leaving:
            got = membership.leave(bounded, bound, now, client, "i", "g")
            want = membership.leave(scanned, {}, now, client, "i", "g")
        else:
            args = (now, client, "i", "g", (("t", 4),), hb, 1, 0, False)
            got = membership.announce(bounded, bound, *args)
            want = membership.announce(scanned, {}, *args)
        assert got == want
        assert {
            g: {c: (m.since, m.last, m.hb) for c, m in ms.items()} for g, ms in bounded.items()
        } == {g: {c: (m.since, m.last, m.hb) for c, m in ms.items()} for g, ms in scanned.items()}
