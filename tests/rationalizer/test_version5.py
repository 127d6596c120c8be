"""Protocol version 5: a lease the log took away early is kept (PROTOCOL.md, "Version 5").

A restart takeover fences the holder it replaces, and a ReleaseGroup voids the holders of a
group, while those holders may still be alive and handing out on a lease that is fresh by
their own clocks until they replay the record. Version 5 remembers when such a lease is
over (``fenced_until``) and refuses a version 5 ClaimingPartition before then (property e),
so the partition cannot pass to another client while the removed holder may still hand it
out. The schedule is the one the simulator found (seed 7158): an older instance, stopped
just after it wrote a heartbeat, wakes; its heartbeat takes the partition over from the
newer instance, it closes and releases, and a third member claims at once.
"""

from __future__ import annotations

import pytest

from rationalizer import (
    ClaimingPartition,
    DecodeError,
    Effect,
    Reason,
    SnapshotError,
    WorldState,
    decode,
    encode,
)
from rationalizer._snapshot import SNAPSHOT_VERSION
from rationalizer._varint import append_svarint
from scenarios.sim_rules import rules_without

from .helpers import Log, beat, claim, release, release_group

HBL = 100  # every lease in these logs: stale after 2·HB, so a lease ends at beat + 201

# ----------------------------------------------------------------------------- golden vectors

CLAIM_V5 = ClaimingPartition(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="orders",
    partition=3,
    heartbeat_interval_ms=1000,
    version=5,
)
CLAIM_V5_HEX = ("672f6f72646572732f33", "0502000003e80263310269310167066f726465727303")
#: _woken_older_instance() through the release at offset 4 (log times 0..70), window 8:
#: partition orders/0 unheld, positioned at -1 by the release, fenced_until = 50 + 201 =
#: 251, i.e. 181 ahead of now (70); a:4 fenced
SNAPSHOT_V5_HEX = (
    "4c4d57530508078c0101000000000000010161013400010167066f7264657273000a8c010000b5010000"
    "070101010101010110001510132201016101340015"
)


def test_golden_claim():
    key, value = encode(CLAIM_V5)
    assert (key.hex(), value.hex()) == CLAIM_V5_HEX
    assert decode(key, value) == CLAIM_V5
    # byte for byte the version 1 claim but for byte 0
    v1 = encode(ClaimingPartition(**{**_fields(CLAIM_V5), "version": 1}))[1]
    assert v1[1:] == value[1:] and v1[0] == 1


def _fields(msg: ClaimingPartition) -> dict:
    return {
        "client_id": msg.client_id,
        "instance_id": msg.instance_id,
        "group_id": msg.group_id,
        "topic": msg.topic,
        "partition": msg.partition,
        "heartbeat_interval_ms": msg.heartbeat_interval_ms,
    }


@pytest.mark.parametrize(
    "value",
    [
        "0501000000000000000900000bb8000263310269310167066f726465727303",  # a v5 Heartbeat
        "050300000000000000090263310269310167066f726465727303",  # a v5 release
        "0502000003e8",  # truncated
        "0502000000000263310269310167066f726465727303",  # heartbeat interval 0
    ],
)
def test_version_5_has_one_layout_and_decodes_strictly(value):
    with pytest.raises(DecodeError):
        decode(bytes.fromhex(CLAIM_V5_HEX[0]), bytes.fromhex(value))
    log = Log()
    v = log.raw(bytes.fromhex(CLAIM_V5_HEX[0]), bytes.fromhex(value), 0)
    assert v.reason is Reason.INVALID_RECORD  # skipped and counted, not a version to come
    assert log.w.halted is None


def test_the_version_field_takes_1_or_5():
    assert claim("a:1").version == 1
    with pytest.raises(ValueError, match="version"):
        claim("a:1", version=4)


# ----------------------------------------------------------------------------- property e


