"""Protocol version 6 (PROTOCOL.md, "Version 6"): the envelope, releases that name their
tenure (property f).

A holder's tenure begins with an accepted claim or restart takeover; a version 6 claim's
offset (or the takeover heartbeat's) names it, and a version 6 release names the tenure it
ends. A release that lands late, after its instance claimed the same partition again, names
the old tenure and is ``NOT_HOLDER``: before version 6 it ended the new tenure and gave back
what that tenure had handed out (``tests/logmarshal/core/test_late_release.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rationalizer import (
    ClaimingPartition,
    DecodeError,
    Effect,
    Reason,
    ReleasingPartition,
    ReleasingTask,
    SnapshotError,
    WorldState,
    decode,
    encode,
)
from rationalizer._codec import envelope, seal
from rationalizer._snapshot import SNAPSHOT_VERSION
from scenarios.sim_rules import rules_without

from .helpers import Log, beat, claim, ids, release, release_group

HBL = 100

# ----------------------------------------------------------------------------- golden vectors

CLAIM_V6 = ClaimingPartition(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="orders",
    partition=3,
    heartbeat_interval_ms=1000,
    version=6,
)
CLAIM_V6_HEX = ("672f6f72646572732f33", "0602789518180167000003e80263310269310167066f726465727303")
RELEASE_V6 = ReleasingPartition(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="orders",
    partition=3,
    last_offset=41,
    tenure=0,
)
RELEASE_V6_HEX = (
    "672f6f72646572732f33",
    "06032420babd0167000000000000000000000000000000290263310269310167066f726465727303",
)
RELEASE_TASK_V6 = ReleasingTask(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="wordcount.task.0",
    partition=0,
    positions=(("a", -1), ("b", 200)),
    tenure=5,
)
RELEASE_TASK_V6_HEX = (
    "672f776f7264636f756e742e7461736b2e302f30",
    "060947648ee601670000000000000005020161000162c901026331026931016710776f7264636f756e742e"
    "7461736b2e3000",
)
#: CLAIM_V6 at offset 0 (log time 1000), Heartbeat(c1, i1, g, orders, 3, 41, hb=1000) at
#: 1 (1001), window 4: flags 0x13 (held, positioned, tenured), tenure 0 after the HB
SNAPSHOT_V6_HEX = (
    "4c4d5753060402d20f00000000000000000000010167066f72646572730313026331026931e80700d20f2a"
    "000000000201011013"
)
#: ... then RELEASE_V6 at 2 (1002): flags 0x22 (positioned, a last holder), its ids after
#: claimed_through + 1 (issue 33 item 3: the audit of a log that starts here names the
#: failover the next claim makes)
SNAPSHOT_V6_RELEASED_HEX = (
    "4c4d5753060403d40f00000000000000000000010167066f72646572730322d40f2a2a02633102693100"
    "000003010101101315"
)
#: ... or instead ReleaseGroup(adm, x, g, expires 0) at 2 (1005): flags 0x6a (positioned,
#: a lease still running, a last holder, voided), after the lease (3002 - 1005) the ids and
#: 4, the void's time after the last beat (1001)
SNAPSHOT_V6_VOIDED_HEX = (
    "4c4d5753060403da0f00000000000000000000010167066f7264657273036ad20f2a00cd0f026331026931"
    "04000000030101011013270001066f726465727303026331026931"
)


def release6(who: str, last: int, tenure: int, p: int = 0, g: str = "g") -> ReleasingPartition:
    return ReleasingPartition(
        **ids(who), group_id=g, topic="orders", partition=p, last_offset=last, tenure=tenure
    )


@pytest.mark.parametrize(
    ("msg", "hexes"),
    [
        (CLAIM_V6, CLAIM_V6_HEX),
        (RELEASE_V6, RELEASE_V6_HEX),
        (RELEASE_TASK_V6, RELEASE_TASK_V6_HEX),
    ],
    ids=str,
)
def test_golden_records(msg, hexes):
    key, value = encode(msg)
    assert (key.hex(), value.hex()) == hexes
    assert decode(key, value) == msg
    assert msg.version == 6
    typ = {ClaimingPartition: 2, ReleasingPartition: 3, ReleasingTask: 9}[type(msg)]
    assert envelope(value) == (6, typ, "g", 8)


def test_golden_snapshot_names_the_tenure():
    log = Log()
    log.w = WorldState(verdict_window=4)
    assert log.put(CLAIM_V6, 1000).effect is Effect.CLAIMED
    assert log.put(beat("c1:i1", 41, p=3, hb=1000), 1001).effect is Effect.RENEWED
    data = log.w.to_bytes()
    assert data[4] == SNAPSHOT_VERSION == 6
    assert data.hex() == SNAPSHOT_V6_HEX
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.partition_state("g", "orders", 3).tenure == 0
    # the restored world judges the tenure's releases as the original does
    for world in (log.w, restored):
        assert world.apply(2, 1002, *encode(release6("c1:i1", 41, 1, p=3))).reason is (
            Reason.NOT_HOLDER
        )
        assert world.apply(3, 1003, *encode(RELEASE_V6)).effect is Effect.RELEASED
    assert restored.to_bytes() == log.w.to_bytes()


def test_golden_vectors_are_in_protocol_md():
    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    for key, value in (CLAIM_V6_HEX, RELEASE_V6_HEX, RELEASE_TASK_V6_HEX):
        assert f"`{key}`" in text and f"`{value}`" in text
    for snapshot in (SNAPSHOT_V6_HEX, SNAPSHOT_V6_RELEASED_HEX, SNAPSHOT_V6_VOIDED_HEX):
        assert f"`{snapshot}`" in text


def test_a_world_without_named_tenures_is_written_as_before():
    """Version 1 and 5 claims name no tenure: their worlds keep their older snapshot bytes."""
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(claim("b:1", p=1, version=5), 1)
    assert log.w.partition_state("g", "orders", 0).tenure is None
    assert log.w.to_bytes()[4] == 1


# ----------------------------------------------------------------------------- the envelope


def _flip(value: bytes, i: int) -> bytes:
    return value[:i] + bytes((value[i] ^ 0x01,)) + value[i + 1 :]


@pytest.mark.parametrize(
    "hexes", [CLAIM_V6_HEX, RELEASE_V6_HEX, RELEASE_TASK_V6_HEX], ids=["claim", "release", "task"]
)
def test_every_byte_is_under_the_check(hexes):
    """One flipped bit anywhere (version byte aside, which makes it another version) fails
    the check: skipped and counted, never judged."""
    key, value = (bytes.fromhex(h) for h in hexes)
    for i in range(1, len(value)):
        bad = _flip(value, i)
        with pytest.raises(DecodeError):
            decode(key, bad)
        log = Log()
        assert log.raw(key, bad, 0).reason is Reason.INVALID_RECORD
        assert log.w.halted is None


@pytest.mark.parametrize(
    ("typ", "group", "body", "why"),
    [
        (1, "g", bytes(16), "unknown version 6 message type"),  # a v6 Heartbeat: none yet
        (2, "h", bytes.fromhex("000003e80263310269310167066f726465727303"), "not the record's"),
        (2, "g", bytes.fromhex("000000000263310269310167066f726465727303"), "out of range"),
        (3, "g", bytes.fromhex("ffffffffffffffff") + bytes(8), "tenure"),
        (3, "g", bytes(8), "truncated"),
    ],
)
def test_version_6_decodes_strictly(typ, group, body, why):
    value = seal(6, typ, group, body)
    envelope(value)  # a well-formed envelope...
    with pytest.raises(DecodeError, match=why):  # ...of a record that is not valid
        decode(bytes.fromhex(CLAIM_V6_HEX[0]), value)


def test_the_version_fields():
    assert release("a:1", 3).version == 1
    with pytest.raises(ValueError, match="tenure"):
        ReleasingPartition(
            **ids("a:1"), group_id="g", topic="t", partition=0, last_offset=1, version=6
        )
    with pytest.raises(ValueError, match="tenure"):
        release6("a:1", 1, -1)
    assert claim("a:1", version=6).version == 6


# ----------------------------------------------------------------------------- property f


def _stray_release(without: frozenset[str] = frozenset()) -> tuple[Log, int]:
    """a:1 claims (offset 0), releases at 29 (its release is also kept by a transport that
    reports it failed), claims again (offset 3) and reserves 30..59; the first release then
    lands a second time, late."""
    log = Log()
    log.w = WorldState(rules=rules_without(without))
    assert log.put(claim("a:1", hb=HBL, version=6), 0).effect is Effect.CLAIMED
    assert log.w.partition_state("g", "orders", 0).tenure == 0
    assert log.put(beat("a:1", 29, hb=HBL), 10).accepted
    assert log.put(release6("a:1", 29, 0), 20).effect is Effect.RELEASED
    assert log.w.partition_state("g", "orders", 0).tenure is None
    assert log.put(claim("a:1", hb=HBL, version=6), 30).effect is Effect.CLAIMED
    assert log.w.partition_state("g", "orders", 0).tenure == 3
    from .helpers import claim_msgs

    assert log.put(claim_msgs("a:1", 59, first=30), 40).effect is Effect.MESSAGES_CLAIMED
    return log, log.put(release6("a:1", 29, 0), 50)


def test_a_release_of_an_earlier_tenure_is_not_the_holders():
    log, stray = _stray_release()
    assert stray.reason is Reason.NOT_HOLDER
    st = log.w.partition_state("g", "orders", 0)
    assert st.holder == ("a", "1") and st.tenure == 3
    assert log.w.resume_offset("g", "orders", 0) == 60  # 30..59 stay reserved
    assert log.put(release6("a:1", 59, 3), 60).effect is Effect.RELEASED


def test_without_property_f_the_stray_release_gives_back_the_new_tenures_reservation():
    log, stray = _stray_release(frozenset({"release_tenure"}))
    assert stray.effect is Effect.RELEASED
    assert log.w.resume_offset("g", "orders", 0) == 30  # 30..59 would be handed out again


def test_a_version_1_release_is_judged_as_before():
    log, _ = _stray_release()
    assert log.put(release("a:1", 29), 60).effect is Effect.RELEASED  # names no tenure


def test_a_restart_takeover_begins_a_tenure():
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).accepted
    assert log.put(beat("a:2", -1, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.w.partition_state("g", "orders", 0).tenure == 1
    assert log.put(release6("a:2", -1, 0), 20).reason is Reason.NOT_HOLDER  # a:1's tenure
    assert log.put(release6("a:2", -1, 1), 30).effect is Effect.RELEASED


def test_a_tenure_begun_by_an_older_claim_has_no_name():
    """A version 1 or 5 claim's tenure is ended by a version 1 release only (its writer
    does not name tenures), and a stale takeover begins a new one."""
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=5), 0).accepted
    assert log.put(release6("a:1", -1, 0), 10).reason is Reason.NOT_HOLDER
    assert log.put(claim("a:1", hb=HBL, version=6), 300).effect is Effect.TOOK_OVER_STALE
    assert log.w.partition_state("g", "orders", 0).tenure == 2
    assert log.put(release6("a:1", -1, 2), 310).accepted


def test_a_takeover_of_an_unnamed_tenure_names_none():
    """So a version 5 replayer, which reads no version 6 record of this log, never meets a
    named tenure: every state it keeps is the state version 6 keeps."""
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=5), 0).accepted
    assert log.put(beat("a:2", -1, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.w.partition_state("g", "orders", 0).tenure is None
    assert log.put(release6("a:2", -1, 1), 20).reason is Reason.NOT_HOLDER
    assert log.put(release("a:2", -1), 30).effect is Effect.RELEASED


def test_a_release_group_ends_every_tenure():
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).accepted
    assert log.put(release_group("adm:x", 100), 10).accepted
    assert log.w.partition_state("g", "orders", 0).tenure is None
    assert log.put(release6("a:1", -1, 0), 20).reason is Reason.GROUP_PAUSED
    assert log.put(release6("a:1", -1, 0), 200).reason is Reason.NOT_HOLDER


def test_a_version_6_claim_waits_out_a_kept_lease_as_version_5_does():
    log = Log()
    assert log.put(claim("a:1", hb=HBL), 0).accepted
    assert log.put(beat("a:2", -1, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.put(release("a:2", -1), 20).accepted
    assert log.put(claim("c:1", hb=HBL, version=6), 30).reason is Reason.STILL_OWNED
    assert log.put(claim("c:1", hb=HBL, version=6), 201).effect is Effect.CLAIMED


def test_snapshot_tenures_are_read_strictly():
    good = bytes.fromhex(SNAPSHOT_V6_HEX)
    flags_at = good.index(bytes.fromhex("066f726465727303")) + 8
    assert good[flags_at] == 0x13
    assert good[9:17] == bytes(8)  # eight rejection counts; version 5 has seven
    as_v5 = good[:4] + b"\x05" + good[5:16] + good[17:]
    with pytest.raises(SnapshotError, match="flags"):
        WorldState.from_bytes(as_v5)
    tenure_at = good.index(bytes.fromhex("e80700"), flags_at) + 2
    late = good[:tenure_at] + b"\x05" + good[tenure_at + 1 :]  # after applied_through (1)
    with pytest.raises(SnapshotError, match="after applied_through"):
        WorldState.from_bytes(late)


# ----------------------------------------------------------------------------- last holders


def _ended(how: str) -> Log:
    """The golden snapshots' logs: CLAIM_V6, a heartbeat, then a release or a ReleaseGroup."""
    log = Log()
    log.w = WorldState(verdict_window=4)
    assert log.put(CLAIM_V6, 1000).effect is Effect.CLAIMED
    assert log.put(beat("c1:i1", 41, p=3, hb=1000), 1001).effect is Effect.RENEWED
    if how == "released":
        assert log.put(RELEASE_V6, 1002).effect is Effect.RELEASED
    else:
        assert log.put(release_group("adm:x", 0), 1005).voided == (("orders", 3, "c1", "i1"),)
    return log


