"""Protocol version 8 (PROTOCOL.md, "Version 8"): a task's heartbeat names the tenure it
beats in, and counts only there (property i).

Before version 8 a task's late heartbeat from an earlier tenure, landing after the task
was released and claimed again, was judged as the new tenure's: a restart takeover of
tenure 0 overtaken in the transport set tenure 3's position back (issue 33 item 4; seed 489
of ``python -m scenarios.sim --without idempotent-writes``). Version 7 gave partitions this
through the MemberHeartbeat's entries; tasks heartbeat alone, so their record names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rationalizer import (
    DecodeError,
    Effect,
    HeartbeatingTask,
    Reason,
    ReleasingTask,
    WorldState,
    decode,
    encode,
)
from rationalizer._codec import envelope, seal
from rationalizer._messages import FUTURE_VERSIONS, PROTOCOL_VERSION, SUPPORTED_VERSIONS
from scenarios.sim_rules import rules_without

from .helpers import Log, assert_every_byte_is_under_the_check, claim, ids, release_group
from .test_version6 import release6
from .test_version7 import _judged

HBL = 100
TASK = "wordcount.task"

# ----------------------------------------------------------------------------- golden vectors

BEAT = HeartbeatingTask(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic=TASK,
    partition=3,
    heartbeat_interval_ms=1000,
    positions=(("lines", 41), ("words", -1)),
    tenure=42,
)
BEAT_HEX = (
    "672f776f7264636f756e742e7461736b2f33",
    "0808ea550a950167000003e8000000000000002a02056c696e65732a05776f7264730002633102693101670e"
    "776f7264636f756e742e7461736b03",
)
SMALL = HeartbeatingTask(
    client_id="c1",
    instance_id="i1",
    group_id="g",
    topic="t",
    partition=0,
    heartbeat_interval_ms=3000,
    positions=(("a", 0),),
    tenure=0,
)
SMALL_HEX = ("672f742f30", "0808688e1a5c016700000bb80000000000000000010161010263310269310167017400")


def tbeat(
    who: str, tenure: int | None, *positions: tuple[str, int], hb: int = HBL, p: int = 0
) -> HeartbeatingTask:
    """A HeartbeatingTask of ``who`` for task orders/``p`` with ``positions``, naming
    ``tenure`` (version 8) or none (version 3)."""
    return HeartbeatingTask(
        **ids(who),
        group_id="g",
        topic="orders",
        partition=p,
        heartbeat_interval_ms=hb,
        positions=positions,
        tenure=tenure,
    )


def task_claim(who: str, p: int = 0):
    return claim(who, p=p, hb=HBL, version=6)  # a version 6 claim: its offset names the tenure


@pytest.mark.parametrize(("msg", "hexes"), [(BEAT, BEAT_HEX), (SMALL, SMALL_HEX)])
def test_golden_records(msg, hexes):
    key, value = encode(msg)
    assert (key.hex(), value.hex()) == hexes
    assert decode(key, value) == msg
    assert msg.version == 8 and PROTOCOL_VERSION >= 8 and 8 in SUPPORTED_VERSIONS
    assert envelope(value)[:3] == (8, 8, "g")
    assert 8 not in FUTURE_VERSIONS


def test_golden_vectors_are_in_protocol_md():
    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    for key, value in (BEAT_HEX, SMALL_HEX):
        assert f"`{key}`" in text and f"`{value}`" in text


def test_without_a_tenure_it_is_the_version_3_record():
    v3 = tbeat("c1:i1", None, ("a", 5))
    assert v3.version == 3 and encode(v3)[1][:2] == b"\x03\x08"
    assert decode(*encode(v3)) == v3


# ----------------------------------------------------------------------------- strictness


def test_every_byte_is_under_the_check():
    assert_every_byte_is_under_the_check(*(bytes.fromhex(h) for h in BEAT_HEX))


IDENT = b"\x02c1\x02i1\x01g\x01t\x00"  # c1, i1, group g, topic t, partition 0
VEC = b"\x01\x01a\x01"  # one source, a, position 0


def _body(
    hb: int = 1000, tenure: bytes = bytes(8), vec: bytes = VEC, ident: bytes = IDENT
) -> bytes:
    return hb.to_bytes(4, "big") + tenure + vec + ident


@pytest.mark.parametrize(
    ("typ", "key", "body", "why"),
    [
        (8, b"g/t/0", _body(), None),  # the valid one the others change
        (1, b"g/t/0", _body(), "unknown version 8 message type"),
        (9, b"g/t/0", _body(), "unknown version 8 message type"),
        (8, b"g/t/1", _body(), "key does not match"),
        (8, b"g/t/0", _body(hb=0), "heartbeat_interval_ms"),
        (8, b"g/t/0", _body(hb=3_600_001), "heartbeat_interval_ms"),
        (8, b"g/t/0", _body(tenure=b"\xff" * 8), "tenure"),
        (8, b"g/t/0", _body(vec=b"\x00"), "without sources"),
        (8, b"g/t/0", _body(vec=b"\x02\x01b\x01\x01a\x01"), "sorted"),
        (8, b"g/t/0", _body() + b"\x00", "trailing"),
        (8, b"g/t/0", _body()[:-1], "truncated"),
        (8, b"g/t/0", _body()[:10], "truncated"),
        (8, b"h/t/0", _body(ident=b"\x02c1\x02i1\x01h\x01t\x00"), "group"),
        (8, b"g/t/0", _body(ident=b"\x02c1\x02i1\x01g\x02t!\x00"), "topic"),
    ],
)
def test_version_8_decodes_strictly(typ, key, body, why):
    value = seal(8, typ, "g", body)
    envelope(value)  # a well-formed envelope...
    if why is None:
        assert decode(key, value) == HeartbeatingTask(
            **ids("c1:i1"),
            group_id="g",
            topic="t",
            partition=0,
            heartbeat_interval_ms=1000,
            positions=(("a", 0),),
            tenure=0,
        )
        assert Log().raw(key, value, 0).reason is Reason.NOT_HOLDER  # judged: no such task
        return
    with pytest.raises(DecodeError, match=why):  # ...of a record that is not valid
        decode(key, value)
    assert Log().raw(key, value, 0).reason is Reason.INVALID_RECORD


@pytest.mark.parametrize(
    ("tenure", "version"),
    [(-1, None), (2**63, None), (True, None), ("1", None), (1.0, None), (None, 8), (3, 3)],
)
def test_invalid_tenures_cannot_be_built(tenure, version):
    extra = {} if version is None else {"version": version}
    with pytest.raises((ValueError, TypeError)):
        HeartbeatingTask(
            **ids("a:1"),
            group_id="g",
            topic="t",
            partition=0,
            heartbeat_interval_ms=1,
            positions=(("a", 0),),
            tenure=tenure,
            **extra,
        )


# ----------------------------------------------------------------------------- property i


def test_a_task_heartbeat_renews_only_in_the_tenure_it_names():
    ok, not_holder = (True, None, Effect.RENEWED), (False, Reason.NOT_HOLDER, None)
    got = _judged(
        [
            (task_claim("a:1"), 0),  # 0: tenure 0
            (tbeat("a:1", 0, ("a", 5), ("b", 1)), 1),  # 1
            (tbeat("a:1", 1, ("a", 6), ("b", 1)), 2),  # 2: no such tenure
            (tbeat("a:1", None, ("a", 7), ("b", 1)), 3),  # 3: version 3, unnamed: as before
            (tbeat("b:1", 0, ("a", 8), ("b", 1)), 4),  # 4: another client
            (claim("a:1", p=1, hb=HBL), 5),  # 5: a version 1 claim: an unnamed tenure
            (tbeat("a:1", 0, ("a", 5), p=1), 6),  # 6: an unnamed tenure is never named
            (tbeat("a:1", None, ("a", 5), p=1), 7),  # 7: the version 3 one renews it
        ]
    )
    assert got[1:] == [(ok,), (not_holder,), (ok,), (not_holder,), got[5], (not_holder,), (ok,)]
    assert got[5] == ((True, None, Effect.CLAIMED),)


def test_in_its_tenure_it_is_judged_as_the_version_3_heartbeat():
    """Renewed, renewed late, a late (lower) position kept (property g), a new lease: the
    same verdicts and the same state as the version 3 HeartbeatingTasks of a twin log."""
    twin, log = Log(), Log()
    for lg in (twin, log):
        lg.put(task_claim("a:1"), 0)
        lg.put(tbeat("a:1", None, ("a", 50), ("b", 0)), 1)
    steps = [(55, 120, HBL), (5, 150, HBL), (40, 420, 400), (60, 430, 400), (10, 1500, 400)]
    for a, t, hb in steps:
        want = twin.put(tbeat("a:1", None, ("a", a), ("b", 0), hb=hb), t)
        got = log.put(tbeat("a:1", 0, ("a", a), ("b", 0), hb=hb), t)
        assert got == want
    for lg in (twin, log):
        state = lg.w.partition_state("g", "orders", 0)
        assert state.last_offset == 61  # a 60 and b 0: 61 records, so 61 - 1 + 1
    assert twin.w.partition_state("g", "orders", 0) == log.w.partition_state("g", "orders", 0)
    assert twin.w.to_bytes() == log.w.to_bytes()


def test_a_takeover_naming_the_tenure_is_a_restart_takeover():
    """A newer instance of the holder's client naming the task's tenure takes it over by
    rule 5 (property a: carrying at least the position); naming another tenure it is
    NOT_HOLDER and fences nobody. The takeover's offset names the new tenure."""
    ok, not_holder = (True, None, Effect.RENEWED), (False, Reason.NOT_HOLDER, None)
    took = (True, None, Effect.RESTART_TAKEOVER)
    got = _judged(
        [
            (task_claim("a:1"), 0),  # 0: tenure 0
            (tbeat("a:1", 0, ("a", 50)), 1),  # 1
            (tbeat("a:2", 1, ("a", 60)), 2),  # 2: names no tenure of the task
            (tbeat("a:2", 0, ("a", 40)), 3),  # 3: below the position (property a)
            (tbeat("a:2", 0, ("a", 60)), 4),  # 4: the restart takeover, tenure 4
            (tbeat("a:2", 0, ("a", 61)), 5),  # 5: the tenure it ended
            (tbeat("a:2", 4, ("a", 62)), 6),  # 6: its own tenure
            (tbeat("a:1", 0, ("a", 70)), 7),  # 7: fenced
            (tbeat("a:3", 0, ("a", 70)), 8),  # 8: a later takeover of an earlier tenure
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
    log.put(task_claim("a:1"), 0)
    log.put(tbeat("a:1", 0, ("a", 50)), 1)
    assert log.put(tbeat("a:2", 1, ("a", 60)), 2).reason is Reason.NOT_HOLDER
    assert not log.w.is_fenced("a", "1")  # a rejected heartbeat fences nobody
    v = log.put(tbeat("a:2", 0, ("a", 60)), 3)
    assert v.effect is Effect.RESTART_TAKEOVER and v.previous_holder == ("a", "1")
    assert log.w.holder("g", "orders", 0) == ("a", "2") and log.w.is_fenced("a", "1")
    assert log.w.partition_state("g", "orders", 0).positions == (("a", 60),)
    assert log.put(tbeat("a:2", 3, ("a", 65)), 4).accepted  # the takeover's offset names it


def _late_takeover(rules=None) -> Log:
    """Seed 489 of ``python -m scenarios.sim --without idempotent-writes``, made small: a:2's
    restart takeover of a:1's tenure 0, carrying a 100, is overtaken in the transport; a:1
    releases at a 150, a:2 claims again (tenure 3) and heartbeats a 160, then the takeover
    lands."""
    log = Log()
    if rules is not None:
        log.w = WorldState(rules=rules)
    log.put(task_claim("a:1"), 0)  # tenure 0
    log.put(tbeat("a:1", 0, ("a", 90)), 1)
    rel = ReleasingTask(
        **ids("a:1"), group_id="g", topic="orders", partition=0, positions=(("a", 150),),
        tenure=0,
    )  # fmt: skip
    assert log.put(rel, 2).effect is Effect.RELEASED
    assert log.put(task_claim("a:2"), 3).effect is Effect.CLAIMED  # tenure 3
    assert log.put(tbeat("a:2", 3, ("a", 160)), 4).accepted
    return log


def test_a_late_takeover_naming_an_earlier_tenure_is_not_holder():
    log = _late_takeover()
    late = log.put(tbeat("a:2", 0, ("a", 100)), 5)
    assert late.reason is Reason.NOT_HOLDER
    assert log.w.partition_state("g", "orders", 0).positions == (("a", 160),)
    assert log.w.holder("g", "orders", 0) == ("a", "2")


def test_without_property_i_the_late_takeover_sets_the_position_back():
    """The experiment the simulator's ``--without task_tenure`` runs: the tenure is not
    checked, so the late takeover is tenure 3's holder's heartbeat, below the floor: a
    reset to a 100 (what seed 489 finds)."""
    log = _late_takeover(rules_without(frozenset({"task_tenure"})))
    late = log.put(tbeat("a:2", 0, ("a", 100)), 5)
    assert late.accepted
    assert log.w.partition_state("g", "orders", 0).positions == (("a", 100),)


def test_whole_record_rules_come_first():
    """Rules 1 and 3 (fenced, paused) and a halted group judge the record before property
    i, as they do a version 3 heartbeat."""
    log = Log()
    log.put(task_claim("a:1"), 0)
    log.put(release_group("adm:x", 500), 10)
    assert log.put(tbeat("a:1", 0, ("a", 5)), 20).reason is Reason.GROUP_PAUSED
    log2 = Log()  # a restart takeover of another task fences a:1 in this world
    log2.put(task_claim("a:1"), 0)
    log2.put(task_claim("a:1", p=1), 1)
    assert log2.put(tbeat("a:2", 1, ("a", 0), p=1), 2).effect is Effect.RESTART_TAKEOVER
    assert log2.put(tbeat("a:1", 0, ("a", 5)), 3).reason is Reason.FENCED
    log3 = Log()
    log3.put(task_claim("a:1"), 0)
    log3.raw(b"g", seal(10, 1, "g", b"rules to come"), 1)
    assert log3.put(tbeat("a:1", 0, ("a", 5)), 2).reason is Reason.GROUP_HALTED


def test_snapshots_are_unchanged():
    """A version 8 heartbeat leaves what a version 3 one leaves: the snapshot of the twin
    worlds is the same bytes, and the restored world judges the next record alike."""
    twin, log = Log(), Log()
    for lg in (twin, log):
        lg.put(task_claim("a:1"), 0)
    twin.put(tbeat("a:1", None, ("a", 5), ("b", 2)), 10)
    log.put(tbeat("a:1", 0, ("a", 5), ("b", 2)), 10)
    assert log.w.to_bytes() == twin.w.to_bytes()
    restored = WorldState.from_bytes(log.w.to_bytes())
    for w in (log.w, restored):
        assert w.apply(2, 20, *encode(tbeat("a:1", 1, ("a", 6), ("b", 2)))).reason is (
            Reason.NOT_HOLDER
        )
        assert w.apply(3, 21, *encode(tbeat("a:1", 0, ("a", 6), ("b", 2)))).accepted
    assert restored.to_bytes() == log.w.to_bytes()


def test_apply_many_and_the_model_agree_on_a_mixed_log():
    """Versions 3 and 8 heartbeats of tasks, version 7 of partitions, releases and claims:
    apply, apply_many and the reference model (``_judged``) give the same outcomes."""
    from .test_version7 import beats

    _judged(
        [
            (task_claim("a:1"), 0),
            (claim("a:1", p=1, hb=HBL, version=6), 1),
            (tbeat("a:1", 0, ("a", 5)), 2),
            (beats("a:1", (1, 1, 7)), 3),
            (tbeat("a:1", None, ("a", 6)), 4),
            (tbeat("a:1", 2, ("a", 7)), 5),
            (tbeat("b:1", 0, ("a", 8)), 6),
            (release6("a:1", 9, 1, p=1), 7),
            (tbeat("a:2", 0, ("a", 9)), 8),
            (tbeat("a:2", 8, ("a", 10)), 9),
            (tbeat("a:1", 0, ("a", 11)), 10),
        ]
    )


def test_a_version_8_heartbeat_of_a_partition_is_not_a_thing():
    """Only tasks' heartbeats gained the tenure (partitions name theirs in a MemberHeartbeat
    entry): byte 8 with the Heartbeat's type is not a record."""
    body = _body()
    value = seal(8, 1, "g", body)
    assert Log().raw(b"g/t/0", value, 0).reason is Reason.INVALID_RECORD
