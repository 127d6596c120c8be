"""Protocol version 9 (PROTOCOL.md, "Version 9"): the holder of a tenure without a name
names it (NamingTenure, property j).

A tenure begun by a claim of version 1 or 5 has no name, and a restart takeover keeps a
tenure as it is: a group upgraded by killed instances kept such tenures for as long as its
partitions did not move, heartbeated one record per partition (no MemberHeartbeat entry
names a tenure without a name) and with no f, g or h to judge their late writes. Version 9
lets the holder name it by the offset of a record of its own.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rationalizer import (
    DecodeError,
    Effect,
    NamingTenure,
    Reason,
    WorldState,
    decode,
    encode,
)
from rationalizer._codec import envelope, seal
from rationalizer._messages import FUTURE_VERSIONS, PROTOCOL_VERSION, SUPPORTED_VERSIONS
from scenarios.sim_rules import rules_without

from .helpers import (
    Log,
    assert_every_byte_is_under_the_check,
    beat,
    claim,
    ids,
    release,
    release_group,
)
from .test_version6 import release6
from .test_version7 import _judged, beats

HBL = 100

# ----------------------------------------------------------------------------- golden vectors

NAME = NamingTenure(client_id="c1", instance_id="i1", group_id="g", topic="orders", partition=3)
NAME_HEX = ("672f6f72646572732f33", "090a68bf278301670263310269310167066f726465727303")
TASK_NAME = NamingTenure(
    client_id="c1", instance_id="i1", group_id="g", topic="wordcount.task", partition=0
)
TASK_NAME_HEX = (
    "672f776f7264636f756e742e7461736b2f30",
    "090a3860227f016702633102693101670e776f7264636f756e742e7461736b00",
)
#: a snapshot (window 4) after a version 5 claim of orders/3 by c1:i1 at 0 (log time 1000),
#: NAME at 1 (1001) and the holder's Heartbeat at 41 at 2 (1002)
SNAPSHOT_HEX = (
    "4c4d5753060403d40f00000000000000000000010167066f72646572730313026331026931e80701d40f2a"
    "0000000003010101101c13"
)


def name(who: str, p: int = 0) -> NamingTenure:
    return NamingTenure(**ids(who), group_id="g", topic="orders", partition=p)


@pytest.mark.parametrize(("msg", "hexes"), [(NAME, NAME_HEX), (TASK_NAME, TASK_NAME_HEX)])
def test_golden_records(msg, hexes):
    key, value = encode(msg)
    assert (key.hex(), value.hex()) == hexes
    assert decode(key, value) == msg
    assert msg.version == 9 and PROTOCOL_VERSION == 9 and 9 in SUPPORTED_VERSIONS
    assert envelope(value)[:3] == (9, 10, "g")
    assert 9 not in FUTURE_VERSIONS and list(FUTURE_VERSIONS) == list(range(10, 16))


def test_golden_snapshot():
    w = WorldState(verdict_window=4)
    w.apply(0, 1000, *encode(claim("c1:i1", p=3, hb=1000, version=5)))
    assert w.apply(1, 1001, *encode(NAME)).effect is Effect.NAMED
    w.apply(2, 1002, *encode(beat("c1:i1", 41, p=3, hb=1000)))
    assert w.to_bytes().hex() == SNAPSHOT_HEX
    restored = WorldState.from_bytes(bytes.fromhex(SNAPSHOT_HEX))
    assert restored.verdict(1) == w.verdict(1) and restored.verdict(1).effect is Effect.NAMED
    assert restored.partition_state("g", "orders", 3).tenure == 1


def test_golden_vectors_are_in_protocol_md():
    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    for key, value in (NAME_HEX, TASK_NAME_HEX):
        assert f"`{key}`" in text and f"`{value}`" in text
    assert f"`{SNAPSHOT_HEX}`" in text


# ----------------------------------------------------------------------------- strictness


def test_every_byte_is_under_the_check():
    assert_every_byte_is_under_the_check(*(bytes.fromhex(h) for h in NAME_HEX))


IDENT = b"\x02c1\x02i1\x01g\x01t\x00"  # c1, i1, group g, topic t, partition 0


@pytest.mark.parametrize(
    ("typ", "key", "body", "why"),
    [
        (10, b"g/t/0", IDENT, None),  # the valid one the others change
        (2, b"g/t/0", IDENT, "unknown version 9 message type"),
        (11, b"g/t/0", IDENT, "unknown version 9 message type"),
        (10, b"g/t/1", IDENT, "key does not match"),
        (10, b"g", IDENT, "key does not match"),
        (10, b"g/t/0", IDENT + b"\x00", "trailing"),
        (10, b"g/t/0", IDENT[:-1], "truncated|partition"),
        (10, b"h/t/0", b"\x02c1\x02i1\x01h\x01t\x00", "group"),
        (10, b"g/t/0", b"\x02c1\x02i1\x01g\x02t!\x00", "topic"),
        (10, b"g/t/0", b"\x00\x02i1\x01g\x01t\x00", "client_id"),
    ],
)
def test_version_9_decodes_strictly(typ, key, body, why):
    value = seal(9, typ, "g", body)
    envelope(value)  # a well-formed envelope...
    if why is None:
        assert decode(key, value) == NamingTenure(
            **ids("c1:i1"), group_id="g", topic="t", partition=0
        )
        assert Log().raw(key, value, 0).reason is Reason.NOT_HOLDER  # judged: nobody holds it
        return
    with pytest.raises(DecodeError, match=why):  # ...of a record that is not valid
        decode(key, value)
    assert Log().raw(key, value, 0).reason is Reason.INVALID_RECORD


def test_only_version_9_is_a_naming():
    with pytest.raises(ValueError, match="version"):
        NamingTenure(**ids("c1:i1"), group_id="g", topic="t", partition=0, version=6)


# ----------------------------------------------------------------------------- property j


@pytest.mark.parametrize("version", [1, 5])
def test_the_holder_names_a_tenure_without_a_name(version):
    """Named by the NamingTenure's offset; nothing else changes: the holder, its lease, the
    position, the reservations and the floor."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=version), 0)
    log.put(beat("a:1", 9, hb=HBL), 10)
    before = log.w.partition_state("g", "orders", 0)
    assert before.tenure is None
    at = log.offset
    v = log.put(name("a:1"), 20)
    assert v.accepted and v.effect is Effect.NAMED
    after = log.w.partition_state("g", "orders", 0)
    assert after.tenure == at
    assert after == attrs.evolve(before, tenure=at)  # (the rest kept)
    # named: its version 6 release must name it, a MemberHeartbeat's entry too
    assert log.put(release6("a:1", 9, at + 1), 30).reason is Reason.NOT_HOLDER
    assert log.put(beats("a:1", (0, at, 12)), 40).accepted
    assert log.put(release6("a:1", 12, at), 50).effect is Effect.RELEASED


