"""The columnar fold gives every table of the per-record fold, whatever the log and chunking.

The per-record fold (:class:`PartitionAudit`) is the reference: it handles each record as it
comes. The columnar one (:class:`ColumnarAudit`, what both engines run) defers renewals and
folds them a run at a time, so these tests aim at what deferring could get wrong: runs cut
by batch ends and by rare records of the same key, ties between gaps, positions read at a
claim's start and end, windows (since/until) that cut a batch, re-deliveries, snapshots.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from logmarshal.audit import ReplayConfig
from logmarshal.audit.columnar import ColumnarAudit
from logmarshal.audit.local import audit_records
from logmarshal.audit.replay import AuditRows, PartitionAudit
from rationalizer import Effect, Reason, Verdict, WorldState

from .logs import RebalanceStory, Script, fleet_log, random_log, story

B = 1_700_000_000_000

Record = tuple[int, int, bytes | None, bytes | None]


def _chunks(rng: random.Random, records: list[Record], redeliver: bool) -> list[list[Record]]:
    """``records`` cut at random (single records to hundreds), some chunks starting with a
    re-delivery of records already fed (when ``redeliver``)."""
    out, i = [], 0
    while i < len(records):
        k = rng.choice((1, 2, 3, 7, 30, 200, 1000))
        start = i
        if redeliver and i and rng.random() < 0.2:
            start = max(0, i - rng.randint(1, 5))
        out.append(records[start : i + k])
        i += k
    return out


def fold_both(
    records: dict[int, list[Record]], config: ReplayConfig, seed: int, *, redeliver: bool = False
) -> tuple[dict[int, AuditRows], dict[int, AuditRows]]:
    """Each coordination partition folded by the per-record fold (records in random chunks)
    and by the columnar one (other random chunks, as Arrow batches)."""
    rng = random.Random(seed)
    ref, col = {}, {}
    for cp, recs in records.items():
        a = PartitionAudit(cp, config)
        for chunk in _chunks(rng, recs, redeliver):
            a.feed(*(list(c) for c in zip(*chunk, strict=True)))
        ref[cp] = a.finish()
        b = ColumnarAudit(cp, config)
        for chunk in _chunks(rng, recs, redeliver):
            b.feed(*(list(c) for c in zip(*chunk, strict=True)))
        col[cp] = b.finish()
    return ref, col


def assert_same(ref: dict[int, AuditRows], col: dict[int, AuditRows]) -> None:
    assert ref.keys() == col.keys()
    for cp in ref:
        for table in ref[cp]:
            assert col[cp][table] == ref[cp][table], (cp, table)


def _window(data: st.DataObject) -> ReplayConfig:
    kind = data.draw(st.sampled_from(["all", "since", "until", "both"]))
    since = B + data.draw(st.integers(0, 40_000)) if kind in ("since", "both") else None
    until = B + data.draw(st.integers(0, 60_000)) if kind in ("until", "both") else None
    return ReplayConfig(since_ms=since, until_ms=until)


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    steps=st.integers(0, 900),
    n=st.integers(1, 4),
    tasks=st.sampled_from([0.0, 0.3]),
    redeliver=st.booleans(),
    data=st.data(),
)
def test_the_columnar_fold_equals_the_per_record_fold_on_fleets(
    seed: int, steps: int, n: int, tasks: float, redeliver: bool, data: st.DataObject
) -> None:
    """Steady fleets: long runs of renewals between the rare events (fleet_log)."""
    script = Script(n)
    fleet_log(random.Random(seed), script, steps, tasks=tasks)
    ref, col = fold_both(script.records, _window(data), seed, redeliver=redeliver)
    assert_same(ref, col)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    steps=st.integers(0, 200),
    n=st.integers(1, 4),
    tasks=st.sampled_from([0.0, 0.5]),
    names=st.sampled_from([0.0, 0.1]),
    data=st.data(),
)
def test_the_columnar_fold_equals_the_per_record_fold_on_random_logs(
    seed: int, steps: int, n: int, tasks: float, names: float, data: st.DataObject
) -> None:
    """Random clients writing anything (random_log: most writes are rejected; with
    ``names``, NamingTenures of version 9 too)."""
    script = Script(n)
    random_log(random.Random(seed), script, steps, tasks=tasks, names=names)
    ref, col = fold_both(script.records, _window(data), seed)
    assert_same(ref, col)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), cut=st.floats(0.1, 0.9))
def test_the_columnar_fold_equals_the_per_record_fold_from_a_snapshot(
    seed: int, cut: float
) -> None:
    """A replay that starts from a snapshot's world (claims open at the genesis)."""
    script = Script(2)
    fleet_log(random.Random(seed), script, 600)
    genesis, tail = {}, {}
    held = 0  # claims open at the snapshots: each is an interval that starts there
    for cp, records in script.records.items():
        head = records[: int(len(records) * cut)]
        tail[cp] = records[len(head) :]
        if head:
            world = WorldState()
            world.apply_many(head)
            genesis[cp] = (head[-1][0], world.to_bytes())
            held += sum(s.holder is not None for s in world.partitions())
    ref, col = fold_both(tail, ReplayConfig(genesis=genesis), seed)
    assert_same(ref, col)
    assert sum(o[8] == "snapshot" for rows in col.values() for o in rows["ownership"]) == held


