"""``WorldState.apply_many`` is ``apply`` one record at a time, whatever the batches.

A consumer's fetches overlap: after a reconnect or a reset it is handed records it has
applied already, in the middle of a batch of new ones. ``apply_many`` extends the verdict
window per contiguous run of new offsets, so a re-delivery inside a batch must close the
run and start the next one at the next new offset; these tests hold it to the one-by-one
replay: the verdicts it returns, the verdict the world answers at every offset, the
window's offsets and verdicts, the snapshot bytes, and the world restored from each
snapshot, continued with the rest of the deliveries.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rationalizer import Effect, Reason, WorldState, encode
from rationalizer._codec import seal
from rationalizer._messages import FUTURE_VERSIONS
from rationalizer._verdict import ACCEPTED, REJECTED

from .helpers import beat, claim
from .test_properties import KEYS, logs

Record = tuple[int, int, "bytes | None", "bytes | None"]


def _world(window: int) -> WorldState:
    return WorldState(verdict_window=window, admin_keys=KEYS)


def _window(w: WorldState) -> tuple[list[int], list]:
    """The window as the snapshot holds it: offsets and their verdicts."""
    image = w.image()
    return list(image.verdict_offsets), list(image.verdicts)


def _same_world(got: WorldState, want: WorldState, offsets: list[int]) -> None:
    assert got.applied_through == want.applied_through
    assert got.now == want.now
    assert _window(got) == _window(want)
    for o in offsets:
        assert got.verdict(o) == want.verdict(o), o
    data = want.to_bytes()
    assert got.to_bytes() == data
    restored = WorldState.from_bytes(data, admin_keys=KEYS)
    assert restored.to_bytes() == data
    assert _window(restored) == _window(want)
    for o in offsets:
        assert restored.verdict(o) == want.verdict(o), o


@st.composite
def deliveries(draw, records: list[Record]) -> list[tuple[Record, bool]]:
    """The log as a consumer may be handed it: every record once, in order, with
    re-deliveries of offsets below the next new one between them: one earlier record, a
    re-fed run of earlier records (a fetch from an older position), or an offset the log
    skipped (a gap: never applied). ``(record, is_new)``."""
    out: list[tuple[Record, bool]] = []
    gaps = sorted(set(range(records[-1][0])) - {r[0] for r in records}) if records else []
    for i, rec in enumerate(records):
        while i and draw(st.integers(0, 3)) == 0:
            how = draw(st.integers(0, 2))
            if how == 0:
                out.append((records[draw(st.integers(0, i - 1))], False))
            elif how == 1:
                j = draw(st.integers(0, i - 1))
                k = draw(st.integers(j + 1, i))
                out += [(r, False) for r in records[j:k]]
            else:
                below = [g for g in gaps if g < records[i - 1][0]]
                if below:
                    out.append(((draw(st.sampled_from(below)), 0, None, b"gap"), False))
        out.append((rec, True))
    if records and draw(st.booleans()):  # a re-fed tail after the last new record
        j = draw(st.integers(0, len(records) - 1))
        out += [(r, False) for r in records[j:]]
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(max_size=50, tasks=True, members=True), st.integers(1, 8), st.data())
def test_apply_many_with_redeliveries_is_apply_one_by_one(log, window, data):
    """Random logs of every record type (versions 1 to 7: claims, heartbeats, releases,
    reservations, ReleaseGroups, task records, announcements, member heartbeats, junk), delivered with
    re-deliveries, applied (a) one at a time in log order, (b) one at a time as delivered,
    (c) by ``apply_many`` in random chunks, the world snapshotted and restored at random
    chunk boundaries: (c) equals (b) at every boundary, and (b) equals (a)."""
    records: list[Record] = [r[:4] for r in log]
    plan = data.draw(deliveries(records))
    # every offset of the log, the one after each (a gap, or the next new one) and -1
    offsets = sorted({-1} | {r[0] + d for r in records for d in (0, 1)})

    # (a) the log in order, one record at a time: the bytes after each prefix
    ordered = _world(window)
    want_new = [ordered.apply(*r) for r in records]
    prefix_bytes = [_world(window).to_bytes()]
    replay = _world(window)
    for r in records:
        replay.apply(*r)
        prefix_bytes.append(replay.to_bytes())

    # (b) as delivered, one at a time; (c) the same deliveries in chunks
    one = _world(window)
    many = _world(window)
    i = applied = 0
    while i < len(plan):
        if data.draw(st.integers(0, 3)) == 0:  # snapshot, restore, continue from it
            many = WorldState.from_bytes(many.to_bytes(), admin_keys=KEYS)
        n = data.draw(st.integers(1, 12))
        chunk = plan[i : i + n]
        want = [one.apply(*rec) for rec, _ in chunk]
        got = many.apply_many([rec for rec, _ in chunk])
        assert got == want
        # a MemberHeartbeat's verdicts per entry take no part in equality: compared here,
        # for the new records (a re-delivery answers from the window, which a restored
        # world holds as the snapshot did: the sums only)
        for (_, new), a, b in zip(chunk, got, want, strict=True):
            if new:
                assert a.entries == b.entries
        for (_, new), v in zip(chunk, want, strict=True):
            if new:
                assert v == want_new[applied]
                applied += 1
        _same_world(many, one, offsets)
        assert one.to_bytes() == prefix_bytes[applied]
        i += n
    assert applied == len(records)
    _same_world(one, ordered, offsets)

    # the whole plan in one call
    whole = _world(window)
    assert whole.apply_many([rec for rec, _ in plan]) == _replayed(plan, window)
    _same_world(whole, ordered, offsets)


def _replayed(plan: list[tuple[Record, bool]], window: int) -> list:
    w = _world(window)
    return [w.apply(*rec) for rec, _ in plan]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs(max_size=30, tasks=True, members=True),
    st.integers(1, 8),
    st.sampled_from([FUTURE_VERSIONS[0], FUTURE_VERSIONS[-1]]),
    st.data(),
)
def test_a_version_to_come_halts_its_group_alike(log, window, version, data):
    """A well-formed record of a version to come for group "g" in the middle of the log
    (offsets after it shifted by one): ``apply_many`` in chunks halts the group where
    ``apply`` does, with the same verdicts, the same window, the same snapshot; every later
    record of "g" is GROUP_HALTED, and "h" goes on as in a log without it."""
    records: list[Record] = [r[:4] for r in log]
    k = data.draw(st.integers(0, len(records)))
    at = records[k][0] if k < len(records) else (records[-1][0] + 1 if records else 0)
    # its timestamp moves no clock: the world's time is the highest timestamp seen, and the
    # comparison with a log without it below is about verdicts, not time
    ts = max((r[1] for r in records[:k]), default=min((r[1] for r in records), default=0))
    future = (at, ts, b"g/t/0", seal(version, 1, "g", b"to come"))
    shifted = records[:k] + [future] + [(o + 1, *rest) for o, *rest in records[k:]]
    plan = [rec for rec, _ in data.draw(deliveries(shifted))]
    chunks = []
    i = 0
    while i < len(plan):
        n = data.draw(st.integers(1, 12))
        chunks.append(plan[i : i + n])
        i += n
    one, many = _world(window), _world(window)
    got = [v for chunk in chunks for v in many.apply_many(chunk)]
    want = [one.apply(*rec) for rec in plan]
    assert got == want
    assert [v and v.entries for v in got] == [v and v.entries for v in want]
    assert many.halted_groups == one.halted_groups == {"g": (at, version)}
    _same_world(many, one, sorted({-1} | {r[0] + d for r in shifted for d in (0, 1)}))
    halted = REJECTED[Reason.GROUP_HALTED]
    for o, _, key, _ in shifted[k:]:
        if key is not None and (key.startswith(b"g/") or key == b"g"):
            assert one.verdict(o) in (halted, REJECTED[Reason.INVALID_RECORD], None), o
    # group h is judged as if the record of a version to come were not there, unless a
    # record of g that is no longer judged fenced an instance that writes to h too
    # (fencing is per world: PROTOCOL.md, "Version 6", what a halt cannot contain)
    plain = _world(window)
    for rec in shifted:
        if rec is not future:
            plain.apply(*rec)
    if one.fenced() == plain.fenced():
        assert one.partitions("h") == plain.partitions("h")


def _four() -> list[Record]:
    """0: a claims, 1: a renews, 2: b's claim loses (STILL_OWNED), 3: a renews."""
    msgs = [claim("a:1"), beat("a:1", 5), claim("b:1"), beat("a:1", 6)]
    return [(i, 10 * i, *encode(m)) for i, m in enumerate(msgs)]