def _woken_older_instance(without: frozenset[str] = frozenset()) -> Log:
    """a:4 (the newer instance) holds orders/0 and renewed it at 50; a:2, its older
    instance, stopped right after writing a heartbeat, wakes: the heartbeat lands at 60 and
    takes the partition over (restart recovery: there is no position to be behind), a:2
    closes and releases at 70. a:4 may hand out until 50 + HB by its own clock; the log
    keeps its lease until 251."""
    log = Log()
    log.w = WorldState(verdict_window=8, rules=rules_without(without))
    assert log.put(claim("a:2", hb=HBL), 0).effect is Effect.CLAIMED
    assert log.put(claim("a:4", hb=HBL), 1).reason is Reason.STILL_OWNED
    assert log.put(release("a:2", -1), 2).effect is Effect.RELEASED
    assert log.put(claim("a:4", hb=HBL, version=5), 3).effect is Effect.CLAIMED
    assert log.put(beat("a:4", -1, hb=HBL), 50).effect is Effect.RENEWED
    v = log.put(beat("a:2", -1, hb=HBL), 60)
    assert v.effect is Effect.RESTART_TAKEOVER and v.previous_holder == ("a", "4")
    assert log.put(release("a:2", -1), 70).effect is Effect.RELEASED
    return log


@pytest.mark.parametrize(("at", "effect"), [(71, None), (250, None), (251, Effect.CLAIMED)])
def test_a_version_5_claim_waits_out_the_fenced_lease(at, effect):
    log = _woken_older_instance()
    st = log.w.partition_state("g", "orders", 0)
    assert st.holder is None and st.fenced_until == 251
    assert log.w.claimable("g", "orders", 0, at) is (effect is not None)
    v = log.put(claim("c:5", hb=HBL, version=5), at)
    assert v.effect is effect
    if effect is None:
        assert v.reason is Reason.STILL_OWNED and log.w.holder("g", "orders", 0) is None
    else:
        assert log.w.holder("g", "orders", 0) == ("c", "5")


def test_a_version_1_claim_is_judged_as_version_4_judged_it():
    """What a version 4 replayer also accepts (so replayers of both versions agree on every
    record the older one can read): the hole the version 5 claim closes."""
    log = _woken_older_instance()
    assert log.put(claim("c:5", hb=HBL), 71).effect is Effect.CLAIMED


def test_without_property_e_the_partition_passes_while_the_fenced_lease_runs():
    log = _woken_older_instance(frozenset({"fenced_lease"}))
    assert log.w.claimable("g", "orders", 0, 71)
    assert log.put(claim("c:5", hb=HBL, version=5), 71).effect is Effect.CLAIMED


def test_a_lease_voided_by_the_admin_is_kept_too():
    log = Log()
    assert log.put(claim("a:1", hb=HBL), 0).accepted
    assert log.put(beat("a:1", 7, hb=HBL), 40).accepted
    v = log.put(release_group("adm:x", 50), 45)  # pause until 50
    assert v.voided == (("orders", 0, "a", "1"),)
    assert log.w.partition_state("g", "orders", 0).fenced_until == 241
    assert log.put(claim("c:5", hb=HBL, version=5), 60).reason is Reason.STILL_OWNED
    assert log.put(claim("c:5", hb=HBL, version=5), 241).effect is Effect.CLAIMED
    assert log.w.resume_offset("g", "orders", 0) == 8  # positions are kept, as before


