import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rationalizer import Effect, Reason, SnapshotError, WorldState

from .helpers import KEY, Log, beat, claim, claim_msgs, release, release_group

KEYS = {"h": KEY}


def _busy_world() -> WorldState:
    log = Log(admin_keys=KEYS)
    log.put(claim("a:1", hb=300), 0)
    log.put(claim("b:1", p=1), 0)
    log.put(claim_msgs("a:1", 30), 5)
    log.put(beat("a:2", 30, hb=3_600_000), 10)  # restart takeover (current position), fences a:1
    log.put(claim("c:1", p=1, hb=77), 5000)  # stale takeover
    log.put(release_group("adm:x", 9000, g="h"), 5001)  # unauthenticated
    log.put(release_group("adm:x", 9000, g="h", key=KEY), 5001)
    log.put(claim("z:9", g="h"), 5002)
    log.raw(b"junk", b"\x07", 5003)
    return log.w


def test_round_trip_is_canonical_and_keeps_everything():
    w = _busy_world()
    b = w.to_bytes()
    r = WorldState.from_bytes(b, admin_keys=KEYS)
    assert r.to_bytes() == b
    assert r.applied_through == w.applied_through == 8
    assert r.now == 5003
    assert r.holder("g", "orders", 0) == ("a", "2")
    assert r.is_fenced("a", "1")
    assert r.paused_until("h") == 9000 and r.pause_admin("h") == ("adm", "x")
    assert r.verdict(3).effect is Effect.RESTART_TAKEOVER and r.verdict(3).previous_holder == (
        "a",
        "1",
    )
    assert r.verdict(5).reason is Reason.UNAUTHENTICATED
    assert r.rejections() == w.rejections()
    assert r.rejections()[Reason.UNAUTHENTICATED] == 1
    assert r.skipped == 1
    assert r.resume_offset("g", "orders", 0) == 31
    assert r.partitions() == w.partitions()
    assert [s.heartbeat_interval_ms for s in r.partitions("g")] == [3_600_000, 77]
    assert r.has_admin_key("h")
    assert KEY not in b


def test_the_snapshot_sees_the_world_through_its_image():
    """``image`` / ``from_image`` are the format's one view of a world: the bytes are the
    image's, and a world restored from the image the reader gives writes the same bytes."""
    from rationalizer._snapshot import dump, load

    w = _busy_world()
    b = w.to_bytes()
    assert dump(w.image()) == b
    image = load(b)
    assert image.applied_through == 8 and image.now == 5003
    r = WorldState.from_image(image, admin_keys=KEYS)
    assert r.to_bytes() == b
    assert r.partitions() == w.partitions()


def test_release_group_voided_list_survives():
    log = Log()
    log.put(claim("a:1"), 0)
    log.put(release_group("adm:x", 100), 1)
    r = WorldState.from_bytes(log.w.to_bytes())
    assert r.verdict(1).voided == (("orders", 0, "a", "1"),)


def test_expired_pause_is_not_in_snapshot():
    log = Log()
    log.put(release_group("adm:x", 100), 0)
    log.put(claim("a:1", g="other"), 200)
    assert log.w.paused_until("g") is None
    fresh = Log()
    fresh.put(release_group("adm:x", 100), 0)
    fresh.put(claim("a:1", g="other"), 200)
    assert log.w.to_bytes() == fresh.w.to_bytes()


def test_empty_world():
    w = WorldState(verdict_window=10)
    r = WorldState.from_bytes(w.to_bytes())
    assert r.to_bytes() == w.to_bytes() and r.verdict_window == 10


@pytest.mark.parametrize("bad", [b"", b"LMWS", b"XXXX\x01", b"LMWS\x02", "LMWS", None])
def test_rejects_garbage(bad):
    with pytest.raises(SnapshotError):
        WorldState.from_bytes(bad)