def test_a_named_tenure_is_not_named_again():
    log = Log()
    log.put(claim("a:1", hb=HBL, version=6), 0)  # named 0 by its claim
    assert log.put(name("a:1"), 10).reason is Reason.NOT_HOLDER
    assert log.w.partition_state("g", "orders", 0).tenure == 0
    log2 = Log()
    log2.put(claim("a:1", hb=HBL, version=5), 0)
    assert log2.put(name("a:1"), 10).effect is Effect.NAMED
    assert log2.put(name("a:1"), 20).reason is Reason.NOT_HOLDER  # named at 1 already
    assert log2.w.partition_state("g", "orders", 0).tenure == 1


def test_nobody_but_that_instance_names_it():
    """Another member, another instance of the holder's client, a partition never seen or
    without holder: NOT_HOLDER, nothing changes (the other instance is not fenced either:
    a naming takes nothing over)."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=5), 0)
    assert log.put(name("b:1"), 10).reason is Reason.NOT_HOLDER
    assert log.put(name("a:2"), 11).reason is Reason.NOT_HOLDER
    assert log.put(name("a:1", p=1), 12).reason is Reason.NOT_HOLDER  # never seen
    assert log.w.partition_state("g", "orders", 0).tenure is None
    assert not log.w.is_fenced("a", "2")
    assert log.put(release("a:1", 5), 20).effect is Effect.RELEASED
    assert log.put(name("a:1"), 30).reason is Reason.NOT_HOLDER  # released: no holder
    assert log.w.partition_state("g", "orders", 0).tenure is None


def test_a_stale_holder_names_its_tenure_and_its_lease_is_still_stale():
    """The naming renews nothing: a holder stale by its lease stays stale, and anyone's
    claim takes the partition over."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=5), 0)
    assert log.put(name("a:1"), 5 * HBL).effect is Effect.NAMED
    assert log.put(claim("b:1", hb=HBL, version=6), 5 * HBL + 1).effect is Effect.TOOK_OVER_STALE


