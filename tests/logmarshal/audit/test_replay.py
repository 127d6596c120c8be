"""The pure fold: every event of the story lands in the right table, fast and without Spark."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmarshal.audit import ReplayConfig, audit_records, new_world
from logmarshal.audit.schema import TABLES

from .logs import Script, random_log, story

B = 1_700_000_000_000
CONFIG = ReplayConfig()


def as_dicts(rows: dict, table: str) -> list[dict]:
    names = [c for c, _ in TABLES[table]]
    return [dict(zip(names, r, strict=True)) for r in rows[table]]


@pytest.fixture(scope="module")
def audited():
    script = Script()
    at = story(script)
    return script, at, audit_records(script.records, CONFIG)


def test_ownership_explains_every_claim(audited) -> None:
    _script, at, rows = audited
    own = {
        (o["partition"], o["client_id"], o["instance_id"]): o for o in as_dicts(rows, "ownership")
    }
    a = own[(0, "a", "1")]
    assert (a["start_ms"], a["start_cause"], a["end_reason"]) == (B, "claimed", "stale_taken")
    assert (a["end_ms"], a["end_offset"], a["last_seen_ms"]) == (
        B + 3000,
        at["b_takeover"],
        B + 600,
    )
    assert a["end_position"] == 20  # a's last heartbeat said 19
    b = own[(0, "b", "1")]
    assert (b["start_cause"], b["start_position"], b["end_reason"]) == (
        "took_over_stale",
        20,
        "group_reset",
    )
    assert own[(1, "c", "1")]["end_reason"] == "released"
    assert own[(1, "d", "1")]["start_position"] == 8
    assert own[(2, "e", "1")]["end_reason"] == "fenced_new_instance"
    assert own[(2, "e", "2")]["start_cause"] == "restart_takeover"
    f = own[(0, "f", "1")]
    assert (f["end_reason"], f["end_ms"], f["state_at_end"]) == ("open", None, "fresh")
    assert f["start_position"] == 101  # the admin set 100 during the pause
    assert len(own) == 7


def test_failovers_have_clients_gaps_and_causes(audited) -> None:
    _script, at, rows = audited
    fail = {(f["partition"], f["cause"]): f for f in as_dicts(rows, "failovers")}
    assert set(fail) == {(0, "stale_takeover"), (1, "released"), (2, "restart"), (0, "group_reset")}
    stale = fail[(0, "stale_takeover")]
    assert (stale["from_client"], stale["to_client"], stale["gap_ms"]) == ("a", "b", 2400)
    assert (stale["to_start_ms"], stale["offset"], stale["resume_position"]) == (
        B + 3000,
        at["b_takeover"],
        20,
    )
    handoff = fail[(1, "released")]
    assert (handoff["from_client"], handoff["to_client"], handoff["gap_ms"]) == ("c", "d", 200)
    restart = fail[(2, "restart")]
    assert (restart["from_instance"], restart["to_instance"], restart["gap_ms"]) == ("1", "2", 400)
    reset = fail[(0, "group_reset")]
    assert (reset["from_client"], reset["to_client"], reset["from_end_ms"]) == ("b", "f", B + 5000)


def test_violations_name_the_misbehaving_client(audited) -> None:
    script, at, rows = audited
    viol = {v["kind"]: v for v in as_dicts(rows, "violations")}
    assert set(viol) == {
        "heartbeat_without_claim",
        "write_from_fenced_instance",
        "write_during_pause",
        "offset_regression",
        "invalid_record",
    }
    zombie = viol["heartbeat_without_claim"]
    assert (zombie["client_id"], zombie["offset"], zombie["time_ms"]) == (
        "a",
        at["a_zombie"],
        B + 3100,
    )
    assert (zombie["holder_client"], zombie["lost_at_ms"]) == ("b", B + 3000)
    fenced = viol["write_from_fenced_instance"]
    assert (fenced["client_id"], fenced["instance_id"], fenced["lost_at_ms"]) == ("e", "1", B + 900)
    assert fenced["offset"] == at["e_zombie"] and fenced["coord_partition"] == script.cp(2)
    paused = viol["write_during_pause"]
    assert (paused["client_id"], paused["offset"], paused["lost_at_ms"]) == (
        "b",
        at["b_paused"],
        B + 5000,
    )
    assert viol["offset_regression"]["offset"] == at["f_regression"]
    junk = viol["invalid_record"]
    assert (junk["coord_partition"], junk["offset"], junk["client_id"]) == (
        at["garbage_cp"],
        at["garbage"],
        None,
    )


def test_gaps_positions_and_verdict_counts(audited) -> None:
    _script, _at, rows = audited
    gaps = {(g["client_id"], g["partition"]): g for g in as_dicts(rows, "heartbeat_gaps")}
    assert gaps[("b", 0)]["max_gap_ms"] == 800
    assert gaps[("b", 0)]["gap_over_hb"] == pytest.approx(0.8)
    pos = {p["partition"]: p for p in as_dicts(rows, "positions")}
    assert (pos[0]["holder_client"], pos[0]["resume_offset"], pos[0]["freshness"]) == (
        "f",
        151,
        "fresh",
    )
    assert pos[1]["holder_client"] is None and pos[1]["resume_offset"] == 10
    counts: dict = {}
    for v in as_dicts(rows, "verdicts"):
        k = (v["outcome"], v["reason"])
        counts[k] = counts.get(k, 0) + v["records"]
    assert counts[("rejected", "still_owned")] == 1
    assert counts[("accepted", "group_paused")] == 4  # one ReleaseGroup per coordination partition
    assert sum(counts.values()) == sum(len(r) for r in _script.records.values())


def test_since_and_until_bound_the_report() -> None:
    script = Script()
    story(script)
    rows = audit_records(script.records, ReplayConfig(until_ms=B + 4000))
    own = as_dicts(rows, "ownership")
    assert {o["end_reason"] for o in own if o["client_id"] == "b"} == {"open"}
    assert not any(o["client_id"] == "f" for o in own)
    assert max(c["last_ms"] for c in as_dicts(rows, "coordination")) <= B + 4000
    rows = audit_records(script.records, ReplayConfig(since_ms=B + 4000))
    fail = as_dicts(rows, "failovers")
    assert [f["cause"] for f in fail] == ["group_reset"]
    assert all(v["time_ms"] >= B + 4000 for v in as_dicts(rows, "violations"))


def test_one_place_builds_the_world() -> None:
    assert new_world(CONFIG).applied_through == -1


def _tables(rows):
    pytest.importorskip("pyarrow")
    import pyarrow as pa

    from logmarshal.audit.arrow import rows_to_union, split_union

    batch = rows_to_union(rows)
    from logmarshal.audit.arrow import union_schema

    union = pa.Table.from_batches([] if batch is None else [batch], schema=union_schema())
    return split_union(union)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    steps=st.integers(0, 120),
    n=st.integers(1, 4),
    tasks=st.sampled_from([0.0, 0.5]),
)
def test_cross_check_on_random_logs(seed: int, steps: int, n: int, tasks: float) -> None:
    from logmarshal.audit.verify import compare, reference_replay

    script = Script(n)
    random_log(random.Random(seed), script, steps, tasks=tasks)
    rows = audit_records(script.records, CONFIG)
    result = compare(_tables(rows), reference_replay(script.records.items(), CONFIG))
    assert result.ok, result.mismatches


def _resume_after(records, group, topic, partition, upto: int):
    """The world's resume offset after applying the records with offset < ``upto``."""
    world = new_world(CONFIG)
    world.apply_many([r for r in records if r[0] < upto])
    return world.resume_offset(group, topic, partition)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    steps=st.integers(0, 80),
    n=st.integers(1, 3),
    tasks=st.sampled_from([0.0, 0.5]),
)
def test_ownership_positions_are_the_worlds_resume_offsets(
    seed: int, steps: int, n: int, tasks: float
) -> None:
    """start/end positions (None: no position) are what WorldState.resume_offset says then
    (for a task's key: the scalar of its vector)."""
    script = Script(n)
    random_log(random.Random(seed), script, steps, tasks=tasks)
    rows = audit_records(script.records, CONFIG)
    for o in as_dicts(rows, "ownership"):
        recs = script.records[o["coord_partition"]]
        where = (o["group"], o["topic"], o["partition"])
        assert o["start_position"] == _resume_after(recs, *where, o["start_offset"] + 1), o
        if o["end_offset"] is not None:
            # a restart takeover ends the old claim before its heartbeat sets a position
            end = o["end_offset"] + (o["end_reason"] != "fenced_new_instance")
            assert o["end_position"] == _resume_after(recs, *where, end), o


