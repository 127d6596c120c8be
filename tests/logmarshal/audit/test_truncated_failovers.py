"""The audit of a truncated log names the failovers whose previous claim ended before its
genesis snapshot, as the audit of the full history does (issue 33 item 3).

Such a claim ended by a release or was voided by a group reset; the next claim's failover
row names it. A world forgets a holder when it releases, so before version 6 the snapshot
could not say who held the partition last, and the truncated audit lost those rows (the
snapshots scenario's check filtered them out). A world now keeps the last holder of a named
tenure (PROTOCOL.md "Version 6", a released partition's last holder) and the snapshot
carries it.
"""

from __future__ import annotations

import random

import pytest

from logmarshal.audit import ReplayConfig, audit_records
from logmarshal.audit.replay import PartitionAudit
from logmarshal.audit.schema import column_index
from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
    WorldState,
    encode,
)

from .logs import Script

B = 1_700_000_000_000
HB = 1000
ENDED = column_index("failovers", "from_end_ms")
CAUSE = column_index("failovers", "cause")


def _folds() -> list:
    folds = [PartitionAudit]
    try:
        from logmarshal.audit.columnar import ColumnarAudit
        from logmarshal.audit.deps import require

        require("numpy")
        require("pyarrow.compute")
    except ImportError:
        return folds
    return [*folds, ColumnarAudit]


FOLDS = pytest.mark.parametrize("fold", _folds(), ids=lambda f: f.__name__)


class V6Log:
    """One coordination partition written as this release's members write it: version 6
    claims, releases that name the tenure a replay of the log shows."""

    def __init__(self) -> None:
        self.script = Script(1)
        self.world = WorldState()

    @property
    def records(self) -> list:
        return self.script.records[0]

    def _put(self, msg: object, t: int) -> int:
        key, value = encode(msg)
        off = self.script.raw(0, t, key, value)
        self.world.apply(*self.records[-1])
        return off

    @staticmethod
    def _ids(who: str) -> dict[str, str]:
        client, instance = who.split(":")
        return {"client_id": client, "instance_id": instance, "group_id": "g"}

    def claim(self, who: str, p: int, t: int) -> int:
        return self._put(
            ClaimingPartition(
                **self._ids(who), topic="events", partition=p, heartbeat_interval_ms=HB, version=6
            ),
            t,
        )

    def beat(self, who: str, p: int, last: int, t: int) -> int:
        msg = Heartbeat(
            **self._ids(who),
            topic="events",
            partition=p,
            last_offset=last,
            heartbeat_interval_ms=HB,
        )
        return self._put(msg, t)

    def release(self, who: str, p: int, last: int, t: int, tenure: int | None = None) -> int:
        if tenure is None:  # the tenure the replay shows (a member's own release)
            st = self.world.partition_state("g", "events", p)
            tenure = 0 if st is None or st.tenure is None else st.tenure
        msg = ReleasingPartition(
            **self._ids(who), topic="events", partition=p, last_offset=last, tenure=tenure
        )
        return self._put(msg, t)

    def reserve(self, who: str, p: int, through: int, t: int) -> int:
        msg = ClaimingMessages(
            **self._ids(who), topic="events", partition=p, proposed_last_offset=through
        )
        return self._put(msg, t)

    def reset(self, expires: int, t: int) -> int:
        msg = ReleaseGroup(**self._ids("admin:1"), msg_expire_time=B + expires)
        return self._put(msg, t)


def _truncated_and_full(log: V6Log, cut: int, fold) -> tuple[list, list, int]:
    """Failovers of the audit of ``log`` truncated before offset ``cut`` (starting from a
    snapshot covering ``cut - 1``) and of the full log's, both from the snapshot's log
    time on; and that time."""
    genesis = WorldState()
    genesis.apply_many(log.records[:cut])
    since = genesis.now + 1
    truncated = audit_records(
        {0: log.records[cut:]},
        ReplayConfig(genesis={0: (cut - 1, genesis.to_bytes())}, since_ms=since),
        fold=fold,
    )
    full = audit_records({0: log.records}, ReplayConfig(since_ms=since), fold=fold)
    return truncated["failovers"], full["failovers"], since


def _rows(rows: list) -> list:
    return sorted(rows, key=repr)


@FOLDS
def test_a_failover_after_the_snapshot_names_the_holder_released_or_voided_before_it(fold):
    log = V6Log()
    log.claim("a:1", 0, 0)
    log.claim("c:1", 1, 10)
    log.beat("a:1", 0, 10, 100)
    log.beat("c:1", 1, 5, 150)
    log.release("a:1", 0, 10, 200)  # a:1's claim ends: released
    log.reset(400, 300)  # c:1's claim ends: voided, the group paused until 400
    cut = len(log.records)  # the snapshot covers everything so far
    st = log.world.partition_state("g", "events", 1)
    assert (st.last_holder, st.last_holder_end_ms, st.last_holder_voided) == (
        ("c", "1"),
        B + 300,
        True,
    )
    log.claim("b:1", 0, 1000)
    log.claim("d:1", 1, 2200)  # (after c:1's kept lease: 150 + 2·HB)
    truncated, full, since = _truncated_and_full(log, cut, fold)
    assert since == B + 301
    want = {
        ("a", "1", "b", "1", "released", B + 200, B + 200),
        ("c", "1", "d", "1", "group_reset", B + 150, B + 300),
    }
    names = ("from_client", "from_instance", "to_client", "to_instance", "cause")
    picked = [column_index("failovers", n) for n in names] + [
        column_index("failovers", "from_last_seen_ms"),
        ENDED,
    ]
    assert {tuple(f[i] for i in picked) for f in full} == want
    assert _rows(truncated) == _rows(full)


