"""The protocol under Apache Kafka's own failures: a 3-node KRaft cluster (replication factor
3, ``min.insync.replicas=2``, idempotent acks=all coordination writes) whose partition
leaders are killed with SIGKILL again and again, then restarted node by node as a rolling
restart does, while an ALO group and an AMO group consume.

Required, and asserted: 0 offsets handed out twice in the AMO group, 0 produced offsets never
handed out in the ALO group, every member handing out again within 90 s once Kafka takes
writes to every partition again after each fault (Kafka's own recovery is timed apart and
printed: on two cores it took up to tens of seconds), and the audit of ``__marshal``
finding no violation and no two tenures of one partition at once.

A separate stage of ``.ci/run`` (``pytest -m kafka_cluster``): minutes, three JVMs.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import logmarshal
from logmarshal._coordlog import COORDINATION_TOPIC, records_from_cluster
from logmarshal.audit.local import audit_records
from logmarshal.audit.replay import ReplayConfig
from logmarshal.audit.schema import column_index
from logmarshal.localkafka import KafkaCluster

from .conftest import start_cluster

pytestmark = [pytest.mark.kafka_cluster, pytest.mark.slow]

TOPIC = "events"
PARTITIONS = 6
HB = 1.0
#: what the audit calls a write from a member that no longer held the partition
LAPSED_WRITES = {"heartbeat_without_claim", "release_without_claim", "claim_messages_without_claim"}


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory) -> Iterator[KafkaCluster]:
    # a killed node is fenced by the controller after broker.session.timeout.ms (9 s by
    # default); 3 s keeps each round of the test short without changing what it exercises
    server = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}
    cluster = start_cluster(tmp_path_factory.mktemp("kafka3"), nodes=3, heap="384m", server=server)
    try:
        yield cluster
    finally:
        cluster.stop()


class Member(threading.Thread):
    """One member, its own connection, Marshaler and Consumer, in a thread: records every
    offset it hands out and (ALO) commits it."""

    def __init__(self, bootstrap: str, group: str, name: str, mode: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group, self.client_id, self.mode = bootstrap, group, name, mode
        self.handed: list[tuple[int, int, float]] = []
        #: the values handed out (a record acknowledged without its offset is found by it)
        self.values: set[bytes | None] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.consumer: logmarshal.Consumer | None = None

    def run(self) -> None:
        try:
            cluster = logmarshal.connect(bootstrap=self.bootstrap)
            marshaler = logmarshal.Marshaler(
                cluster, client_id=self.client_id, group_id=self.group, heartbeat_interval=HB
            )
            with logmarshal.Consumer(marshaler, [TOPIC], mode=self.mode,
                                     auto_offset_reset="earliest") as consumer:  # fmt: skip
                self.consumer = consumer
                while not self.stop.is_set():
                    batch = consumer.poll(timeout=0.5)
                    now = time.monotonic()
                    self.handed.extend((m.partition, m.offset, now) for m in batch)
                    self.values.update(m.value for m in batch)
                    if batch and self.mode == "alo":
                        consumer.commit(*batch)
            marshaler.close()
            cluster.close()
        except BaseException as exc:  # reported by the test, not lost in a thread
            traceback.print_exc()  # where it was raised, in the failure's captured output
            self.error = exc

    def handed_since(self, t: float) -> int:
        return sum(1 for _, _, at in self.handed if at >= t)


class Producing(threading.Thread):
    """Keyed records into TOPIC until stopped; remembers every acknowledged offset."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="producer", daemon=True)
        self.bootstrap = bootstrap
        self.acked: set[tuple[int, int]] = set()
        #: values acknowledged without an offset (offset None; seen once in CI on
        #: 2026-12-04, likely a retried idempotent batch that Kafka answered
        #: DUPLICATE_SEQUENCE_NUMBER: written already, by a try whose answer a killed node
        #: lost): the ALO group is checked for them by value
        self.acked_unplaced: list[bytes] = []
        #: per partition, when its last record was acknowledged (time.monotonic())
        self.acked_at: dict[int, float] = {}
        self.stop = threading.Event()
        self.errors = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})  # fmt: skip

        def report(err, msg) -> None:
            if err is None:
                if msg.offset() is None:
                    self.acked_unplaced.append(msg.value())
                else:
                    self.acked.add((msg.partition(), msg.offset()))
                self.acked_at[msg.partition()] = time.monotonic()
            else:
                self.errors += 1

        i = 0
        try:
            while not self.stop.is_set():
                try:
                    producer.produce(TOPIC, b"v%d" % i, key=b"k%d" % (i % 97),
                                     on_delivery=report)  # fmt: skip
                except BufferError:
                    # the local queue is full while leaders are away: wait, then the same
                    # record again (this producer died here once, and the caught-up ALO
                    # members, with nothing new to hand out, looked stuck)
                    producer.poll(0.2)
                    continue
                i += 1
                # about 1,000 records a second: plenty for every member to make progress.
                # At 5,000 this producer's broker threads spun (poll with a zero timeout,
                # 40-80 % of a core each, identified with gdb on 2026-11-30) while a node
                # was away, and starved the restarting JVM past the harness's 90 s.
                if i % 10 == 0:
                    producer.poll(0)
                    time.sleep(0.01)
            producer.flush(60)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc


def _leader_of_most(cluster: KafkaCluster) -> int:
    leaders = Counter(cluster.leader(COORDINATION_TOPIC, p) for p in range(8))
    return leaders.most_common(1)[0][0]


def _core_state(m: Member) -> Any:
    """The member's core state (``MemberState``), or None before its Consumer exists."""
    return getattr(getattr(m.consumer, "_core", None), "_st", None)


def _explain(stuck: list[Member]) -> None:
    """What a stuck member holds and where its threads are, for the failure's report."""
    for m in stuck:
        st = _core_state(m)
        for key, held in sorted((getattr(st, "held", None) or {}).items()):
            print(f"{m.client_id} holds {key}: {held!r}", file=sys.stderr)
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)[-8:])
        print(f"thread {names.get(ident, ident)}:\n{stack}", file=sys.stderr)


def _state(m: Member) -> str:
    """A stuck member's core in one line: what it holds, where, and what it waits for."""
    st = _core_state(m)
    last = f"{time.monotonic() - m.handed[-1][2]:.1f}s ago" if m.handed else "never"
    if st is None:
        return f"{m.client_id}: no consumer yet"
    now = m.consumer._now()
    held = ",".join(
        f"{t}/{p}@{h.next_fetch}:{h.handed_through}" for (t, p), h in sorted(st.held.items())
    )

    def age(t: int | None) -> str:
        return "-" if t is None else f"{now - t}ms"

    return (
        f"{m.client_id}: last handed out {last}, held [{held}]"
        f" buffered {sum(len(h.buffer) for h in st.held.values())}"
        f" stalled {sorted(st.stalled)} caught_up {sorted(st.caught_up)}"
        f" halted {sorted(st.halted)} pending {len(st.pending)} fenced {st.fenced}"
        f" last step {age(st.last_step)} ago, stall found {age(st.stall_found_at)} ago,"
        f" target {None if st.target is None else len(st.target)}"
        f" catch-up wanted {m.consumer._catch_up.wanted}"
    )


def _writes_land(producing: Producing, since: float, what: str) -> float:
    """Until Kafka acknowledges writes (acks=all) to every partition of TOPIC again after
    ``since``; when it did. Kafka's own recovery, apart from ours: on this machine's two cores
    its controller quorum, starved by a restarting node, let brokers' heartbeats time out and
    held acks=all writes for a whole request timeout (30 s, 2026-12-01). The 60 s the
    members once had counted that recovery too, and a CI run ran out of them."""
    deadline = time.monotonic() + 180.0
    while time.monotonic() < deadline:
        assert producing.is_alive() and producing.error is None, f"producer: {producing.error!r}"
        if all(producing.acked_at.get(p, 0.0) >= since for p in range(PARTITIONS)):
            landed = max(producing.acked_at[p] for p in range(PARTITIONS))
            print(
                f"{what}: Kafka took writes to every partition again after {landed - since:.1f} s"
            )
            return landed
        time.sleep(0.1)
    raise AssertionError(f"{what}: Apache Kafka took no write to some partition in 180 s")


def _progress(
    members: list[Member], since: float, timeout: float, producing: Producing, what: str
) -> None:
    """Until every member hands out something after ``since`` (while the producer, alive,
    keeps giving them something new to hand out); says how long that took, after ``what``."""
    began = time.monotonic()
    deadline = began + timeout
    while time.monotonic() < deadline:
        failed = {m.client_id: m.error for m in members if m.error is not None}
        assert not failed, f"members failed: {failed}"
        assert producing.is_alive() and producing.error is None, f"producer: {producing.error!r}"
        if all(m.handed_since(since) > 0 for m in members):
            print(f"{what}: every member handed out again within {time.monotonic() - began:.1f} s")
            return
        time.sleep(0.2)
    stuck = [m for m in members if m.handed_since(since) == 0]
    _explain(stuck)
    # the state in the message itself: a CI log keeps the summary line, not always stderr
    states = "; ".join(_state(m) for m in stuck)
    raise AssertionError(f"members handed out nothing after {what}: {states}")


