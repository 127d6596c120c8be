"""Protocol version 4: at-most-once enforced by the log (PROTOCOL.md, "Version 4").

Golden vectors, strict decoding, the stop at a version to come, the properties a-c one by
one (each with its switch off, to show what it prevents), snapshots with tenure floors, and
the log-level property: records from arbitrary members never yield overlapping reservations
nor a resume point at or below a reservation that is still live, except through the admin.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rationalizer import (
    AnnouncingMember,
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Effect,
    Heartbeat,
    Reason,
    ReleaseGroup,
    ReleasingPartition,
    SnapshotError,
    WorldState,
    decode,
    encode,
)
from rationalizer._codec import seal
from rationalizer._messages import FUTURE_VERSIONS
from scenarios.sim_rules import rules_without

from .helpers import HB, Log, beat, claim, claim_msgs, release, release_group

# ----------------------------------------------------------------------------- golden vectors

RESERVATION = ClaimingMessages(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="orders",
    partition=200,
    first_offset=201,
    proposed_last_offset=300,
)
RESERVATION_HEX = (
    "672f6f72646572732f323030",
    "040400000000000000c9000000000000012c0263310269310167066f7264657273c801",
)
ANNOUNCEMENT = AnnouncingMember(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topics=(("t", 4),),
    heartbeat_interval_ms=1000,
    version=4,
)
ANNOUNCEMENT_HEX = ("67", "0406000003e800010000000000026331026931016701017404")
#: ClaimingPartition(c1,i1,g,orders,3,hb=1000)@0 t=1000, Heartbeat(c1,i1,..,last=9)@1,
#: ReleasingPartition(c1,i1,..,last=9)@2, ClaimingPartition(c2,i1,..)@3 (floor 9),
#: ClaimingMessages v4 (c2,i1,.., first=10, through 19)@4, log times 1000..1004, window 4
SNAPSHOT_V4_HEX = (
    "4c4d5753040405d80f000000000000000000010167066f72646572730307026332026931e807d80f0a140a"
    "00000501010101011013151016"
)


@pytest.mark.parametrize(
    ("msg", "hexes"), [(RESERVATION, RESERVATION_HEX), (ANNOUNCEMENT, ANNOUNCEMENT_HEX)]
)
def test_golden_vectors(msg, hexes):
    key, value = encode(msg)
    assert (key.hex(), value.hex()) == hexes
    assert decode(bytes.fromhex(hexes[0]), bytes.fromhex(hexes[1])) == msg


def test_golden_snapshot_with_a_tenure_floor():
    w = WorldState(verdict_window=4)
    c1 = {"client_id": "c1", "instance_id": "i1", "group_id": "g", "topic": "orders"}
    c2 = {**c1, "client_id": "c2"}
    records = [
        ClaimingPartition(**c1, partition=3, heartbeat_interval_ms=1000),
        Heartbeat(**c1, partition=3, last_offset=9, heartbeat_interval_ms=1000),
        ReleasingPartition(**c1, partition=3, last_offset=9),
        ClaimingPartition(**c2, partition=3, heartbeat_interval_ms=1000),
        ClaimingMessages(**c2, partition=3, first_offset=10, proposed_last_offset=19),
    ]
    for offset, msg in enumerate(records):
        assert w.apply(offset, 1000 + offset, *encode(msg)).accepted
    assert w.to_bytes().hex() == SNAPSHOT_V4_HEX
    restored = WorldState.from_bytes(bytes.fromhex(SNAPSHOT_V4_HEX))
    assert restored.partition_state("g", "orders", 3).tenure_floor == 9
    assert restored.to_bytes().hex() == SNAPSHOT_V4_HEX


def test_version_field_follows_the_first_offset():
    assert RESERVATION.version == 4
    assert claim_msgs("a:1", 5).version == 1
    with pytest.raises(ValueError, match="first_offset"):
        claim_msgs("a:1", 5, first=6)  # an empty or backwards range
    with pytest.raises(ValueError, match="names its first_offset"):
        ClaimingMessages(
            client_id="a",
            instance_id="1",
            group_id="g",
            topic="t",
            partition=0,
            proposed_last_offset=5,
            version=4,
        )
    with pytest.raises(ValueError, match="version"):
        AnnouncingMember(
            client_id="a",
            instance_id="1",
            group_id="g",
            topics=(),
            heartbeat_interval_ms=1,
            version=3,
        )


@pytest.mark.parametrize(
    "value",
    [
        "0404000000000000012d000000000000012c0263310269310167066f7264657273c801",  # first > last
        "0404ffffffffffffffff000000000000012c0263310269310167066f7264657273c801",  # first -1
        "040400000000000000c9000000000000012c0263310269310167066f7264657273c80100",  # trailing
        "040400000000000000c9",  # truncated
        "0401000000000000002900000bb8000263310269310167066f726465727303",  # v4 Heartbeat
        "04070263310269310167",  # LeavingGroup has no version 4
    ],
)
def test_version_4_decoding_is_strict(value):
    key = b"g" if value.startswith("0407") else bytes.fromhex(RESERVATION_HEX[0])
    if value.startswith("0401"):
        key = b"g/orders/3"
    with pytest.raises(DecodeError):
        decode(key, bytes.fromhex(value))
    log = Log()
    assert log.raw(key, bytes.fromhex(value), 0).reason is Reason.INVALID_RECORD


# ----------------------------------------------------------------------------- versions to come


@pytest.mark.parametrize("version", [FUTURE_VERSIONS[0], FUTURE_VERSIONS[-1]])
def test_a_version_to_come_halts_its_group_since_version_6(version):
    """Version 4 stopped the whole replay here; since version 6 a well-formed record of a
    version to come halts the group its envelope names (tests/rationalizer/test_version6.py)
    and version-shaped bytes without an envelope are skipped."""
    w = WorldState()
    records = [
        (0, 10, *encode(claim("a:1"))),
        (1, 11, b"g/orders/0", bytes([version, 1]) + b"anything"),  # no envelope: junk
        (2, 12, b"g/orders/0", seal(version, 1, "g", b"anything")),
        (3, 13, *encode(beat("a:1", 5))),
    ]
    assert [v.reason for v in w.apply_many(records)] == [
        None,
        Reason.INVALID_RECORD,
        Reason.GROUP_HALTED,
        Reason.GROUP_HALTED,
    ]
    assert w.applied_through == 3 and w.halted is None and w.halted_groups == {"g": (2, version)}
    assert w.holder("g", "orders", 0) == ("a", "1")  # frozen as it was
    assert w.resume_offset("g", "orders", 0) is None  # the heartbeat after it was not judged
    assert not w.claimable("g", "orders", 0, 10**6)
    assert WorldState.from_bytes(w.to_bytes()).halted_groups == {"g": (2, version)}


def test_bytes_that_are_no_version_at_all_are_still_skipped():
    log = Log()
    for value in (b"\x05", b"\x10\x01abc", b"\xff\x01", b"\x00\x01"):
        assert log.raw(b"g/orders/0", value, 0).reason is Reason.INVALID_RECORD
    assert log.w.halted is None


# ----------------------------------------------------------------------------- the zombie, as a log

HBZ = 100


def _zombie_log(without: frozenset[str] = frozenset()) -> Log:
    """The zombie schedule (docs/protocol-notes.md): a:1 handed out 0..29 and froze; c:3 took over stale and released;
    a:2 (a:1's restart) claimed and reserved 30..59."""
    log = Log()
    log.w = WorldState(rules=rules_without(without))
    assert log.put(claim("a:1", hb=HBZ), 0).accepted
    assert log.put(beat("a:1", -1, hb=HBZ), 1).accepted
    assert log.put(claim_msgs("a:1", 29, first=0), 2).accepted
    assert log.put(beat("a:1", 29, hb=HBZ), 3).accepted
    assert log.put(claim("c:3", hb=HBZ), 300).effect is Effect.TOOK_OVER_STALE
    assert log.put(beat("c:3", 29, hb=HBZ), 301).accepted
    assert log.put(release("c:3", 29), 302).accepted
    assert log.put(claim("a:2", hb=HBZ), 303).effect is Effect.CLAIMED
    assert log.put(beat("a:2", 29, hb=HBZ), 304).accepted
    assert log.put(claim_msgs("a:2", 59, first=30), 305).accepted
    assert log.put(beat("a:2", 59, hb=HBZ), 306).accepted
    return log


def test_a_woken_older_instance_cannot_take_its_partition_back():
    log = _zombie_log()
    v = log.put(beat("a:1", 29, hb=HBZ), 310)  # a:1 wakes and heartbeats what it last saw
    assert v.reason is Reason.NOT_HOLDER
    assert log.w.holder("g", "orders", 0) == ("a", "2") and not log.w.is_fenced("a", "2")
    # ... and neither its reservation nor its release is believed
    assert log.put(claim_msgs("a:1", 69, first=30), 311).reason is Reason.NOT_HOLDER
    assert log.put(release("a:1", 29), 312).reason is Reason.NOT_HOLDER
    assert log.w.resume_offset("g", "orders", 0) == 60


def test_without_property_a_the_zombie_takes_over_and_rewinds():
    log = _zombie_log(frozenset({"takeover_position", "release_floor", "reservation_start"}))
    v = log.put(beat("a:1", 29, hb=HBZ), 310)
    assert v.effect is Effect.RESTART_TAKEOVER and log.w.is_fenced("a", "2")
    # variant 1: it reserves 30..69 again (accepted: 69 >= 59) and hands 30..59 out twice
    assert log.put(claim_msgs("a:1", 69, first=30), 311).accepted
    # variant 2: it releases at what it handed out: the next holder resumes at 30
    assert log.put(release("a:1", 29), 312).accepted
    assert log.w.resume_offset("g", "orders", 0) == 30


def test_a_takeover_with_a_current_position_is_still_restart_recovery():
    log = _zombie_log()
    v = log.put(beat("a:9", 59, hb=HBZ), 310)  # a restart that replayed to the log end
    assert v.effect is Effect.RESTART_TAKEOVER and log.w.is_fenced("a", "2")
    assert log.w.partition_state("g", "orders", 0).tenure_floor == 59


def test_a_release_gives_back_only_its_own_tenures_reservations():
    log = _zombie_log()
    log.put(beat("a:9", 59, hb=HBZ), 310)  # tenure of a:9 starts at 59
    assert log.put(claim_msgs("a:9", 69, first=60), 311).accepted
    assert log.put(release("a:9", 29), 312).accepted  # below its own floor
    state = log.w.partition_state("g", "orders", 0)
    assert (state.last_offset, state.claimed_through, state.tenure_floor) == (29, 59, None)
    assert log.w.resume_offset("g", "orders", 0) == 60  # 60..69 given back, 30..59 not


def test_a_graceful_amo_close_gives_back_its_reserved_batch():
    log = _zombie_log()
    assert log.put(claim_msgs("a:2", 69, first=60), 310).accepted
    assert log.put(release("a:2", 59), 311).accepted  # 60..69 never handed out
    assert log.w.resume_offset("g", "orders", 0) == 60


def test_without_the_floor_a_release_gives_back_other_tenures_reservations():
    log = _zombie_log(frozenset({"release_floor"}))
    log.put(beat("a:9", 59, hb=HBZ), 310)
    log.put(release("a:9", 29), 312)
    assert log.w.resume_offset("g", "orders", 0) == 30  # 30..59 (a:2's) would go out again


@pytest.mark.parametrize(("first", "accepted"), [(50, False), (59, False), (60, True), (61, False)])
def test_a_version_4_reservation_starts_exactly_at_the_resume_point(first, accepted):
    log = _zombie_log()
    v = log.put(claim_msgs("a:2", 69, first=first), 310)
    assert v.accepted is accepted
    if not accepted:
        assert v.reason is Reason.OFFSET_REGRESSION
        assert log.w.resume_offset("g", "orders", 0) == 60


def test_without_property_c_a_stale_view_is_believed():
    log = _zombie_log(frozenset({"reservation_start"}))
    assert log.put(claim_msgs("a:2", 69, first=50), 310).accepted


def test_version_1_reservations_are_judged_as_before():
    log = _zombie_log()
    assert log.put(claim_msgs("a:2", 59), 310).accepted  # the same range again: allowed
    assert log.put(claim_msgs("a:2", 58), 311).reason is Reason.OFFSET_REGRESSION


def test_without_a_position_any_first_offset_starts_the_books():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.put(claim_msgs("a:1", 19, first=10), 1).accepted
    assert log.w.resume_offset("g", "orders", 0) == 20


def test_the_admin_path_still_moves_positions_back():
    log = _zombie_log()
    log.put(release_group("adm:x", 1000), 310)
    assert log.put(beat("adm:x", 9), 311).effect is Effect.POSITION_SET
    assert log.w.resume_offset("g", "orders", 0) == 10
    assert log.put(claim("d:4", hb=HBZ), 1000).accepted
    assert log.w.partition_state("g", "orders", 0).tenure_floor == 9


def test_older_snapshots_stay_byte_for_byte_without_floors_or_version_4_members():
    log = Log()
    log.put(claim("a:1"), 0)  # no position: no floor
    assert log.w.to_bytes()[4] == 1
    log.put(beat("a:1", 3), 1)
    log.put(release("a:1", 3), 2)  # floor cleared with the holder
    assert log.w.to_bytes()[4] == 1
    log.put(claim("b:1"), 3)  # a positioned claim: floor 3
    assert log.w.to_bytes()[4] == 4


def test_a_version_4_snapshot_that_an_older_version_could_hold_is_refused():
    log = Log()
    log.put(claim("a:1"), 0)
    b = bytearray(log.w.to_bytes())
    assert b[4] == 1
    b[4] = 4
    with pytest.raises(SnapshotError):
        WorldState.from_bytes(bytes(b) + b"\x00\x00")  # empty members and tasks sections


def test_announced_versions_survive_snapshots():
    log = Log()
    for version, who in ((4, "a:1"), (2, "b:1")):
        msg = AnnouncingMember(
            client_id=who[0],
            instance_id=who[2],
            group_id="g",
            topics=(("orders", 2),),
            heartbeat_interval_ms=HB,
            version=version,
        )
        assert log.put(msg, 0).accepted
    restored = WorldState.from_bytes(log.w.to_bytes())
    assert log.w.to_bytes()[4] == 4
    assert {m.client_id: m.version for m in restored.members("g")} == {"a": 4, "b": 2}


# ----------------------------------------------------------------------------- the log property

CLIENTS = ("a", "b", "c")
INSTANCES = ("1", "2")


@st.composite
def adversarial_logs(draw):
    """Records from arbitrary members of one partition: any client and instance, order,
    offsets and versions, with an admin acting now and then."""
    out = []
    t = 0
    for _ in range(draw(st.integers(1, 60))):
        t += draw(st.sampled_from([0, 1, 5, 40, 90, 150, 250]))
        who = {
            "client_id": draw(st.sampled_from(CLIENTS)),
            "instance_id": draw(st.sampled_from(INSTANCES)),
        }
        ids = {**who, "group_id": "g", "topic": "orders", "partition": 0}
        n = draw(st.integers(-1, 40))
        kind = draw(
            st.sampled_from(["claim", "beat", "beat", "release", "v1", "v4", "v4", "admin"])
        )
        if kind == "claim":
            msg = ClaimingPartition(**ids, heartbeat_interval_ms=draw(st.sampled_from([50, 100])))
        elif kind == "beat":
            msg = Heartbeat(
                **ids, last_offset=n, heartbeat_interval_ms=draw(st.sampled_from([50, 100]))
            )
        elif kind == "release":
            msg = ReleasingPartition(**ids, last_offset=n)
        elif kind == "v1":
            msg = ClaimingMessages(**ids, proposed_last_offset=n)
        elif kind == "v4":
            first = max(0, n)
            msg = ClaimingMessages(
                **ids, first_offset=first, proposed_last_offset=first + draw(st.integers(0, 9))
            )
        else:
            admin = {"client_id": "adm", "instance_id": "x", "group_id": "g"}
            if draw(st.booleans()):
                msg = ReleaseGroup(**admin, msg_expire_time=t + draw(st.integers(1, 200)))
            else:
                msg = Heartbeat(
                    **admin, topic="orders", partition=0, last_offset=n, heartbeat_interval_ms=100
                )
        out.append((t, msg))
    return out


def _check_log(records, without=frozenset()):
    """Replay ``records``; return the violations of the log's AMO properties.

    A reservation is live unless the release of its own tenure gave it back. Properties:
    live reservations never overlap; every resume point lies above every live reservation
    of another tenure; a restart takeover carries at least the partition's position. An
    admin position set ends every reservation (the admin path may move positions back)."""
    w = WorldState(rules=rules_without(without))
    found: list[str] = []
    live: list[tuple[int, int, int]] = []  # (start, end, tenure)
    tenure = 0
    for offset, (t, msg) in enumerate(records):
        before = w.partition_state("g", "orders", 0)
        position = None
        if before is not None and before.has_position:
            position = max(before.last_offset, before.claimed_through)
        v = w.apply(offset, t, *encode(msg))
        if not v.accepted:
            continue
        if v.effect in (Effect.CLAIMED, Effect.TOOK_OVER_STALE, Effect.RESTART_TAKEOVER):
            tenure += 1
            takeover = v.effect is Effect.RESTART_TAKEOVER
            if takeover and position is not None and msg.last_offset < position:
                found.append(f"@{offset} takeover at {msg.last_offset} below {position}")
        elif v.effect is Effect.POSITION_SET:
            live.clear()
        elif v.effect is Effect.MESSAGES_CLAIMED:
            start = position + 1 if position is not None else (msg.first_offset or 0)
            for s, e, _ in live:
                if start <= e and s <= msg.proposed_last_offset:
                    found.append(
                        f"@{offset} reservation {start}..{msg.proposed_last_offset} overlaps {s}..{e}"
                    )
            live.append((start, msg.proposed_last_offset, tenure))
        elif v.effect is Effect.RELEASED:
            claimed = w.partition_state("g", "orders", 0).claimed_through
            live = [
                (s, min(e, claimed) if k == tenure else e, k)
                for s, e, k in live
                if k != tenure or s <= claimed  # its own: given back above claimed
            ]
        after = w.partition_state("g", "orders", 0)
        if after is not None and after.has_position:
            resume = max(after.last_offset, after.claimed_through) + 1
            for s, e, k in live:
                if k != tenure and resume <= e:
                    found.append(
                        f"@{offset} resume point {resume} at or below {s}..{e} (tenure {k})"
                    )
    return found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(adversarial_logs())
def test_no_member_can_make_the_log_hand_an_offset_out_twice(records):
    assert _check_log(records) == []


def _ids(client: str, instance: str) -> dict:
    return {
        "client_id": client,
        "instance_id": instance,
        "group_id": "g",
        "topic": "orders",
        "partition": 0,
    }


def test_the_property_check_finds_each_hole_when_its_rule_is_off():
    """The zombie schedule as records; the check above catches it on the old rules, and each
    rule alone closes its part of it."""
    a1, a2, c3 = _ids("a", "1"), _ids("a", "2"), _ids("c", "3")
    schedule = [
        (0, ClaimingPartition(**a1, heartbeat_interval_ms=100)),
        (1, Heartbeat(**a1, last_offset=-1, heartbeat_interval_ms=100)),
        (2, ClaimingMessages(**a1, proposed_last_offset=29)),
        (300, ClaimingPartition(**c3, heartbeat_interval_ms=100)),  # a:1 stale, not fenced
        (301, ReleasingPartition(**c3, last_offset=29)),
        (302, ClaimingPartition(**a2, heartbeat_interval_ms=100)),
        (303, Heartbeat(**a2, last_offset=29, heartbeat_interval_ms=100)),
        (304, ClaimingMessages(**a2, proposed_last_offset=59)),
        (305, Heartbeat(**a1, last_offset=29, heartbeat_interval_ms=100)),  # a:1 wakes
        (306, ReleasingPartition(**a1, last_offset=29)),
    ]
    assert _check_log(schedule) == []
    # rule a off: the takeover is believed, but its release cannot give back a:2's 30..59
    assert [v for v in _check_log(schedule, frozenset({"takeover_position"}))] == [
        "@8 takeover at 29 below 59"
    ]
    # rules a and b off: the next holder would resume at 30
    assert "@9 resume point 30 at or below 30..59 (tenure 3)" in _check_log(
        schedule, frozenset({"takeover_position", "release_floor"})
    )
