"""Streams with exactly-once state on Apache Kafka, under SIGKILL and SIGSTOP: the word count
of ``tests/logmarshal/streams`` as member processes over the session's Kafka. Whatever a killed member
committed, and whatever a frozen member appends to the changelogs when it wakes, the stores end
with exactly the true counts (the same checks as on logmarshal's broker, tests/logmarshal/streams/test_app.py)."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from logmarshal import NewRecord, connect
from logmarshal.streams import App, StoreSpec, Topology
from logmarshal.streams.changelog import _replay, read_changelog, valid_commits
from logmarshal.streams.serde import string_deserializer
from logmarshal.streams.stores import SqliteStore
from tests.interop.test_network_cluster import check_a_call_refused_in_part
from tests.logmarshal.streams.test_app import (
    _commits,
    _spawn,
    _stop,
    _stopped,
    produce_lines,
    run_until,
    setup_topics,
    tables,
)
from tests.logmarshal.streams.test_bad_day import CountWords, damage_at_call

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

HB = 0.3


def _counted(cluster) -> int:
    return sum(sum(read_changelog(cluster, "wc", "counts", p)[0].values()) for p in (0, 1))


def _wait(cond, seconds: float, procs, outs: list[Path]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        assert all(p.poll() is None for p in procs), [
            o.read_text()[-2000:] for o in outs if o.exists()
        ]
        time.sleep(0.05)
    return False


def test_sigkilled_and_sigstopped_members_leave_exact_counts_on_kafka(kafka, tmp_path) -> None:
    bootstrap = kafka.bootstrap
    with connect(bootstrap=bootstrap) as cluster:
        setup_topics(cluster)
        cluster.create_topic("wc-counts-changelog", 2)
        truth = produce_lines(cluster, 0, 4000)
    total = sum(sum(c.values()) for c in truth.values())
    member = [sys.executable, "-m", "tests.logmarshal.streams.member", f"bootstrap={bootstrap}"]
    outs = [tmp_path / f"m{i}.out" for i in (1, 2, 3)]
    procs = []
    try:
        # m1 is killed with SIGKILL mid-stream
        procs.append(_spawn([*member, "m1", str(tmp_path / "s1")], outs[0]))
        assert _wait(lambda: _commits(outs[0], 2) >= 10, 90, procs, outs)
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        procs.pop(0)
        # m2 takes over and writes its changelogs before checking it still holds its tasks;
        # it stops itself (SIGSTOP) past its 10th commit, between the check and the write,
        # stays frozen past 2·HB while m3 takes over, then is thawed
        procs.append(_spawn([*member, "m2", str(tmp_path / "s2")], outs[1],
                            LM_STALE_WRITER="1", LM_FREEZE_AFTER="10"))  # fmt: skip
        assert _wait(lambda: _stopped(procs[0].pid), 90, procs, outs), "m2 did not stop itself"
        assert _commits(outs[1], 2) >= 10
        frozen_at = time.monotonic()
        procs.append(_spawn([*member, "m3", str(tmp_path / "s3")], outs[2]))
        assert _wait(lambda: _commits(outs[2], 2) >= 3, 90, procs, outs)
        time.sleep(max(0.0, frozen_at + 2 * HB + 0.2 - time.monotonic()))
        os.killpg(procs[0].pid, signal.SIGCONT)
        with connect(bootstrap=bootstrap) as cluster:
            assert _counted(cluster) < total, "the faults must land mid-stream"
            assert _wait(lambda: _counted(cluster) >= total, 120, procs, outs), _counted(cluster)
            time.sleep(4 * HB)  # anything the thawed member still appends lands now
    finally:
        for proc in procs:
            _stop(proc)
    with connect(bootstrap=bootstrap) as cluster:
        assert tables(cluster) == truth
        stale = 0
        for p in (0, 1):
            found = _replay(cluster, "wc-counts-changelog", p, lambda k, v: None, 0,
                            cluster.latest_offset("wc-counts-changelog", p))  # fmt: skip
            stale += len(found.commits) - len(valid_commits(found.commits, found.fences))
    # each stale write is reported (Fenced): a stale commit, or records no marker of theirs
    # follows (the marker goes alone once its records are stored, and the write saw the
    # newer owner's fence first)
    reported = outs[1].read_text().count("stale commit written")
    assert stale <= reported
    assert reported >= 1, "the thawed member must have written"


def test_a_call_refused_in_part_is_stored_in_part_on_kafka(kafka) -> None:
    """Apache Kafka stores the batches after a refused one too, idempotent producer or not:
    a streams commit's marker must not share a produce call with its records there either."""
    with connect(bootstrap=kafka.bootstrap) as cluster:
        check_a_call_refused_in_part(cluster, f"partly-{time.time_ns()}")


def test_a_store_found_damaged_is_restored_and_its_inputs_read_again_on_kafka(
    kafka, tmp_path, monkeypatch
) -> None:
    """The running App restores a task whose store meets damage at a commit's flush, and
    moves its input back to where the restored state ends: over the network consumer (whose
    reads of the old offsets may still be in flight), every line is counted once."""

    name = f"dmg-{uuid.uuid4().hex[:8]}"
    lines = [f"a b{i % 7}" for i in range(2000)]
    # the first commit's flush meets the damage
    damaged = damage_at_call(monkeypatch, SqliteStore, "_put_many", 1)
    CountWords.fail = False
    with connect(bootstrap=kafka.bootstrap) as cluster:
        cluster.create_topic(name, 1)
        now = int(time.time() * 1000)
        cluster.produce(name, 0, [NewRecord(x.encode(), timestamp=now) for x in lines[:1000]])
        topology = Topology().add_source("s", name, value_deserializer=string_deserializer)
        topology = topology.add_processor("p", CountWords, "s")
        app = App(
            cluster,
            name,
            topology.add_state_store(StoreSpec("n", "sqlite"), "p"),
            client_id="x",
            heartbeat_interval=HB,
            state_dir=tmp_path,
            commit_interval=0.05,
        )
        fed = False

        def progress() -> bool:
            nonlocal fed
            if not fed and damaged["left"] <= 0:
                more = [NewRecord(x.encode(), timestamp=now) for x in lines[1000:]]
                cluster.produce(name, 0, more)
                fed = True
            return fed and read_changelog(cluster, name, "n", 0)[1] == {name: 2000}

        run_until(app, progress, timeout=90)
        counts = {
            "a": 2000,
            **{f"b{j}": sum(1 for i in range(2000) if i % 7 == j) for j in range(7)},
        }
        assert read_changelog(cluster, name, "n", 0) == (counts, {name: 2000})
