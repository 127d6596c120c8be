"""The admin CLI on Apache Kafka with a live group: ``group list``, ``group describe``,
``group reset --execute`` (ReleaseGroup) while a Consumer in this process holds every
partition, then ``coord dump`` and ``coord export``, each run as ``python -m logmarshal
--bootstrap HOST:PORT --json ...`` in a subprocess and judged on its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logmarshal import Consumer, NewRecord
from logmarshal._coordlog import COORDINATION_TOPIC
from logmarshal.admin import read_coordination
from logmarshal.marshaler import Marshaler
from logmarshal.network import NetworkCluster

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
HB = 2.0  # the CLI judges freshness (age < HB) a few seconds after reading
PARTITIONS = 3
RECORDS = 40
TARGET = 10


def cli(bootstrap: str, *argv: str, timeout: float = 120.0) -> Any:
    """``python -m logmarshal --bootstrap B --json ARGV``: its JSON (exit 0 required)."""
    done = subprocess.run(
        [sys.executable, "-m", "logmarshal", "--bootstrap", bootstrap, "--json", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (argv, done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout)


def wait_for(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.1)  # a real cluster and real consumers: no clock of ours to advance


class Member:
    """A Marshaler and a Consumer of ``topic`` in a thread, committing what it is handed
    and noting (partition, offset, wall time) of each record."""

    def __init__(self, cluster: NetworkCluster, group: str, topic: str) -> None:
        self.marshaler = Marshaler(
            cluster,
            "c0",
            group,
            HB,
            fetch_wait=0.1,
            coordination_partitions=4,
            snapshot_interval=None,
        )
        self.consumer = Consumer(self.marshaler, topic, batch_size=10, fetch_wait=0.1)
        self.handed: list[tuple[int, int, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-admin-member", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.consumer.poll(0.1)
            now = time.time()
            for message in batch:
                with self._lock:
                    self.handed.append((message.partition, message.offset, now))
                self.consumer.commit(message)

    def seen(self, since: float = 0.0) -> dict[int, list[int]]:
        with self._lock:
            out: dict[int, list[int]] = {}
            for p, o, at in self.handed:
                if at >= since:
                    out.setdefault(p, []).append(o)
            return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        self.marshaler.close(timeout=10)


@pytest.fixture
def live(bootstrap: str) -> Iterator[tuple[NetworkCluster, Member, str, str]]:
    topic, group = f"adm-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with NetworkCluster(bootstrap, timeout=30.0) as cluster:
        cluster.create_topic(topic, PARTITIONS)
        now = int(time.time() * 1000)
        for p in range(PARTITIONS):
            cluster.produce(
                topic, p, [NewRecord(value=b"v%d" % i, timestamp=now) for i in range(RECORDS)]
            )
        member = Member(cluster, group, topic)
        try:
            yield cluster, member, topic, group
        finally:
            member.close()


def positions(cluster: NetworkCluster, group: str, topic: str) -> list[int | None]:
    view = read_coordination(cluster).view
    return [view and view.resume_offset(group, topic, p) for p in range(PARTITIONS)]


def test_list_describe_reset_dump_and_export_a_live_group(live, bootstrap: str, tmp_path) -> None:
    cluster, member, topic, group = live
    wait_for(
        "every record handed out and committed",
        lambda: positions(cluster, group, topic) == [RECORDS] * PARTITIONS,
    )
    client_id, instance_id = member.marshaler.identity
    assert member.seen() == {p: list(range(RECORDS)) for p in range(PARTITIONS)}

    # group list: one member holding all three partitions, not paused
    listed = {g["group"]: g for g in cli(bootstrap, "group", "list")}
    assert listed[group] == {
        "group": group,
        "members": [[client_id, instance_id]],
        "owned": PARTITIONS,
        "known": PARTITIONS,
        "paused": False,
        "paused_until_ms": None,
        "halted": None,
    }

    # group describe: the holder, positions, log ends and lag of each partition
    described = cli(bootstrap, "group", "describe", group)
    assert described["group"] == group and described["paused"] is False
    assert [(m["client_id"], m["instance_id"]) for m in described["members"]] == [
        (client_id, instance_id)
    ], described
    assert sorted((u["topic"], u["partition"]) for u in described["members"][0]["current"]) == [
        (topic, p) for p in range(PARTITIONS)
    ]
    rows = [
        (
            p["topic"],
            p["partition"],
            p["client_id"],
            p["instance_id"],
            p["freshness"],
            p["position"],
            p["earliest"],
            p["log_end"],
            p["lag"],
        )
        for p in described["partitions"]
    ]
    assert rows == [
        (topic, p, client_id, instance_id, "fresh", RECORDS, 0, RECORDS, 0)
        for p in range(PARTITIONS)
    ]

    # group reset --execute while the member holds every partition
    before_reset = time.time()
    reset = cli(
        bootstrap,
        "group",
        "reset",
        group,
        "--topic",
        topic,
        "--to-offset",
        str(TARGET),
        "--execute",
        "--pause-for",
        "5s",
    )
    assert reset["ok"] is True and reset["executed"] is True
    assert reset["partitions"] == [
        {"topic": topic, "partition": p, "old": RECORDS, "new": TARGET} for p in range(PARTITIONS)
    ]
    kinds = [(r["kind"], r["verdict"]) for r in reset["records"]]
    n_coord = cluster.partitions(COORDINATION_TOPIC)
    releases = [r for r in reset["records"] if r["kind"] == "release_group"]
    assert sorted(r["coord_partition"] for r in releases) == list(range(n_coord))
    assert all(v.startswith("accepted") for _, v in kinds), kinds
    pause_end = reset["paused_until_ms"] / 1000
    admin_id = reset["admin"]

    # while paused: nothing handed out (after the member had 2 HB to see the pause); after
    # it: the member claims again and resumes exactly at the new position
    wait_for(
        "the member to re-read from the new position",
        lambda: all(
            member.seen(since=before_reset).get(p, [])[-1:] == [RECORDS - 1]
            for p in range(PARTITIONS)
        ),
        timeout=45,
    )
    again = member.seen(since=before_reset)
    assert again == {p: list(range(TARGET, RECORDS)) for p in range(PARTITIONS)}, again
    with member._lock:
        during = [
            (p, o) for p, o, at in member.handed if before_reset + 2 * HB + 1.0 <= at < pause_end
        ]
    assert during == []
    wait_for(
        "the positions back at the end",
        lambda: positions(cluster, group, topic) == [RECORDS] * PARTITIONS,
    )
    described = cli(bootstrap, "group", "describe", group)
    assert described["paused"] is False
    assert [(p["client_id"], p["position"], p["lag"]) for p in described["partitions"]] == [
        (client_id, RECORDS, 0)
    ] * PARTITIONS

    # coord dump: the group's records with the verdicts replay gave them
    dumped = subprocess.run(
        [
            sys.executable,
            "-m",
            "logmarshal",
            "--bootstrap",
            bootstrap,
            "--json",
            "coord",
            "dump",
            "--group",
            group,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dump = [json.loads(line) for line in dumped.stdout.splitlines()]
    assert {r["group"] for r in dump} == {group}
    assert all(r["verdict"] != "-" for r in dump)
    claims = [
        (r["client_id"], r["partition"], r["reason"])
        for r in dump
        if r["type"] == "claiming_partition" and r["verdict"] == "accepted"
    ]
    # each partition claimed twice by the member: at first, and again after the pause
    assert sorted(claims) == sorted([(client_id, p, "claimed") for p in range(PARTITIONS)] * 2)
    released = [r for r in dump if r["type"] == "release_group"]
    # the pause is one round of ReleaseGroup on every coordination partition, or two: when
    # the first round's LogAppendTime leaves less than 2·HB of the pause (the round landing
    # more than the default's extra second late, as under load, or the broker's clock ahead
    # of the admin's), the admin writes a second round with the expiry moved out
    # (logmarshal/admin/reset.py, "extending")
    rounds = Counter(r["cp"] for r in released)
    assert sorted(rounds) == list(range(n_coord))
    assert len(set(rounds.values())) == 1 and set(rounds.values()) <= {1, 2}, rounds
    assert all(r["verdict"] == "accepted" and r["client_id"] == admin_id[0] for r in released)
    admin_beats = sorted(
        (r["partition"], r["value"])
        for r in dump
        if r["type"] == "heartbeat" and r["client_id"] == admin_id[0]
    )
    assert admin_beats == [(p, TARGET - 1) for p in range(PARTITIONS)]  # last_offset: 9
    stamps = [r["timestamp_ms"] for r in dump]
    assert all(abs(s / 1000 - time.time()) < 600 for s in stamps)  # the broker's clock

    # coord export: every record of __marshal, per coordination partition
    out = tmp_path / "export"
    exported = cli(bootstrap, "coord", "export", "--out", str(out))
    assert exported["skipped_batches"] == 0
    bounds = [
        (
            cluster.earliest_offset(COORDINATION_TOPIC, cp),
            cluster.latest_offset(COORDINATION_TOPIC, cp),
        )
        for cp in range(n_coord)
    ]
    parts = sorted(exported["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == list(range(n_coord))
    # the member still heartbeats: the export's ends are at most today's
    for p, (earliest, latest) in zip(parts, bounds, strict=True):
        assert p["earliest"] == earliest and p["latest"] <= latest
        assert p["records"] == p["latest"] - p["earliest"]
    assert exported["records"] == sum(p["records"] for p in parts)
    import pyarrow.parquet as pq

    table_rows = 0
    group_keys = 0
    for path in sorted(Path(exported["path"]).rglob("*.parquet")):
        table = pq.read_table(path)
        table_rows += table.num_rows
        keys = table.column("key").to_pylist()
        group_keys += sum(1 for k in keys if k is not None and group.encode() in k)
    assert table_rows == exported["records"]
    assert group_keys >= len(dump)  # every dumped record of the group is in the export
