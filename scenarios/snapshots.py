"""Real processes on a bounded coordination log: snapshots, truncation, late joiners, reset.

    python -m scenarios.snapshots --seed 3 [--mode amo]

Three member processes consume while publishing snapshots every few dozen coordination
records and truncating ``__marshal`` behind them (small segments, so truncation really
deletes). Checks: the log is truncated while they run; an observer started after the
truncation (restoring a snapshot, replaying the tail) and a member process started after it
agree with the others (each partition one holder, everyone's view matching the log); an
admin reset (``logmarshal group reset --execute`` in a subprocess) across the snapshots is
confirmed and every partition resumes exactly at its target; once everyone stopped, the
late observer's worlds are byte for byte those of the observer that replayed from offset 0;
and the audit of the truncated log (exported, starting from the snapshots it holds) gives
on the window after its snapshots the same tables as an audit of the full history, which a
recorder kept by reading every ``__marshal`` record as it was written, before the members'
truncation deleted it.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs

from logmarshal import Marshaler
from logmarshal import _coordlog as coordlog
from logmarshal._coordlog import COORDINATION_TOPIC, SNAPSHOT_TOPIC
from logmarshal.audit.engine import replay_config_for
from logmarshal.audit.export import export_coordination
from logmarshal.audit.genesis import read_exported_snapshots
from logmarshal.audit.local import audit_records
from logmarshal.audit.schema import column_index
from logmarshal.audit.verify import records_from_export
from logmarshal.cluster import Cluster
from logmarshal.network import NetworkCluster
from rationalizer import WorldState

from .common import Report, mode_for, wait_until
from .process_harness import GROUP, ROOT, TOPIC, procs

__all__ = ["main", "run"]

SNAPSHOT_RECORDS = 40
SMALL = {"segment.bytes": "4096", "retention.ms": "-1", "flush.messages": "1"}
N_COORD = 4


def _worlds(m: Marshaler) -> list[bytes]:
    with m.replay_paused():
        return [world.to_bytes() for world in m.worlds()]


Record = tuple[int, int, "bytes | None", "bytes | None"]


class _Recorder:
    """Keeps every ``__marshal`` record, read as it is written (its own connection, one
    thread): the full history that truncation deletes, for the full audit to compare with.
    Truncation trails the log end by at least two snapshot intervals, which a reader polling
    every few tens of milliseconds stays well ahead of; if it ever fell behind, the fetch
    fails with out-of-range and :meth:`finish` says so."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self._cluster = NetworkCluster(bootstrap, timeout=15.0, config={"log_level": 2})
        self.records: dict[int, list[Record]] = {cp: [] for cp in range(partitions)}
        self._next = dict.fromkeys(self.records, 0)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="marshal-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for cp, out in self.records.items():
                    cols = coordlog.fetch_columns(
                        self._cluster, COORDINATION_TOPIC, cp, self._next[cp], max_wait=0.02
                    )
                    if cols[0]:
                        out.extend(zip(*cols, strict=True))
                        self._next[cp] = cols[0][-1] + 1
        except Exception as exc:  # reported by finish(): the copy is incomplete
            self.error = exc

    def finish(self, ends: dict[int, int], timeout: float) -> str | None:
        """Stop once every partition is read up to ``ends``; None, or what went wrong."""
        if self._stop.is_set():
            return "the recorder was already stopped"
        reached = wait_until(
            lambda: self.error is not None or all(self._next[cp] >= e for cp, e in ends.items()),
            timeout,
        )
        self._stop.set()
        self._thread.join(timeout=10)
        self._cluster.close()
        if self.error is not None:
            return f"the recorder stopped: {self.error!r}"
        if not reached:
            return f"the recorder did not reach {ends} (at {self._next})"
        for cp, out in self.records.items():
            if [r[0] for r in out] != list(range(len(out))):
                return f"__marshal/{cp}: the recorded offsets are not 0, 1, 2, ..."
        return None


def _rows(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=repr)


