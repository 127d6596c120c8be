from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logmarshal._commits import CommitTracker


def test_in_order_commits_advance_the_position() -> None:
    tracker = CommitTracker(-1)
    for offset in range(3):
        tracker.handed_out(offset)
    assert tracker.position == -1
    for offset in range(3):
        assert tracker.commit(offset)
        assert tracker.position == offset
    assert tracker.outstanding == 0


def test_a_gap_holds_the_position_back_until_filled() -> None:
    tracker = CommitTracker(4)
    for offset in (5, 6, 7, 8):
        tracker.handed_out(offset)
    tracker.commit(6)
    tracker.commit(8)
    assert tracker.position == 4
    tracker.commit(5)
    assert tracker.position == 6
    tracker.commit(7)
    assert tracker.position == 8


def test_offsets_may_skip_as_in_compacted_topics() -> None:
    tracker = CommitTracker(-1)
    for offset in (0, 3, 10):
        tracker.handed_out(offset)
    tracker.commit(3)
    tracker.commit(0)
    assert tracker.position == 3
    tracker.commit(10)
    assert tracker.position == 10


def test_unknown_and_repeated_commits_change_nothing() -> None:
    tracker = CommitTracker(-1)
    tracker.handed_out(0)
    assert not tracker.commit(1)  # never handed out
    assert tracker.commit(0)
    assert not tracker.commit(0)  # repeated
    assert tracker.position == 0


def test_handed_out_offsets_must_increase() -> None:
    tracker = CommitTracker(5)
    with pytest.raises(ValueError, match="must increase"):
        tracker.handed_out(5)


@given(st.integers(1, 60).flatmap(lambda n: st.permutations(range(n))), st.data())
def test_position_is_the_longest_committed_prefix(order: list[int], data) -> None:
    tracker = CommitTracker(-1)
    for offset in range(len(order)):
        tracker.handed_out(offset)
    stop = data.draw(st.integers(0, len(order)))
    committed = set(order[:stop])
    for offset in order[:stop]:
        tracker.commit(offset)
    expected = -1
    while expected + 1 in committed:
        expected += 1
    assert tracker.position == expected
    assert tracker.outstanding == len(order) - stop


@given(
    offsets=st.lists(st.integers(0, 400), min_size=1, max_size=60, unique=True).map(sorted),
    data=st.data(),
)
def test_bulk_hand_out_and_commit_equal_one_at_a_time(offsets: list[int], data) -> None:
    """handed_out_many / commit_many (the consumer's hot path) keep the same books as the
    per-offset calls, for any split into batches and any commit order."""
    bulk, single = CommitTracker(-1), CommitTracker(-1)
    cut = data.draw(st.integers(0, len(offsets)))
    for part in (offsets[:cut], offsets[cut:]):
        bulk.handed_out_many(part)
        for o in part:
            single.handed_out(o)
    pending = [*offsets, 999]  # one never handed out: counted by neither
    while pending:
        n = data.draw(st.integers(1, len(pending)))
        batch = data.draw(st.permutations(pending))[:n]
        pending = [o for o in pending if o not in batch]
        done = bulk.commit_many(batch)
        assert done == sum(single.commit(o) for o in batch)
        assert (bulk.position, bulk.outstanding) == (single.position, single.outstanding)
    assert bulk.position == offsets[-1]


def test_bulk_hand_out_refuses_offsets_that_do_not_increase() -> None:
    tracker = CommitTracker(9)
    with pytest.raises(ValueError, match="must increase"):
        tracker.handed_out_many([9, 10])
    tracker.handed_out_many([10, 12])
    with pytest.raises(ValueError, match="must increase"):
        tracker.handed_out_many([12])
    assert tracker.commit_many([12, 10]) == 2 and tracker.position == 12


class _Model:
    """The books kept naively: every handed-out offset, every committed one."""

    def __init__(self, last_offset: int) -> None:
        self.start = last_offset
        self.handed: list[int] = []
        self.committed: set[int] = set()

    def commit(self, offset: int) -> bool:
        if offset not in self.handed or offset in self.committed:
            return False
        self.committed.add(offset)
        return True

    @property
    def position(self) -> int:
        position = self.start
        for offset in self.handed:
            if offset <= self.start:
                continue  # (below a rewind's position)
            if offset not in self.committed:
                break
            position = offset
        return position

    def rewind(self, target: int) -> None:
        position = self.position
        self.handed = [o for o in self.handed if o < target]
        self.committed = {o for o in self.committed if o < target}
        self.start = min(position, target - 1)


