"""Idempotent producer state (pure): duplicates, gaps, fencing, wrap, replay from headers."""

from __future__ import annotations

import pytest

from storage import NewRecord, assign_offsets, encode_batch
from storage._producers import (
    BatchIdentity,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStates,
    batch_identities,
    last_sequence,
)


def ident(pid: int, epoch: int, seq: int, n: int = 3) -> BatchIdentity:
    return BatchIdentity(pid, epoch, seq, n - 1, False, 0, 0)


def stored(states: ProducerStates, b: BatchIdentity, offset: int) -> None:
    assert states.check([b]) is None
    states.record(b, offset, -1)


def test_retry_of_any_of_last_five_is_a_duplicate_with_original_offsets():
    s = ProducerStates()
    for i in range(7):
        stored(s, ident(7, 0, 3 * i), 100 + 3 * i)
    for i in range(2, 7):
        dup = s.check([ident(7, 0, 3 * i)])
        assert dup is not None and dup.batch.first_offset == 100 + 3 * i
        assert dup.batch.last_offset == 102 + 3 * i
    # the sixth-newest is forgotten: it is now out of order, not a duplicate
    with pytest.raises(OutOfOrderSequence):
        s.check([ident(7, 0, 3)])
    # a different range at a stored start is not a duplicate either
    with pytest.raises(OutOfOrderSequence):
        s.check([ident(7, 0, 18, n=2)])


def test_gap_and_reorder_are_refused_next_is_accepted():
    s = ProducerStates()
    stored(s, ident(1, 0, 0), 0)
    with pytest.raises(OutOfOrderSequence, match="expected sequence 3, got 4"):
        s.check([ident(1, 0, 4)])
    assert s.check([ident(1, 0, 3)]) is None


def test_old_epoch_fenced_new_epoch_must_start_at_zero():
    s = ProducerStates()
    stored(s, ident(1, 2, 0), 0)
    with pytest.raises(InvalidProducerEpoch):
        s.check([ident(1, 1, 3)])
    with pytest.raises(OutOfOrderSequence, match="not 0"):
        s.check([ident(1, 3, 5)])
    stored(s, ident(1, 3, 0), 3)
    assert s.epoch_of(1) == 3
    # the old epoch's batches no longer count as duplicates
    with pytest.raises(InvalidProducerEpoch):
        s.check([ident(1, 2, 0)])


def test_unknown_producer_may_start_anywhere_but_not_negative():
    s = ProducerStates()
    assert s.check([ident(9, 0, 42)]) is None
    with pytest.raises(OutOfOrderSequence):
        s.check([ident(9, 0, -1)])


def test_several_batches_in_one_append_are_checked_in_order():
    s = ProducerStates()
    assert s.check([ident(1, 0, 0), ident(1, 0, 3)]) is None
    with pytest.raises(OutOfOrderSequence):
        s.check([ident(1, 0, 0), ident(1, 0, 4)])


def test_sequence_wraps_at_int32_max():
    top = (1 << 31) - 1
    assert last_sequence(top - 1, 2) == 0
    s = ProducerStates()
    stored(s, ident(1, 0, top - 2, n=3), 0)
    assert s.check([ident(1, 0, 0)]) is None


def test_replay_rebuilds_from_stored_headers():
    recs = [NewRecord(b"x", timestamp=1)] * 2
    data = b"".join(
        bytes(
            assign_offsets(
                encode_batch(recs, producer_id=5, producer_epoch=1, base_sequence=2 * i),
                10 + 2 * i,
                None,
            )
        )
        for i in range(3)
    ) + bytes(assign_offsets(encode_batch(recs), 16, None))
    s = ProducerStates()
    assert s.replay(data) == 18
    assert [b.first_offset for b in s.retained(5)] == [10, 12, 14]
    dup = s.check([ident(5, 1, 2, n=2)])
    assert dup is not None and dup.batch.first_offset == 12
    assert s.check([ident(5, 1, 6, n=2)]) is None
    ids = list(batch_identities(data))
    assert [b.producer_id for b in ids] == [5, 5, 5, -1]


def test_idle_producers_expire_and_then_start_anywhere():
    s = ProducerStates()
    s.record(ident(1, 0, 0), 0, -1, now_ms=1_000)
    s.record(ident(2, 0, 0), 3, -1, now_ms=5_000)
    assert s.expire(now_ms=10_000, max_age_ms=6_000) == 1
    assert s.epoch_of(1) is None and s.epoch_of(2) == 0
    assert s.check([ident(1, 0, 30)]) is None  # forgotten: treated as new, like Kafka
