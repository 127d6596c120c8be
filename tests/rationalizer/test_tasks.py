"""Protocol version 3: task records (HeartbeatingTask, ReleasingTask), their rules (5 and 6,
as for a Heartbeat and a ReleasingPartition, with a position vector) and snapshot version 3
(PROTOCOL.md, "Tasks (version 3)")."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rationalizer import (
    MAX_TASK_SOURCES,
    AnnouncingMember,
    DecodeError,
    Effect,
    GroupView,
    HeartbeatingTask,
    LeavingGroup,
    Reason,
    ReleasingPartition,
    ReleasingTask,
    SnapshotError,
    WorldState,
    coordination_partition,
    decode,
    encode,
)
from rationalizer._codec import (
    decode_fields,
    decode_member_fields,
    decode_task_fields,
)
from rationalizer._messages import MAX_OFFSET, task_last_offset
from rationalizer._snapshot_record import (
    encode_snapshot_record,
    parse_snapshot_record,
    restore_snapshot,
)

from .helpers import Log, beat, claim, claim_msgs, release, release_group
from .strategies import heartbeat_intervals, ids, partitions, topics

PROTOCOL = Path(__file__).resolve().parents[2] / "PROTOCOL.md"
IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}
TASK = "wordcount.task.0"


def task_beat(who: str, positions, p: int = 0, g: str = "g", t: str = "orders", hb: int = 1000):
    client, instance = who.split(":")
    return HeartbeatingTask(
        client_id=client,
        instance_id=instance,
        group_id=g,
        topic=t,
        partition=p,
        heartbeat_interval_ms=hb,
        positions=positions,
    )


def task_release(who: str, positions, p: int = 0, g: str = "g", t: str = "orders"):
    client, instance = who.split(":")
    return ReleasingTask(
        client_id=client,
        instance_id=instance,
        group_id=g,
        topic=t,
        partition=p,
        positions=positions,
    )


# ------------------------------------------------------------------------- golden vectors

# The same vectors are printed in PROTOCOL.md ("Tasks (version 3)").
GOLDEN = [
    (
        HeartbeatingTask(
            **IDS,
            topic=TASK,
            partition=0,
            heartbeat_interval_ms=3000,
            positions=(("a", 12), ("b", 7)),
        ),
        "672f776f7264636f756e742e7461736b2e302f30",
        "030800000bb80201610d016208026331026931016710776f7264636f756e742e7461736b2e3000",
    ),
    (
        ReleasingTask(**IDS, topic=TASK, partition=0, positions=(("a", -1), ("b", 200))),
        "672f776f7264636f756e742e7461736b2e302f30",
        "0309020161000162c901026331026931016710776f7264636f756e742e7461736b2e3000",
    ),
]

#: window 4; ClaimingPartition(c1, i1, g, wordcount.task.0, 0, hb=1000) at offset 0, time
#: 1000, then HeartbeatingTask(..., hb=1000, positions a:12, b:7) at offset 1, time 1001
GOLDEN_SNAPSHOT = (
    "4c4d5753030402d20f00000000000000000001016710776f7264636f756e742e7461736b2e3000030263310269"
    "31e807d20f15000001016710776f7264636f756e742e7461736b2e30000201610d0162080201011013"
)


def _golden_world() -> WorldState:
    w = WorldState(verdict_window=4)
    w.apply(0, 1000, *encode(claim("c1:i1", t=TASK)))
    w.apply(1, 1001, *encode(task_beat("c1:i1", (("a", 12), ("b", 7)), t=TASK)))
    return w


@pytest.mark.parametrize(("msg", "key", "value"), GOLDEN)
def test_golden_vectors(msg, key, value):
    assert encode(msg) == (bytes.fromhex(key), bytes.fromhex(value))
    assert decode(bytes.fromhex(key), bytes.fromhex(value)) == msg


def test_golden_snapshot():
    w = _golden_world()
    assert w.to_bytes().hex() == GOLDEN_SNAPSHOT
    r = WorldState.from_bytes(bytes.fromhex(GOLDEN_SNAPSHOT))
    assert r.resume_positions("g", TASK, 0) == {"a": 13, "b": 8}
    assert r.resume_offset("g", TASK, 0) == 21


def test_golden_vectors_are_documented():
    text = PROTOCOL.read_text(encoding="utf-8")
    for _msg, key, value in GOLDEN:
        assert f"`{key}`" in text and f"`{value}`" in text
    assert f"`{GOLDEN_SNAPSHOT}`" in text
    assert "(rationalizer v9)" in text.splitlines()[0]  # versions 4 to 9 keep the task records


def test_a_task_is_coordinated_where_its_claim_is():
    k, _ = encode(GOLDEN[0][0])
    assert k == encode(claim("c1:i1", t=TASK))[0]
    # the world of a task is the world of its key, as for any partition
    assert coordination_partition(TASK, 0, 8) == coordination_partition(TASK, 0, 8)


# ------------------------------------------------------------------------------ messages


def test_the_scalar_is_the_number_of_records_consumed_minus_one():
    assert task_last_offset((("a", -1),)) == -1
    assert task_last_offset((("a", -1), ("b", -1))) == -1
    assert task_last_offset((("a", 12), ("b", 7))) == 20
    assert GOLDEN[0][0].last_offset == 20 and GOLDEN[1][0].last_offset == 200


@pytest.mark.parametrize(
    "positions",
    [
        (),
        [("a", 1)],  # a list, not a tuple
        (("b", 1), ("a", 1)),  # unsorted
        (("a", 1), ("a", 2)),  # a topic twice
        (("bad/topic", 1),),
        ((".", 1),),
        (("a", -2),),
        (("a", 2**63),),
        (("a", True),),
        (("a", 1.0),),
        (("a", 1, 2),),
        ((b"a", 1),),
        (("a", MAX_OFFSET), ("b", 0)),  # the scalar would not fit an int64
        tuple((f"t{i:03}", 0) for i in range(MAX_TASK_SOURCES + 1)),
    ],
)
def test_invalid_vectors_cannot_be_built(positions):
    with pytest.raises(ValueError):
        HeartbeatingTask(
            **IDS, topic=TASK, partition=0, heartbeat_interval_ms=1, positions=positions
        )
    with pytest.raises(ValueError):
        ReleasingTask(**IDS, topic=TASK, partition=0, positions=positions)


def test_limits_that_are_valid():
    most = tuple((f"t{i:03}", 0) for i in range(MAX_TASK_SOURCES))
    top = (("a", MAX_OFFSET - 1), ("b", 0))  # the scalar is exactly 2^63 - 1
    for positions in (most, top, (("a", MAX_OFFSET),)):
        msg = ReleasingTask(**IDS, topic=TASK, partition=0, positions=positions)
        assert decode(*encode(msg)) == msg
    assert task_last_offset(top) == MAX_OFFSET


@pytest.mark.parametrize("version", [1, 2, 4, "3", True])
def test_task_messages_are_version_3(version):
    with pytest.raises(ValueError):
        ReleasingTask(**IDS, topic=TASK, partition=0, positions=(("a", 1),), version=version)


# ------------------------------------------------------------------------------- codec

vectors = st.dictionaries(topics, st.integers(-1, 2**40), min_size=1, max_size=5).map(
    lambda d: tuple(sorted(d.items()))
)
task_messages = st.one_of(
    st.builds(
        HeartbeatingTask,
        client_id=ids,
        instance_id=ids,
        group_id=ids,
        topic=topics,
        partition=partitions,
        heartbeat_interval_ms=heartbeat_intervals,
        positions=vectors,
    ),
    st.builds(
        ReleasingTask,
        client_id=ids,
        instance_id=ids,
        group_id=ids,
        topic=topics,
        partition=partitions,
        positions=vectors,
    ),
)


@given(task_messages)
def test_round_trip_and_the_identity_part_is_that_of_the_version_1_types(msg):
    k, v = encode(msg)
    assert decode(k, v) == msg
    typ, client, instance, group, topic, partition, hb, vector, start = decode_task_fields(k, v)
    assert (typ, v[0]) == ((8 if isinstance(msg, HeartbeatingTask) else 9), 3)
    assert (client, instance, group, topic, partition) == (
        msg.client_id, msg.instance_id, msg.group_id, msg.topic, msg.partition,
    )  # fmt: skip
    assert hb == getattr(msg, "heartbeat_interval_ms", 0) and vector == msg.positions
    same = ReleasingPartition(
        client_id=client, instance_id=instance, group_id=group, topic=topic,
        partition=partition, last_offset=0,
    )  # fmt: skip
    assert v[start:] == encode(same)[1][10:]


def _value(typ: int = 8, hb: bytes = b"\x00\x00\x03\xe8", vector: bytes = b"\x01\x01a\x01"):
    head = bytes([3, typ]) + (hb if typ == 8 else b"")
    return head + vector + b"\x02c1\x02i1\x01g\x06orders\x00"


KEY = b"g/orders/0"


def test_the_helper_builds_valid_values():
    assert decode(KEY, _value()) == task_beat("c1:i1", (("a", 0),))
    assert decode(KEY, _value(9)) == task_release("c1:i1", (("a", 0),))
    long_topic = b"\x01\xf9\x01" + b"x" * 249 + b"\x00"  # a 249-byte topic, at -1
    assert decode(KEY, _value(vector=long_topic)).positions == (("x" * 249, -1),)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (_value() + b"\x00", "trailing"),
        (_value(9) + b"\x00", "trailing"),
        (_value(vector=b"\x80\x00"), "overlong"),  # overlong source count
        (_value(vector=b"\x01\x01a\x81\x00"), "overlong"),  # overlong position
        (_value(vector=b"\x01\x81\x00" + b"a"), "overlong"),  # overlong topic length
        (_value(vector=b"\x00"), "without sources"),
        (_value(vector=b"\x41" + b"\x01a\x00" * 65), "range"),  # 65 sources
        (_value(vector=b"\x02\x01b\x01\x01a\x01"), "sorted"),
        (_value(vector=b"\x02\x01a\x01\x01a\x02"), "sorted"),
        (_value(vector=b"\x01\x03a/b\x01"), "topic"),
        (_value(vector=b"\x01\x01.\x01"), "topic"),
        (_value(vector=b"\x01\x00\x01"), "empty"),
        (_value(vector=b"\x01\x01\xff\x01"), "UTF-8"),
        (_value(vector=b"\x01\x01a\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01"), "range"),  # 2^63+1
        (_value(vector=b"\x02\x01a\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x01b\x02"), "2\\^63"),
        (_value(hb=b"\x00\x00\x00\x00"), "heartbeat_interval_ms"),
        (_value(hb=b"\x00\x36\xee\x81"), "heartbeat_interval_ms"),  # one hour + 1 ms
        (b"\x03\x08\x00\x00\x03", "truncated"),
        (b"\x03\x09", "truncated"),
        (b"\x03\x0a" + _value()[2:], "type"),  # version 3, unknown type
        (b"\x03\x01" + _value()[2:], "type"),  # version 3 with a version 1 type
        (b"\x03\x06" + _value()[2:], "type"),  # version 3 with a version 2 type
        (b"\x01\x08" + _value()[2:], "type"),  # a task type with version byte 1
        (b"\x02\x08" + _value()[2:], "type"),  # ... or 2
        (b"\x04\x08" + _value()[2:], "version"),  # an unknown version
    ],
)
def test_strict_decoding(value, match):
    with pytest.raises(DecodeError, match=match):
        decode(KEY, value)


def test_the_key_must_match_the_value():
    _, v = encode(GOLDEN[0][0])
    for bad in (b"g", b"g/wordcount.task.0/1", b"g/wordcount.task.0/00", b"h/wordcount.task.0/0"):
        with pytest.raises(DecodeError, match="key"):
            decode(bad, v)
    for key, value in ((None, v), (GOLDEN[0][1], v), (bytes.fromhex(GOLDEN[0][1]), v.hex())):
        with pytest.raises(DecodeError):
            decode(key, value)
    k = bytes.fromhex(GOLDEN[0][1])
    assert decode(bytearray(k), memoryview(v)) == decode(k, v)


def test_every_truncation_is_rejected():
    for msg, _, _ in GOLDEN:
        k, v = encode(msg)
        for n in range(len(v)):
            with pytest.raises(DecodeError):
                decode(k, v[:n])


def test_older_decoders_reject_task_records():
    """What a version 1 or 2 replayer's decoders say of a task record: not theirs (so it
    skips it as INVALID_RECORD, rule 0)."""
    for msg, _, _ in GOLDEN:
        k, v = encode(msg)
        with pytest.raises(DecodeError, match="version"):
            decode_fields(k, v)
        with pytest.raises(DecodeError, match="version"):
            decode_member_fields(k, v)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60))
def test_any_bytes_after_a_version_3_header_decode_canonically_or_raise_decode_error(tail):
    for head in (b"\x03\x08", b"\x03\x09"):
        value = head + tail
        try:
            msg = decode(KEY, value)
        except DecodeError:
            continue
        assert encode(msg) == (KEY, value)


@settings(max_examples=300, deadline=None)
@given(task_messages, st.data())
def test_mutated_records_decode_canonically_or_fail(msg, data):
    k, v = encode(msg)
    v = bytearray(v)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(v) - 1))
        v[i] = data.draw(st.integers(0, 255))
    try:
        out = decode(k, bytes(v))
    except DecodeError:
        return
    assert encode(out) == (k, bytes(v))


@settings(max_examples=200, deadline=None)
@given(task_messages, st.data())
def test_a_world_skips_a_mutated_task_record_exactly_when_decode_rejects_it(msg, data):
    k, v = encode(msg)
    v = bytearray(v)
    i = data.draw(st.integers(0, len(v) - 1))
    v[i] = data.draw(st.integers(0, 255))
    try:
        decode(k, bytes(v))
        valid = True
    except DecodeError:
        valid = False
    world = WorldState()
    # (byte 0 made a version to come: no envelope, so junk as well; test_version6.py)
    verdict = world.apply(0, 0, k, bytes(v))
    assert (verdict.reason is Reason.INVALID_RECORD) == (not valid)


# ------------------------------------------------------------------------------- rules

AB = (("a", 12), ("b", 7))


def test_renewal_sets_the_vector_and_its_scalar():
    log = Log()
    log.put(claim("a:1"), 0)
    assert log.w.resume_positions("g", "orders", 0) is None
    assert log.put(task_beat("a:1", AB, hb=300), 100).effect is Effect.RENEWED
    assert log.w.resume_positions("g", "orders", 0) == {"a": 13, "b": 8}
    s = log.w.partition_state("g", "orders", 0)
    assert (s.positions, s.last_offset, s.claimed_through) == (AB, 20, -1)
    assert s.heartbeat_interval_ms == 300 and s.last_beat == 100 and s.has_position
    assert log.w.resume_offset("g", "orders", 0) == 21
    # late: stale by the lease recorded before (300), nobody took it
    v = log.put(task_beat("a:1", (("a", 13), ("b", 7))), 100 + 601)
    assert v.effect is Effect.RENEWED_LATE
    assert log.w.resume_positions("g", "orders", 0) == {"a": 14, "b": 8}
    assert GroupView([log.w]).resume_positions("g", "orders", 0) == {"a": 14, "b": 8}


def test_a_restart_takes_a_fresh_task_over_and_fences_the_old_instance():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(task_beat("a:1", AB), 10)
    epoch = log.w.ownership_epoch
    v = log.put(task_beat("a:2", (("a", 12), ("b", 9))), 500)
    assert v.effect is Effect.RESTART_TAKEOVER and v.previous_holder == ("a", "1")
    assert log.w.is_fenced("a", "1") and log.w.holder("g", "orders", 0) == ("a", "2")
    assert log.w.ownership_epoch == epoch + 1
    assert log.w.resume_positions("g", "orders", 0) == {"a": 13, "b": 10}
    assert log.put(task_beat("a:1", AB), 600).reason is Reason.FENCED
    assert log.put(task_release("a:1", AB), 600).reason is Reason.FENCED


def test_anyone_else_is_not_the_holder():
    log = Log()
    assert log.put(task_beat("a:1", AB), 0).reason is Reason.NOT_HOLDER  # nobody holds it
    log.put(claim("a:1"), 0)
    assert log.put(task_beat("b:1", AB), 10).reason is Reason.NOT_HOLDER
    assert log.put(task_release("b:1", AB), 10).reason is Reason.NOT_HOLDER
    # another instance of the holder's client once the claim is not fresh: no restart
    assert log.put(task_beat("a:2", AB), 1000).reason is Reason.NOT_HOLDER
    assert log.w.rejections()[Reason.NOT_HOLDER] == 4
    assert log.w.resume_positions("g", "orders", 0) is None
    assert log.w.resume_offset("g", "orders", 0) is None  # rejected records set nothing


def test_a_paused_group_rejects_task_records_and_only_the_admins_heartbeat_sets_positions():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(task_beat("a:1", AB), 1)
    v = log.put(release_group("adm:x", 1000), 2)
    assert v.voided == (("orders", 0, "a", "1"),)
    assert log.w.resume_positions("g", "orders", 0) == {"a": 13, "b": 8}  # kept
    assert log.put(task_beat("a:1", AB), 3).reason is Reason.GROUP_PAUSED
    assert log.put(task_beat("adm:x", AB), 4).reason is Reason.GROUP_PAUSED
    assert log.put(task_release("adm:x", AB), 4).reason is Reason.GROUP_PAUSED
    assert log.put(beat("adm:x", 4), 5).effect is Effect.POSITION_SET
    assert log.w.resume_positions("g", "orders", 0) is None
    assert log.w.resume_offset("g", "orders", 0) == 5


def test_release_records_the_final_vector_for_the_next_holder():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim_msgs("a:1", 40), 1)  # a reservation beyond the release is given back
    epoch = log.w.ownership_epoch
    assert log.put(task_release("a:1", (("a", 30), ("b", -1))), 2).effect is Effect.RELEASED
    assert log.w.ownership_epoch == epoch + 1
    s = log.w.partition_state("g", "orders", 0)
    assert (s.holder, s.heartbeat_interval_ms, s.last_offset, s.claimed_through) == (
        None, None, 30, 30,
    )  # fmt: skip
    assert log.w.resume_positions("g", "orders", 0) == {"a": 31, "b": 0}
    # the next holder's claim keeps it: that is where it resumes
    assert log.put(claim("b:1"), 3).effect is Effect.CLAIMED
    assert log.w.resume_positions("g", "orders", 0) == {"a": 31, "b": 0}
    assert log.put(task_beat("b:1", (("a", 35), ("b", 2))), 4).accepted


@pytest.mark.parametrize(
    ("msg", "resume"),
    [
        (beat("a:1", 3), 4),
        (release("a:1", 3), 4),
        (claim_msgs("a:1", 50), 51),
    ],
)
def test_any_other_position_record_clears_the_vector(msg, resume):
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(task_beat("a:1", AB), 1)
    log.put(task_beat("a:1", AB), 2)  # and again, so a heartbeat lane is open for the key
    assert log.put(msg, 3).accepted
    assert log.w.resume_positions("g", "orders", 0) is None
    assert log.w.partition_state("g", "orders", 0).positions is None
    assert log.w.resume_offset("g", "orders", 0) == resume


def test_a_plain_heartbeat_in_the_fast_lane_clears_the_vector():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 3), 1)
    log.put(beat("a:1", 4), 2)  # the lane is open: the same shape, only the offset moves
    log.put(task_beat("a:1", AB), 3)
    assert log.w.resume_positions("g", "orders", 0) == {"a": 13, "b": 8}
    assert log.put(beat("a:1", 5), 4).effect is Effect.RENEWED  # through the lane
    assert log.w.resume_positions("g", "orders", 0) is None
    assert log.w.resume_offset("g", "orders", 0) == 6


def test_claims_and_other_keys_do_not_touch_a_vector():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(task_beat("a:1", AB), 1)
    log.put(claim("b:1"), 3000)  # a stale takeover
    log.put(claim("b:1", p=1), 3000)
    log.put(beat("b:1", 99, p=1), 3000)
    assert log.w.resume_positions("g", "orders", 0) == {"a": 13, "b": 8}
    assert log.w.resume_positions("g", "orders", 1) is None
    assert log.w.resume_positions("g", "nothing", 0) is None


def test_task_and_membership_records_mix_in_one_world():
    log = Log()
    log.put(AnnouncingMember(**IDS, topics=((TASK, 1),), heartbeat_interval_ms=1000), 0)
    log.put(claim("c1:i1", t=TASK), 1)
    log.put(task_beat("c1:i1", AB, t=TASK), 2)
    log.put(LeavingGroup(**IDS), 3)
    log.put(task_release("c1:i1", AB, t=TASK), 3)
    assert log.w.members("g") == [] and log.w.holder("g", TASK, 0) is None
    assert log.w.resume_positions("g", TASK, 0) == {"a": 13, "b": 8}


# --------------------------------------------------------------------------- snapshots


def _snap(log: Log) -> bytes:
    b = log.w.to_bytes()
    r = WorldState.from_bytes(b)
    assert r.to_bytes() == b
    assert r.partitions() == log.w.partitions()
    return b


def test_snapshot_version_follows_what_the_world_holds():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(beat("a:1", 3), 1)
    v1 = _snap(log)
    assert v1[4] == 1
    log.put(task_beat("a:1", AB), 2)
    b = _snap(log)
    assert b[4] == 3
    assert WorldState.from_bytes(b).resume_positions("g", "orders", 0) == {"a": 13, "b": 8}
    log.put(AnnouncingMember(**IDS, topics=(("t", 1),), heartbeat_interval_ms=1000), 3)
    assert _snap(log)[4] == 3  # members and vectors
    log.put(beat("a:1", 30), 4)  # no vector left: version 2 again, byte for byte
    v2 = _snap(log)
    assert v2[4] == 2
    log.put(LeavingGroup(**IDS), 5)
    assert _snap(log)[4] == 1


def test_v1_and_v2_snapshots_are_unchanged_when_no_vector_is_left():
    """A world whose task vectors were all cleared is written exactly as a world that never
    saw a task record (the same state otherwise): old snapshots stay canonical."""
    ab, plain = Log(), Log()
    for log in (ab, plain):
        log.put(claim("a:1"), 0)
    ab.put(task_beat("a:1", AB), 1)
    plain.put(beat("a:1", 20), 1)
    ab.put(beat("a:1", 25), 2)
    plain.put(beat("a:1", 25), 2)
    assert ab.w.to_bytes() == plain.w.to_bytes()
    assert ab.w.to_bytes()[4] == 1


def _v3_world() -> Log:
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim("a:1", p=1), 0)
    log.put(claim("a:1", t=TASK), 0)
    log.put(task_beat("a:1", AB), 1)
    log.put(task_release("a:1", (("x", 5),), p=1), 2)
    log.put(task_beat("a:1", tuple((f"s{i:02}", i) for i in range(64)), t=TASK), 3)
    return log


def test_snapshot_v3_round_trips_every_vector():
    log = _v3_world()
    b = _snap(log)
    assert b[4] == 3
    r = WorldState.from_bytes(b)
    for p, t in ((0, "orders"), (1, "orders"), (0, TASK)):
        assert r.resume_positions("g", t, p) == log.w.resume_positions("g", t, p) is not None


def test_every_truncation_and_trailing_byte_of_a_v3_snapshot_is_rejected():
    b = _v3_world().w.to_bytes()
    for n in range(len(b)):
        with pytest.raises(SnapshotError):
            WorldState.from_bytes(b[:n])
    with pytest.raises(SnapshotError):
        WorldState.from_bytes(b + b"\x00")


def _positions_section(b: bytes) -> int:
    """Where the positions section of GOLDEN_SNAPSHOT's world starts (after 0 members)."""
    i = b.index(b"\x15\x00\x00\x01\x01g")  # last+1 = 21, claimed+1 = 0, members 0, count 1
    return i + 3