def _oldest_genesis(cut) -> dict[int, tuple[int, bytes]]:
    """``{cp: (covered, world bytes)}`` from the oldest valid snapshot of each truncated
    coordination partition that reaches its exported start."""
    snapshots = read_exported_snapshots(cut.path)
    genesis = {}
    for p in cut.partitions:
        if p.earliest <= 0:
            continue
        for record in sorted(snapshots.get(p.partition, []), key=lambda r: r[0]):
            restored = coordlog.load_snapshot(
                None, p.partition, None, earliest=p.earliest, snapshots=[record]
            )
            if restored is not None:
                genesis[p.partition] = (restored.covered, restored.world.to_bytes())
                break
    return genesis


def _audits_agree(
    report: Report, cluster: Cluster, recorded: dict[int, list[Record]], out: Path
) -> None:
    """The audit of the truncated log (its export, its snapshots as the genesis) against an
    audit of the full history, on the window after the newest genesis."""
    cut = export_coordination(cluster, out)
    # the oldest kept snapshot that reaches each partition's start, not the newest (the
    # audit's default): the newest may cover nearly all of the history (the last records
    # landed on a snapshot point), leaving an empty window to compare
    config = attrs.evolve(replay_config_for(cut), genesis=_oldest_genesis(cut))
    if not report.check(
        "the audit of the truncated log starts from snapshots",
        bool(cut.truncated) and set(config.genesis) == set(cut.truncated),
        f"truncated {cut.truncated}, genesis {sorted(config.genesis)}",
    ):
        return
    cut_records = dict(records_from_export(cut))
    # the full history up to where the export read
    full = {p.partition: recorded[p.partition][: p.latest] for p in cut.partitions}
    report.check(
        "the truncated log is the full history's tail",
        all(recs == full[cp][recs[0][0] :] for cp, recs in cut_records.items() if recs)
        and all(len(full[p.partition]) == p.latest for p in cut.partitions),
    )
    since = max(WorldState.from_bytes(world).now for _, world in config.genesis.values()) + 1
    got = audit_records(cut_records, attrs.evolve(config, since_ms=since))
    want = audit_records(full, attrs.evolve(config, since_ms=since, genesis={}))
    # every failover, also one whose previous claim ended before the snapshot: the snapshot
    # keeps a released partition's last holder (PROTOCOL.md "Version 6")
    ended = column_index("failovers", "from_end_ms")
    report.figures["failovers from a claim that ended before the genesis"] = float(
        sum(f[ended] < since for f in want["failovers"])
    )
    differ = [t for t in ("positions", "verdicts", "failovers") if _rows(got[t]) != _rows(want[t])]
    extra = {
        t: ([r for r in _rows(got[t]) if r not in want[t]][:2],
            [r for r in _rows(want[t]) if r not in got[t]][:2])
        for t in differ
    }  # fmt: skip
    # claims granted after the genesis are the same; those open at it start with "snapshot"
    cause = column_index("ownership", "start_cause")
    start = column_index("ownership", "start_offset")
    cp_at = column_index("ownership", "coord_partition")
    covered = {cp: g[0] for cp, g in config.genesis.items()}
    later = [o for o in got["ownership"] if o[cause] != "snapshot"]
    full_later = [o for o in want["ownership"] if o[start] > covered.get(o[cp_at], -1)]
    if _rows(later) != _rows(full_later):
        differ.append("ownership")
    report.check(
        "the audit of the truncated log equals the full audit on the window after the snapshots",
        not differ and bool(got["positions"]) and bool(got["verdicts"]),
        f"tables that differ: {differ}; rows only in the truncated / the full audit: {extra}",
    )