@FOLDS
def test_an_older_claim_names_no_previous_holder_after_the_snapshot(fold):
    """A version 1 claim names no tenure, so its release leaves no last holder: the audit
    from the snapshot has no row for the next claim, as before version 6 (the scenario
    members and every member of this release claim with version 6)."""
    log = V6Log()
    log._put(
        ClaimingPartition(
            **V6Log._ids("a:1"), topic="events", partition=0, heartbeat_interval_ms=HB
        ),
        0,
    )
    log._put(
        ReleasingPartition(**V6Log._ids("a:1"), topic="events", partition=0, last_offset=3), 100
    )
    cut = len(log.records)
    log.claim("b:1", 0, 1000)
    truncated, full, _ = _truncated_and_full(log, cut, fold)
    assert [f[CAUSE] for f in full] == ["released"]
    assert truncated == []


def _random_log(rng: random.Random, steps: int) -> V6Log:
    """Claims, beats, reservations, releases (mostly naming the replay's tenure), restarts,
    stale takeovers and group resets on four partitions."""
    log = V6Log()
    instance = dict.fromkeys(("c0", "c1", "c2", "c3"), 1)
    t = 0
    for _ in range(steps):
        t += rng.choice((0, 1, 50, 300, 900, 1500, 2500))
        p = rng.randrange(4)
        holder = log.world.holder("g", "events", p)
        c = rng.choice(list(instance))
        if holder is not None and rng.random() < 0.6:
            c = holder[0]  # the holder writes most of the partition's records
        who = f"{c}:{instance[c]}"
        r = rng.random()
        if r < 0.3:
            log.claim(who, p, t)
        elif r < 0.6:
            # mostly forward; some late heartbeats below the position (property g keeps it)
            # and some below the tenure's floor (a reset: they set it)
            st = log.world.partition_state("g", "events", p)
            at = -1 if st is None or st.resume_offset is None else st.resume_offset - 1
            log.beat(who, p, max(-1, at + rng.randrange(-60, 40)), t)
        elif r < 0.75:
            wrong = rng.random() < 0.1
            log.release(
                who, p, rng.randrange(-1, 500), t, tenure=rng.randrange(5) if wrong else None
            )
        elif r < 0.85:
            log.reserve(who, p, rng.randrange(-1, 500), t)
        elif r < 0.93:
            instance[c] += 1  # a restart: the new instance takes over while fresh
            log.beat(f"{c}:{instance[c]}", p, rng.randrange(-1, 500), t)
        else:
            log.reset(t + rng.choice((0, 500, 3000)), t)
    return log


@FOLDS
@pytest.mark.parametrize("seed", range(6))
def test_random_logs_cut_anywhere_give_the_full_failovers(fold, seed):
    log = _random_log(random.Random(seed), 300)
    spanning: set[str] = set()
    for cut in range(10, len(log.records), 23):
        truncated, full, since = _truncated_and_full(log, cut, fold)
        assert _rows(truncated) == _rows(full), cut
        spanning.update(f[CAUSE] for f in full if f[ENDED] < since)
    # the logs do end claims before a snapshot that the next claim follows after it
    assert spanning == {"released", "group_reset"}


RESUME = column_index("failovers", "resume_position")
AT = column_index("failovers", "offset")


@FOLDS
def test_a_late_heartbeat_sets_no_position_in_the_audit_either(fold):
    """Property g: a holder's heartbeat below its position renews but keeps the position;
    the audit's failover resumes where the world does (it took the late one's before)."""
    log = V6Log()
    log.claim("a:1", 0, 0)
    log.beat("a:1", 0, 20, 100)
    log.beat("a:1", 0, 10, 200)  # overtaken by the one at 20: late
    assert log.world.resume_offset("g", "events", 0) == 21
    at = log.claim("b:1", 0, 200 + 3 * HB)  # a:1's lease is over
    assert log.world.holder("g", "events", 0) == ("b", "1")
    rows = audit_records({0: log.records}, ReplayConfig(), fold=fold)["failovers"]
    assert [(r[AT], r[RESUME]) for r in rows] == [(at, 21)]


@FOLDS
@pytest.mark.parametrize("seed", range(6))
def test_failovers_resume_where_the_world_does(fold, seed):
    """Every failover's resume position in the audit is the world's resume offset right
    after that claim, on random logs with late heartbeats and resets."""
    log = _random_log(random.Random(100 + seed), 300)
    want = {}
    world = WorldState()
    for rec in log.records:
        v = world.apply(*rec)
        if (
            v is not None
            and v.accepted
            and v.effect is not None
            and v.effect.name
            in (
                "TOOK_OVER_STALE",
                "CLAIMED",
                "RESTART_TAKEOVER",
            )
        ):
            msg_key = rec[2].decode()
            _, _, p = msg_key.split("/")
            want[rec[0]] = world.resume_offset("g", "events", int(p))
    rows = audit_records({0: log.records}, ReplayConfig(), fold=fold)["failovers"]
    assert rows
    assert {r[AT]: r[RESUME] for r in rows} == {o: want[o] for o in (r[AT] for r in rows)}
