"""MemberHeartbeat replay beside version 1 Heartbeat replay (figures, not pass/fail).

A member capped at 7 writes one MemberHeartbeat per coordination partition per heartbeat
pass, with an entry per partition it holds there (PROTOCOL.md, "Version 7"); capped at 6 it
writes one version 1 Heartbeat per partition. This prints what ``WorldState.apply_many``
costs for each, per record and per partition heartbeat, in the same run: records with 1, 3
and 32 entries, each either repeating byte for byte (idle partitions: positions stand) or
with every position moved (busy partitions: no record repeats), and version 1 Heartbeats
(the baseline) the same two ways. Every record renews: this is the replay's common path.
Then a task's heartbeat (two sources): version 8, naming its tenure (PROTOCOL.md, "Version
8"), beside version 3 (its baseline) in the same run.

    python bench/member_beats.py [--beats 200000] [--rounds 3] [--code DIR]

``--code DIR`` replays with the ``rationalizer`` of another checkout (its C extension built
there, ``python setup.py build_ext --inplace``): the same bench, before and after a change.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

HB_MS = 3000


def _claims(r: Any, n: int) -> tuple[list[tuple], dict[int, int]]:
    """Version 6 claims of partitions 0..n-1 by c1/i1 (their offsets name the tenures)."""
    recs, tenures = [], {}
    for p in range(n):
        msg = r.ClaimingPartition(
            client_id="c1",
            instance_id="i1",
            group_id="g",
            topic="orders",
            partition=p,
            heartbeat_interval_ms=HB_MS,
            version=6,
        )
        recs.append((p, 1000, *r.encode(msg)))
        tenures[p] = p
    return recs, tenures


def _member_log(r: Any, entries: int, beats: int, busy: bool) -> tuple[list, list]:
    claims, tenures = _claims(r, entries)
    out = []
    for i in range(max(1, beats // entries)):
        msg = r.MemberHeartbeat(
            client_id="c1",
            instance_id="i1",
            group_id="g",
            heartbeat_interval_ms=HB_MS,
            entries=tuple(
                ("orders", p, tenures[p], 5 + (i if busy else 0)) for p in range(entries)
            ),
        )
        out.append((entries + i, 1000 + 10 * i, *r.encode(msg)))
    return claims, out


def _v1_log(r: Any, beats: int, busy: bool) -> tuple[list, list]:
    claims, _ = _claims(r, 1)
    out = []
    for i in range(beats):
        msg = r.Heartbeat(
            client_id="c1",
            instance_id="i1",
            group_id="g",
            topic="orders",
            partition=0,
            last_offset=5 + (i if busy else 0),
            heartbeat_interval_ms=HB_MS,
        )
        out.append((1 + i, 1000 + 10 * i, *r.encode(msg)))
    return claims, out


def _task_log(r: Any, version: int, beats: int, busy: bool) -> tuple[list, list]:
    """A task (two sources) claimed by a version 6 claim, then ``beats`` of its
    HeartbeatingTasks: version 3, or version 8 naming the claim's tenure."""
    claims, tenures = _claims(r, 1)
    out = []
    for i in range(beats):
        msg = r.HeartbeatingTask(
            client_id="c1",
            instance_id="i1",
            group_id="g",
            topic="orders",
            partition=0,
            heartbeat_interval_ms=HB_MS,
            positions=(("lines", 5 + (i if busy else 0)), ("more-lines", 7)),
            tenure=tenures[0] if version == 8 else None,
        )
        out.append((1 + i, 1000 + 10 * i, *r.encode(msg)))
    return claims, out


def _time(r: Any, claims: list, records: list, rounds: int) -> float:
    """Best CPU seconds of ``rounds`` replays of ``records`` into a world that applied
    ``claims`` (each round a new world)."""
    best = float("inf")
    for _ in range(rounds):
        world = r.WorldState()
        world.apply_many(claims)
        t0 = time.process_time()
        verdicts = world.apply_many(records)
        best = min(best, time.process_time() - t0)
        assert all(v is not None and v.accepted for v in verdicts), "a record did not renew"
    return best


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--beats", type=int, default=200_000, help="partition heartbeats per row")
    ap.add_argument("--rounds", type=int, default=3, help="best of this many replays per row")
    ap.add_argument("--code", type=Path, help="a checkout whose rationalizer replays")
    args = ap.parse_args()
    root = (args.code or Path(__file__).resolve().parents[1]).resolve()
    sys.path.insert(0, str(root))
    import rationalizer as r

    print(f"rationalizer from {Path(r.__file__).parent} ({os.cpu_count()} cores)")
    print(
        "| records | per record, idle | per record, busy | per partition heartbeat, idle / busy |"
    )
    print("| --- | ---: | ---: | ---: |")
    base: dict[bool, float] = {}
    for busy in (False, True):
        claims, recs = _v1_log(r, args.beats, busy)
        base[busy] = _time(r, claims, recs, args.rounds) / len(recs) * 1e6
    print(
        f"| version 1 Heartbeat (baseline) | {base[False]:.2f} µs | {base[True]:.2f} µs |"
        f" {base[False]:.2f} / {base[True]:.2f} µs (1.00x / 1.00x) |"
    )
    for entries in (1, 3, 32):
        rec: dict[bool, float] = {}
        for busy in (False, True):
            claims, recs = _member_log(r, entries, args.beats, busy)
            rec[busy] = _time(r, claims, recs, args.rounds) / len(recs) * 1e6
        idle, busy_ = rec[False] / entries, rec[True] / entries
        print(
            f"| MemberHeartbeat, {entries} entries | {rec[False]:.2f} µs | {rec[True]:.2f} µs |"
            f" {idle:.2f} / {busy_:.2f} µs ({idle / base[False]:.2f}x / {busy_ / base[True]:.2f}x) |"
        )
    if "tenure" not in getattr(r.HeartbeatingTask, "__attrs_attrs__", ()).__repr__():
        return  # a rationalizer before version 8 (``--code``): no version 8 task heartbeat
    tasks: dict[int, dict[bool, float]] = {}
    for version in (3, 8):
        tasks[version] = {}
        for busy in (False, True):
            claims, recs = _task_log(r, version, args.beats, busy)
            tasks[version][busy] = _time(r, claims, recs, args.rounds) / len(recs) * 1e6
    for version, what in ((3, "version 3 HeartbeatingTask (baseline of the next)"),
                          (8, "version 8 HeartbeatingTask")):  # fmt: skip
        idle, busy_ = tasks[version][False], tasks[version][True]
        print(
            f"| {what}, 2 sources | {idle:.2f} µs | {busy_:.2f} µs | {idle:.2f} / {busy_:.2f} µs"
            f" ({idle / tasks[3][False]:.2f}x / {busy_ / tasks[3][True]:.2f}x of version 3) |"
        )


if __name__ == "__main__":
    main()
