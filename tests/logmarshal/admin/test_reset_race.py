"""The reset race (docs/protocol-notes.md): a live AMO holder reserves more between the moment the
admin read the group's position and the moment its ReleaseGroup lands.

A relative target (``--to-current``, ``--shift-by``) must be taken from the world after the
pause landed, or the holder's last reservation is rewound and handed out twice. The holder
is a real :class:`~logmarshal.consumer.Consumer` (AMO) on an embedded cluster; the test
polls it itself. AMO reserves only when a poll asks, one window ahead (here one batch), so
its progress lands exactly where the test puts it: after the admin's read, before its
ReleaseGroup. Nothing sleeps: every wait is for something that must happen, bounded in time.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from logmarshal.admin import Target, execute, new_admin, plan_reset, read_coordination
from logmarshal.cli import context as cli_context
from logmarshal.cli import group as cli_group
from logmarshal.cli.main import main
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler
from rationalizer import Effect

TOPIC = "events"
KEY = (TOPIC, 0)
HB = 0.3
PAUSE_MS = 1500
BATCH = 10
RECORDS = 300


class AmoHolder:
    """One AMO consumer of group ``g`` whose polls the test makes, recording every offset
    it was handed (in order, across the reset)."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.marshaler = Marshaler(
            cluster,
            "c1",
            "g",
            HB,
            fetch_wait=0.05,
            coordination_partitions=4,
            rng=random.Random("c1"),
        )
        # A window of one batch: each reservation is exactly the batch the test then takes,
        # so the figures below are what the holder reserved (AMO windows run ahead otherwise).
        self.consumer = Consumer(
            self.marshaler,
            TOPIC,
            mode="amo",
            batch_size=BATCH,
            max_reserved=BATCH,
            rng=random.Random("c1/amo"),
        )
        self.handed: list[int] = []

    def take(self, count: int, timeout: float = 15.0) -> list[int]:
        """Poll until ``count`` more offsets were handed out; returns them."""
        got: list[int] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"handed {len(got)} of {count} offsets within {timeout} s")
            got += [m.offset for m in self.consumer.poll(0.1)]
        self.handed += got
        return got

    def close(self) -> None:
        self.consumer.close()
        self.marshaler.close(timeout=5)


@pytest.fixture
def holder(tmp_path) -> Iterator[AmoHolder]:
    """``events`` (1 partition, 300 records) consumed by one AMO holder that has handed out
    0..29 and reserved 30..39, the window its last poll asked for (four reservations of 10)."""
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 1)
        now = int(time.time() * 1000)
        cluster.produce(TOPIC, 0, [NewRecord(value=b"m", timestamp=now)] * RECORDS)
        member = AmoHolder(cluster)
        try:
            assert member.take(30) == list(range(30))
            settled_position(member)
            yield member
        finally:
            member.close()


def logged_position(cluster: EmbeddedCluster) -> int | None:
    """The group's position (next offset to consume) as a fresh replay of the log shows it."""
    view = read_coordination(cluster).view
    assert view is not None
    return view.resume_offset("g", *KEY)


def settled_position(holder: AmoHolder, timeout: float = 15.0) -> int:
    """The log's position once the window the holder's last poll asked for has landed: one
    batch past what it handed out (its ``max_reserved``). Waits for it, bounded."""
    want = holder.handed[-1] + 1 + BATCH
    deadline = time.monotonic() + timeout
    while (seen := logged_position(holder.cluster)) != want:
        if time.monotonic() > deadline:
            raise AssertionError(f"position {seen}, not {want}, within {timeout} s")
        time.sleep(0.01)  # not polling: a poll would hand the landed window out
    return want


def progress_before_the_pause(holder: AmoHolder) -> int:
    """The holder hands out 30 more offsets (reserving as it goes) and its next window lands;
    returns that reservation's end + 1, checked in the log: the position an operator asking
    for "current" means."""
    before = holder.handed[-1] + 1
    got = holder.take(30)
    assert got == list(range(before, before + 30)), got
    return settled_position(holder)


def after_the_pause(holder: AmoHolder, pause_until_ms: int) -> list[int]:
    """Offsets handed out once the pause is over (the holder claims the partition again).

    The holder's own replay must first have applied what the admin wrote: until it sees the
    ReleaseGroup it still holds the partition by its replay and its lease (< 2·HB), and a
    poll rightly hands out the window it reserved before the pause (60..69; the reset
    counts it as consumed, so it is never handed out again). On a loaded machine that
    replay thread can still be waiting for a CPU when the test's next poll runs."""
    assert holder.marshaler.wait_caught_up(15), "the holder's replay did not reach the reset"
    wait = max(0.0, pause_until_ms / 1000 - time.time())
    return holder.take(20, timeout=wait + 15)


