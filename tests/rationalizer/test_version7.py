"""Protocol version 7 (PROTOCOL.md, "Version 7"): one MemberHeartbeat per member and
coordination partition, each entry judged as its partition's Heartbeat in the tenure it
names (property h).

Before version 7 a holder's late heartbeat from an earlier tenure of the same instance,
landing after that instance claimed the partition again, was judged as the new tenure's:
below the new tenure's floor it set the position back (issue 33 item 4; seed 231 of
``python -m scenarios.sim --without idempotent-writes``). An entry names its tenure, so it
is NOT_HOLDER there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rationalizer import (
    DecodeError,
    Effect,
    Heartbeat,
    MemberHeartbeat,
    Reason,
    WorldState,
    decode,
    encode,
)
from rationalizer._codec import decode_fields, envelope, seal
from rationalizer._messages import MAX_BEAT_ENTRIES
from rationalizer._rules import RENEWED_KEPT
from rationalizer._snapshot import SNAPSHOT_VERSION
from rationalizer._varint import uvarint
from scenarios.sim_rules import rules_without

from .helpers import (
    Log,
    assert_every_byte_is_under_the_check,
    beat,
    claim,
    claim_msgs,
    ids,
    release_group,
)
from .model import Model

HBL = 100

# ----------------------------------------------------------------------------- golden vectors

BEATS = MemberHeartbeat(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    heartbeat_interval_ms=1000,
    entries=(("orders", 0, 5, 41), ("orders", 3, 0, -1), ("payments", 17, 300, 1000)),
)
BEATS_HEX = (
    "67",
    "0701d7d54cfa0167000003e802633102693102066f72646572730200052a030000087061796d656e74730111"
    "ac02e907",
)
ONE_BEAT = MemberHeartbeat(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    heartbeat_interval_ms=3000,
    entries=(("orders", 3, 0, 41),),
)
ONE_BEAT_HEX = ("67", "07010575311f016700000bb802633102693101066f72646572730103002a")


def beats(who: str, *entries: tuple, g: str = "g", hb: int = HBL) -> MemberHeartbeat:
    """A MemberHeartbeat of ``who`` with entries ``(partition, tenure, last)`` of topic
    orders, or ``(topic, partition, tenure, last)``."""
    full = tuple(e if len(e) == 4 else ("orders", *e) for e in entries)
    return MemberHeartbeat(**ids(who), group_id=g, heartbeat_interval_ms=hb, entries=full)


@pytest.mark.parametrize(("msg", "hexes"), [(BEATS, BEATS_HEX), (ONE_BEAT, ONE_BEAT_HEX)])
def test_golden_records(msg, hexes):
    key, value = encode(msg)
    assert (key.hex(), value.hex()) == hexes
    assert decode(key, value) == msg
    assert msg.version == 7
    assert envelope(value) == (7, 1, "g", 8)


def test_golden_vectors_are_in_protocol_md():
    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    for key, value in (BEATS_HEX, ONE_BEAT_HEX):
        assert f"`{key}`" in text and f"`{value}`" in text


# ----------------------------------------------------------------------------- strictness


def test_every_byte_is_under_the_check():
    assert_every_byte_is_under_the_check(*(bytes.fromhex(h) for h in BEATS_HEX))


def _body(*topics: tuple[bytes, list[bytes]], hb: int = 1000, tail: bytes = b"") -> bytes:
    """A version 7 body: hb, ids c1/i1, then raw topic groups (topic bytes, entry bytes)."""
    out = hb.to_bytes(4, "big") + b"\x02c1\x02i1" + uvarint(len(topics))
    for topic, entries in topics:
        out += uvarint(len(topic)) + topic + uvarint(len(entries)) + b"".join(entries)
    return out + tail


E = bytes.fromhex("00002a")  # partition 0, tenure 0, last_offset 41


@pytest.mark.parametrize(
    ("typ", "key", "body", "why"),
    [
        (1, b"g", _body((b"t", [E])), None),  # the valid one the others change
        (2, b"g", _body((b"t", [E])), "unknown version 7 message type"),
        (1, b"g/t/0", _body((b"t", [E])), "key does not match"),
        (1, b"g", _body(), "without entries"),
        (1, b"g", _body((b"t", [])), "without entries"),
        (1, b"g", _body((b"t", [E, E])), "not sorted"),
        (1, b"g", _body((b"u", [E]), (b"t", [E])), "not sorted"),
        (1, b"g", _body((b"t", [E]), (b"t", [bytes.fromhex("01002a")])), "not sorted"),
        (1, b"g", _body((b"t", [E]), tail=b"\x00"), "trailing"),
        (1, b"g", _body((b"t", [bytes.fromhex("0080002a")])), "overlong"),
        (1, b"g", _body((b"t", [bytes.fromhex("008080808080808080800100")])), "tenure"),
        (1, b"g", _body((b"t!", [E])), "invalid topic"),
        (1, b"g", _body((b"t", [E]), hb=0), "heartbeat_interval_ms"),
        (1, b"g", _body((b"t", [E]))[:-1], "truncated"),
    ],
)
def test_version_7_decodes_strictly(typ, key, body, why):
    value = seal(7, typ, "g", body)
    envelope(value)  # a well-formed envelope...
    if why is None:
        assert decode(key, value).entries == (("t", 0, 0, 41),)
        return
    with pytest.raises(DecodeError, match=why):  # ...of a record that is not valid
        decode(key, value)
    assert Log().raw(key, value, 0).reason is Reason.INVALID_RECORD


def test_the_entry_count_is_bounded():
    many = tuple(("t", p, 0, 0) for p in range(MAX_BEAT_ENTRIES))
    msg = MemberHeartbeat(**ids("a:1"), group_id="g", heartbeat_interval_ms=1, entries=many)
    key, value = encode(msg)
    assert len(value) < 1 << 20
    assert decode(key, value) == msg
    with pytest.raises(ValueError, match="entries"):
        MemberHeartbeat(
            **ids("a:1"), group_id="g", heartbeat_interval_ms=1, entries=(*many, ("u", 0, 0, 0))
        )
    over = seal(
        7, 1, "g", _body((b"t", [E] * 2), tail=b"")[: 4 + 6] + uvarint(MAX_BEAT_ENTRIES + 1)
    )
    with pytest.raises(DecodeError, match="topic count out of range"):
        decode(b"g", over)


@pytest.mark.parametrize(
    "entries",
    [
        (),
        (("orders", 1, 0, 0), ("orders", 0, 0, 0)),
        (("orders", 1, 0, 0), ("orders", 1, 0, 0)),
        (("orders", 1, -1, 0),),
        (("orders", 1, 0, -2),),
        (("orders", 1, 0),),
        [("orders", 1, 0, 0)],
    ],
)
def test_invalid_entries_cannot_be_built(entries):
    with pytest.raises(ValueError):
        MemberHeartbeat(**ids("a:1"), group_id="g", heartbeat_interval_ms=1, entries=entries)


# ----------------------------------------------------------------------------- property h


def test_an_entry_renews_only_in_the_tenure_it_names():
    log = Log()
    assert log.put(claim("a:1", hb=HBL, version=6), 0).effect is Effect.CLAIMED  # tenure 0
    assert log.put(claim("a:1", p=1, hb=HBL, version=6), 0).effect is Effect.CLAIMED  # tenure 1
    assert log.put(claim("a:1", p=2, hb=HBL), 0).effect is Effect.CLAIMED  # version 1: unnamed
    v = log.put(beats("a:1", (0, 0, 10), (1, 0, 20), (2, 2, 30), (3, 3, 40), ("t", 1, 1, 21)), 10)
    assert [e.reason or e.effect for e in v.entries] == [
        Effect.RENEWED,
        Reason.NOT_HOLDER,  # partition 1's tenure is 1
        Reason.NOT_HOLDER,  # an unnamed tenure (a version 1 claim)
        Reason.NOT_HOLDER,  # never seen
        Reason.NOT_HOLDER,  # another topic
    ]
    assert not v.accepted and v.reason is Reason.NOT_HOLDER  # the first rejected entry's
    assert log.w.resume_offset("g", "orders", 0) == 11
    assert log.w.resume_offset("g", "orders", 1) is None
    assert log.w.resume_offset("g", "orders", 2) is None
    assert log.w.rejections()[Reason.NOT_HOLDER] == 4  # counted per entry
    assert log.w.verdict(log.offset - 1) == v
    ok = log.put(beats("a:1", (0, 0, 12), (1, 1, 22)), 20)
    assert ok.accepted and ok.effect is Effect.RENEWED and len(ok.entries) == 2


def test_an_entry_is_judged_as_its_partitions_heartbeat():
    """Renewed late, property g (a late position is kept), the lease it declares: the same
    verdicts and state as the holder's Heartbeats in a twin log."""
    twin, log = Log(), Log()
    for lg in (twin, log):
        lg.put(claim("a:1", hb=HBL, version=6), 0)
        lg.put(beat("a:1", 50, hb=HBL), 1)
    steps = [(55, 120, HBL), (5, 150, HBL), (40, 420, 400), (60, 430, 400), (10, 1500, 400)]
    seen = []
    for last, t, hb in steps:
        want = twin.put(beat("a:1", last, hb=hb), t)
        got = log.put(beats("a:1", (0, 0, last), hb=hb), t)
        assert got.entries == (want,)
        assert got.entries[0] is want  # the shared instances (RENEWED_KEPT is told apart)
        seen.append(want)
    assert twin.w.partition_state("g", "orders", 0) == log.w.partition_state("g", "orders", 0)
    assert log.w.partition_state("g", "orders", 0).last_offset == 60
    assert seen[1] is RENEWED_KEPT and seen[2].effect is Effect.RENEWED_LATE