@pytest.mark.parametrize(
    ("how", "hexed", "end", "voided"),
    [
        ("released", SNAPSHOT_V6_RELEASED_HEX, 1002, False),
        ("voided", SNAPSHOT_V6_VOIDED_HEX, 1005, True),
    ],
)
def test_golden_snapshot_keeps_the_last_holder(how, hexed, end, voided):
    log = _ended(how)
    st = log.w.partition_state("g", "orders", 3)
    assert (st.holder, st.tenure) == (None, None)
    assert (st.last_holder, st.last_holder_end_ms, st.last_holder_voided) == (
        ("c1", "i1"),
        end,
        voided,
    )
    data = log.w.to_bytes()
    assert data[4] == SNAPSHOT_VERSION == 6  # a last holder alone makes a version 6 world
    assert data.hex() == hexed
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.partition_state("g", "orders", 3) == st
    # the next claim clears it, in the restored world as in the original
    for world in (log.w, restored):
        assert world.apply(3, 5000, *encode(claim("c2:i2", p=3, version=6))).accepted
        assert world.partition_state("g", "orders", 3).last_holder is None
    assert restored.to_bytes() == log.w.to_bytes()


@pytest.mark.parametrize("version", [1, 5])
def test_an_unnamed_tenure_leaves_no_last_holder(version):
    """A log a version 5 replayer reads leaves the state it did: a tenure begun by a version
    1 or 5 claim has no name, and its end no last holder; its world keeps its older bytes."""
    for ending in (release("a:1", 3), release_group("adm:x", 0)):
        log = Log()
        assert log.put(claim("a:1", version=version), 0).accepted
        assert log.put(beat("a:1", 3), 1).accepted
        assert log.put(ending, 2).accepted
        st = log.w.partition_state("g", "orders", 0)
        assert (st.last_holder, st.last_holder_end_ms, st.last_holder_voided) == (
            None,
            None,
            False,
        )
        assert log.w.to_bytes()[4] < SNAPSHOT_VERSION