def test_the_scripted_story_and_a_rebalance_are_the_same_in_both_folds() -> None:
    script = Script()
    story(script)
    assert_same(*fold_both(script.records, ReplayConfig(), 1))
    rebalance = Script()
    RebalanceStory(rebalance).run(RebalanceStory.END)
    ref, col = fold_both(rebalance.records, ReplayConfig(), 2)
    assert_same(ref, col)
    assert any(rows["membership"] for rows in col.values())


def test_the_first_of_equal_gaps_is_the_largest_across_batches() -> None:
    """Gaps of 300, 500, 500 (the second 500 in another batch) and, after the release, the
    claim's largest gap ends at the first 500: record by record, a tie does not replace."""
    script = Script(1)
    script.claim("a:1", 0, 0)
    script.beat("a:1", 0, 1, 300)
    script.beat("a:1", 0, 2, 800)  # gap 500, ends at 800
    script.beat("a:1", 0, 3, 1300)  # gap 500 again
    script.release("a:1", 0, 4, 1500)
    (records,) = script.records.values()
    col = ColumnarAudit(0, ReplayConfig())
    col.feed(*(list(c) for c in zip(*records[:3], strict=True)))
    col.feed(*(list(c) for c in zip(*records[3:], strict=True)))
    (gaps,) = col.finish()["heartbeat_gaps"]
    assert (gaps[8], gaps[9], gaps[10]) == (5, 500, B + 800)  # messages, max gap, its end
    ref = audit_records(script.records, ReplayConfig(), fold=PartitionAudit)
    assert ref["heartbeat_gaps"] == [gaps]


def test_positions_at_a_claims_end_include_the_renewals_just_before_it() -> None:
    """A restart ends the old claim at the position of the heartbeats before it, in the same
    batch: the deferred renewals are folded before the end is written."""
    script = Script(1)
    script.claim("a:1", 0, 0)
    script.beat("a:1", 0, 10, 100)
    script.claim_messages("a:1", 0, 20, 200)
    script.beat("a:1", 0, 15, 300)
    restart = script.beat("a:2", 0, 30, 400)
    rows = audit_records(script.records, ReplayConfig(), fold=ColumnarAudit)
    own = {o[5]: o for o in rows["ownership"]}  # by instance
    assert own["1"][12:14] == ("fenced_new_instance", 21)  # end reason, end position
    assert (own["2"][7], own["2"][9]) == (restart, 31)  # start offset and position
    assert own["1"][15] == 4  # claim + 3 renewals


@pytest.mark.parametrize("effect", list(Effect))
def test_every_effect_is_classified_by_value_not_by_instance(effect: Effect) -> None:
    """The columns pick the rationalizer's shared verdicts by identity; a verdict built
    anew (as a rule may) is classified by its effect, the same way."""
    from logmarshal.audit.columnar import _classify
    from rationalizer._verdict import ACCEPTED

    assert _classify(Verdict(True, effect=effect)) == _classify(ACCEPTED[effect])


def test_every_rejection_reason_but_a_lost_race_goes_through_the_per_record_code() -> None:
    from logmarshal.audit.columnar import _LOST, _RARE, _classify

    codes = {r: _classify(Verdict(False, reason=r)) for r in Reason}
    assert codes.pop(Reason.STILL_OWNED) == _LOST
    assert set(codes.values()) == {_RARE}