def _judged(msgs: list[tuple[object, int]], rules=None) -> list[tuple]:
    """Each record's entries' outcomes ``(accepted, reason, effect)`` (a MemberHeartbeat) or
    its own, replayed by ``apply`` one at a time, by ``apply_many`` at once and, with the
    production rules, by the reference model: all three must agree."""
    records = [(i, t, *encode(msg)) for i, (msg, t) in enumerate(msgs)]  # type: ignore[arg-type]
    one = WorldState(rules=rules) if rules else WorldState()
    many = WorldState(rules=rules) if rules else WorldState()
    by_one = [one.apply(*r) for r in records]
    by_many = many.apply_many(records)
    assert by_many == by_one and many.to_bytes() == one.to_bytes()

    def outcomes(v) -> tuple:
        return tuple((e.accepted, e.reason, e.effect) for e in (v.entries or (v,)))

    got = [outcomes(v) for v in by_one]
    assert [outcomes(v) for v in by_many] == got
    if rules is None:
        model = Model()
        want = []
        for i, (msg, t) in enumerate(msgs):
            whole = model.apply(t, msg, i)
            want.append(model.entries if isinstance(msg, MemberHeartbeat) else (whole,))
        assert got == want
    return got


def test_a_takeover_entry_naming_the_tenure_is_a_restart_takeover():
    """Property h: an entry of a newer instance of the holder's client naming the
    partition's tenure is judged as rule 5's restart takeover (property a: it carries the
    position; the new tenure is named by the record's offset); naming another tenure, or
    carrying less than the position, it is NOT_HOLDER and fences nobody."""
    ok, not_holder = (True, None, Effect.RENEWED), (False, Reason.NOT_HOLDER, None)
    took = (True, None, Effect.RESTART_TAKEOVER)
    got = _judged(
        [
            (claim("a:1", hb=HBL, version=6), 0),  # 0: tenure 0
            (beats("a:1", (0, 0, 50)), 1),  # 1
            (beats("a:2", (0, 1, 60)), 2),  # 2: names no tenure of partition 0
            (beats("a:2", (0, 0, 40)), 3),  # 3: below the position (property a)
            (beats("a:2", (0, 0, 60)), 4),  # 4: the restart takeover, tenure 4
            (beats("a:2", (0, 0, 61)), 5),  # 5: the tenure it ended
            (beats("a:2", (0, 4, 62)), 6),  # 6: its own tenure
            (beats("a:1", (0, 0, 70)), 7),  # 7: fenced
            (beats("a:3", (0, 0, 70)), 8),  # 8: a later takeover of an earlier tenure
        ]
    )
    assert got[1:] == [
        (ok,),
        (not_holder,),
        (not_holder,),
        (took,),
        (not_holder,),
        (ok,),
        ((False, Reason.FENCED, None),),
        (not_holder,),
    ]
    log = Log()
    log.put(claim("a:1", hb=HBL, version=6), 0)
    log.put(beats("a:1", (0, 0, 50)), 1)
    assert log.put(beats("a:2", (0, 1, 60)), 2).entries[0].reason is Reason.NOT_HOLDER
    assert not log.w.is_fenced("a", "1")  # a rejected entry fences nobody
    v = log.put(beats("a:2", (0, 0, 60)), 3).entries[0]
    assert v.effect is Effect.RESTART_TAKEOVER and v.previous_holder == ("a", "1")
    assert log.w.holder("g", "orders", 0) == ("a", "2") and log.w.is_fenced("a", "1")
    assert log.w.resume_offset("g", "orders", 0) == 61
    assert log.put(beats("a:2", (0, 3, 65)), 4).accepted  # the takeover's offset names it