def test_redelivery_inside_a_batch_starts_the_next_segment_at_the_next_new_offset():
    """Record 0 applied, then ``apply_many([1, 0, 2, 3])``: the re-delivered 0 splits the
    batch; 2 and 3 are recorded at 2 and 3 (the bug recorded them at 1 and 2: ``verdict(2)``
    answered 1's RENEWED, ``verdict(3)`` None, and the snapshot did not restore)."""
    r = _four()
    claimed = ACCEPTED[Effect.CLAIMED]
    renewed = ACCEPTED[Effect.RENEWED]
    lost = REJECTED[Reason.STILL_OWNED]

    w = WorldState()
    assert w.apply(*r[0]) == claimed
    assert w.apply_many([r[1], r[0], r[2], r[3]]) == [renewed, claimed, lost, renewed]
    assert [w.verdict(o) for o in range(5)] == [claimed, renewed, lost, renewed, None]
    assert _window(w) == ([0, 1, 2, 3], [claimed, renewed, lost, renewed])

    one = WorldState()
    for rec in (r[0], r[1], r[0], r[2], r[3]):
        one.apply(*rec)
    assert w.to_bytes() == one.to_bytes()
    restored = WorldState.from_bytes(w.to_bytes())
    assert [restored.verdict(o) for o in range(5)] == [claimed, renewed, lost, renewed, None]
    # and it goes on from there: 4 is the next new offset, 3 a re-delivery
    more = (4, 40, *encode(beat("a:1", 7)))
    assert restored.apply_many([r[3], more]) == [renewed, renewed]
    assert _window(restored) == ([0, 1, 2, 3, 4], [claimed, renewed, lost, renewed, renewed])