def test_a_snapshot_older_than_version_6_restores_no_last_holder():
    """Older snapshots decode as before: the last holder is unknown there (None)."""
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=5), 0).accepted
    assert log.put(beat("a:2", -1, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.put(release("a:2", -1), 20).accepted
    data = log.w.to_bytes()
    assert data[4] == 5  # a lease taken away early still runs
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.partition_state("g", "orders", 0).last_holder is None


def test_snapshot_last_holders_are_read_strictly():
    good = bytes.fromhex(SNAPSHOT_V6_VOIDED_HEX)
    flags_at = good.index(bytes.fromhex("066f726465727303")) + 8
    assert good[flags_at] == 0x6A
    for flags, why in ((0x4A, "flags"), (0x6B, "flags")):  # voided alone; a holder too
        with pytest.raises(SnapshotError, match=why):
            WorldState.from_bytes(good[:flags_at] + bytes((flags,)) + good[flags_at + 1 :])
    delta_at = good.index(bytes.fromhex("026331026931"), flags_at) + 6
    assert good[delta_at] == 4
    late = good[:delta_at] + b"\x05" + good[delta_at + 1 :]  # voided at 1006, after now
    with pytest.raises(SnapshotError, match="after the world's now"):
        WorldState.from_bytes(late)
    released = bytes.fromhex(SNAPSHOT_V6_RELEASED_HEX)
    flags_at = released.index(bytes.fromhex("066f726465727303")) + 8
    assert released[flags_at] == 0x22
    assert released[16] == 0 and released[-8:-7] == b"\x00"  # GROUP_HALTED count, halted
    as_v5 = released[:4] + b"\x05" + released[5:16] + released[17:-8] + released[-7:]
    with pytest.raises(SnapshotError, match="flags"):  # (seven counts, no halted section)
        WorldState.from_bytes(as_v5)
    # without the flag and the ids it is a version 5 snapshot (of a world version 1 holds)
    plain = as_v5.replace(bytes.fromhex("22d40f2a2a026331026931"), bytes.fromhex("02d40f2a2a"))
    with pytest.raises(SnapshotError, match="older version holds"):
        WorldState.from_bytes(plain)
    assert WorldState.from_bytes(plain[:4] + b"\x01" + plain[5:-9] + plain[-7:]).now == 1002


# ----------------------------------------------------------------------------- property g


def _overtaken(version: int, without: frozenset[str] = frozenset()) -> Log:
    """a:1 claims (of ``version``) and heartbeats 20, then its earlier heartbeat of 10,
    overtaken in the transport, lands."""
    log = Log()
    log.w = WorldState(rules=rules_without(without))
    assert log.put(claim("a:1", hb=HBL, version=version), 0).accepted
    assert log.put(beat("a:1", 20, hb=HBL), 10).effect is Effect.RENEWED
    assert log.put(beat("a:1", 10, hb=50), 20).effect is Effect.RENEWED
    return log


def test_a_holders_late_heartbeat_renews_and_keeps_its_position():
    log = _overtaken(6)
    st = log.w.partition_state("g", "orders", 0)
    assert (st.last_offset, st.last_beat, st.heartbeat_interval_ms) == (20, 20, 50)
    assert log.w.resume_offset("g", "orders", 0) == 21
    assert log.put(beat("a:1", 25, hb=HBL), 30).accepted
    assert log.w.resume_offset("g", "orders", 0) == 26


def test_a_late_heartbeat_after_a_stale_lease_still_renews_late():
    log = _overtaken(6)
    assert log.put(beat("a:1", 5, hb=HBL), 500).effect is Effect.RENEWED_LATE
    assert log.w.resume_offset("g", "orders", 0) == 21


@pytest.mark.parametrize("version", [1, 5])
def test_an_unnamed_tenure_is_judged_as_before(version):
    """What a version 5 replayer also computes (it reads no version 6 record of this log)."""
    log = _overtaken(version)
    assert log.w.resume_offset("g", "orders", 0) == 11


def test_without_property_g_the_position_moves_back():
    log = _overtaken(6, frozenset({"late_heartbeat"}))
    assert log.w.resume_offset("g", "orders", 0) == 11


def test_a_late_task_heartbeat_keeps_the_vector():
    from rationalizer import HeartbeatingTask

    def task_beat(a: int, b: int, t: int) -> None:
        msg = HeartbeatingTask(
            **ids("a:1"),
            group_id="g",
            topic="orders",
            partition=0,
            heartbeat_interval_ms=HBL,
            positions=(("a", a), ("b", b)),
        )
        assert log.put(msg, t).effect is Effect.RENEWED

    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).accepted
    task_beat(10, 10, 10)
    task_beat(5, 9, 20)  # overtaken: its scalar (15) is below 21
    assert log.w.resume_positions("g", "orders", 0) == {"a": 11, "b": 11}
    assert log.w.partition_state("g", "orders", 0).last_offset == 21


def test_a_late_task_release_of_an_earlier_tenure_is_not_the_holders():
    """The simulator's seed 56 without an idempotent producer: a ReleasingTask of the
    previous tenure lands after the same instance claimed the task again."""

    def task_release(tenure: int, b: int) -> ReleasingTask:
        return ReleasingTask(
            **ids("a:1"),
            group_id="g",
            topic="orders",
            partition=0,
            positions=(("a", 5), ("b", b)),
            tenure=tenure,
        )

    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).accepted
    assert log.put(task_release(0, 5), 10).effect is Effect.RELEASED
    assert log.put(claim("a:1", hb=HBL, version=6), 20).accepted
    assert log.put(task_release(0, 5), 30).reason is Reason.NOT_HOLDER
    assert log.put(task_release(2, 9), 40).effect is Effect.RELEASED
    assert log.w.resume_positions("g", "orders", 0) == {"a": 6, "b": 10}


