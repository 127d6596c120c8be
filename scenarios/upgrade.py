"""upgrade: a running group is upgraded member by member, protocol version 4 → 5 → 6 → 7, by
three rolling restarts while records are produced (issue 33 item 8; PROTOCOL.md, "Upgrading
a running group").

Three members start capped at 4 (``protocol_version=4``: version 1 claims and releases, what
a version 4 replayer reads). An operator's rolling restart replaces each member's instance
by one capped at 5 (version 5 claims), one member after the other, each in one of three
ways drawn by the seed: the old process is killed and the new one starts (SIGKILL), the old
one is stopped gracefully first (SIGTERM, its claims released), or the new one starts
beside it and the old one is then stopped (a surge). A second rolling restart brings every
member to 6, a third to 7 (MemberHeartbeats). Records are produced throughout. Checks: after each rolling restart every
partition is held by a live member; at the end the group reaches the end of the data, each
partition has one holder and the members' views agree with the log; ALO: nothing lost;
AMO: nothing handed out twice.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from logmarshal._coordlog import records_from_cluster
from rationalizer import ClaimingPartition, DecodeError, MemberHeartbeat, decode

from .member import GROUP
from .scenario import Scenario, main_for
from .stages.base import Member, Stage

__all__ = ["SCENARIO", "main", "run"]

#: the caps the group goes through: it starts at the first, each rolling restart moves it on
CAPS = (4, 5, 6, 7)


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


def _claim_versions(stage: Stage) -> Counter[int] | None:
    """How many of the group's ClaimingPartition records ``__marshal`` holds, by version
    (what the caps wrote: 1 at 4, 5 at 5, 6 at 6 and 7), and its MemberHeartbeats (cap 7)
    under the key 0; None where the stage does not say."""
    sim: Any = getattr(stage, "sim", None)
    procs: Any = getattr(stage, "procs", None)
    if sim is not None:
        group, records = sim.group, [(k, v) for log in sim.log for _, k, v in log]
    else:
        cluster = procs.cluster if procs is not None else getattr(stage, "cluster", None)
        if cluster is None:
            return None
        group = procs.group if procs is not None else GROUP
        records = [(r[2], r[3]) for _, recs in records_from_cluster(cluster) for r in recs]
    out: Counter[int] = Counter()
    for key, value in records:
        try:
            msg = decode(key, value)
        except DecodeError:
            continue
        if isinstance(msg, ClaimingPartition) and msg.group_id == group:
            out[msg.version] += 1
        elif isinstance(msg, MemberHeartbeat) and msg.group_id == group:
            out[0] += 1
    return out


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
    versions = _claim_versions(stage)
    if versions is not None:
        beats = versions.pop(0, 0)
        for version, n in sorted(versions.items()):
            report.figures[f"claims of version {version}"] = float(n)
        report.figures["MemberHeartbeats"] = float(beats)
        # A MemberHeartbeat carries partitions of named tenures, which only a version 6
        # claim begins: a restart takeover (a member killed) carries the tenure it ends on,
        # named or not, so a run whose partitions all moved by takeovers after the caps
        # below 6 holds none, by design (seed 3 in about 1 run of 10, 2026-12-06)
        report.check(
            "the log holds the capped members' claims, none but what a cap writes, and the "
            "MemberHeartbeats of cap 7 wherever a version 6 claim named a tenure",
            versions[1] > 0 and set(versions) <= {1, 5, 6} and (beats > 0) == (6 in versions),
            f"{dict(versions)}, {beats} MemberHeartbeats",
        )


SCENARIO = Scenario("upgrade", body, partitions=6, hb=0.5)
run = SCENARIO.run


def main(argv: list[str] | None = None) -> int:
    return main_for(SCENARIO, argv)


if __name__ == "__main__":
    sys.exit(main())