def assert_no_repeats(holder: AmoHolder) -> None:
    twice = sorted(o for o, n in Counter(holder.handed).items() if n > 1)
    assert twice == [], f"{len(twice)} offsets handed out twice: {twice[:5]}..{twice[-5:]}"


@pytest.mark.parametrize(("target", "shift"), [(Target("current"), 0), (Target("shift", 5), 5)])
def test_relative_reset_counts_what_the_holder_reserved_before_the_pause(
    holder: AmoHolder, target: Target, shift: int
) -> None:
    """Library path: the admin reads and plans, the holder moves on, then ``execute``."""
    cluster = holder.cluster
    state = read_coordination(cluster)
    planned = state.view.resume_offset("g", *KEY)  # type: ignore[union-attr]
    assert planned == 40  # 0..29 handed out, 30..39 reserved by the last poll
    plan = plan_reset("g", [KEY], {KEY: planned}, {KEY: (0, RECORDS)}, target)
    assert [(r.current, r.new) for r in plan.rows] == [(40, 40 + shift)]  # as of the read

    end = progress_before_the_pause(holder)  # 70: it handed out 30..59 and reserved 60..69

    result = execute(
        cluster, state, plan, admin=new_admin("admin@test", random.Random(3)), pause_ms=PAUSE_MS
    )
    assert result.ok, [w.describe_verdict() for w in result.rejected]
    [position] = [w for w in result.written if w.kind == "position"]
    assert position.verdict is not None and position.verdict.effect is Effect.POSITION_SET

    resumed = after_the_pause(holder, result.pause_until_ms)
    assert_no_repeats(holder)
    assert resumed[0] == end + shift, resumed
    # the figures the execution reports are those it wrote: as of the pause
    assert [(r.current, r.new) for r in result.rows] == [(end, end + shift)]


class _SharedCluster:
    """The test's open cluster as the CLI's connection: the embedded directory is locked by
    the live holder's cluster, and the CLI must not close it when it exits."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("flags", "shift", "as_json"),
    [(["--to-current"], 0, True), (["--shift-by", "5"], 5, False)],
)
def test_cli_relative_reset_counts_what_the_holder_reserved_before_the_pause(
    holder: AmoHolder,
    monkeypatch,
    capsys,
    tmp_path,
    flags: list[str],
    shift: int,
    as_json: bool,
) -> None:
    """CLI path: ``group reset`` reads the position; the holder moves on right before the
    CLI writes its ReleaseGroup (the injection wraps the CLI's call of ``execute``)."""
    cluster = holder.cluster
    monkeypatch.setattr(cli_context, "connect", lambda *a, **k: _SharedCluster(cluster))
    real_execute: Callable[..., Any] = cli_group.execute
    ends: list[int] = []

    def holder_moves_first(*args: Any, **kwargs: Any) -> Any:
        ends.append(progress_before_the_pause(holder))
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(cli_group, "execute", holder_moves_first)
    capsys.readouterr()
    # an existing directory (the CLI refuses a missing one) that is never opened: connect is
    # replaced by the holder's cluster
    argv = ["--data-dir", str(tmp_path), *(["--json"] if as_json else []), "group", "reset", "g"]
    argv += ["--topic", TOPIC, *flags]
    rc = main([*argv, "--execute", "--pause-for", f"{PAUSE_MS}ms", "--client-id", "admin@test"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [end] = ends
    report = json.loads(out) if as_json else None
    until = report["paused_until_ms"] if report else time.time() * 1000 + PAUSE_MS

    resumed = after_the_pause(holder, until)
    assert_no_repeats(holder)
    assert resumed[0] == end + shift, resumed
    if report is None:
        assert out.splitlines()[0] == (
            f"{TOPIC}/0: {end} -> {end + shift} (planned 40 -> {40 + shift}; the group moved "
            "before the pause landed)"
        )
        assert "1 position(s) set, confirmed by replay" in out
        return
    assert report["ok"] is True
    assert report["partitions"] == [
        {"topic": TOPIC, "partition": 0, "old": end, "new": end + shift}
    ]
    assert report["planned"] == [{"topic": TOPIC, "partition": 0, "old": 40, "new": 40 + shift}]