@pytest.mark.parametrize(
    ("section", "match"),
    [
        (b"\x00", "without task positions"),
        (b"\x01\x01g\x10wordcount.task.0\x00\x00", "without sources"),
        (b"\x01\x01g\x10wordcount.task.0\x00\x02\x01b\x08\x01a\x0d", "sorted"),
        (b"\x01\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01a\x08", "sorted"),
        (b"\x01\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01b\x09", "match"),  # scalar 21
        (b"\x01\x01g\x10wordcount.task.0\x01\x02\x01a\x0d\x01b\x08", "match"),  # no such part
        (b"\x01\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01/\x08", "topic"),
        (b"\x01\x01g\x10wordcount.task.0\x00\x41", "range"),  # 65 sources
        (
            b"\x02\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01b\x08"
            b"\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01b\x08",
            "sorted",
        ),
    ],
)
def test_the_positions_section_is_strict(section, match):
    b = bytes.fromhex(GOLDEN_SNAPSHOT)
    i = _positions_section(b)
    good = b"\x01\x01g\x10wordcount.task.0\x00\x02\x01a\x0d\x01b\x08"
    assert b[i : i + len(good)] == good
    WorldState.from_bytes(b[:i] + good + b[i + len(good) :])
    with pytest.raises(SnapshotError, match=match):
        WorldState.from_bytes(b[:i] + section + b[i + len(good) :])