def test_the_latest_lease_end_is_kept():
    """Two leases taken away in turn: the longer one still runs after the shorter ends."""
    log = Log()
    assert log.put(claim("a:1", hb=1000), 0).accepted  # a lease of 1 s: ends at 2001
    assert log.put(beat("a:2", -1, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.put(beat("a:3", -1, hb=HBL), 20).effect is Effect.RESTART_TAKEOVER  # ends 211
    assert log.put(release("a:3", -1), 30).accepted
    assert log.w.partition_state("g", "orders", 0).fenced_until == 2001
    assert log.put(claim("c:5", hb=HBL, version=5), 1000).reason is Reason.STILL_OWNED
    assert log.put(claim("c:5", hb=HBL, version=5), 2001).accepted


def test_the_fenced_instance_itself_is_still_fenced():
    log = _woken_older_instance()
    assert log.put(claim("a:4", hb=HBL, version=5), 300).reason is Reason.FENCED


# ----------------------------------------------------------------------------- snapshots


def test_golden_snapshot_with_a_running_lease():
    log = _woken_older_instance()
    data = log.w.to_bytes()
    assert data[4] == SNAPSHOT_VERSION - 1 == 5
    assert data.hex() == "".join(SNAPSHOT_V5_HEX)
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.partition_state("g", "orders", 0).fenced_until == 251
    # the restored world judges what follows as the original does
    nxt = log.offset
    for world in (log.w, restored):
        assert world.apply(nxt, 100, *encode(claim("c:5", hb=HBL, version=5))).reason is (
            Reason.STILL_OWNED
        )
        assert world.apply(nxt + 1, 251, *encode(claim("c:5", hb=HBL, version=5))).accepted
    assert restored.to_bytes() == log.w.to_bytes()


def test_a_lease_that_is_over_is_not_written():
    """Once log time reaches the lease end the entry says nothing a claim could see: the
    world is written in the oldest version that holds it, as before version 5."""
    log = _woken_older_instance()
    log.put(beat("z:9", -1, p=9, hb=HBL), 251)  # any record that moves log time on
    assert log.w.partition_state("g", "orders", 0).fenced_until is None
    assert log.w.to_bytes()[4] == 1


def test_snapshot_leases_are_read_strictly():
    good = bytes.fromhex("".join(SNAPSHOT_V5_HEX))
    flags_at = good.index(bytes.fromhex("066f7264657273000a")) + 8
    assert good[flags_at] == 0x0A  # positioned, leased
    ahead_at = flags_at + 1 + 2 + 1 + 1  # after beat (svarint 70), last + 1, claimed + 1
    assert good[ahead_at : ahead_at + 2] == bytes.fromhex("b501")  # 181
    zero = good[:ahead_at] + b"\x00" + good[ahead_at + 2 :]
    with pytest.raises(SnapshotError, match="not ahead"):
        WorldState.from_bytes(zero)
    as_v4 = good[:4] + b"\x04" + good[5:]
    with pytest.raises(SnapshotError, match="flags"):
        WorldState.from_bytes(as_v4)
    no_lease = good[:flags_at] + b"\x02" + good[flags_at + 1 : ahead_at] + good[ahead_at + 2 :]
    with pytest.raises(SnapshotError, match="version 5 snapshot"):
        WorldState.from_bytes(no_lease)


def test_a_lease_no_log_could_give_is_refused():
    """Crafted snapshots: a lease ending more than 2·(max HB) + 1 after the partition's last
    beat, and a last beat after the world's now (found by an adversarial review)."""
    good = bytes.fromhex("".join(SNAPSHOT_V5_HEX))
    flags_at = good.index(bytes.fromhex("066f7264657273000a")) + 8
    beat_at = flags_at + 1
    assert good[beat_at : beat_at + 2] == bytes.fromhex("8c01")  # zigzag 70
    # a last beat 8,000 s before now: the lease end (251) is then out of reach
    far = bytearray()
    append_svarint(far, 70 - 8_000_000)
    crafted = good[:beat_at] + bytes(far) + good[beat_at + 2 :]
    with pytest.raises(SnapshotError, match="no log could give"):
        WorldState.from_bytes(crafted)
    ahead = bytearray()
    append_svarint(ahead, 71)  # one past now (70)
    with pytest.raises(SnapshotError, match="after the world's now"):
        WorldState.from_bytes(good[:beat_at] + bytes(ahead) + good[beat_at + 2 :])


def test_claimable_in_the_past_agrees_after_a_restore():
    """A restored world drops a lease that is over by its own time; the live world's query
    about an earlier time must agree with it."""
    log = _woken_older_instance()
    log.put(beat("z:9", -1, p=9, hb=HBL), 300)
    restored = WorldState.from_bytes(log.w.to_bytes())
    for at in (150, 250, 251, 400):
        assert log.w.claimable("g", "orders", 0, at) == restored.claimable("g", "orders", 0, at)


def test_golden_vectors_are_in_protocol_md():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    assert f"`{CLAIM_V5_HEX[0]}`" in text and f"`{CLAIM_V5_HEX[1]}`" in text
    assert f"`{''.join(SNAPSHOT_V5_HEX)}`" in text