def test_a_claim_alone_is_no_position_and_minus_one_is_one() -> None:
    """A claimed-only partition has no resume offset (nor lag); an admin reset to offset 0
    (last_offset -1) and a holder's heartbeat of -1 are positions: resume at 0."""
    script = Script(1)
    script.claim("a:1", 0, 0)  # p0: claimed, never a heartbeat
    script.claim("a:1", 1, 0)
    script.beat("a:1", 1, -1, 10)  # p1: the holder starts at 0
    script.claim("a:1", 2, 0)
    script.beat("a:1", 2, 41, 10)
    script.release_group("admin:x", 2000, 100)
    script.beat("admin:x", 2, -1, 110)  # p2: reset to earliest
    script.claim("b:1", 0, 2100)  # after the pause: p0 still has no position
    script.claim("b:1", 2, 2100)
    config = ReplayConfig(log_end={("events", p): 50 for p in range(3)})
    rows = audit_records(script.records, config)
    pos = {p["partition"]: p for p in as_dicts(rows, "positions")}
    got = {
        p: (r["last_offset"], r["claimed_through"], r["resume_offset"], r["lag"])
        for p, r in pos.items()
    }
    assert got == {0: (-1, -1, None, None), 1: (-1, -1, 0, 50), 2: (-1, -1, 0, 50)}
    own = {(o["partition"], o["client_id"]): o for o in as_dicts(rows, "ownership")}
    assert own[(0, "a")]["start_position"] is None and own[(0, "a")]["end_position"] is None
    assert own[(0, "b")]["start_position"] is None
    assert own[(1, "a")]["start_position"] is None and own[(1, "a")]["end_position"] == 0
    assert own[(2, "a")]["end_position"] == 42
    assert own[(2, "b")]["start_position"] == 0
    fail = {f["partition"]: f for f in as_dicts(rows, "failovers")}
    assert fail[0]["resume_position"] is None and fail[2]["resume_position"] == 0
    from logmarshal.audit.verify import compare, reference_replay

    check = compare(_tables(rows), reference_replay(script.records.items(), config))
    assert check.ok, check.mismatches


