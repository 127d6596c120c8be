"""``apply_many``'s task lane (``rationalizer/_task_vectors.py``) against the strict decoder.

A world that has decoded a task record of a key reads the key's next task records by that
record's vector layout: by sources (the C reader ``rationalizer._vectors``, where it is
built) or by low bytes (pure Python, also forced with ``WorldState(_python_vectors=True)``).
Here every byte of such a next record's vector is replaced by each value that matters to a
varint (a continuation bit set or cleared, a zero that would end a varint overlong, the
extremes), for vectors whose offsets take 1, 2, 3, 4, 9 and 10 varint bytes: both lanes
must judge each exactly as a world that decodes it strictly. Random vectors check the
readers themselves against the decoder, including every case where they must give up.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rationalizer import ClaimingPartition, HeartbeatingTask, ReleasingTask, WorldState, encode
from rationalizer._codec import DecodeError, decode_task_fields
from rationalizer._messages import MAX_OFFSET, MAX_TASK_SOURCES, Positions, task_last_offset
from rationalizer._task_vectors import MAX_FAST_SOURCES, NATIVE, learn
from rationalizer._varint import uvarint

IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}
TASK = {"topic": "app.task.0", "partition": 3}

VECTORS: list[Positions] = [
    (("a", 5),),
    (("a", 126), ("b", 127)),  # one byte, then two
    (("a", 16_383), ("bb", 200), ("c", 2**21)),  # three, two, four
    (("lines", 4_123_456), ("words", 2**56)),  # four, nine
    (("a", MAX_OFFSET),),  # ten bytes: never read by a layout by low bytes
    (("a", 1), ("b", 2), ("c", 3), ("d", 4)),  # more sources than low bytes read
]

#: (the world's switch, whether its layouts are read by sources)
LANES = [
    pytest.param(True, False, id="python"),
    pytest.param(
        False,
        True,
        id="native",
        marks=pytest.mark.skipif(not NATIVE, reason="rationalizer._vectors was not built"),
    ),
]


def _records(
    vector: Positions, release: bool, step: int = 1, partition: int = 3
) -> list[tuple[int, int, bytes, bytes]]:
    """Claim, HeartbeatingTask(vector), then the record to judge: a HeartbeatingTask or a
    ReleasingTask with each offset moved on by ``step`` (some cross a varint length)."""
    task = {**TASK, "partition": partition}
    claim = encode(ClaimingPartition(**IDS, **task, heartbeat_interval_ms=1000))
    beat = encode(HeartbeatingTask(**IDS, **task, heartbeat_interval_ms=1000, positions=vector))
    moved = tuple((s, o + step if o < MAX_OFFSET - 8 else o) for s, o in vector)
    last = (
        ReleasingTask(**IDS, **task, positions=moved)
        if release
        else HeartbeatingTask(**IDS, **task, heartbeat_interval_ms=1000, positions=moved)
    )
    return [(0, 10, *claim), (1, 11, *beat), (2, 12, *encode(last))]


def _strict(records: list) -> WorldState:
    """One record at a time, the identity caches and learned layouts emptied after each: no
    lane opens."""
    w = WorldState()
    for rec in records:
        w.apply(*rec)
        for cache in (
            w._ids.by_bytes,
            w._ids.by_key,
            w._ids.senders,
            w._ids.topics,
            w._ids.layouts,
        ):
            cache.clear()
    return w


@pytest.mark.parametrize(("python", "native"), LANES)
@pytest.mark.parametrize("step", [0, 1])
@pytest.mark.parametrize("release", [False, True])
@pytest.mark.parametrize("vector", VECTORS)
def test_every_byte_of_a_vector_is_judged_as_the_decoder_judges_it(
    vector, release, step, python, native
):
    records = _records(vector, release, step)
    offset, ts, key, value = records[-1]
    start = 2 if release else 6
    size = 1 + sum(1 + len(t) + len(uvarint(o + 1)) for t, o in vector)
    cases = 0
    for i in range(start, start + size):
        for b in {0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, value[i] ^ 0x80}:
            mutated = (offset, ts, key, value[:i] + bytes((b,)) + value[i + 1 :])
            lane = WorldState(_python_vectors=python)
            got = lane.apply_many([*records[:-1], mutated])
            strict = _strict([*records[:-1], mutated])
            assert got[-1] == strict.verdict(offset), (i, b)
            assert lane.to_bytes() == strict.to_bytes(), (i, b)
            cases += 1
    assert cases >= 3 * size


@pytest.mark.parametrize(("python", "native"), LANES)
@pytest.mark.parametrize("vector", VECTORS)
def test_the_unmutated_record_takes_the_lane_when_it_can(vector, python, native):
    """(So the test above tests the lane: a layout exists for what it mutates.) A layout by
    sources reads every vector; one by low bytes up to three sources of up to nine bytes."""
    records = _records(vector, False, 0)
    w = WorldState(_python_vectors=python)
    w.apply_many(records[:-1])
    lay = w._ids.by_key[records[-1][2]].layout
    fast = native or (len(vector) <= MAX_FAST_SOURCES and max(o for _, o in vector) < MAX_OFFSET)
    assert (lay is not None) == fast
    if fast:
        value = records[-1][3]
        got = lay[1](lay, value, 6)
        assert got is not None
        assert got[:2] == (vector, task_last_offset(vector))
        assert value[got[2] :] == w._ids.by_key[records[-1][2]].ident  # the identity part
    strict = _strict(records)
    assert w.apply_many(records[-1:]) == [strict.verdict(2)]
    assert w.to_bytes() == strict.to_bytes()


def test_a_layout_never_lets_low_parts_push_the_scalar_past_its_limit():
    """A vector whose low parts could add up beyond 2^63 - 1 gets no layout by low bytes
    (this one's scalar is 2^63 - 1 itself)."""
    vector = (("a", 2**62), ("b", 2**62 - 2))
    _, value = encode(HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1, positions=vector))
    end = len(value) - len(encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1))[1]) + 6
    assert learn(value, 6, end, vector, python=True) is None