def test_a_takeover_of_a_named_tenure_names_the_next_one():
    """A restart takeover passes a name on (property f): once a member named the tenure it
    took over, the next takeover is named too, and the late writes of the instance before
    it are judged by their tenure."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=5), 0)
    assert log.put(beat("a:2", 5, hb=HBL), 10).effect is Effect.RESTART_TAKEOVER
    assert log.w.partition_state("g", "orders", 0).tenure is None  # (a takeover keeps it)
    at = log.offset
    assert log.put(name("a:2"), 20).effect is Effect.NAMED
    assert log.put(name("a:1"), 21).reason is Reason.FENCED  # the instance before: fenced
    taken = log.offset
    assert log.put(beats("a:3", (0, at, 7)), 30).effect is Effect.RENEWED  # a takeover entry
    state = log.w.partition_state("g", "orders", 0)
    assert state.holder == ("a", "3") and state.tenure == taken


def test_a_late_heartbeat_of_the_named_tenure_keeps_the_position():
    """Property g acts from the naming on: the holder's heartbeat overtaken in the
    transport (below the position, at or above the floor) renews and sets none."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=5), 0)
    log.put(beat("a:1", 20, hb=HBL), 10)
    log.put(name("a:1"), 20)
    assert log.put(beat("a:1", 15, hb=HBL), 30).accepted
    assert log.w.partition_state("g", "orders", 0).last_offset == 20
    # before the naming, the same late heartbeat set the position back (version 8 did too)
    log2 = Log()
    log2.put(claim("a:1", hb=HBL, version=5), 0)
    log2.put(beat("a:1", 20, hb=HBL), 10)
    assert log2.put(beat("a:1", 15, hb=HBL), 30).accepted
    assert log2.w.partition_state("g", "orders", 0).last_offset == 15


def test_whole_record_rules_come_first():
    """A halted group, rules 1 and 3 (fenced, paused) judge a NamingTenure before j."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=5), 0)
    log.put(release_group("adm:x", 500), 10)
    assert log.put(name("a:1"), 20).reason is Reason.GROUP_PAUSED
    log2 = Log()
    log2.put(claim("a:1", hb=HBL, version=5), 0)
    log2.put(claim("a:1", p=1, hb=HBL, version=5), 1)
    assert log2.put(beat("a:2", 0, p=1, hb=HBL), 2).effect is Effect.RESTART_TAKEOVER
    assert log2.put(name("a:1"), 3).reason is Reason.FENCED
    log3 = Log()
    log3.put(claim("a:1", hb=HBL, version=5), 0)
    log3.raw(b"g", seal(10, 1, "g", b"rules to come"), 1)
    assert log3.put(name("a:1"), 2).reason is Reason.GROUP_HALTED


def test_without_property_j_nothing_is_named():
    w = WorldState(rules=rules_without(frozenset({"own_tenure"})))
    w.apply(0, 0, *encode(claim("a:1", hb=HBL, version=5)))
    assert w.apply(1, 10, *encode(name("a:1"))).reason is Reason.NOT_HOLDER
    assert w.partition_state("g", "orders", 0).tenure is None


def test_apply_many_and_the_model_agree_on_a_mixed_log():
    """Claims of versions 1, 5 and 6, namings from the holder and from others, heartbeats
    of versions 1 and 7, takeovers and releases: apply, apply_many and the reference model
    (``_judged``) give the same outcomes."""
    _judged(
        [
            (claim("a:1", hb=HBL, version=5), 0),
            (claim("b:1", p=1, hb=HBL, version=1), 1),
            (name("b:1"), 2),
            (name("a:1"), 3),
            (name("b:1", p=1), 4),
            (beat("a:1", 5, hb=HBL), 5),
            (beats("a:1", (0, 3, 6)), 6),
            (beats("b:2", (1, 4, 7)), 7),
            (name("b:2", p=1), 8),
            (name("b:1", p=1), 9),
            (release6("a:1", 8, 3), 10),
            (name("a:1"), 11),
            (claim("a:1", hb=HBL, version=6), 12),
            (name("a:1"), 13),
        ]
    )