# ---------------------------------------------------------------- rebalancing (docs/rebalancing.md)

#: (partition, offset into the story ms, client, action) -> cause, for RebalanceStory
REBALANCE_MOVES = {
    (0, 310, "a", "took"): "rebalance: member joined (a)",
    (1, 310, "a", "took"): "rebalance: member joined (a)",
    (2, 310, "a", "took"): "rebalance: member joined (a)",
    (2, 1510, "a", "gave_up"): "rebalance: member joined (c)",
    (2, 1520, "c", "took"): "rebalance: member joined (c)",
    (1, 2410, "a", "gave_up"): "rebalance: member joined (b)",
    (1, 2420, "b", "took"): "rebalance: member joined (b)",
    (2, 3000, "c", "gave_up"): "closed",
    (2, 3020, "a", "took"): "rebalance: member left (c)",
    (1, 5400, "b", "gave_up"): "failover: holder stale",
    (1, 5400, "a", "took"): "failover: holder stale",
    (3, 6010, "a", "took"): "rebalance: partitions added (events 3->4)",
}


def _moves(rows: dict, since: int | None = None) -> dict:
    from logmarshal.audit.moves import derive_moves

    names = [c for c, _ in TABLES["moves"]]
    out = {}
    for r in derive_moves(as_dicts(rows, "ownership"), as_dicts(rows, "membership"), since):
        m = dict(zip(names, r, strict=True))
        if m["group"] == "g":
            out[(m["partition"], m["time_ms"] - B, m["client_id"], m["action"])] = m["cause"]
    return out


def test_a_rebalancing_log_names_the_cause_of_every_move() -> None:
    from .logs import RebalanceStory

    script = Script()
    story = RebalanceStory(script)
    story.run(story.END)
    rows = audit_records(script.records, CONFIG)
    events = [
        (e["time_ms"] - B, e["client_id"], e["event"], e["detail"])
        for e in as_dicts(rows, "membership")
    ]
    assert events == [
        (0, "a", "joined", None),
        (1000, "c", "joined", None),
        (2000, "b", "joined", None),
        (3010, "c", "left", None),
        (5301, "b", "expired", None),  # last announcement 3300 + 2·HB + 1
        (6000, "a", "partitions_added", "events 3->4"),
    ]
    assert _moves(rows) == REBALANCE_MOVES
    counts = {(g, o, r): n for g, o, r, n in rows["verdicts"]}
    assert counts[("g", "accepted", "joined")] == 3
    assert counts[("g", "accepted", "left")] == 1
    assert counts[("g", "accepted", "announced")] > 20
    # the same tables whatever the chunking (membership expiry is dated, not observed)
    from logmarshal.audit.replay import PartitionAudit

    for cp, records in script.records.items():
        audit = PartitionAudit(cp, CONFIG)
        for r in records:
            audit.feed([r[0]], [r[1]], [r[2]], [r[3]])
        one = audit.finish()
        whole = audit_records({cp: records}, CONFIG)
        assert one["membership"] == whole["membership"] and one["ownership"] == whole["ownership"]


