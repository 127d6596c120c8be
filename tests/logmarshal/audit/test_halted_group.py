"""The audit of a log with a record of a protocol version to come (PROTOCOL.md, "Version
6"): version-shaped junk is counted as invalid, the group a well-formed version 10 record
names is reported halted (a finding with its offset and version) and the audit finishes;
the other group of the coordination partition is audited as ever."""

from __future__ import annotations

import random

import pytest

from logmarshal.audit import ReplayConfig
from logmarshal.audit.columnar import ColumnarAudit
from logmarshal.audit.local import audit_records
from logmarshal.audit.replay import PartitionAudit
from rationalizer import ClaimingPartition, Heartbeat, encode
from rationalizer._codec import seal
from rationalizer._messages import FUTURE_VERSIONS


def _claim(client: str, group: str, t: int) -> tuple[int, bytes, bytes]:
    msg = ClaimingPartition(
        client_id=client,
        instance_id="1",
        group_id=group,
        topic="t",
        partition=0,
        heartbeat_interval_ms=1000,
        version=6,
    )
    return (t, *encode(msg))


def _beat(client: str, group: str, t: int, last: int) -> tuple[int, bytes, bytes]:
    msg = Heartbeat(
        client_id=client,
        instance_id="1",
        group_id=group,
        topic="t",
        partition=0,
        last_offset=last,
        heartbeat_interval_ms=1000,
    )
    return (t, *encode(msg))


@pytest.mark.parametrize("fold", [PartitionAudit, ColumnarAudit], ids=["per-record", "columnar"])
def test_a_halted_group_is_a_finding_and_the_audit_finishes(fold):
    rnd = random.Random(7)
    log = [_claim("a", "g", 1000), _claim("b", "h", 1000)]
    junk = [(1001, rnd.randbytes(4), bytes([v]) + rnd.randbytes(20)) for v in FUTURE_VERSIONS]
    log += junk
    halt_at = len(log)
    log.append((1002, b"g/t/0", seal(10, 2, "g", b"rules to come")))
    log += [_beat("a", "g", 1003 + i, i) for i in range(3)]
    log += [_beat("b", "h", 1003 + i, i) for i in range(3)]
    records = {0: [(o, *r) for o, r in enumerate(log)]}
    rows = audit_records(records, ReplayConfig(), fold=fold)
    halted = [r for r in rows["violations"] if r[10] == "group_halted"]
    assert halted == [
        (0, halt_at, 1002, "g", None, None, None, None, "version_10", "group_halted",
         "group_halted", None, None, None)
    ]  # fmt: skip
    invalid = [r for r in rows["violations"] if r[10] == "invalid_record"]
    assert len(invalid) == len(junk)
    verdicts = {(g, o, r): n for g, o, r, n in rows["verdicts"]}
    assert verdicts[("g", "rejected", "group_halted")] == 4  # the halt and three heartbeats
    assert verdicts[("h", "accepted", "renewed")] == 3