def test_a_late_takeover_entry_naming_an_earlier_tenure_is_not_holder():
    """Issue 33 item 4, the takeover (seed 231 of ``python -m scenarios.sim --without
    idempotent-writes``): a:2's restart takeover of a:1's tenure 0, carrying 100, is
    overtaken in the transport; a:1 releases at 150, a:2 claims again (tenure 3, floor 150)
    and heartbeats 160, then the takeover lands. It names tenure 0: NOT_HOLDER. Without
    property h it is judged as tenure 3's holder's heartbeat: below the floor, a reset to
    100."""
    from .test_version6 import release6

    msgs = [
        (claim("a:1", hb=HBL, version=6), 0),  # tenure 0
        (beats("a:1", (0, 0, 90)), 1),
        (release6("a:1", 150, 0), 2),
        (claim("a:2", hb=HBL, version=6), 3),  # tenure 3
        (beats("a:2", (0, 3, 160)), 4),
        (beats("a:2", (0, 0, 100)), 5),  # the late takeover
    ]
    for without, late, want in (
        (frozenset(), (False, Reason.NOT_HOLDER, None), 160),
        (frozenset({"member_tenure"}), (True, None, Effect.RENEWED), 100),
    ):
        got = _judged(msgs, rules_without(without) if without else None)
        assert got[-1] == (late,)
        log = Log()
        log.w = WorldState(rules=rules_without(without))
        for msg, t in msgs:
            log.put(msg, t)
        assert log.w.partition_state("g", "orders", 0).last_offset == want
        assert log.w.holder("g", "orders", 0) == ("a", "2")