def test_a_version_2_or_1_snapshot_cannot_carry_positions():
    b = bytes.fromhex(GOLDEN_SNAPSHOT)
    for version in (1, 2):
        with pytest.raises(SnapshotError):
            WorldState.from_bytes(b[:4] + bytes([version]) + b[5:])
    with pytest.raises(SnapshotError, match="version"):
        WorldState.from_bytes(b[:4] + b"\x04" + b[5:])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corruption_raises_snapshot_error_or_loads_canonically(data):
    b = bytearray(_v3_world().w.to_bytes())
    i = data.draw(st.integers(0, len(b) - 1))
    b[i] = data.draw(st.integers(0, 255))
    try:
        r = WorldState.from_bytes(bytes(b))
    except SnapshotError:
        return
    assert r.to_bytes() == bytes(b)


def test_a_published_snapshot_record_of_a_v3_world_round_trips():
    w = _v3_world().w
    for keys in (None, {"g": bytes(range(32))}):
        world = WorldState.from_bytes(w.to_bytes(), admin_keys=keys)
        key, value = encode_snapshot_record(world, 5, keys)
        restored = restore_snapshot(parse_snapshot_record(key, value), 5, keys)
        assert restored.to_bytes() == w.to_bytes()
        assert restored.resume_positions("g", "orders", 0) == {"a": 13, "b": 8}


