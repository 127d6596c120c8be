"""upgrade: a running group is upgraded member by member, protocol version 4 → 5 → 6 → 7 →
9, by four rolling restarts while records are produced (issue 33 item 8; PROTOCOL.md,
"Upgrading a running group").

Three members start capped at 4 (``protocol_version=4``: version 1 claims and releases, what
a version 4 replayer reads). An operator's rolling restart replaces each member's instance
by one capped at 5 (version 5 claims), one member after the other, each in one of three
ways drawn by the seed: the old process is killed and the new one starts (SIGKILL), the old
one is stopped gracefully first (SIGTERM, its claims released), or the new one starts
beside it and the old one is then stopped (a surge). A second rolling restart brings every
member to 6, a third to 7 (MemberHeartbeats), a fourth to 9 (the newest: a member names
a tenure without a name). Records are produced throughout. Checks: after each rolling
restart every partition is held by a live member; at the end the group reaches the end of
the data, each partition has one holder and the members' views agree with the log, and
every partition's tenure has a name (the log's replay says so: the members heartbeat them
all in MemberHeartbeats); ALO: nothing lost; AMO: nothing handed out twice.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from logmarshal._coordlog import records_from_cluster
from rationalizer import (
    ClaimingPartition,
    DecodeError,
    MemberHeartbeat,
    NamingTenure,
    WorldState,
    decode,
)

from .member import GROUP
from .scenario import Scenario, main_for
from .stages.base import Member, Stage

__all__ = ["SCENARIO", "main", "run"]

#: the caps the group goes through: it starts at the first, each rolling restart moves it on
CAPS = (4, 5, 6, 7, 9)


def _replace(stage: Stage, member: Member, cap: int, how: str) -> Member:
    """One step of a rolling restart: ``member``'s instance replaced by one capped at ``cap``."""
    if how == "kill":
        return stage.restart(member, old="kill", protocol_version=cap)
    if how == "stop-first":
        stage.leave(member)
        return stage.restart(member, old="keep", protocol_version=cap)
    new = stage.restart(member, old="keep", protocol_version=cap)  # surge
    stage.sleep(stage.rng.uniform(0.1, 1.0) * stage.hb)
    stage.leave(member)
    return new


def _coordination_log(stage: Stage) -> tuple[str, list[list[tuple[int, int, Any, Any]]]] | None:
    """The group and each coordination partition's records ``(offset, log time, key,
    value)`` from its first; None where the stage does not say, or the log was truncated."""
    sim: Any = getattr(stage, "sim", None)
    procs: Any = getattr(stage, "procs", None)
    if sim is not None:
        return sim.group, [[(o, *r) for o, r in enumerate(log)] for log in sim.log]
    cluster = procs.cluster if procs is not None else getattr(stage, "cluster", None)
    if cluster is None:
        return None
    logs = [[(r[0], r[1], r[2], r[3]) for r in recs] for _, recs in records_from_cluster(cluster)]
    if any(recs and recs[0][0] != 0 for recs in logs):
        return None
    return (procs.group if procs is not None else GROUP), logs


def _claim_versions(group: str, logs: list[list[tuple[int, int, Any, Any]]]) -> Counter[int]:
    """How many of the group's ClaimingPartition records ``__marshal`` holds, by version
    (what the caps wrote: 1 at 4, 5 at 5, 6 at 6 and later), its MemberHeartbeats (cap 7
    and later) under the key 0 and its NamingTenures (cap 9) under the key -1."""
    out: Counter[int] = Counter()
    for _, _, key, value in (r for recs in logs for r in recs):
        try:
            msg = decode(key, value)
        except DecodeError:
            continue
        if getattr(msg, "group_id", None) != group:
            continue
        if isinstance(msg, ClaimingPartition):
            out[msg.version] += 1
        elif isinstance(msg, MemberHeartbeat):
            out[0] += 1
        elif isinstance(msg, NamingTenure):
            out[-1] += 1
    return out


def _unnamed(group: str, logs: list[list[tuple[int, int, Any, Any]]]) -> list[tuple[str, int]]:
    """The group's held partitions whose tenure has no name at the end of the log."""
    out = []
    for recs in logs:
        world = WorldState()
        world.apply_many(recs)
        out += [
            (s.topic, s.partition)
            for s in world.partitions(group)
            if s.holder is not None and s.tenure is None
        ]
    return sorted(out)


def body(stage: Stage) -> None:
    hb, rng, report = stage.hb, stage.rng, stage.report
    stage.produce(20)
    members = stage.start_group(["a", "b", "c"], protocol_version=CAPS[0])
    if not report.check(
        "the members capped at 4 own every partition",
        stage.wait_until(lambda: stage.owned_by(members), 15),
    ):
        return
    everyone = list(members)
    stage.produce_in_background(per_partition=150, seconds=8 * hb)
    for cap in CAPS[1:]:
        for i, m in enumerate(members):
            how = rng.choice(("kill", "stop-first", "surge"))
            new = _replace(stage, m, cap, how)
            members[i] = new
            everyone.append(new)
            report.figures[f"restarts to {cap} by {how}"] = (
                report.figures.get(f"restarts to {cap} by {how}", 0.0) + 1
            )
            stage.sleep(rng.uniform(0.5, 2.0) * hb)
        report.check(
            f"every partition is held by a live member after the rolling restart to {cap}",
            stage.wait_until(lambda: stage.owned_by(members), 15 + 4 * hb),
            str(stage.holders()),
        )
    stage.wait_produced()
    report.check(
        "the upgraded group reaches the end", stage.wait_until(lambda: stage.drained(everyone), 30)
    )
    stage.one_holder_each(members)
    stage.delivery(everyone)
    found = _coordination_log(stage)
    if found is not None:
        group, logs = found
        versions = _claim_versions(group, logs)
        beats = versions.pop(0, 0)
        names = versions.pop(-1, 0)
        for version, n in sorted(versions.items()):
            report.figures[f"claims of version {version}"] = float(n)
        report.figures["MemberHeartbeats"] = float(beats)
        report.figures["NamingTenures"] = float(names)
        report.check(
            "the log holds the capped members' claims, none but what a cap writes, and "
            "MemberHeartbeats",
            versions[1] > 0 and set(versions) <= {1, 5, 6} and beats > 0,
            f"{dict(versions)}, {beats} MemberHeartbeats, {names} NamingTenures",
        )
        # a restart takeover (a member killed) carries the tenure it ends on, named or
        # not: a tenure a claim of cap 4 or 5 began keeps no name until a member capped at
        # 9 names it (before version 9, about 1 run in 10 ended with none named: seed 3,
        # 2026-12-06)
        unnamed = _unnamed(group, logs)
        report.check(
            "every partition's tenure has a name at the end (MemberHeartbeats carry them all)",
            not unnamed,
            f"without a name: {unnamed}",
        )


SCENARIO = Scenario("upgrade", body, partitions=6, hb=0.5)
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