@given(
    batches=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=12), min_size=1, max_size=8),
    data=st.data(),
)
def test_the_books_by_runs_match_a_naive_model(batches: list[list[int]], data) -> None:
    """Batches handed out (contiguous, or with gaps where a step is above 1), then commits
    of every shape the consumer makes: a whole batch, a prefix of one in order, single
    offsets in or out of order, repeated and unknown offsets. Position and outstanding are
    those of a set of handed-out and committed offsets, after every call."""
    tracker, model = CommitTracker(-1), _Model(-1)
    offset, handed = -1, []
    for steps in batches:
        batch = []
        for step in steps:
            offset += step
            batch.append(offset)
        if len(batch) == 1 and data.draw(st.booleans()):
            tracker.handed_out(batch[0])
        else:
            tracker.handed_out_many(batch)
        model.handed.extend(batch)
        handed.append(batch)
    calls = data.draw(st.integers(1, 30))
    for _ in range(calls):
        shape = data.draw(st.sampled_from(["batch", "prefix", "one", "subset"]))
        batch = data.draw(st.sampled_from(handed))
        if shape == "batch":
            offsets = list(batch)
        elif shape == "prefix":
            offsets = batch[: data.draw(st.integers(1, len(batch)))]
        elif shape == "one":
            offsets = [data.draw(st.integers(-1, offset + 2))]
        else:
            pool = [*batch, offset + 5]
            offsets = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=8))
        if len(offsets) == 1 and data.draw(st.booleans()):
            assert tracker.commit(offsets[0]) == model.commit(offsets[0])
        else:
            assert tracker.commit_many(offsets) == sum(model.commit(o) for o in offsets)
        assert tracker.position == model.position
        assert tracker.outstanding == len(model.handed) - len(model.committed)
    for o in model.handed:
        tracker.commit(o)
    assert tracker.position == offset and tracker.outstanding == 0


@given(data=st.data())
def test_a_rewind_keeps_what_lies_below_the_target_as_a_naive_model(data) -> None:
    """Hand-outs (contiguous or with gaps), commits in any order and seeks back
    (:meth:`CommitTracker.rewind`: offsets from the target on are handed out again) in any
    mix: position and outstanding are those of the naive books, where a rewind forgets what
    was handed out from the target on and moves a position at or past it to the target - 1."""
    tracker, model = CommitTracker(-1), _Model(-1)
    last = -1
    for _ in range(data.draw(st.integers(1, 25))):
        what = data.draw(st.sampled_from(["hand", "hand", "commit", "commit", "rewind"]))
        if what == "hand":
            steps = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
            batch = []
            for step in steps:
                last += step
                batch.append(last)
            tracker.handed_out_many(batch)
            model.handed.extend(batch)
        elif what == "commit":
            pool = [*model.handed, last + 3] if model.handed else [last + 3]
            offsets = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))
            assert tracker.commit_many(offsets) == sum(model.commit(o) for o in offsets)
        else:
            target = data.draw(st.integers(0, last + 2))
            tracker.rewind(target)
            model.rewind(target)
            last = min(last, target - 1)
            assert tracker.last_handed_out == last
        assert tracker.position == model.position, (tracker, model.handed, model.committed)
        assert tracker.outstanding == len(set(model.handed) - model.committed)


def test_a_rewind_past_what_was_handed_out_changes_nothing() -> None:
    tracker = CommitTracker(9)
    tracker.handed_out_many([10, 11, 12])
    tracker.rewind(13)
    assert tracker.last_handed_out == 12 and tracker.outstanding == 3 and tracker.position == 9
    tracker.rewind(11)  # 11 and 12 are handed out again; 10 still holds the position
    assert tracker.last_handed_out == 10 and tracker.outstanding == 1
    tracker.handed_out_many([11, 12])
    assert tracker.commit_many([11, 12]) == 2 and tracker.position == 9
    assert tracker.commit(10) and tracker.position == 12 and tracker.outstanding == 0


@pytest.mark.parametrize(
    "kind",
    [float, Fraction, lambda o: bool(o) if o in (0, 1) else o],
    ids=["float", "Fraction", "bool"],
)
@pytest.mark.parametrize("gaps", [False, True], ids=["contiguous", "compacted"])
def test_the_position_is_always_an_int_of_ours(kind, gaps) -> None:
    """An offset committed as another type equal to it (a hand-built Message's numpy
    integer, True, 5.0) passed the position as that object, and the next heartbeat's
    encoding failed the consumer's core (a review, 2026-12-06): the position is ours."""
    offsets = [0, 1, 3, 4, 6] if gaps else [0, 1, 2, 3, 4]
    for bulk in (False, True):
        tracker = CommitTracker(-1)
        tracker.handed_out_many(offsets)
        try:
            if bulk:
                assert tracker.commit_many([kind(o) for o in offsets[:3]]) == 3
            else:
                for o in offsets[:3]:
                    assert tracker.commit(kind(o))
        except TypeError:  # (refused whole: the books as they were, a commit of ints goes on)
            assert tracker.position == -1 and tracker.outstanding == len(offsets)
            assert tracker.commit_many(offsets[:3]) == 3
        assert tracker.position == offsets[2] and type(tracker.position) is int