@pytest.mark.skipif(not NATIVE, reason="rationalizer._vectors was not built")
def test_a_layout_by_sources_refuses_a_scalar_past_its_limit():
    """The same vector has a layout by sources; one more record consumed in either source
    makes the scalar 2^63, which the reader leaves to the decoder (which refuses it)."""
    vector = (("a", 2**62), ("b", 2**62 - 2))
    claim = encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1))
    _, value = encode(HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1, positions=vector))
    lay = learn(value, 6, len(value) - len(claim[1]) + 6, vector)
    assert lay is not None
    assert lay[1](lay, value, 6) == (vector, MAX_OFFSET, len(value) - len(claim[1]) + 6)
    # b's offset + 1 is 2^62 - 1 (nine varint bytes ending 0x3f): make it 2^62
    i = value.index(b"\x01b") + 2
    over = value[:i] + uvarint(2**62) + value[i + len(uvarint(2**62 - 1)) :]
    assert lay[1](lay, over, 6) is None
    with pytest.raises(DecodeError):
        decode_task_fields(claim[0], over)


@pytest.mark.parametrize(("python", "native"), LANES)
def test_a_task_s_other_partitions_start_from_its_layout(python, native):
    """The first task record of a key tries the layout by sources its task's name last had
    (a task's partitions share their sources) and takes the lane; with other sources, or
    with layouts by low bytes, it is decoded strictly; judged alike either way."""
    first = _records((("a", 5), ("b", 300)), False, partition=0)
    second = _records((("a", 70_000), ("b", 9)), False, partition=1)
    other = _records((("a", 1), ("c", 2)), False, partition=2)  # other sources
    log = [(i, ts, k, v) for i, (_, ts, k, v) in enumerate(first + second + other)]
    w = WorldState(_python_vectors=python)
    decoded = []
    slow = w._slow

    def counting(key, value, now, offset):
        if value[:1] == b"\x03":
            decoded.append(key)
        return slow(key, value, now, offset)

    w._slow = counting  # type: ignore[method-assign]
    got = w.apply_many(log)
    strict = _strict(log)
    assert got == [strict.verdict(i) for i in range(len(log))]
    assert w.to_bytes() == strict.to_bytes()
    keys = [first[0][2], second[0][2], other[0][2]]
    if native:  # partition 1's first task record took partition 0's layout
        assert decoded == [keys[0], keys[2]]
        assert w._ids.by_key[keys[1]].layout is w._ids.by_key[keys[0]].layout
        assert w._ids.layouts == {TASK["topic"]: w._ids.by_key[keys[2]].layout}
    else:  # layouts by low bytes are not offered to other keys
        assert decoded == keys
        assert w._ids.layouts == {}