def test_whole_record_rules_give_every_entry_the_same_verdict():
    """Rules 0', 1 and 3 depend on the sender, the group and the time only."""
    log = Log()
    log.put(claim("a:1", hb=HBL, version=6), 0)
    log.put(claim("a:1", p=1, hb=HBL, version=6), 0)
    log.put(release_group("adm:x", 500), 10)  # paused until 500
    v = log.put(beats("a:1", (0, 0, 5), (1, 1, 5)), 20)
    assert [e.reason for e in v.entries] == [Reason.GROUP_PAUSED] * 2
    # fenced: a restart takeover of another partition fences a:1 in this world
    log2 = Log()
    log2.put(claim("a:1", hb=HBL, version=6), 0)
    log2.put(claim("a:1", p=1, hb=HBL, version=6), 0)
    assert log2.put(beat("a:2", 0, p=1, hb=HBL), 1).effect is Effect.RESTART_TAKEOVER
    v = log2.put(beats("a:1", (0, 0, 5), (1, 1, 5)), 2)
    assert [e.reason for e in v.entries] == [Reason.FENCED] * 2 and v.reason is Reason.FENCED
    assert log2.w.rejections()[Reason.FENCED] == 2
    # halted
    log3 = Log()
    log3.put(claim("a:1", hb=HBL, version=6), 0)
    log3.raw(b"g", seal(10, 1, "g", b"rules to come"), 1)
    v = log3.put(beats("a:1", (0, 0, 5)), 2)
    assert [e.reason for e in v.entries] == [Reason.GROUP_HALTED]


def test_an_earlier_tenures_late_entry_does_not_move_the_position_back():
    """Issue 33 item 4: a:1 heartbeats 100 in tenure 0, releases at 150, claims again
    (tenure 3, floor 150) and heartbeats 160; its tenure 0 entry carrying 100, overtaken in
    the transport, lands last. Without property h it is judged as tenure 3's heartbeat:
    below the floor it is a reset and sets the position back to 100."""
    from .test_version6 import release6

    for without, want in ((frozenset(), 160), (frozenset({"member_tenure"}), 100)):
        log = Log()
        log.w = WorldState(rules=rules_without(without))
        log.put(claim("a:1", hb=HBL, version=6), 0)  # tenure 0
        log.put(beats("a:1", (0, 0, 90)), 1)
        log.put(release6("a:1", 150, 0), 2)
        assert log.put(claim("a:1", hb=HBL, version=6), 3).effect is Effect.CLAIMED  # tenure 3
        log.put(beats("a:1", (0, 3, 160)), 4)
        late = log.put(beats("a:1", (0, 0, 100)), 5)
        assert late.entries[0].accepted == bool(without)
        assert log.w.partition_state("g", "orders", 0).last_offset == want