def test_a_leave_from_a_non_member_is_a_violation_and_v2_junk_is_counted() -> None:
    script = Script()
    script.announce("a:1", 0)
    script.leave("z:1", 100)  # never a member
    script.raw(script.cp(0), 200, b"g", b"\x02\x06garbage")
    rows = audit_records(script.records, CONFIG)
    viol = as_dicts(rows, "violations")
    assert sorted((v["client_id"] or "", v["message_type"] or "", v["kind"]) for v in viol) == [
        ("", "", "invalid_record"),
        ("z", "leaving_group", "leave_without_membership"),
    ]
    assert [e["event"] for e in as_dicts(rows, "membership")] == ["joined"]


def test_an_audit_from_a_snapshot_still_sees_the_members() -> None:
    """Membership is in the world snapshot (format version 2): an audit starting there
    knows the members (their joins are dated at ``since``), expires them and explains the
    moves after it as the full history does."""
    from rationalizer import WorldState

    from .logs import RebalanceStory

    script = Script()
    story = RebalanceStory(script)
    story.run(2200)  # a, c and b have joined
    genesis = {}
    for cp, records in script.records.items():
        w = WorldState()
        w.apply_many(records)
        if records:
            genesis[cp] = (records[-1][0], w.to_bytes())
    story.run(story.END)
    tail = {
        cp: [r for r in recs if cp not in genesis or r[0] > genesis[cp][0]]
        for cp, recs in script.records.items()
    }
    since = B + 2201
    rows = audit_records(tail, ReplayConfig(genesis=genesis, since_ms=since))
    events = [
        (e["time_ms"] - B, e["client_id"], e["event"], e["offset"] is None)
        for e in as_dicts(rows, "membership")
    ]
    assert events == [
        (0, "a", "joined", True),
        (1000, "c", "joined", True),
        (2000, "b", "joined", True),
        (3010, "c", "left", False),
        (5301, "b", "expired", True),
        (6000, "a", "partitions_added", False),
    ]
    after = {k: v for k, v in REBALANCE_MOVES.items() if k[1] >= 2201}
    assert _moves(rows, since) == after
    full = audit_records(script.records, ReplayConfig(since_ms=since))
    assert _moves(full, since) == after


# ------------------------------------------------------------------ tasks (protocol version 3)