# ------------------------------------------------------------------ the readers themselves

#: source topic names (valid, short, so vectors of many sources stay small)
names = st.text(alphabet="ab.-_Z9", min_size=1, max_size=3).filter(lambda t: t not in (".", ".."))
#: offsets near every varint length's edge, the extremes and anything
edges = st.sampled_from([0, 1, 7, 14, 21, 28, 35, 42, 49, 56, 63]).map(lambda e: 2**e - 1)
offsets = st.one_of(
    st.integers(-1, 3),
    edges.flatmap(lambda e: st.integers(max(-1, e - 2), min(MAX_OFFSET, e + 1))),
    st.integers(-1, MAX_OFFSET),
)


@st.composite
def vectors(draw, sources=None):
    """A vector of valid sources (1..MAX_TASK_SOURCES, mostly few) within the scalar's
    limit; ``sources``: these sources."""
    if sources is None:
        n = draw(st.one_of(st.integers(1, 4), st.integers(1, MAX_TASK_SOURCES)))
        sources = sorted(draw(st.sets(names, min_size=n, max_size=n)))
    vector = []
    room = MAX_OFFSET + 1 - len(sources)  # what the offsets may add up to, + 1 each
    for s in sources:
        o = min(draw(offsets), room - 1)
        vector.append((s, o))
        room -= o + 1
    return tuple(vector)


@st.composite
def next_values(draw):
    """(learned vector, its record's value, the next record's value, the next's header
    length): the next one has the same sources, others, or a mutated byte."""
    first = draw(vectors())
    kind = draw(st.sampled_from(["same", "same", "other", "mutated"]))
    nxt = draw(vectors(sources=[s for s, _ in first] if kind != "other" else None))
    release = draw(st.booleans())
    msg = (
        ReleasingTask(**IDS, **TASK, positions=nxt)
        if release
        else HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=7, positions=nxt)
    )
    _, value = encode(msg)
    hl = 2 if release else 6
    if kind == "mutated":
        i = draw(st.integers(hl, len(value) - 1))
        b = draw(
            st.one_of(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF]), st.integers(0, 255))
        )
        value = value[:i] + bytes((b,)) + value[i + 1 :]
    _, learned = encode(HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=7, positions=first))
    return first, learned, value, hl


KEY = encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1))[0]
IDENT = encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1))[1][6:]


@pytest.mark.parametrize(("python", "native"), LANES)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(next_values())
def test_a_reader_reads_exactly_what_the_decoder_reads(python, native, case):
    """Whatever a layout's reader returns is the strict decoder's reading of those bytes
    (vector, scalar, and where the vector ends); a reader gives up only where it must: a
    layout by sources reads every valid vector of its sources."""
    first, learned, value, hl = case
    lay = learn(learned, 6, len(learned) - len(IDENT), first, python=python)
    if lay is None:
        assert python  # by sources, every vector the decoder accepted has a layout
        return
    got = lay[1](lay, value, hl) if len(value) > hl + lay[0] else None
    try:
        vector = decode_task_fields(KEY, value)[7]
    except DecodeError:
        vector = None
    if got is not None:
        # those bytes, followed by a valid identity part, are a valid record read alike
        positions, scalar, end = got
        _, *_, want, want_end = decode_task_fields(KEY, value[:end] + IDENT)
        assert (positions, scalar, end) == (want, task_last_offset(want), want_end)
        assert [s for s, _ in positions] == [s for s, _ in first]
    elif native and vector is not None and [s for s, _ in vector] == [s for s, _ in first]:
        pytest.fail(f"a layout by sources gave up on {vector} ({first} learned)")