def test_amo_reservation_then_member_heartbeat():
    log = Log()
    log.put(claim("a:1", hb=HBL, version=6), 0)
    assert log.put(claim_msgs("a:1", 9, first=0), 1).effect is Effect.MESSAGES_CLAIMED
    assert log.put(beats("a:1", (0, 0, 9)), 2).accepted
    assert log.w.resume_offset("g", "orders", 0) == 10


# ----------------------------------------------------------------------------- snapshots


def test_snapshots_are_unchanged_and_keep_the_sum():
    """The partition state is what Heartbeats leave: the snapshot format and version stay;
    the window keeps each record's summed-up verdict (its entries are not in it)."""
    log, twin = Log(), Log()
    for lg in (log, twin):
        lg.put(claim("a:1", hb=HBL, version=6), 0)
        lg.put(claim("a:1", p=1, hb=HBL, version=6), 0)
    v = log.put(beats("a:1", (0, 0, 5), (1, 1, 7)), 10)
    twin.put(beat("a:1", 5, hb=HBL), 10)
    twin.put(beat("a:1", 7, p=1, hb=HBL), 10)
    data = log.w.to_bytes()
    assert data[4] == SNAPSHOT_VERSION == 6
    restored = WorldState.from_bytes(data)
    assert restored.to_bytes() == data
    assert restored.verdict(2).effect is Effect.RENEWED
    assert restored.verdict(2).entries == () and v.entries
    for p in (0, 1):
        assert log.w.partition_state("g", "orders", p) == twin.w.partition_state("g", "orders", p)
    # the restored world judges the next record as the original does
    for w in (log.w, restored):
        assert w.apply(3, 20, *encode(beats("a:1", (0, 0, 6), (1, 0, 8)))).entries[1].reason is (
            Reason.NOT_HOLDER
        )
    assert restored.to_bytes() == log.w.to_bytes()


def test_apply_many_in_any_chunks_is_apply_one_by_one():
    records = []
    for i, msg in enumerate(
        [
            claim("a:1", hb=HBL, version=6),
            claim("a:1", p=1, hb=HBL, version=6),
            beats("a:1", (0, 0, 5), (1, 1, 7)),
            beats("a:1", (0, 0, 6), (1, 0, 8)),
            beats("b:1", (0, 0, 6)),
            beat("a:1", 9, hb=HBL),
            beats("a:1", (0, 0, 10), (1, 1, 10)),
        ]
    ):
        records.append((i, 10 * i, *encode(msg)))
    one = WorldState()
    got = [one.apply(*r) for r in records]
    many = WorldState()
    assert many.apply_many(records) == got
    assert many.to_bytes() == one.to_bytes()


def test_the_c_reader_of_entries_is_the_python_one(monkeypatch):
    """``_vectors.varints`` (C) and ``varint.read_varints`` read the same entries and refuse
    the same bytes: every single-byte change of the golden record decodes alike both ways."""
    import random

    from rationalizer import _codec

    assert _codec._native_varints is not None  # (setup.py builds it)
    key, value = (bytes.fromhex(h) for h in BEATS_HEX)
    rnd = random.Random(7)
    body = value[6:]
    cases = [value]
    for _ in range(400):
        i = rnd.randrange(len(body))
        b = rnd.choice([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, rnd.randrange(256)])
        cases.append(seal(7, 1, "g", body[2:i] + bytes((b,)) + body[i + 1 :]))

    def outcome(v: bytes) -> object:
        try:
            return decode(key, v)
        except DecodeError:
            return DecodeError

    native = [outcome(v) for v in cases]
    monkeypatch.setattr(_codec, "_native_varints", None)
    assert [outcome(v) for v in cases] == native
    assert native.count(DecodeError) < len(cases) - 1  # some changes still decode