# ------------------------------------------------- snapshot + tail == full replay, with tasks

WHO = (("a", "1"), ("a", "2"), ("b", "1"))
SOURCES = ("s1", "s2", "s3")
_EVENTS = st.lists(
    st.tuples(
        st.integers(-20, 800),  # time step (log time is clamped)
        st.sampled_from(WHO),
        st.sampled_from(
            ["claim"] * 4
            + ["task_beat"] * 6
            + ["task_release", "beat", "release", "msgs"]
            + ["announce", "leave", "pause", "admin_beat", "junk"]
        ),
        st.integers(0, 1),  # partition
        st.lists(st.integers(-1, 30), min_size=1, max_size=3),  # a vector's offsets
        st.sampled_from([300, 1000]),  # lease
        st.booleans(),  # sent by the partition's holder, if it has one (else by "who")
    ),
    max_size=50,
)


def _event_record(event, t, holder):
    _step, who, kind, p, offsets, hb, as_holder = event
    client, instance = holder if as_holder and holder is not None else who
    ids = {"client_id": client, "instance_id": instance, "group_id": "g"}
    where = {"topic": TASK, "partition": p}
    vector = tuple(zip(SOURCES, offsets, strict=False))
    if kind == "claim":
        return encode(claim(f"{client}:{instance}", p=p, t=TASK, hb=hb))
    if kind == "task_beat":
        return encode(HeartbeatingTask(**ids, **where, heartbeat_interval_ms=hb, positions=vector))
    if kind == "task_release":
        return encode(ReleasingTask(**ids, **where, positions=vector))
    if kind == "beat":
        return encode(beat(f"{client}:{instance}", offsets[0], p=p, t=TASK, hb=hb))
    if kind == "release":
        return encode(release(f"{client}:{instance}", offsets[0], p=p, t=TASK))
    if kind == "msgs":
        return encode(claim_msgs(f"{client}:{instance}", offsets[0], p=p, t=TASK))
    if kind == "announce":
        return encode(AnnouncingMember(**ids, topics=((TASK, 3),), heartbeat_interval_ms=hb))
    if kind == "leave":
        return encode(LeavingGroup(**ids))
    if kind == "pause":
        return encode(release_group("adm:x", t + hb))
    if kind == "admin_beat":
        return encode(beat("adm:x", offsets[0], p=p, t=TASK))
    k, v = encode(HeartbeatingTask(**ids, **where, heartbeat_interval_ms=hb, positions=vector))
    return k, v[:-1] + b"\x01"  # junk: a task record whose key does not match its partition


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_EVENTS, st.integers(0, 50), st.integers(1, 8))
def test_restoring_a_snapshot_and_replaying_the_rest_equals_a_full_replay(events, cut, window):
    # the log is written against a one-by-one replay of itself (so holders can write)
    single = WorldState(verdict_window=window)
    records, verdicts = [], []
    t = 1000
    for event in events:
        t += event[0]
        record = (len(records), t, *_event_record(event, t, single.holder("g", TASK, event[3])))
        records.append(record)
        verdicts.append(single.apply(*record))
    full = WorldState(verdict_window=window)
    assert full.apply_many(records) == verdicts
    assert full.to_bytes() == single.to_bytes()
    cut = min(cut, len(records))
    first = WorldState(verdict_window=window)
    first.apply_many(records[:cut])
    data = first.to_bytes()
    resumed = WorldState.from_bytes(data)
    assert resumed.to_bytes() == data
    assert [resumed.apply(*r) for r in records[cut:]] == verdicts[cut:]
    assert resumed.to_bytes() == full.to_bytes()
    for p in range(2):
        assert resumed.resume_positions("g", TASK, p) == full.resume_positions("g", TASK, p)
        assert resumed.partition_state("g", TASK, p) == full.partition_state("g", TASK, p)
