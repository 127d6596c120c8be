"""The audit of a log with MemberHeartbeats (PROTOCOL.md, "Version 7"): each entry is
counted and folded as its partition's Heartbeat (positions, renewals, gaps), a rejected
entry is a finding of its own, and both folds agree."""

from __future__ import annotations

import pytest

from logmarshal.audit import ReplayConfig
from logmarshal.audit.columnar import ColumnarAudit
from logmarshal.audit.local import audit_records
from logmarshal.audit.replay import PartitionAudit
from rationalizer import ClaimingPartition, Heartbeat, MemberHeartbeat, ReleasingPartition, encode

ME = {"client_id": "a", "instance_id": "1", "group_id": "g"}


def _claim(p: int) -> ClaimingPartition:
    return ClaimingPartition(**ME, topic="t", partition=p, heartbeat_interval_ms=1000, version=6)


def _log(member: bool) -> list[tuple[int, bytes, bytes]]:
    """a claims t/0 and t/1 (tenures 0 and 1), heartbeats both three times, releases t/1
    at 30, claims it again (tenure 6) and heartbeats it at 40; then tenure 1's entry,
    overtaken in the transport, lands (member heartbeats only: NOT_HOLDER)."""
    msgs: list[object] = [_claim(0), _claim(1)]
    for i in range(3):
        if member:
            entries = (("t", 0, 0, 10 * i), ("t", 1, 1, 10 * i + 5))
            msgs.append(MemberHeartbeat(**ME, heartbeat_interval_ms=1000, entries=entries))
        else:
            for p, last in ((0, 10 * i), (1, 10 * i + 5)):
                msgs.append(
                    Heartbeat(
                        **ME, topic="t", partition=p, last_offset=last, heartbeat_interval_ms=1000
                    )
                )
    msgs.append(ReleasingPartition(**ME, topic="t", partition=1, last_offset=30, tenure=1))
    tenure = len(msgs)
    msgs.append(_claim(1))
    if member:
        msgs.append(
            MemberHeartbeat(**ME, heartbeat_interval_ms=1000, entries=(("t", 1, tenure, 40),))
        )
        msgs.append(MemberHeartbeat(**ME, heartbeat_interval_ms=1000, entries=(("t", 1, 1, 25),)))
    else:
        msgs.append(
            Heartbeat(**ME, topic="t", partition=1, last_offset=40, heartbeat_interval_ms=1000)
        )
    return [(1000 + 100 * i, *encode(m)) for i, m in enumerate(msgs)]  # type: ignore[arg-type]


def _rows(member: bool, fold: type) -> dict:
    records = {0: [(o, *r) for o, r in enumerate(_log(member))]}
    return audit_records(records, ReplayConfig(), fold=fold)


@pytest.mark.parametrize("fold", [PartitionAudit, ColumnarAudit], ids=["per-record", "columnar"])
def test_entries_are_folded_as_heartbeats(fold):
    beats, plain = _rows(True, fold), _rows(False, fold)
    # positions: what the Heartbeats leave (the late entry moved nothing back)
    cols = [0, 1, 2, 4, 5, 7, 8, 9]  # the partition, holder, last_offset, claimed, resume
    assert [[r[i] for i in cols] for r in beats["positions"]] == [
        [r[i] for i in cols] for r in plain["positions"]
    ]
    assert [r[7] for r in beats["positions"]] == [20, 40]
    verdicts = {(g, o, r): n for g, o, r, n in beats["verdicts"]}
    want = {(g, o, r): n for g, o, r, n in plain["verdicts"]}
    want[("g", "rejected", "not_holder")] = 1  # the late entry of tenure 1
    assert verdicts == want
    assert verdicts[("g", "accepted", "renewed")] == 7  # one per accepted entry
    late = [r for r in beats["violations"]]
    assert [(r[4], r[5], r[8], r[9], r[10], r[11]) for r in late] == [
        ("t", 1, "member_heartbeat", "not_holder", "heartbeat_without_claim", "a")
    ]
    # each interval counts the entries that renewed it, as it counts Heartbeats
    assert [r[-5] for r in beats["heartbeat_gaps"]] == [r[-5] for r in plain["heartbeat_gaps"]]
    assert [r[-5] for r in beats["heartbeat_gaps"]] == [4, 5, 2]  # (the claim, renewals, a release)


def test_both_folds_agree():
    assert _rows(True, PartitionAudit) == _rows(True, ColumnarAudit)


def _takeover_log(member: bool) -> list[tuple[int, int, bytes, bytes]]:
    """a:1 claims t/0 (tenure 0) and heartbeats 10; a:2 takes it over at 20 (property h: an
    entry naming tenure 0, or a version 1 Heartbeat) and heartbeats 30 in its own tenure."""
    new = {**ME, "instance_id": "2"}

    def beat(who: dict, last: int, tenure: int) -> object:
        if member:
            entries = (("t", 0, tenure, last),)
            return MemberHeartbeat(**who, heartbeat_interval_ms=1000, entries=entries)
        return Heartbeat(
            **who, topic="t", partition=0, last_offset=last, heartbeat_interval_ms=1000
        )

    msgs = [_claim(0), beat(ME, 10, 0), beat(new, 20, 0), beat(new, 30, 2)]
    return [(o, 1000 + 100 * o, *encode(m)) for o, m in enumerate(msgs)]  # type: ignore[arg-type]


@pytest.mark.parametrize("fold", [PartitionAudit, ColumnarAudit], ids=["per-record", "columnar"])
def test_a_takeover_entry_is_folded_as_the_heartbeats_takeover(fold):
    beats = audit_records({0: _takeover_log(True)}, ReplayConfig(), fold=fold)
    plain = audit_records({0: _takeover_log(False)}, ReplayConfig(), fold=fold)
    verdicts = {(g, o, r): n for g, o, r, n in beats["verdicts"]}
    assert verdicts[("g", "accepted", "restart_takeover")] == 1
    assert verdicts == {(g, o, r): n for g, o, r, n in plain["verdicts"]}
    assert beats["violations"] == plain["violations"] == []
    cols = [0, 1, 2, 4, 5, 7, 8, 9]
    assert [[r[i] for i in cols] for r in beats["positions"]] == [
        [r[i] for i in cols] for r in plain["positions"]
    ]
    assert [r[7] for r in beats["positions"]] == [30]
    assert beats["failovers"] == plain["failovers"] != []
    assert [r[-5] for r in beats["heartbeat_gaps"]] == [r[-5] for r in plain["heartbeat_gaps"]]