def test_every_truncation_and_trailing_byte_rejected():
    b = _busy_world().to_bytes()
    for n in range(len(b)):
        with pytest.raises(SnapshotError):
            WorldState.from_bytes(b[:n])
    with pytest.raises(SnapshotError):
        WorldState.from_bytes(b + b"\x00")


@settings(max_examples=300)
@given(st.data())
def test_corruption_raises_snapshot_error_or_loads_canonically(data):
    b = bytearray(_busy_world().to_bytes())
    i = data.draw(st.integers(0, len(b) - 1))
    b[i] = data.draw(st.integers(0, 255))
    try:
        r = WorldState.from_bytes(bytes(b))
    except SnapshotError:
        return
    assert r.to_bytes() == bytes(b)


def test_holder_interval_is_validated_on_restore():
    log = Log()
    log.put(claim("a:1", hb=5), 0)
    log.put(beat("a:1", 0, hb=5), 0)
    b = log.w.to_bytes()
    # the partition record ends: ..., holder ids, hb (0x05), beat (zigzag 0), last+1, claimed+1
    i = b.rindex(b"\x05\x00\x01\x00")
    assert WorldState.from_bytes(b).partition_state("g", "orders", 0).heartbeat_interval_ms == 5
    for bad in (b"\x00", b"\x81\xdd\xdb\x01"):  # 0 and one hour + 1 ms
        with pytest.raises(SnapshotError):
            WorldState.from_bytes(b[:i] + bad + b[i + 1 :])


def _one_partition_world(*records) -> bytes:
    log = Log()
    for msg, t in records:
        log.put(msg, t)
    return log.w.to_bytes()


def test_a_partition_without_a_position_round_trips_as_one():
    b = _one_partition_world((claim("a:1", hb=5), 0))
    r = WorldState.from_bytes(b)
    assert r.to_bytes() == b
    s = r.partition_state("g", "orders", 0)
    assert not s.has_position and (s.last_offset, s.claimed_through) == (-1, -1)
    assert r.resume_offset("g", "orders", 0) is None
    # flags 0x01 (held, no position), ids, hb, beat, and no position fields: the window follows
    i = b.index(b"\x01\x01a\x011\x05\x00")
    assert b[i + 7 :].startswith(b"\x01\x01")  # one verdict, at offset 0 (delta 1)


@pytest.mark.parametrize(
    ("records", "flags", "resume"),
    [
        ([(claim("a:1"), 0), (release("a:1", -1), 1)], 0x02, 0),  # released before any message
        ([(claim("a:1"), 0), (beat("a:1", -1), 1)], 0x03, 0),
        ([(claim("a:1"), 0), (claim_msgs("a:1", 4), 1)], 0x03, 5),
        ([(release_group("adm:x", 100), 0), (beat("adm:x", -1), 1)], 0x02, 0),  # POSITION_SET
        # voided: no position, and the voided holder's lease still runs (version 5)
        ([(claim("a:1"), 0), (release_group("adm:x", 10), 1)], 0x08, None),
    ],
)
def test_position_flag_round_trips(records, flags, resume):
    b = _one_partition_world(*records)
    r = WorldState.from_bytes(b)
    assert r.to_bytes() == b
    assert r.resume_offset("g", "orders", 0) == resume
    assert r.partition_state("g", "orders", 0).has_position == (resume is not None)
    i = b.index(b"\x01g\x06orders\x00") + 10  # group, topic, partition: then the flags byte
    assert b[i] == flags


@pytest.mark.parametrize("flags", [0x04, 0x07, 0x80, 0xFF])
def test_unknown_partition_flags_are_rejected(flags):
    b = _one_partition_world((claim("a:1"), 0), (beat("a:1", 3), 1))
    i = b.index(b"\x01g\x06orders\x00") + 10
    with pytest.raises(SnapshotError, match="flags"):
        WorldState.from_bytes(b[:i] + bytes([flags]) + b[i + 1 :])
