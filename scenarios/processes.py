"""The scenarios in real processes: a broker process, consumer processes, real signals.

    python -m scenarios.processes failover --seed 7 [--mode amo] [--data-dir D]
    python -m scenarios.failover --processes --seed 7          # the same

``failover``, ``pause``, ``handoff`` and ``restart`` are written once for every stage
(:mod:`scenarios.stages`); here they run on :class:`~scenarios.stages.processes.ProcessStage`
(SIGKILL, SIGSTOP/SIGCONT, SIGTERM). These need real processes and a real broker:

- ``broker-crash``: a producer writes acks=all while 2 consumers consume; the broker is
  SIGKILLed mid-load, a torn write is appended to a partition's last segment, and the broker
  restarts on the same data and port. Every acknowledged record is still there with its
  content, nothing of the torn write is served, and the consumers resume with ALO / AMO kept.
- ``reset``: 3 consumers while ``logmarshal group reset --to-offset N --execute`` runs in a
  subprocess: nothing handed out during the pause (once members had 2·HB to notice), every
  partition resumes exactly at N after the expiry, and nobody keeps a stale claim.
- ``zombie`` (AMO only; :mod:`scenarios.zombie`): issue 23's schedule. A member frozen past
  2·HB, its partition moved by a third member, its client restarted in a new process, then
  thawed with its ``__marshal`` fetches lagging: no offset is handed out twice.
- ``multi-broker``: 3 brokers; the broker leading some ``__marshal`` partitions is SIGKILLed:
  consumers stop handing out the partitions coordinated there, the others keep going.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logmarshal import NewRecord
from rationalizer import coordination_partition

from . import failover, handoff, pause, rebalance, restart, zombie
from .common import Report, configure_logging, mode_for, wait_until
from .procs import GROUP, ROOT, TOPIC, MemberProc, procs

__all__ = ["SCENARIOS", "main", "run"]


# -- broker crash -----------------------------------------------------------------------------

_VALUE = re.compile(rb"^(\d+):(\d+)$")


def _segment_end(path: Path) -> tuple[int, int, bytes | None]:
    """(byte length of the complete batches, next offset after them, the last batch)."""
    data = path.read_bytes()
    pos, end_offset, last = 0, None, None
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length < 49 or pos + 12 + length > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        end_offset = base + delta + 1
        last = data[pos : pos + 12 + length]
        pos += 12 + length
    if end_offset is None:
        end_offset = int(path.stem)
    return pos, end_offset, last


def _tear(partition_dir: Path, how: str) -> tuple[int, int]:
    """Append a torn write to the newest segment: a batch cut short (``short``) or complete
    but with a flipped byte (``crc``). Returns (valid end offset, bytes appended)."""
    segment = max(partition_dir.glob("*.log"))
    size, end, last = _segment_end(segment)
    if last is None:
        return end, 0
    batch = bytearray(last)
    struct.pack_into(">q", batch, 0, end)  # as if it were the next batch
    if how == "short":
        torn = bytes(batch[: len(batch) // 2 + 7])
    else:
        batch[-1] ^= 0xFF
        torn = bytes(batch)
    with open(segment, "r+b") as f:
        f.truncate(size)  # anything unparseable already there stays out of the count
        f.seek(size)
        f.write(torn)
    return end, len(torn)


def broker_crash(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 1.0
    partitions = 4
    with procs(
        "broker-crash", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir
    ) as h:
        report = h.report
        h.connect()
        consumers = [h.member(f"c{i}") for i in range(2)]
        if not report.check("the consumers start", h.joined(consumers)):
            return report
        producer = h.producer(per_partition=300, seconds=3.0)
        kill_after = h.rng.randint(100, 500)  # acknowledged records
        wait_until(lambda: len(producer.log().acked) >= kill_after, 20, step=0.02)
        broker = h.brokers[0]
        acked_before = len(producer.log().acked)
        broker.kill()
        killed_at = time.monotonic()
        report.figures["acknowledged before the kill"] = acked_before
        torn_partition = h.rng.randrange(partitions)
        how = h.rng.choice(["short", "crc"])
        valid_end, appended = _tear(h.data_root / f"{TOPIC}-{torn_partition}", how)
        coord_torn = None
        if h.rng.random() < 0.5:
            coord_torn = h.rng.randrange(8)
            _tear(h.data_root / f"__marshal-{coord_torn}", h.rng.choice(["short", "crc"]))
        time.sleep(h.rng.uniform(0.0, 1.0))
        broker.start()
        restarted_at = time.time()
        report.figures["broker down seconds"] = time.monotonic() - killed_at
        assert h.cluster is not None
        end_now = h.cluster.latest_offset(TOPIC, torn_partition)
        report.check(
            f"the torn write ({how}, {appended} bytes on {TOPIC}/{torn_partition}"
            + (f", and on __marshal/{coord_torn}" if coord_torn is not None else "")
            + ") is cut off at restart",
            end_now == valid_end,
            f"log end {end_now}, last complete batch ends at {valid_end}",
        )
        done = wait_until(lambda: producer.log().exited, 60, step=0.05)
        report.check("the producer finishes (it rides out the outage)", done)
        acked = producer.log().acked
        # read everything back and compare with what was acknowledged
        served: dict[tuple[int, int], bytes] = {}
        ends = {}
        for p in range(partitions):
            ends[p] = h.cluster.latest_offset(TOPIC, p)
            offset = 0
            while offset < ends[p]:
                batch = h.cluster.fetch(TOPIC, p, offset, max_wait=1.0)
                if not batch:
                    break
                for m in batch:
                    served[(p, m.offset)] = m.value or b""
                offset = batch[-1].offset + 1
        missing = [k for k in acked if k not in served]
        changed = [k for k, v in acked.items() if k in served and served[k] != v.encode()]
        report.check(
            f"every acknowledged record is there with its content ({len(acked)})",
            not missing and not changed,
            f"{len(missing)} missing, e.g. {missing[:5]}; {len(changed)} changed, e.g. {changed[:5]}",
        )
        bad = [
            k for k, v in served.items() if not _VALUE.match(v) or int(_VALUE.match(v)[1]) != k[0]
        ]
        holes = [p for p in range(partitions) if len([k for k in served if k[0] == p]) != ends[p]]
        report.check(
            "every served record is one the producer wrote, with no gaps",
            not bad and not holes,
            f"bad {bad[:5]}, gaps in {holes}",
        )
        report.figures["records stored but never acknowledged"] = len(served) - len(acked)
        h.produced = ends
        drained = wait_until(lambda: h.drained(consumers), 30)
        report.check("the consumers resume and reach the end", drained)
        report.figures["recovery seconds (kill to drained)"] = time.monotonic() - killed_at
        report.figures["first hand-out after the restart (s)"] = (
            min(
                (
                    x.handed_at
                    for m in consumers
                    for x in m.log().handed
                    if x.handed_at > restarted_at
                ),
                default=float("nan"),
            )
            - restarted_at
        )
        h.one_holder_each(consumers)
        h.delivery(consumers)
        return report


# -- reset ------------------------------------------------------------------------------------


def reset_target(seed: int) -> int:
    """The offset the reset scenario moves every partition to (the audit test checks it)."""
    return 10 + seed % 7


def reset(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    partitions = 6
    new = reset_target(seed)
    with procs("reset", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir) as h:
        report = h.report
        h.connect()
        members = h.start_group(3, first=100, per_partition=200, seconds=6.0)
        if members is None:
            return report

        threshold = 2 * new + h.rng.randint(0, 20)

        def progressed() -> bool:
            assert h.observer is not None
            return all(
                (h.observer.resume_offset(TOPIC, p) or 0) > threshold for p in range(partitions)
            )

        if not report.check(
            "every partition is consumed past the target", wait_until(progressed, 20)
        ):
            return report
        pause_for = 2 * hb + h.rng.uniform(0.2, 1.0)
        command = [
            sys.executable,
            "-m",
            "logmarshal",
            "--bootstrap",
            h.bootstrap,
            "--json",
            "group",
            "reset",
            GROUP,
            "--topic",
            TOPIC,
            "--to-offset",
            str(new),
            "--execute",
            "--pause-for",
            f"{pause_for:.3f}s",
        ]
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        written_at = time.time()
        try:
            result = json.loads(run.stdout)
        except ValueError:
            result = {}
        ok = run.returncode == 0 and result.get("ok") is True
        if not report.check(
            "group reset --execute is confirmed", ok, (run.stderr or run.stdout)[-500:]
        ):
            return report
        expiry = result["paused_until_ms"] / 1000
        report.figures["pause seconds"] = result["pause_ms"] / 1000
        wait_until(lambda: time.time() > expiry, 10)
        quiet = [
            (m.name, x.partition, x.offset)
            for m in members
            for x in m.log().handed
            if written_at + 2 * hb <= x.handed_at < expiry
        ]
        report.check("nothing handed out during the pause (after 2·HB)", not quiet, str(quiet[:5]))

        def after() -> dict[int, list[int]]:
            out: dict[int, list[int]] = {}
            for m in members:
                for x in m.log().handed:
                    if x.handed_at >= expiry:
                        out.setdefault(x.partition, []).append(x.offset)
            return {p: sorted(v) for p, v in out.items()}

        resumed = wait_until(
            lambda: len(after()) == partitions and all(len(v) >= 5 for v in after().values()), 15
        )
        report.check("every partition is consumed again after the pause", resumed)
        wrong = {}
        for p, offsets in sorted(after().items()):
            if offsets[0] != new or offsets != list(range(new, new + len(offsets))):
                wrong[p] = offsets[:8]
        report.check(f"every partition resumes exactly at {new}", not wrong, str(wrong))
        first_after = min(
            (x.handed_at for m in members for x in m.log().handed if x.handed_at >= expiry),
            default=expiry,
        )
        report.figures["first hand-out after the expiry (s)"] = first_after - expiry
        h.wait_produced()
        time.sleep(2 * hb)
        h.one_holder_each(members)
        return report


# -- several brokers --------------------------------------------------------------------------


def _leader(topic: str, partition: int, ids: list[int]) -> int:
    """The broker leading a partition (the broker's cluster-file placement rule)."""
    return sorted(ids)[(zlib.crc32(topic.encode()) + partition) % len(ids)]


def _topic_where(
    prefix: str, partitions: int, n_coord: int, ids: list[int], want: Callable[[int, int], bool]
) -> str:
    """The first name ``prefix<i>`` whose every partition ``p`` satisfies
    ``want(data leader, coordination leader)``: placement is a pure function of the name."""
    for i in range(100_000):
        topic = f"{prefix}{i}"
        if all(
            want(
                _leader(topic, p, ids),
                _leader("__marshal", coordination_partition(topic, p, n_coord), ids),
            )
            for p in range(partitions)
        ):
            return topic
    raise RuntimeError(f"no topic name {prefix}N fits")


def multi_broker(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    """3 brokers; SIGKILL one that is not the controller (the controller holds the topics).

    Two topics, whose names are chosen so that placement (a pure function of the name)
    puts every partition of ``kept…`` (data and coordination) on the survivors, and every
    coordination partition of ``cut…`` on the victim (its data on the survivors). Member
    ``k`` consumes the first, ``d`` the second. What Marshal promises: ``d``, whose
    coordination partitions are gone, stops handing out within 2·HB (it can no longer renew
    its claims, so it fences itself) although its data is still readable and keeps coming;
    ``k`` keeps going with ALO / AMO kept.
    """
    hb = 0.5
    partitions = 2  # data partitions go round-robin over the 3 brokers: 2 can avoid one
    n_coord = 8
    ids = [1, 2, 3]
    with procs(
        "multi-broker", seed, mode=mode, hb=hb, partitions=partitions, data_dir=data_dir, brokers=3
    ) as h:
        report = h.report
        h.connect(coordination_partitions=n_coord)
        assert h.cluster is not None and h.observer is not None
        victim_id = h.rng.choice(ids[1:])
        victim = h.brokers[ids.index(victim_id)]
        kept = _topic_where("kept", partitions, n_coord, ids, lambda d, c: victim_id not in (d, c))
        cut = _topic_where(
            "cut", partitions, n_coord, ids, lambda d, c: d != victim_id and c == victim_id
        )
        produced = {kept: [0] * partitions, cut: [0] * partitions}

        def produce(topic: str, n: int) -> None:
            for p in range(partitions):
                now = int(time.time() * 1000)
                records = [
                    NewRecord(value=b"%d" % (produced[topic][p] + i), timestamp=now)
                    for i in range(n)
                ]
                h.cluster.produce(topic, p, records)  # type: ignore[union-attr]
                produced[topic][p] += n

        for topic in (kept, cut):
            h.cluster.create_topic(topic, partitions)
            produce(topic, 20)
        k, d = h.member("k", topic=kept, greedy=True), h.member("d", topic=cut, greedy=True)
        if not report.check("the members start", h.joined([k, d])):
            return report

        def held_by(member: MemberProc, topic: str) -> bool:
            return all(
                h.observer.holder(topic, p) == member.identity  # type: ignore[union-attr]
                for p in range(partitions)
            )

        ok = wait_until(lambda: held_by(k, kept) and held_by(d, cut), 15)
        if not report.check("k holds every partition of its topic, d of its own", ok):
            return report
        time.sleep(h.rng.uniform(0.1, 0.5))
        killed_at = time.time()
        victim.kill()
        deadline = time.monotonic() + 4 * hb + h.rng.uniform(0.5, 1.5)
        while time.monotonic() < deadline:  # both topics keep receiving records
            produce(kept, 2)
            produce(cut, 2)
            time.sleep(0.05)

        def drained() -> bool:
            last = dict.fromkeys(range(partitions), -1)
            for x in k.log().handed:
                last[x.partition] = max(last[x.partition], x.offset)
            return all(last[p] >= produced[kept][p] - 1 for p in range(partitions))

        report.check(f"k keeps going: it reaches the end of {kept}", wait_until(drained, 15))
        late = [
            (x.partition, x.offset) for x in d.log().handed if x.poll_started > killed_at + 2 * hb
        ]
        report.check(
            f"d, coordinated on the dead broker {victim_id}, hands out nothing 2·HB after the kill",
            not late,
            f"{len(late)} e.g. {late[:5]}",
        )
        last_d = max((x.handed_at for x in d.log().handed), default=killed_at)
        report.figures["d's last hand-out after the kill (s)"] = max(0.0, last_d - killed_at)
        report.figures["records written to d's topic after the kill"] = (
            sum(produced[cut]) - 20 * partitions
        )
        counts = Counter((x.partition, x.offset) for x in k.log().handed)
        wanted = {(p, o) for p in range(partitions) for o in range(produced[kept][p])}
        if mode == "amo":
            twice = sorted(o for o, c in counts.items() if c > 1)
            report.check("AMO (k): no offset handed out twice", not twice, str(twice[:5]))
        else:
            missing = sorted(wanted - set(counts))
            report.check("ALO (k): every offset handled", not missing, str(missing[:5]))
        report.check("both member processes are still running", k.alive and d.alive)
        return report


def _on_processes(module: Any) -> Callable[..., Report]:
    def run(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
        return module.run(seed, mode=mode, stage="processes", data_dir=data_dir)

    return run


#: every scenario that runs in real processes: those written once for every stage, and
#: those only real processes can play (a broker's crash, several brokers, the admin CLI)
SCENARIOS: dict[str, Callable[..., Report]] = {
    "failover": _on_processes(failover),
    "pause": _on_processes(pause),
    "handoff": _on_processes(handoff),
    "restart": _on_processes(restart),
    "rebalance": _on_processes(rebalance),
    "zombie": _on_processes(zombie),
    "broker-crash": broker_crash,
    "reset": reset,
    "multi-broker": multi_broker,
}


def run(name: str, seed: int, *, mode: str | None = None, data_dir: str | None = None) -> Report:
    return SCENARIOS[name](seed, mode=mode_for(seed, mode), data_dir=data_dir)


def main(argv: list[str] | None = None, name: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.processes")
    if name is None:
        parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--processes", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="keep the broker's log here afterwards")
    parser.add_argument("--mode", choices=["alo", "amo"], default=None, help="default: by seed")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    report = run(name or args.scenario, args.seed, mode=args.mode, data_dir=args.data_dir)
    report.print()
    if args.data_dir:
        print(f"log kept in {args.data_dir}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
