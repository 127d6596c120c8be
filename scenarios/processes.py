"""The scenarios in real processes: a broker process, consumer processes, real signals.

    python -m scenarios.processes failover --seed 7 [--mode amo] [--data-dir D]
    python -m scenarios.failover --processes --seed 7          # the same

- ``failover``: 3 consumers on 8 partitions; one is SIGKILLed. The survivors own every
  partition within 2·HB + margin; ALO nothing lost, AMO nothing twice.
- ``pause``: one of 3 consumers is SIGSTOPped beyond 2·HB, until the others own its
  partitions, then SIGCONTed: no poll it starts afterwards hands out a partition it lost.
- ``handoff``: one consumer holds everything; SIGTERM closes it cleanly (commits flushed,
  claims released) and a waiting successor resumes exactly there: 0 lost, 0 repeated.
- ``restart``: consumer "a" hangs (SIGSTOP) and a new process of client "a" starts; it takes
  a's partitions (restart recovery, or stale takeover), and the old one, SIGCONTed, is fenced.
- ``broker-crash``: a producer writes acks=all while 2 consumers consume; the broker is
  SIGKILLed mid-load, a torn write is appended to a partition's last segment, and the broker
  restarts on the same data and port. Every acknowledged record is still there with its
  content, nothing of the torn write is served, and the consumers resume with ALO / AMO kept.
- ``reset``: 3 consumers while ``logmarshal group reset --to-offset N --execute`` runs in a
  subprocess: nothing handed out during the pause (once members had 2·HB to notice), every
  partition resumes exactly at N after the expiry, and nobody keeps a stale claim.
- ``multi-broker``: 3 brokers; the broker leading some ``__marshal`` partitions is SIGKILLed:
  consumers stop handing out the partitions coordinated there, the others keep going.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from logmarshal import NewRecord
from rationalizer import coordination_partition

from .common import Report, mode_for, wait_for
from .procs import GROUP, ROOT, TOPIC, MemberProc, procs

__all__ = ["SCENARIOS", "main", "run"]


# -- failover ---------------------------------------------------------------------------------


def failover(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    margin = 0.5  # claim pass, a durable write and the observer's replay on a loaded 2-core box
    with procs("failover", seed, mode=mode, hb=hb, partitions=8, data_dir=data_dir) as h:
        report = h.report
        h.connect()
        members = h.start_group(3, first=20, per_partition=100, seconds=2.0)
        if members is None:
            return report
        # Non-greedy members take one partition per pass: one that starts late on a loaded
        # machine may find nothing left (there is no rebalancing), which is fine here.
        ok = wait_for(lambda: h.owned_by(members) and h.holding(members) >= 2, 15)
        if not report.check("all 8 owned, two members or more holding some, before the kill", ok):
            return report
        time.sleep(h.rng.uniform(0.1, 0.6))
        victim = h.rng.choice([m for m in members if h.holding([m])])
        survivors = [m for m in members if m is not victim]
        report.figures["partitions taken over"] = sum(
            1 for holder in h.holders().values() if holder == victim.identity
        )
        stopped = time.monotonic()
        victim.kill()
        owned = wait_for(lambda: h.owned_by(survivors), 2 * hb + margin + 10)
        took = time.monotonic() - stopped
        report.figures["failover seconds"] = took
        report.check(
            f"survivors own all 8 within 2·HB + margin ({2 * hb + margin:.2f} s)",
            owned and took <= 2 * hb + margin,
            f"{took:.3f} s after SIGKILL of {victim.name}",
        )
        h.wait_produced()
        report.check("survivors reach the end", wait_for(lambda: h.drained(survivors), 20))
        h.one_holder_each(survivors)
        h.delivery(members)
        return report


# -- pause ------------------------------------------------------------------------------------


def pause(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    with procs("pause", seed, mode=mode, hb=hb, partitions=8, data_dir=data_dir) as h:
        report = h.report
        h.connect()
        members = h.start_group(3, first=20, per_partition=120, seconds=3.0)
        if members is None:
            return report
        ok = wait_for(lambda: h.owned_by(members) and h.holding(members) >= 2, 15)
        if not report.check("all partitions owned, two members or more holding some", ok):
            return report
        time.sleep(h.rng.uniform(0.05, 0.4))
        frozen = h.rng.choice([m for m in members if h.holding([m])])
        others = [m for m in members if m is not frozen]
        taken = {p for p, holder in h.holders().items() if holder == frozen.identity}
        frozen_at = time.time()
        frozen.signal(signal.SIGSTOP)
        moved = wait_for(lambda: h.owned_by(others), 2 * hb + 10)
        report.check("the others own everything while it is stopped", moved)
        # beyond 2·HB whatever happened: the others may take over sooner (the lease runs
        # from its last heartbeat, before the stop)
        time.sleep(max(0.0, frozen_at + 2 * hb + h.rng.uniform(0.05, 0.5) - time.time()))
        thawed_at = time.time()
        report.figures["stopped seconds"] = thawed_at - frozen_at
        report.check(
            "it was stopped beyond 2·HB",
            thawed_at - frozen_at > 2 * hb,
            f"{thawed_at - frozen_at:.3f} s",
        )
        frozen.signal(signal.SIGCONT)
        h.wait_produced()
        report.check("the group reaches the end", wait_for(lambda: h.drained(members), 20))
        # A poll that was under way when SIGSTOP hit may finish after SIGCONT (a process
        # cannot fence itself between a check and a return); every poll started after the
        # stop must respect self-fencing.
        lost = {p for p in taken if h.observer.holder(TOPIC, p) != frozen.identity}  # type: ignore[union-attr]
        late = [
            (x.partition, x.offset)
            for x in frozen.log().handed
            if x.poll_started > frozen_at and x.partition in lost
        ]
        report.check(
            "the resumed member hands out nothing of the partitions it lost",
            not late,
            f"{len(late)} handed out late, e.g. {late[:5]}",
        )
        h.one_holder_each(members)
        h.delivery(members)
        return report


# -- handoff ----------------------------------------------------------------------------------


def handoff(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 0.5
    with procs("handoff", seed, mode=mode, hb=hb, partitions=4, data_dir=data_dir) as h:
        report = h.report
        h.connect()
        h.produce(50)
        first = h.member("first", greedy=True)
        successor = h.member("successor", go=False)
        ok = h.joined([first]) and wait_for(lambda: h.owned_by([first]), 15)
        if not report.check("the first member owns every partition", ok):
            return report
        successor.go()
        if not report.check("the successor starts", h.joined([successor])):
            return report
        h.produce_in_background(per_partition=150, seconds=1.5)
        time.sleep(h.rng.uniform(0.05, 0.8))
        closed_at = time.monotonic()
        code = first.terminate()
        report.check(
            "the first member exits cleanly on SIGTERM",
            code == 0 and first.log().exited,
            f"exit code {code}",
        )
        handed = wait_for(lambda: h.owned_by([successor]), 10)
        took = time.monotonic() - closed_at
        report.figures["handoff seconds (SIGTERM to successor owning all)"] = took
        report.check("the successor owns every partition", handed, f"{took:.3f} s")
        h.wait_produced()
        report.check("the successor reaches the end", wait_for(lambda: h.drained([successor]), 20))
        counts = Counter(o for m in (first, successor) for o in m.handled_set())
        lost = h.all_offsets() - set(counts)
        repeated = sorted(o for o, c in counts.items() if c > 1)
        report.check("0 lost", not lost, f"{len(lost)} lost, e.g. {sorted(lost)[:5]}")
        report.check("0 repeated", not repeated, f"{len(repeated)} repeated, e.g. {repeated[:5]}")
        return report


# -- restart ----------------------------------------------------------------------------------


def restart(seed: int, *, mode: str, data_dir: str | None = None) -> Report:
    hb = 1.0
    with procs("restart", seed, mode=mode, hb=hb, partitions=8, data_dir=data_dir) as h:
        report = h.report
        h.connect()
        h.produce(20)
        a = h.member("a", max_claims=4, greedy=True)
        a2 = h.member("a", max_claims=4, greedy=True, go=False)
        ok = h.joined([a]) and wait_for(
            lambda: sum(1 for x in h.holders().values() if x == a.identity) == 4, 15
        )
        if not report.check("a holds 4", ok):
            return report
        b = h.member("b", max_claims=4, greedy=True)
        if not report.check(
            "a and b own all 8", h.joined([b]) and wait_for(lambda: h.owned_by([a, b]), 15)
        ):
            return report
        h.produce_in_background(per_partition=100, seconds=2.5)
        time.sleep(h.rng.uniform(0.05, 0.4))
        a_partitions = {p for p, x in h.holders().items() if x == a.identity}
        restarted_at = time.monotonic()
        a.signal(signal.SIGSTOP)  # a hung process; its successor starts at once
        a2.go()
        took = h.joined([a2]) and wait_for(
            lambda: {p for p, x in h.holders().items() if x == a2.identity} == a_partitions,
            2 * hb + 10,
        )
        report.figures["restart takeover seconds"] = time.monotonic() - restarted_at
        report.check("the new instance holds all of a's partitions", took and h.owned_by([a2, b]))
        thawed_at = time.time()
        a.signal(signal.SIGCONT)
        fenced = wait_for(lambda: a.log().fenced_at is not None and not a.believed(), 10, step=0.05)
        report.check("the old instance is fenced and holds nothing", fenced)
        h.wait_produced()
        report.check("the group reaches the end", wait_for(lambda: h.drained([a2, b]), 20))
        zombie = a.log()
        since = thawed_at if mode == "amo" else (zombie.fenced_at or thawed_at)
        late = [(x.partition, x.offset) for x in zombie.handed if x.poll_started > since]
        report.figures["handed out by the zombie after SIGCONT"] = sum(
            1 for x in zombie.handed if x.handed_at > thawed_at
        )
        report.check(
            "the fenced instance hands out nothing "
            + ("after SIGCONT" if mode == "amo" else "once it knows it is fenced"),
            not late,
            f"{len(late)} e.g. {late[:5]}",
        )
        h.one_holder_each([a2, b])
        h.delivery([a, a2, b])
        return report


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
        wait_for(lambda: len(producer.log().acked) >= kill_after, 20, step=0.02)
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
        done = wait_for(lambda: producer.log().exited, 60, step=0.05)
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
        drained = wait_for(lambda: h.drained(consumers), 30)
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
            "every partition is consumed past the target", wait_for(progressed, 20)
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
        wait_for(lambda: time.time() > expiry, 10)
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

        resumed = wait_for(
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

        ok = wait_for(lambda: held_by(k, kept) and held_by(d, cut), 15)
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

        report.check(f"k keeps going: it reaches the end of {kept}", wait_for(drained, 15))
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


SCENARIOS: dict[str, Callable[..., Report]] = {
    "failover": failover,
    "pause": pause,
    "handoff": handoff,
    "restart": restart,
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
    logging.basicConfig(
        level=[logging.CRITICAL + 1, logging.WARNING, logging.INFO][min(args.verbose, 2)],
        format="%(relativeCreated)7.0f %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose:
        os.environ["SCENARIO_SHOW_OUTPUT"] = "1"
    report = run(name or args.scenario, args.seed, mode=args.mode, data_dir=args.data_dir)
    report.print()
    if args.data_dir:
        print(f"log kept in {args.data_dir}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
