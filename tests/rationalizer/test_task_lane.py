"""``apply_many``'s task lane (``rationalizer/vectors.py``) against the strict decoder.

A world that has decoded a task record of a key reads the key's next task records by that
record's vector layout. Here every byte of such a next record's vector is replaced by each
value that matters to a varint (a continuation bit set or cleared, a zero that would end a
varint overlong, the extremes), for vectors whose offsets take 1, 2, 3, 4, 9 and 10 varint
bytes: the lane must judge each exactly as a world that decodes it strictly.
"""

from __future__ import annotations

import pytest

from rationalizer import ClaimingPartition, HeartbeatingTask, ReleasingTask, WorldState, encode
from rationalizer.messages import MAX_OFFSET, Positions
from rationalizer.varint import uvarint
from rationalizer.vectors import MAX_FAST_SOURCES, learn

IDS = {"client_id": "c1", "instance_id": "i1", "group_id": "g"}
TASK = {"topic": "app.task.0", "partition": 3}

VECTORS: list[Positions] = [
    (("a", 5),),
    (("a", 126), ("b", 127)),  # one byte, then two
    (("a", 16_383), ("bb", 200), ("c", 2**21)),  # three, two, four
    (("lines", 4_123_456), ("words", 2**56)),  # four, nine
    (("a", MAX_OFFSET),),  # ten bytes: never read by a layout
    (("a", 1), ("b", 2), ("c", 3), ("d", 4)),  # more sources than the lane reads
]


def _records(
    vector: Positions, release: bool, step: int = 1
) -> list[tuple[int, int, bytes, bytes]]:
    """Claim, HeartbeatingTask(vector), then the record to judge: a HeartbeatingTask or a
    ReleasingTask with each offset moved on by ``step`` (some cross a varint length)."""
    claim = encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1000))
    beat = encode(HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1000, positions=vector))
    moved = tuple((s, o + step if o < MAX_OFFSET - 8 else o) for s, o in vector)
    last = (
        ReleasingTask(**IDS, **TASK, positions=moved)
        if release
        else HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1000, positions=moved)
    )
    return [(0, 10, *claim), (1, 11, *beat), (2, 12, *encode(last))]


def _strict(records: list) -> WorldState:
    """One record at a time, the identity caches emptied after each: no lane opens."""
    w = WorldState()
    for rec in records:
        w.apply(*rec)
        for cache in (w._pcache, w._kcache, w._scache, w._tcache):
            cache.clear()
    return w


@pytest.mark.parametrize("step", [0, 1])
@pytest.mark.parametrize("release", [False, True])
@pytest.mark.parametrize("vector", VECTORS)
def test_every_byte_of_a_vector_is_judged_as_the_decoder_judges_it(vector, release, step):
    records = _records(vector, release, step)
    offset, ts, key, value = records[-1]
    start = 2 if release else 6
    size = 1 + sum(1 + len(t) + len(uvarint(o + 1)) for t, o in vector)
    cases = 0
    for i in range(start, start + size):
        for b in {0x00, 0x01, 0x7F, 0x80, 0x81, 0xFF, value[i] ^ 0x80}:
            mutated = (offset, ts, key, value[:i] + bytes((b,)) + value[i + 1 :])
            lane = WorldState()
            got = lane.apply_many([*records[:-1], mutated])
            strict = _strict([*records[:-1], mutated])
            assert got[-1] == strict.verdict(offset), (i, b)
            assert lane.to_bytes() == strict.to_bytes(), (i, b)
            cases += 1
    assert cases >= 3 * size


@pytest.mark.parametrize("vector", VECTORS)
def test_the_unmutated_record_takes_the_lane_when_it_can(vector):
    """(So the test above tests the lane: a layout exists for what it mutates.)"""
    records = _records(vector, False, 0)
    w = WorldState()
    w.apply_many(records[:-1])
    lay = w._kcache[records[-1][2]][13]
    fast = len(vector) <= MAX_FAST_SOURCES and max(o for _, o in vector) < MAX_OFFSET
    assert (lay is not None) == fast
    if fast:
        value = records[-1][3]
        assert lay[1](lay, value, 6) is not None
    strict = _strict(records)
    assert w.apply_many(records[-1:]) == [strict.verdict(2)]
    assert w.to_bytes() == strict.to_bytes()


def test_a_layout_never_lets_low_parts_push_the_scalar_past_its_limit():
    """A vector whose low parts could add up beyond 2^63 - 1 gets no layout (this one's
    scalar is 2^63 - 1 itself)."""
    vector = (("a", 2**62), ("b", 2**62 - 2))
    _, value = encode(HeartbeatingTask(**IDS, **TASK, heartbeat_interval_ms=1, positions=vector))
    end = len(value) - len(encode(ClaimingPartition(**IDS, **TASK, heartbeat_interval_ms=1))[1]) + 6
    assert learn(value, 6, end, vector) is None