def test_a_tasks_heartbeats_and_release_are_those_of_its_key() -> None:
    """HeartbeatingTask / ReleasingTask are folded as a heartbeat / release of the task's key
    (same effects, gaps, failovers and violation kinds); positions are their scalars."""
    from logmarshal.audit.verify import compare, reference_replay

    script = Script(1, topic="wc.task")
    script.claim("a:1", 0, 0)
    script.task_beat("a:1", 0, (("left", 9), ("right", 4)), 100)  # scalar 14
    script.task_beat("a:1", 0, (("left", 12), ("right", 4)), 700)  # a gap of 600
    zombie = script.task_beat("b:1", 0, (("left", 1),), 750)  # not the holder
    script.task_release("a:1", 0, (("left", 19), ("right", 9)), 800)  # scalar 29
    script.claim("b:1", 0, 900)
    restart = script.task_beat("b:2", 0, (("left", 20), ("right", 9)), 1000)  # 30; b:1 fenced
    fenced = script.task_release("b:1", 0, (("left", 20),), 1100)
    script.beat("b:2", 0, 40, 1200)  # a plain heartbeat: the key's vector is gone
    rows = audit_records(script.records, CONFIG)
    own = {(o["client_id"], o["instance_id"]): o for o in as_dicts(rows, "ownership")}
    a = own[("a", "1")]
    assert (a["end_reason"], a["end_position"], a["accepted_messages"]) == ("released", 30, 4)
    assert own[("b", "1")]["start_position"] == 30
    assert own[("b", "1")]["end_reason"] == "fenced_new_instance"
    b2 = own[("b", "2")]
    assert (b2["start_cause"], b2["start_offset"], b2["start_position"]) == (
        "restart_takeover",
        restart,
        31,
    )
    gaps = {(g["client_id"], g["instance_id"]): g for g in as_dicts(rows, "heartbeat_gaps")}
    assert gaps[("a", "1")]["max_gap_ms"] == 600
    fail = {f["cause"]: f for f in as_dicts(rows, "failovers")}
    assert fail["released"]["resume_position"] == 30
    viol = {v["kind"]: v for v in as_dicts(rows, "violations")}
    assert set(viol) == {"heartbeat_without_claim", "write_from_fenced_instance"}
    beat, write = viol["heartbeat_without_claim"], viol["write_from_fenced_instance"]
    assert (beat["offset"], beat["message_type"]) == (zombie, "heartbeating_task")
    assert (write["offset"], write["message_type"]) == (fenced, "releasing_task")
    counts = {(o, r): n for _g, o, r, n in rows["verdicts"]}
    assert counts[("accepted", "renewed")] == 3
    assert counts[("accepted", "released")] == 1
    assert counts[("accepted", "restart_takeover")] == 1
    (pos,) = as_dicts(rows, "positions")
    assert (pos["last_offset"], pos["resume_offset"]) == (40, 41)
    check = compare(_tables(rows), reference_replay(script.records.items(), CONFIG))
    assert check.ok, check.mismatches


def test_an_audit_from_a_version_3_snapshot_equals_the_full_history() -> None:
    """A genesis snapshot holding task vectors (snapshot version 3) restores, and the audit
    from it reaches the positions of the full replay."""
    from rationalizer import WorldState

    script = Script(2, topic="wc.task")
    rng = random.Random(7)
    random_log(rng, script, 150, tasks=0.7)
    genesis = {}
    for cp, records in script.records.items():
        w = WorldState()
        w.apply_many(records)
        if records:
            genesis[cp] = (records[-1][0], w.to_bytes())
    # version 3 holds the task vectors; version 4 holds them too, with the tenure floors
    assert any(data[4] >= 3 for _, data in genesis.values())
    done = {cp: len(records) for cp, records in script.records.items()}
    for p in range(4):  # the tail: every partition's holder, if any, beats once more
        for cp, records in script.records.items():
            w = WorldState()
            w.apply_many(records)
            holder = w.holder("g", "wc.task", p)
            if holder is not None and script.cp(p) == cp:
                script.task_beat(f"{holder[0]}:{holder[1]}", p, (("left", 500),), 10**6)
    tail = {cp: recs[done[cp] :] for cp, recs in script.records.items()}
    from_snapshot = audit_records(tail, ReplayConfig(genesis=genesis))
    full = audit_records(script.records, CONFIG)
    assert from_snapshot["positions"] == full["positions"]


def test_a_move_in_the_window_is_explained_as_in_the_full_audit() -> None:
    """``--since T`` dropped the claims that ended before T, and with them what explains a
    move at or after T: the claim taken after a release before T lost its counterpart, and
    its cause (an attack on the audit, 2026-12-06). The fold keeps the last such claim of
    each partition for the moves; the ownership table reported still starts at T."""
    pytest.importorskip("pyarrow")
    from logmarshal.audit.arrow import tables_from_rows
    from logmarshal.audit.moves import derive_moves, ownership_since

    script = Script()
    story(script)
    full = audit_records(script.records, ReplayConfig())
    moves = derive_moves(as_dicts(full, "ownership"), as_dicts(full, "membership"))
    took = sorted({m[4] for m in moves if m[8] == "took"})
    assert len(took) >= 3
    for since in took:
        rows = audit_records(script.records, ReplayConfig(since_ms=since))
        got = derive_moves(as_dicts(rows, "ownership"), as_dicts(rows, "membership"), since)
        assert got == [m for m in moves if m[4] >= since], since
        reported = ownership_since(tables_from_rows(rows)["ownership"], since).to_pylist()
        assert all(o["end_ms"] is None or o["end_ms"] >= since for o in reported)
        assert len(reported) == len(
            [o for o in as_dicts(full, "ownership") if o["end_ms"] is None or o["end_ms"] >= since]
        )
