"""multi-broker: 3 brokers; the broker leading some ``__marshal`` partitions is SIGKILLed.

Checks: consumers stop handing out the partitions coordinated there, the others keep going.
Real processes only (the harness of :mod:`scenarios.process_harness`); also
``python -m scenarios.processes multi-broker``.

    python -m scenarios.multi_broker --seed 7 [--mode alo|amo] [--data-dir D] [-v]
"""

from __future__ import annotations

import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable

from logmarshal import NewRecord
from rationalizer import coordination_partition

from .common import OnKafka, Report, main_on_processes, wait_until
from .process_harness import MemberProc, procs

__all__ = ["NOT_ON_KAFKA", "main", "run"]


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


#: why it has no Apache Kafka equivalent (``--kafka`` skips it with this reason)
NOT_ON_KAFKA = (
    "it places partitions by logmarshal's cluster-file rule (a pure function of the topic "
    "name) to put __marshal leaders on the broker it kills; on Kafka the controller places "
    "them (3-node Kafka faults: pytest -m kafka_cluster)"
)


def run(
    seed: int, *, mode: str, data_dir: str | None = None, kafka: OnKafka | None = None
) -> Report:
    """3 brokers; SIGKILL one that is not the controller (the controller holds the topics).

    Two topics, whose names are chosen so that placement (a pure function of the name)
    puts every partition of ``kept…`` (data and coordination) on the survivors, and every
    coordination partition of ``cut…`` on the victim (its data on the survivors). Member
    ``k`` consumes the first, ``d`` the second. What Marshal promises: ``d``, whose
    coordination partitions are gone, stops handing out within 2·HB (it can no longer renew
    its claims, so it fences itself) although its data is still readable and keeps coming;
    ``k`` keeps going with ALO / AMO kept.
    """
    if kafka is not None:
        raise ValueError(f"multi-broker does not run on Apache Kafka: {NOT_ON_KAFKA}")
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


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.multi_broker --seed N [--mode alo|amo] [--data-dir D] [-v]``."""
    return main_on_processes(
        "python -m scenarios.multi_broker", argv, {"multi-broker": run}, "multi-broker"
    )


if __name__ == "__main__":
    sys.exit(main())
