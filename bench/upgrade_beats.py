"""Heartbeat records after an upgrade by killed instances, capped at 8 beside 9 (figures).

A group whose partitions were claimed by members capped at 5 (version 5 claims: tenures
without a name) is upgraded by killing each member and starting its next instance without
the old cap: each next instance takes its partitions over by restart, and a restart
takeover keeps a tenure as it is. Capped at 8 the tenures stay unnamed, so every held
partition is heartbeated by a record of its own every pass (PROTOCOL.md, "Version 7": a
MemberHeartbeat's entry names a tenure); capped at 9 a member names each such tenure once
(NamingTenure, "Version 9") and then heartbeats them all in one MemberHeartbeat per
coordination partition. The deterministic simulator (:class:`bench.fleet.FleetSim`: the
real ``MemberCore`` of every member, real replays, faults off, no data) runs the same
schedule once per cap, in the same run, and prints for the steady window after the
upgrade heartbeat records per HB and the partitions they carry, the NamingTenures written
since the restarts, and the tenures still without a name.

    python -m bench.upgrade_beats [--members 4] [--partitions 256] [--hb-ms 1000]
                                  [--coordination-partitions 4] [--window-hb 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python3 bench/upgrade_beats.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fleet import FleetSim
from logmarshal.core import Write
from rationalizer import MemberHeartbeat, decode
from scenarios.sim import GROUP

__all__ = ["main", "run_cap"]


class _Counted(FleetSim):
    """The fleet simulator, counting every coordination write by its kind."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.writes: list[tuple[int, str, bytes, bytes]] | None = None

    def carry(self, inst: object, action: object) -> None:
        if self.writes is not None and isinstance(action, Write):
            self.writes.append((self.now, action.kind, action.key, action.value))
        super().carry(inst, action)  # type: ignore[arg-type]


def run_cap(cap: int, args: argparse.Namespace) -> dict[str, float]:
    """One run: the group capped at 5 converges, every member is killed and restarted
    capped at ``cap``, then the steady window is counted."""
    hb = args.hb_ms
    sim = _Counted(
        args.seed,
        partitions=args.partitions,
        ncoord=args.coordination_partitions,
        hb_ms=hb,
        protocol_version=5,
    )
    started = time.perf_counter()
    deadline = started + 600
    members = [sim.start() for _ in range(args.members)]
    if sim.converge(3 * hb, 60 * hb, deadline)[0] is None:
        raise SystemExit("the group capped at 5 did not converge")
    sim.protocol_version = cap
    sim.writes = []  # from the restarts on: the namings they bring
    for old in members:  # a rolling restart by SIGKILL: the next instance takes over
        sim.kill(old)
        sim.join(
            old.client_id,
            rebalance="balanced",
            heartbeat_interval_ms=hb,
            claim_interval_ms=hb // 2,
            batch_size=20,
        )
        sim.run_until(sim.now + hb // 2)
    if sim.converge(3 * hb, 60 * hb, deadline)[0] is None:
        raise SystemExit(f"the group at cap {cap} did not converge after the restarts")
    sim.run_until(sim.now + 2 * hb)  # past the namings
    begin = sim.now
    sim.run_until(sim.now + args.window_hb * hb)
    assert sim.writes is not None
    beats = [(k, v) for t, kind, k, v in sim.writes if kind == "heartbeat" and t >= begin]
    carried = 0
    for key, value in beats:
        msg = decode(key, value)
        carried += len(msg.entries) if isinstance(msg, MemberHeartbeat) else 1
    names = sum(1 for _, kind, _, _ in sim.writes if kind == "name")  # since the restarts
    unnamed = sum(
        1
        for world in sim.oracle
        for s in world.partitions(GROUP)
        if s.holder is not None and s.tenure is None
    )
    return {
        "records/HB": len(beats) / args.window_hb,
        "partitions/HB": carried / args.window_hb,
        "namings": float(names),
        "unnamed at end": float(unnamed),
        "wall s": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--hb-ms", type=int, default=1000)
    parser.add_argument("--coordination-partitions", type=int, default=4)
    parser.add_argument("--window-hb", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"{args.members} members x {args.partitions} partitions, "
        f"{args.coordination_partitions} coordination partitions, HB {args.hb_ms} ms: "
        f"claimed at cap 5, every member killed and restarted at the cap below"
    )
    print(f"{'cap':>4} {'records/HB':>11} {'partitions/HB':>14} {'namings':>8} {'unnamed':>8}")
    rows = {cap: run_cap(cap, args) for cap in (8, 9)}
    for cap, r in rows.items():
        print(
            f"{cap:>4} {r['records/HB']:>11.1f} {r['partitions/HB']:>14.1f} "
            f"{r['namings']:>8.0f} {r['unnamed at end']:>8.0f}"
        )
    bound = args.members * args.coordination_partitions
    print(f"members x coordination partitions: {bound}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