# ----------------------------------------------------------------------------- versions to come


def test_junk_is_skipped_and_a_version_10_record_halts_only_its_group():
    """Two groups in one coordination partition: version-shaped junk (byte 0 in 10..15, no
    envelope) is skipped and counted; a well-formed version 10 record of group g halts g
    (frozen as it was, nothing of it judged) while group h goes on claiming, renewing,
    reserving and releasing."""
    import random

    from rationalizer._messages import FUTURE_VERSIONS

    from .helpers import claim_msgs

    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).accepted
    assert log.put(claim("b:1", g="h", hb=HBL, version=6), 0).accepted
    rnd = random.Random(33)
    junk = [bytes([v]) + rnd.randbytes(rnd.randrange(1, 40)) for v in list(FUTURE_VERSIONS) * 50]
    for value in junk:
        assert log.raw(rnd.randbytes(5), value, 1).reason is Reason.INVALID_RECORD
    assert log.w.skipped == len(junk) and log.w.halted_groups == {}
    v10 = seal(10, 4, "g", b"a record whose rules this replayer does not know")
    at = log.offset
    assert log.raw(b"g/orders/0", v10, 2).reason is Reason.GROUP_HALTED
    assert log.w.halted_groups == {"g": (at, 10)} and log.w.is_halted("g")
    # g: nothing is judged any more, its state is as it was
    for msg in (
        beat("a:1", 5, hb=HBL),
        release6("a:1", 5, 0),
        claim("c:1", p=1, version=6),
        release_group("adm:x", 500),
    ):
        assert log.put(msg, 3).reason is Reason.GROUP_HALTED
    assert log.w.holder("g", "orders", 0) == ("a", "1")
    assert log.w.resume_offset("g", "orders", 0) is None
    assert not log.w.claimable("g", "orders", 1, 1000)
    # h: judged as ever
    assert log.put(beat("b:1", 9, g="h", hb=HBL), 4).effect is Effect.RENEWED
    assert log.put(claim_msgs("b:1", 19, g="h", first=10), 5).effect is Effect.MESSAGES_CLAIMED
    assert log.put(claim("c:1", p=1, g="h", hb=HBL, version=6), 6).effect is Effect.CLAIMED
    assert log.put(release6("b:1", 19, 1, g="h"), 7).effect is Effect.RELEASED
    assert log.w.resume_offset("h", "orders", 0) == 20
    assert log.w.claimable("h", "orders", 0, 1000)
    # the halt is part of the world's snapshot
    restored = WorldState.from_bytes(log.w.to_bytes())
    assert restored.halted_groups == {"g": (at, 10)}
    assert restored.to_bytes() == log.w.to_bytes()
    assert restored.apply(log.offset, 8, *encode(beat("a:1", 6, hb=HBL))).reason is (
        Reason.GROUP_HALTED
    )
    assert log.w.rejections()[Reason.GROUP_HALTED] == 5  # the v9 record and four after it


def test_an_envelope_needs_its_check_and_a_valid_group():
    good = seal(9, 1, "g", b"x")
    assert envelope(good) == (9, 1, "g", 8)
    for bad in (
        good[:2] + bytes(4) + good[6:],  # check zeroed
        good[:-1],  # truncated
        seal(9, 1, "g", b"x")[:6] + b"\x00" + good[7:],  # empty group (check no longer matches)
    ):
        with pytest.raises(DecodeError):
            envelope(bad)
    from zlib import crc32

    rest = b"\x00\x00"  # an empty group id, then one byte
    check = crc32(rest, crc32(bytes([9, 1]))).to_bytes(4, "big")
    with pytest.raises(DecodeError, match="empty group_id"):
        envelope(bytes([9, 1]) + check + rest)  # a valid check over an empty group id