# ------------------------------------------------------------ version 8 task heartbeats


def _reseal(value: bytes) -> bytes:
    """``value`` with its envelope's check made to match again (what the decoder then
    judges is the body)."""
    return value[:2] + _check(value) + value[6:]


def _check(value: bytes) -> bytes:
    return zlib.crc32(value[6:], zlib.crc32(value[:2])).to_bytes(4, "big")


def _records8(vector: Positions, first: int, step: int = 1) -> list[tuple[int, int, bytes, bytes]]:
    """A version 6 claim (its offset, 0, names the tenure), a HeartbeatingTask of version
    ``first`` (3, or 8 naming tenure 0), then the version 8 one to judge, each offset one
    on by ``step`` (the key's layout, learnt from the first, reads the second)."""
    claim = encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1000, version=6))
    tenure = 0 if first == 8 else None
    beat = HeartbeatingTask(
        **IDS, **TASK, heartbeat_interval_ms=1000, positions=vector, tenure=tenure
    )
    moved = tuple((s, o + step if o < MAX_OFFSET - 8 else o) for s, o in vector)
    last = HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1000, positions=moved, tenure=0)
    return [(0, 10, *claim), (1, 11, *encode(beat)), (2, 12, *encode(last))]


@pytest.mark.parametrize(("python", "native"), LANES)
@pytest.mark.parametrize("first", [3, 8])
@pytest.mark.parametrize("vector", VECTORS)
def test_every_byte_of_a_version_8_heartbeat_is_judged_as_the_decoder_judges_it(
    vector, first, python, native
):
    """Every byte after version and type (the check, the envelope's group, the interval,
    the tenure, the vector, the identity part) replaced by values that matter, with the
    check as it then is and made to match again: the lane judges each exactly as a world
    that decodes it strictly (the lane checks the envelope as decode does)."""
    records = _records8(vector, first)
    offset, ts, key, value = records[-1]
    cases = 0
    for i in range(2, len(value)):
        for b in {0x00, 0x01, 0x80, 0xFF, value[i] ^ 0x80, value[i] ^ 0x01}:
            raw = value[:i] + bytes((b,)) + value[i + 1 :]
            for mutated in {raw, _reseal(raw)}:
                rec = (offset, ts, key, mutated)
                lane = WorldState(_python_vectors=python)
                got = lane.apply_many([*records[:-1], rec])
                strict = _strict([*records[:-1], rec])
                assert got[-1] == strict.verdict(offset), (i, b, mutated == raw)
                assert lane.to_bytes() == strict.to_bytes(), (i, b)
                cases += 1
    assert cases >= 4 * len(value)


@pytest.mark.parametrize(("python", "native"), LANES)
@pytest.mark.parametrize("first", [3, 8])
@pytest.mark.parametrize("vector", VECTORS)
def test_a_version_8_heartbeat_takes_the_lane_when_it_can(vector, first, python, native):
    """(So the test above tests the lane.) The key's layout, learnt from a version 3 or a
    version 8 record, reads the version 8 record after the envelope, interval and tenure;
    the renewal is the strict world's, and the strict decoder is not asked."""
    records = _records8(vector, first, step=0)
    w = WorldState(_python_vectors=python)
    w.apply_many(records[:-1])
    ent = w._ids.by_key[records[-1][2]]
    fast = native or (len(vector) <= MAX_FAST_SOURCES and max(o for _, o in vector) < MAX_OFFSET)
    assert (ent.layout is not None) == fast
    asked = []
    slow = w._slow
    w._slow = lambda *a: asked.append(a) or slow(*a)  # type: ignore[method-assign]
    strict = _strict(records)
    assert w.apply_many(records[-1:]) == [strict.verdict(2)]
    assert strict.verdict(2).accepted
    assert w.to_bytes() == strict.to_bytes()
    assert (asked == []) == fast