def test_records_at_exactly_since_are_counted_by_the_columns_too() -> None:
    """The window starts at ``since`` inclusive, for the renewals and the lost races the
    columns count as for the records the per-record code counts."""
    script = Script(1)
    script.claim("a:1", 0, 0)
    script.beat("a:1", 0, 1, 100)
    script.claim("b:1", 0, 200)  # a lost race
    script.beat("a:1", 0, 2, 200)
    script.claim_messages("a:1", 0, 9, 300)
    for since in (B + 200, B + 201):
        config = ReplayConfig(since_ms=since)
        rows = audit_records(script.records, config, fold=ColumnarAudit)
        counts = {(o, r): n for _g, o, r, n in rows["verdicts"]}
        ref = audit_records(script.records, config, fold=PartitionAudit)
        assert rows["verdicts"] == ref["verdicts"]
        if since == B + 200:
            assert counts == {
                ("rejected", "still_owned"): 1,
                ("accepted", "renewed"): 1,
                ("accepted", "messages_claimed"): 1,
            }
        else:
            assert counts == {("accepted", "messages_claimed"): 1}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), feed_rows=st.sampled_from([1, 7, 100, 1 << 16]))
def test_fold_partitions_gathers_small_batches_into_the_same_rows(
    seed: int, feed_rows: int
) -> None:
    """What the engines run: batches of every coordination partition in turn, cut at random
    (as Spark's Arrow batches are), gathered into feeds of ``feed_rows`` records."""
    import pyarrow as pa

    from logmarshal.audit.arrow import fold_partitions

    script = Script(3)
    fleet_log(random.Random(seed), script, 500)
    rng = random.Random(seed)
    batches = []
    for cp, records in sorted(script.records.items()):
        i = 0
        while i < len(records):
            k = rng.choice((1, 5, 64, 300))
            chunk = records[i : i + k]
            i += k
            offsets, stamps, keys, values = (list(c) for c in zip(*chunk, strict=True))
            batches.append(
                pa.RecordBatch.from_pydict(
                    {
                        "coord_partition": pa.array([cp] * len(chunk), pa.int32()),
                        "offset": pa.array(offsets, pa.int64()),
                        "timestamp_ms": pa.array(stamps, pa.int64()),
                        "key": pa.array(keys, pa.binary()),
                        "value": pa.array(values, pa.binary()),
                    }
                )
            )
    got = list(fold_partitions(batches, ReplayConfig(), feed_rows=feed_rows))
    ref = [
        audit_records({cp: recs}, ReplayConfig(), fold=PartitionAudit)
        for cp, recs in sorted(script.records.items())
        if recs
    ]
    assert got == ref


class _NewOutcome:
    """An effect or reason the rationalizer may add later (the audit must not need a change
    to count it): hashable, with a ``value``, and none of the members the audit knows."""

    def __init__(self, value: str) -> None:
        self.value = value


@pytest.mark.parametrize("fold", [PartitionAudit, ColumnarAudit])
def test_a_new_effect_or_reason_is_counted_without_an_audit_change(fold, caplog) -> None:
    script = Script(1)
    script.claim("a:1", 0, 0)
    new_effect = script.beat("a:1", 0, 5, 100)
    new_reason = script.beat("b:1", 0, 6, 150)
    script.beat("a:1", 0, 7, 200)
    (records,) = script.records.values()
    swap = {
        new_effect: Verdict(True, effect=_NewOutcome("amo_guarded")),  # type: ignore[arg-type]
        new_reason: Verdict(False, reason=_NewOutcome("unsafe_restart")),  # type: ignore[arg-type]
    }
    audit = fold(0, ReplayConfig())
    apply_many = audit.world.apply_many

    def with_new_outcomes(recs):
        recs = list(recs)
        return [swap.get(r[0], v) for r, v in zip(recs, apply_many(recs), strict=True)]

    audit.world.apply_many = with_new_outcomes
    with caplog.at_level("WARNING", logger="logmarshal.audit.replay"):
        audit.feed(*(list(c) for c in zip(*records, strict=True)))
    rows = audit.finish()
    counts = {(o, r): n for _g, o, r, n in rows["verdicts"]}
    assert counts == {
        ("accepted", "claimed"): 1,
        ("accepted", "amo_guarded"): 1,
        ("rejected", "unsafe_restart"): 1,
        ("accepted", "renewed"): 1,
    }
    (violation,) = rows["violations"]
    assert (violation[1], violation[6], violation[9], violation[10]) == (
        new_reason,
        "b",
        "unsafe_restart",
        "unsafe_restart",  # no kind of its own yet: the reason names it
    )
    assert "amo_guarded" in caplog.text


def test_fewer_collections_slows_the_collector_and_puts_it_back() -> None:
    import gc

    from logmarshal.audit.deps import GC_SLOWDOWN, fewer_collections

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == (before[0] * GC_SLOWDOWN, *before[1:])
        raise RuntimeError("the fold failed")
    assert gc.get_threshold() == before
    gc.set_threshold(0)  # collection switched off by the application: it stays off
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