def test_the_c_reader_of_a_record_is_the_python_one():
    """``_vectors.beat`` (C) reads a MemberHeartbeat as ``decode_v7_fields`` does and refuses
    the same bytes: random records (ids in any script, many topics, numbers at their
    bounds), then single-byte changes of them, most resealed so that the check passes and
    the body is what is judged, some not (the check, the envelope), and another key. Each
    entry's identity part is the one a version 1 record of the sender carries."""
    import random

    from rationalizer import _beat_read
    from rationalizer._beat_read import read_v7

    assert _beat_read._native_beat is not None  # (setup.py builds it)
    rnd = random.Random(11)

    def number(top: int) -> int:
        return rnd.choice([0, 1, 127, 128, 16383, 16384, top, top - 1, rnd.randrange(top)])

    def record() -> tuple[bytes, bytes]:
        topics = sorted({rnd.choice(["t", "a.b", "x-y_z", "T9", "..a", "é"[:0] + "q" * 249])
                         for _ in range(rnd.randrange(1, 5))})  # fmt: skip
        entries = tuple(
            (t, p, number(2**63 - 1), number(2**63) - 1)
            for t in topics
            for p in sorted({number(2**31 - 1) for _ in range(rnd.randrange(1, 4))})
        )
        msg = MemberHeartbeat(
            client_id=rnd.choice(["c1", "ç-客户", "x" * 1024]),
            instance_id=rnd.choice(["i1", "inst-ü"]),
            group_id=rnd.choice(["g", "grp/with/slash"]),
            heartbeat_interval_ms=rnd.choice([1, 3000, 3_600_000]),
            entries=entries,
        )
        return encode(msg)

    def outcome(key: bytes, value: bytes, native: bool) -> object:
        try:
            return read_v7(key, value, native=native)
        except DecodeError as exc:
            return str(exc)

    two = bytes.fromhex("01002a")
    for body in (  # the edges a random change seldom makes (see the strict decoding test)
        _body((b"t", [E]), (b"t", [two])),
        _body((b"t", [E]), (b"tt", [two])),
        _body((b"tt", [E]), (b"t", [two])),
        _body((b"t", [E, E])),
        _body((b"t", [two, E])),
        _body((b".", [E])),
        _body((b"..", [E])),
        _body((b"q" * 250, [E])),
        _body((b"t", [E]), tail=b"\x00"),
        _body((b"t", [E]), hb=3_600_001),
        _body((b"t", [bytes.fromhex("8080808008") + b"\x00\x2a"])),
        _body((b"t", [bytes.fromhex("00ffffffffffffffff7f") + b"\x00"])),
        _body((b"t", [bytes.fromhex("0000808080808080808080") + b"\x01"])),
    ):
        for key in (b"g", b"h"):
            v = seal(7, 1, "g", body)
            assert outcome(key, v, True) == outcome(key, v, False), body.hex()
    valid = changed = 0
    for _ in range(300):
        key, value = record()
        _, _, group, at = envelope(value)
        cases = [value]
        for _ in range(8):
            i = rnd.randrange(at, len(value))
            b = rnd.choice([0x00, 0x01, 0x2E, 0x7F, 0x80, 0x81, 0xFF, rnd.randrange(256)])
            cases.append(seal(7, 1, group, value[at:i] + bytes((b,)) + value[i + 1 :]))
        for _ in range(4):  # anywhere, the envelope too, not resealed: the check
            i = rnd.randrange(len(value))
            cases.append(
                value[:i] + bytes((value[i] ^ rnd.choice([1, 0x80, 0xFF]),)) + value[i + 1 :]
            )
        cases.append(value[:1] + b"\x02" + value[2:])  # (another type, a check to match)
        cases.append(seal(7, 1, group, value[at:] + b"\x00"))
        cases.append(seal(7, 1, group, value[at:-1]))
        for v in cases:
            native = outcome(key, v, True)
            assert native == outcome(key, v, False), v.hex()
            if not isinstance(native, str):
                valid += 1
                changed += v != value
                _, _, _, _, rows = native
                assert _beat_read._native_beat(key, v) is not None
                for ident, topic, partition, _, _ in rows:  # a version 1 record's
                    one = Heartbeat(client_id=native[0], instance_id=native[1],
                                    group_id=group, topic=topic, partition=partition,
                                    last_offset=0, heartbeat_interval_ms=1)  # fmt: skip
                    k1, v1 = encode(one)
                    assert ident == v1[decode_fields(k1, v1)[7] :]
    assert valid > 300 and changed > 0  # every record, and some changes still decode
