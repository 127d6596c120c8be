"""Published snapshot records: golden vectors (record versions 1 and 2, and announcements),
strict parsing, per-group tags, the rules a snapshot was made under, and the property that a
reader restoring the newest valid snapshot and replaying the tail gets exactly the state and
verdicts of a full replay, whatever forged, corrupt or untagged snapshots are published after
the valid ones."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rationalizer import PROTOCOL_VERSION, SnapshotError, WorldState, encode
from rationalizer._snapshot_record import (
    announcement_key,
    config_fingerprint,
    encode_announcement,
    encode_snapshot_record,
    fingerprint,
    is_announcement_key,
    parse_announcement,
    parse_snapshot_record,
    restore_snapshot,
    snapshot_key,
)

from .helpers import KEY, OTHER_KEY, beat, claim
from .test_properties import KEYS, logs

# -------------------------------------------------------------------- golden vectors

#: record version 1 (no rules: written by replayers of protocol version 5 and older, and
#: still read, as "rules unknown")
GOLDEN = [
    # (description, coordination partition, admin keys, records applied, key, value)
    (
        "empty world, window 4, partition 3, no keys",
        3,
        None,
        [],
        b"3/-",
        "4c4d5352010300b762f6b9a122ae3ad610fb9fedcca113676ef29169e17cff59343b5ba89ddf70001c"
        "4c4d5753010400ffffffffffffffffff010000000000000000000000",
    ),
    (
        "claim + heartbeat(41) of c1:i1 at 1000/1001, window 4, partition 0, no keys",
        0,
        None,
        [claim("c1:i1"), beat("c1:i1", 41)],
        b"0/-",
        "4c4d535201000256750c66b800d34933e6483593825cfefd40c11bc04604301a4ba82e02f3aee200"
        "2f4c4d5753010402d20f000000000000000000010167066f72646572730003026331026931e807d2"
        "0f2a000201011013",
    ),
    (
        "claim of c1:i1 at 1000, window 4, partition 0, group g keyed with 00..1f",
        0,
        {"g": KEY},
        [claim("c1:i1")],
        b"0/d0caae7217b057be",
        "4c4d5352010001ac569a5342882108ebd21a2a45799b88c396c538cd26f9b0c6fe667c940941e701"
        "016723c56401a1a5839a07daa7288c27f1aea5d1609af12b30143ad7e497c8a6a4ec2b4c4d575301"
        "0401d00f000000000000000000010167066f72646572730001026331026931e807d00f010110",
    ),
]


#: record version 2: the publisher's rules (protocol version) after the version byte, in the
#: key and under every tag; (description, cp, keys, records, rules, key, value)
GOLDEN_V2 = [
    (
        "empty world, window 4, partition 3, no keys, rules 5",
        3,
        None,
        [],
        5,
        b"3/-@5",
        "4c4d535202050300b762f6b9a122ae3ad610fb9fedcca113676ef29169e17cff59343b5ba89ddf7000"
        "1c4c4d5753010400ffffffffffffffffff010000000000000000000000",
    ),
    (
        "claim + heartbeat(41) of c1:i1 at 1000/1001, window 4, partition 0, no keys, rules 5",
        0,
        None,
        [claim("c1:i1"), beat("c1:i1", 41)],
        5,
        b"0/-@5",
        "4c4d53520205000256750c66b800d34933e6483593825cfefd40c11bc04604301a4ba82e02f3aee2"
        "002f4c4d5753010402d20f000000000000000000010167066f72646572730003026331026931e807"
        "d20f2a000201011013",
    ),
    (
        "claim of c1:i1 at 1000, window 4, partition 0, group g keyed with 00..1f, rules 6",
        0,
        {"g": KEY},
        [claim("c1:i1")],
        6,
        b"0/d0caae7217b057be@6",
        "4c4d535202060001ac569a5342882108ebd21a2a45799b88c396c538cd26f9b0c6fe667c940941e7"
        "0101678211a7d6cd3d9161f2669e00d9239f2b197075a6e6ee37ab047944e2b555edc92b4c4d5753"
        "010401d00f000000000000000000010167066f72646572730001026331026931e807d00f010110",
    ),
]

#: announcements: (description, cp, keyed groups, rules, written ms, expiry ms, key, value)
GOLDEN_ANNOUNCEMENTS = [
    (
        "partition 3, no keys, rules 5, written 1,700,000,000,000, expires 10 min later",
        3,
        [],
        5,
        1_700_000_000_000,
        1_700_000_600_000,
        b"3/-@5/live",
        "4c4d43410105030080d095ffbc31c09fbaffbc31",
    ),
    (
        "partition 0, group g keyed, rules 6, same times",
        0,
        ["g"],
        6,
        1_700_000_000_000,
        1_700_000_600_000,
        b"0/d0caae7217b057be@6/live",
        "4c4d434101060001016780d095ffbc31c09fbaffbc31",
    ),
]


def _world(keys, msgs) -> WorldState:
    w = WorldState(verdict_window=4, admin_keys=keys)
    for i, m in enumerate(msgs):
        w.apply(i, 1000 + i, *encode(m))
    return w


@pytest.mark.parametrize(("what", "cp", "keys", "msgs", "key", "value"), GOLDEN)
def test_golden_vectors_of_record_version_1(what, cp, keys, msgs, key, value) -> None:
    w = _world(keys, msgs)
    got_key, got_value = encode_snapshot_record(w, cp, keys, rules=None)
    assert (got_key, got_value.hex()) == (key, value), what
    snap = parse_snapshot_record(key, bytes.fromhex(value))
    assert snap.covered == w.applied_through and snap.coord_partition == cp
    assert snap.digest == hashlib.sha256(w.to_bytes()).digest()
    assert snap.rules is None and snap.config == fingerprint(keys or {})
    # read, but never restored: whose rules it was folded under is unknown
    with pytest.raises(SnapshotError, match="unknown rules"):
        restore_snapshot(snap, cp, keys)


@pytest.mark.parametrize(("what", "cp", "keys", "msgs", "rules", "key", "value"), GOLDEN_V2)
def test_golden_vectors(what, cp, keys, msgs, rules, key, value) -> None:
    w = _world(keys, msgs)
    got_key, got_value = encode_snapshot_record(w, cp, keys, rules=rules)
    assert (got_key, got_value.hex()) == (key, value), what
    snap = parse_snapshot_record(key, bytes.fromhex(value))
    assert snap.covered == w.applied_through and snap.coord_partition == cp
    assert snap.digest == hashlib.sha256(w.to_bytes()).digest()
    assert snap.rules == rules and snap.config == f"{fingerprint(keys or {})}@{rules}"
    assert restore_snapshot(snap, cp, keys, rules=rules).to_bytes() == w.to_bytes()
    # a replayer of other rules never restores it
    with pytest.raises(SnapshotError, match=f"rules of protocol version {rules}"):
        restore_snapshot(snap, cp, keys, rules=rules + 1)


@pytest.mark.parametrize(
    ("what", "cp", "groups", "rules", "written", "expires", "key", "value"),
    GOLDEN_ANNOUNCEMENTS,
)
def test_announcement_golden_vectors(what, cp, groups, rules, written, expires, key, value):
    got = encode_announcement(cp, groups, written_ms=written, expires_ms=expires, rules=rules)
    assert (got[0], got[1].hex()) == (key, value), what
    a = parse_announcement(key, bytes.fromhex(value))
    assert (a.coord_partition, a.keyed_groups, a.rules) == (cp, tuple(groups), rules)
    assert (a.written_ms, a.expires_ms) == (written, expires)
    assert a.config == config_fingerprint(groups, rules)
    assert is_announcement_key(key) and key == announcement_key(cp, groups, rules)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        (b"3/-@5/live", None, "without a value"),
        (b"3/-@5/live", bytes.fromhex("4c4d43410105030080d095ffbc31c09fbaffbc"), "truncated"),
        (b"3/-@5/live", bytes.fromhex("4c4d43410105030080d095ffbc31c09fbaffbc3100"), "trailing"),
        (b"3/-@6/live", bytes.fromhex("4c4d43410105030080d095ffbc31c09fbaffbc31"), "key"),
        (b"3/-@5/live", bytes.fromhex("4c4d43410205030080d095ffbc31c09fbaffbc31"), "version"),
        (b"3/-@5/live", bytes.fromhex("4c4d434101050300c09fbaffbc3101"), "expires before"),
    ],
)
def test_bad_announcements_are_refused(key, value, why) -> None:
    with pytest.raises(SnapshotError, match=why):
        parse_announcement(key, value)


def test_fingerprint_names_the_keyed_groups_not_the_keys() -> None:
    assert fingerprint([]) == "-"
    assert fingerprint(["b", "a"]) == fingerprint(["a", "b"]) != fingerprint(["a"])
    assert snapshot_key(7, {"g": KEY}) == snapshot_key(7, {"g": OTHER_KEY})


def test_the_record_key_names_the_rules() -> None:
    assert snapshot_key(7, {}) == f"7/-@{PROTOCOL_VERSION}".encode()
    assert snapshot_key(7, {}, 5) != snapshot_key(7, {}, 6)
    assert snapshot_key(7, {}, None) == b"7/-"
    assert config_fingerprint(["g"], 6) == "d0caae7217b057be@6"
    # the rules are under every tag: a record moved to other rules does not verify
    keys = {"g": KEY}
    k, v = encode_snapshot_record(_world(keys, [claim("c1:i1")]), 0, keys, rules=5)
    moved = v[:5] + bytes([6]) + v[6:]
    snap = parse_snapshot_record(k.replace(b"@5", b"@6"), moved)
    with pytest.raises(SnapshotError, match="tag"):
        restore_snapshot(snap, 0, keys, rules=6)


# ------------------------------------------------------------------------ refusals


def _keyed_world() -> WorldState:
    return _world({"g": KEY, "h": OTHER_KEY}, [claim("c1:i1"), claim("c2:i1", g="h")])


def test_each_group_tag_is_checked_with_that_groups_key_only() -> None:
    keys = {"g": KEY, "h": OTHER_KEY}
    key, value = encode_snapshot_record(_keyed_world(), 0, keys)
    snap = parse_snapshot_record(key, value)
    assert snap.keyed_groups == ("g", "h")
    restore_snapshot(snap, 0, keys)
    # g's key standing in for h's (and the other way round) verifies nothing
    for wrong in ({"g": KEY, "h": KEY}, {"g": OTHER_KEY, "h": OTHER_KEY}):
        with pytest.raises(SnapshotError, match="tag"):
            restore_snapshot(snap, 0, wrong)
    # a replayer configured for g only (or for no group) never restores a world replayed
    # with h keyed: its verdicts for h's records could differ
    for other in ({"g": KEY}, None, {"g": KEY, "h": OTHER_KEY, "x": KEY}):
        with pytest.raises(SnapshotError, match="other groups"):
            restore_snapshot(snap, 0, other)
    # another coordination partition's snapshot is refused
    with pytest.raises(SnapshotError, match="partition"):
        restore_snapshot(snap, 1, keys)


def test_untagged_and_forged_snapshots_are_refused() -> None:
    w = _world({"g": KEY}, [claim("c1:i1")])
    # untagged: published by a replayer without keys
    key, value = encode_snapshot_record(_world(None, [claim("c1:i1")]), 0, None)
    with pytest.raises(SnapshotError):
        restore_snapshot(parse_snapshot_record(key, value), 0, {"g": KEY})
    # forged: a world of the forger's choosing, tagged with another key
    forged = _world({"g": OTHER_KEY}, [claim("evil:1")])
    key, value = encode_snapshot_record(forged, 0, {"g": OTHER_KEY})
    with pytest.raises(SnapshotError, match="tag"):
        restore_snapshot(parse_snapshot_record(key, value), 0, {"g": KEY})
    # a valid tag moved onto another world: the digest or the tag gives it away
    key, good = encode_snapshot_record(w, 0, {"g": KEY})
    swapped = good[: -len(w.to_bytes())] + forged.to_bytes()
    with pytest.raises(SnapshotError):
        restore_snapshot(parse_snapshot_record(key, swapped), 0, {"g": KEY})


@settings(max_examples=200)
@given(st.data())
def test_corrupt_records_never_restore_something_else(data) -> None:
    w = _keyed_world()
    keys = {"g": KEY, "h": OTHER_KEY}
    key, value = encode_snapshot_record(w, 0, keys)
    buf = bytearray(value)
    how = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del buf[data.draw(st.integers(0, len(buf) - 1)) :]
    else:
        buf += data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(SnapshotError):
        restore_snapshot(parse_snapshot_record(key, bytes(buf)), 0, keys)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"0/-", None),
        (b"0/-", b""),
        (b"0/-", b"LMSR"),
        (b"0/-", b"LMSR\x02"),
        (b"0/-", b"LMSR\x02\x00"),
        (b"0/-", b"LMSR\x03"),
        (b"9/-", None),
    ],
)
def test_garbage_is_a_snapshot_error(key, value) -> None:
    with pytest.raises(SnapshotError):
        parse_snapshot_record(key, value)


def test_key_must_match_value() -> None:
    _, value = encode_snapshot_record(_world(None, []), 2)
    with pytest.raises(SnapshotError, match="key"):
        parse_snapshot_record(b"3/-", value)


# ------------------------------------------------------------------------ property

#: what can sit in the snapshot topic besides valid snapshots
BAD_KINDS = ["corrupt", "forged", "untagged", "other_group", "future_gap"]


def _newest_valid(published, keys):
    """The reader's rule: newest first, the first that restores."""
    for snap_key, value in reversed(published):
        try:
            return restore_snapshot(parse_snapshot_record(snap_key, value), 0, keys)
        except SnapshotError:
            continue
    return None


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(logs(max_size=60), st.data())
def test_snapshot_plus_tail_equals_full_replay(records, data) -> None:
    full = WorldState(verdict_window=8, admin_keys=KEYS)
    verdicts = full.apply_many([r[:4] for r in records])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=4)))
    published: list[tuple[bytes, bytes]] = []
    w = WorldState(verdict_window=8, admin_keys=KEYS)
    done = 0
    for cut in cuts:
        w.apply_many([r[:4] for r in records[done:cut]])
        done = cut
        published.append(encode_snapshot_record(w, 0, KEYS))
        for kind in data.draw(st.lists(st.sampled_from(BAD_KINDS), max_size=2)):
            if kind == "corrupt":
                k, v = encode_snapshot_record(w, 0, KEYS)
                i = data.draw(st.integers(0, len(v) - 1))
                v = v[:i] + bytes([v[i] ^ 0x5A]) + v[i + 1 :]
            elif kind == "forged":  # a fully replayed world, tagged with the wrong key
                k, v = encode_snapshot_record(_rekeyed(full, {"h": OTHER_KEY}), 0, {"h": OTHER_KEY})
            elif kind == "untagged":
                k, v = encode_snapshot_record(_rekeyed(w, None), 0, None)
            elif kind == "other_group":  # tagged for another group with the right key
                k, v = encode_snapshot_record(_rekeyed(w, {"x": KEY}), 0, {"x": KEY})
            else:  # valid, but for another partition
                k, v = encode_snapshot_record(w, 1, KEYS)
            published.append((k, v))
    # the log is truncated up to what the newest valid snapshot covers (or not at all)
    restored = _newest_valid(published, KEYS)
    start = 0 if restored is None else restored.applied_through + 1
    if restored is None:
        restored = WorldState(verdict_window=8, admin_keys=KEYS)
    tail = [r[:4] for r in records if r[0] >= start]
    assert restored.apply_many(tail) == [
        v for r, v in zip(records, verdicts, strict=True) if r[0] >= start
    ]
    assert restored.to_bytes() == full.to_bytes()
    for o, *_ in records:
        assert restored.verdict(o) == full.verdict(o)


def _rekeyed(w: WorldState, keys) -> WorldState:
    """The same bytes restored under other keys (what a replayer so configured publishes)."""
    return WorldState.from_bytes(w.to_bytes(), admin_keys=keys)


def test_protocol_md_lists_these_golden_vectors() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text(encoding="utf-8")
    section = text.split("### Snapshot record golden vectors", 1)[1].split("\n## ", 1)[0]
    for _what, _cp, _keys, _msgs, key, value in GOLDEN:
        assert f"| `{key.decode()}` | `{value}` |" in section
    for _what, _cp, _keys, _msgs, _rules, key, value in GOLDEN_V2:
        assert f"| `{key.decode()}` | `{value}` |" in section
    for *_, key, value in GOLDEN_ANNOUNCEMENTS:
        assert f"| `{key.decode()}` | `{value}` |" in section