def run(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    partitions = 6
    new = 10 + seed % 5
    with procs("snapshots", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir) as h:
        report = h.report
        # the coordination topics with small segments, before anyone creates them
        with NetworkCluster(h.bootstrap, timeout=15.0, config={"log_level": 2}) as setup:
            setup.create_topic(
                COORDINATION_TOPIC,
                N_COORD,
                {**SMALL, "message.timestamp.type": "LogAppendTime"},
            )
            setup.create_topic(SNAPSHOT_TOPIC, N_COORD, SMALL)
        h.connect(coordination_partitions=N_COORD)
        assert h.cluster is not None and h.observer is not None
        cluster = h.cluster
        recorder = _Recorder(h.bootstrap, N_COORD)  # before anyone writes
        try:
            h.produce(100)
            members = h.members_together(
                ["c0", "c1", "c2"],
                coordination_partitions=N_COORD,
                snapshot_records=SNAPSHOT_RECORDS,
            )
            if not report.check("the members start", h.joined(members)):
                return report
            h.produce_in_background(per_partition=300, seconds=8.0)

            def truncated() -> bool:
                busy = [
                    cp
                    for cp in range(N_COORD)
                    if cluster.latest_offset(COORDINATION_TOPIC, cp) > 5 * SNAPSHOT_RECORDS
                ]
                return bool(busy) and all(
                    cluster.earliest_offset(COORDINATION_TOPIC, cp) > 0 for cp in busy
                )

            ok = wait_until(truncated, 40)
            ends = [
                (
                    cluster.earliest_offset(COORDINATION_TOPIC, cp),
                    cluster.latest_offset(COORDINATION_TOPIC, cp),
                )
                for cp in range(N_COORD)
            ]
            if not report.check("__marshal is truncated behind snapshots", ok, str(ends)):
                return report
            report.figures["snapshots kept (all partitions)"] = float(
                sum(len(coordlog.read_snapshots(cluster, cp)) for cp in range(N_COORD))
            )
            late_observer = Marshaler(
                cluster, "late-observer", GROUP, hb, fetch_wait=0.1, coordination_partitions=N_COORD
            )
            try:
                report.check(
                    "an observer started after truncation catches up",
                    late_observer.wait_caught_up(20),
                )
                late = h.member(
                    "late", coordination_partitions=N_COORD, snapshot_records=SNAPSHOT_RECORDS
                )
                members.append(late)
                report.check("a member started after truncation joins", h.joined([late]))
                time.sleep(2 * hb)
                h.one_holder_each(members)

                # an admin reset across the snapshots
                pause_for = 2 * hb + h.rng.uniform(0.2, 0.8)
                command = [
                    sys.executable, "-m", "logmarshal", "--bootstrap", h.bootstrap, "--json",
                    "group", "reset", GROUP, "--topic", TOPIC, "--to-offset", str(new),
                    "--execute", "--pause-for", f"{pause_for:.3f}s",
                ]  # fmt: skip
                out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
                try:
                    result = json.loads(out.stdout)
                except ValueError:
                    result = {}
                if not report.check(
                    "group reset across snapshots is confirmed",
                    out.returncode == 0 and result.get("ok") is True,
                    (out.stderr or out.stdout)[-500:],
                ):
                    return report
                expiry = result["paused_until_ms"] / 1000
                wait_until(lambda: time.time() > expiry, 10)

                def after() -> dict[int, list[int]]:
                    got: dict[int, list[int]] = {}
                    for m in members:
                        for x in m.log().handed:
                            if x.handed_at >= expiry:
                                got.setdefault(x.partition, []).append(x.offset)
                    return {p: sorted(v) for p, v in got.items()}

                report.check(
                    "every partition is consumed again after the reset",
                    wait_until(lambda: len(after()) == partitions, 15),
                )
                wrong = {
                    p: offs[:8]
                    for p, offs in after().items()
                    if offs[0] != new or offs != list(range(new, new + len(offs)))
                }
                report.check(f"every partition resumes exactly at {new}", not wrong, str(wrong))
                h.wait_produced()
                time.sleep(2 * hb)
                h.one_holder_each(members)
                # everyone stops (claims released); then both observers must see the same worlds
                for m in members:
                    m.terminate()
                h.observer.wait_caught_up(10)
                late_observer.wait_caught_up(10)
                same = _worlds(h.observer) == _worlds(late_observer)
                report.check(
                    "the late observer's worlds equal the full replay's, byte for byte", same
                )
                log_ends = {
                    cp: cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in range(N_COORD)
                }
                problem = recorder.finish(log_ends, 20)
                if report.check(
                    "a full copy of __marshal was kept", problem is None, problem or ""
                ):
                    _audits_agree(report, cluster, recorder.records, h.workdir / "audit-export")
            finally:
                late_observer.close()
            return report
        finally:
            recorder.finish({}, 0)  # stops it if the run ended early


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.snapshots")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=["alo", "amo"], default=None)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.CRITICAL + 1, logging.WARNING, logging.INFO][args.verbose])
    report = run(args.seed, mode=mode_for(args.seed, args.mode))
    report.print()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