def test_leaders_killed_and_rolling_restart(cluster3: KafkaCluster) -> None:
    bootstrap = cluster3.bootstrap
    with logmarshal.connect(bootstrap=bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    producing = Producing(bootstrap)
    producing.start()
    alo = [Member(bootstrap, "faults-alo", f"alo-{i}", "alo") for i in range(2)]
    amo = [Member(bootstrap, "faults-amo", f"amo-{i}", "amo") for i in range(2)]
    members = alo + amo
    for m in members:
        m.start()
    try:
        _progress(members, 0.0, 60.0, producing, "the start")
        # kill -9 the node leading most __marshal partitions, three times
        for _ in range(3):
            victim = _leader_of_most(cluster3)
            cluster3.kill(victim)
            time.sleep(3 * HB)
            cluster3.restart(victim)
            what = f"node {victim} killed and restarted"
            _progress(
                members, _writes_land(producing, time.monotonic(), what), 90.0, producing, what
            )
        # a rolling restart: each node shut down cleanly and started again, in turn
        for node in cluster3.nodes:
            assert node.pid is not None
            if not cluster3.shut_down(node.node_id):
                # Kafka's own: its controller quorum, starved, kept the controlled shutdown
                # waiting; the node was killed instead (still a node fault to live through)
                print(f"node {node.node_id}: no clean shutdown within 120 s; killed")
            cluster3.restart(node.node_id)
            what = f"node {node.node_id} restarted"
            _progress(
                members, _writes_land(producing, time.monotonic(), what), 90.0, producing, what
            )
    finally:
        producing.stop.set()
        producing.join(90)
    assert producing.error is None, f"producer: {producing.error!r}"

    # the ALO group catches up with everything acknowledged
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        seen = {(p, o) for m in alo for p, o, _ in m.handed}
        if producing.acked <= seen:
            break
        time.sleep(0.5)
    for m in members:
        m.stop.set()
    for m in members:
        m.join(60)
        assert m.error is None, f"{m.client_id}: {m.error!r}"

    seen_alo = {(p, o) for m in alo for p, o, _ in m.handed}
    lost = producing.acked - seen_alo
    assert producing.acked, "nothing was produced"
    assert not lost, f"ALO lost {len(lost)} acknowledged offsets, e.g. {sorted(lost)[:5]}"
    handed_values = set().union(*(m.values for m in alo))
    unplaced = [v for v in producing.acked_unplaced if v not in handed_values]
    assert not unplaced, f"ALO lost {len(unplaced)} records acknowledged without an offset"
    amo_counts = Counter((p, o) for m in amo for p, o, _ in m.handed)
    twice = [k for k, c in amo_counts.items() if c > 1]
    assert not twice, f"AMO handed out {len(twice)} offsets twice, e.g. {sorted(twice)[:5]}"
    assert amo_counts, "the AMO group handed out nothing"

    # the audit of __marshal: no violation, and no partition with two tenures at once
    with logmarshal.connect(bootstrap=bootstrap) as cluster:
        n = cluster.partitions(COORDINATION_TOPIC)
        ends = {cp: cluster.latest_offset(COORDINATION_TOPIC, cp) for cp in range(n)}
        records = dict(records_from_cluster(cluster, COORDINATION_TOPIC, ends))
    rows = audit_records(records, ReplayConfig())
    # Rejected records of a member whose claim lapsed while its writes stalled behind a dead
    # leader are expected (the log refused them; the member was fenced by its lease). Nothing
    # else may be refused (no fenced instance, no invalid record), but for the one below.
    kinds = Counter(row[column_index("violations", "kind")] for row in rows["violations"])
    # A holder's own AMO reservation refused for not continuing the log's reservations is
    # the log doing its work after a write whose answer the member never had (it may have
    # landed: core.verdicts.on_unknown, "the next reservation is refused"); the member then
    # starts again from the replay, and nothing is handed out twice (asserted above). The
    # simulator makes such writes too (landed, then answered WriteFailed: scenarios/sim.py).
    # Seen here in 1 of 11 runs on 2026-12-01. From anyone but the holder: something else.
    col = {c: column_index("violations", c) for c in ("kind", "group", "client_id",
                                                      "instance_id", "holder_client",
                                                      "holder_instance")}  # fmt: skip
    for row in rows["violations"]:
        if row[col["kind"]] == "offset_regression":
            assert row[col["group"]] == "faults-amo", row
            assert (row[col["client_id"]], row[col["instance_id"]]) == (
                row[col["holder_client"]],
                row[col["holder_instance"]],
            ), row
    assert set(kinds) <= LAPSED_WRITES | {"offset_regression"}, kinds
    tenures: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    cols = [
        column_index("ownership", c) for c in ("group", "topic", "partition", "start_ms", "end_ms")
    ]
    for row in rows["ownership"]:
        group, topic, partition, start, end = (row[i] for i in cols)
        tenures.setdefault((group, topic, partition), []).append(
            (start, end if end is not None else 2**62)
        )
    for key, spans in tenures.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two holders of {key} at once: {spans}"
    assert {k[0] for k in tenures} == {"faults-alo", "faults-amo"}
