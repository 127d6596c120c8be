"""Issue 32, item 4: a coordination log that goes back in time, on logmarshal's own broker.

The broker is stopped, the segment of ``__marshal/0`` is cut back below records the live
member applied (as an unclean leader election on Kafka, or a disk restored from an older
copy, loses acknowledged records), and the broker restarts on the same data and port.
Member ``a`` replayed across the cut and held ``events/0`` in AMO; member ``c`` starts after
it, on the log as it now is (where ``events/0`` is unheld at the position a member ``p``
released before ``a`` came). Real Consumers in threads, each with its own network
connection; bounded waits.

- With the detection: ``a``'s replay sees the log end below what it applied, logs one
  error line naming the partition, the offsets and the recovery path, counts
  ``logmarshal_marshaler_halts_total``, and ``a`` hands out nothing of ``events/0`` after
  that: no offset is handed out by two members after the rewind.
- Without it (``Marshaler(_check_rewind=False)``, the switch only this test uses): ``a``
  keeps acting on its old world (its replay takes every reused offset below what it
  applied as a re-delivery) while ``c`` claims the partition in the log as it now is: the
  two hand out the same offsets.

What no member can see: ``c`` starts on a log that is consistent in itself, so it resumes
where the log now says and hands out again what ``a`` handed out before the rewind (those
acknowledged reservations are gone). That is the loss the operator repairs with the
recovery path (docs/bounded-log.md, "A coordination log that loses records").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logmarshal.localbroker import LocalBroker
from logmarshal.metrics import MarshalerMetrics
from logmarshal.network import NetworkCluster
from scenarios.common import wait_until
from storage import NewRecord
from storage._records import TimestampType, encode_batch
from tests.rewinding import PollingMember, cut_segment, write_until

pytestmark = pytest.mark.slow

TOPIC = "events"
HB = 0.5


def _member(
    address: str, name: str, pause: float, *, check: bool, metrics: MarshalerMetrics | None = None
) -> PollingMember:
    return PollingMember(address, name, pause, check=check, hb=HB, metrics=metrics)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    with LocalBroker(tmp_path) as b:  # restarts on the same port
        yield b


def _run(broker: LocalBroker, *, check: bool, caplog: pytest.LogCaptureFixture) -> dict:
    """The schedule of the module docstring; returns what it measured."""
    address = broker.bootstrap
    admin = NetworkCluster(address)
    members: list[PollingMember] = []
    try:
        admin.create_topic(TOPIC, partitions=1)
        for start in range(0, 20_000, 1000):
            now = int(time.time() * 1000)
            admin.produce(
                TOPIC, 0, [NewRecord(value=b"%d" % (start + i), timestamp=now) for i in range(1000)]
            )
        # p consumes a while and closes: its release is the position the rewound log keeps
        p = _member(address, "p", 0.0, check=check)
        members.append(p)
        assert wait_until(lambda: len(p.handed) >= 300, 30)
        p.close()
        members.remove(p)
        cut = admin.latest_offset("__marshal", 0)
        # a (slow: one batch a poll, 0.2 s apart) holds events/0 past the cut
        metrics = MarshalerMetrics()
        a = _member(address, "a", 0.2, check=check, metrics=metrics)
        members.append(a)
        assert wait_until(lambda: admin.latest_offset("__marshal", 0) >= cut + 80, 60)
        applied = a.marshaler.replay_offsets()[0]
        assert applied > cut + 40, "a must have applied records the cut removes"
        caplog.clear()
        broker.stop(timeout=15)
        assert cut_segment(broker.data_dir / "__marshal-0", cut) == cut
        broker.start()
        restarted = time.monotonic()
        # below what a applied: the log went back (a's writes librdkafka retried across the
        # restart may land before this asks: one CI run saw 5 of them, so not == cut)
        assert cut <= admin.latest_offset("__marshal", 0) < applied
        # c starts on the log as it now is, consuming fast
        c = _member(address, "c", 0.0, check=check)
        members.append(c)
        wait_until(lambda: len(c.offsets()) >= 800, 15)
        if check:
            time.sleep(2 * HB)  # a last window for a to show whether it still hands out
        else:
            # a (slow, and its writes retried across the restart) hands out again only once
            # its next reservation lands: under load that came after the fixed window above
            # and the repeat was missed. The bug shows once both hand out one offset; a
            # correct member never does, and the test then fails after this bounded wait.
            wait_until(lambda: bool(a.offsets(restarted) & c.offsets()), 20)
        halts = a.marshaler.halts()
        return {
            "cut": cut,
            "applied": applied,
            "halts": halts,
            "a_before": a.offsets() - a.offsets(restarted),
            "a_after": a.offsets(restarted),
            "a_handed": list(a.handed),
            "a_halted_at": list(a.halted_at),
            "c": c.offsets(),
            "errors": [r for r in caplog.records if r.levelno >= logging.ERROR],
            "metric": metrics.registry.get_sample_value(
                "logmarshal_marshaler_halts_total",
                {"group": "g", "client_id": "a", "coordination_partition": "0", "why": "rewound"},
            ),
        }
    finally:
        for m in members:
            m.close()
        admin.close()


def test_a_member_that_replayed_across_a_rewind_halts(broker, caplog) -> None:
    caplog.set_level(logging.WARNING)
    got = _run(broker, check=True, caplog=caplog)
    halt = got["halts"].get(0)
    assert halt is not None and halt.why == "rewound", got["halts"]
    assert got["cut"] <= halt.after < halt.before
    lines = [r.getMessage() for r in got["errors"] if "went back" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in got["errors"]]
    assert f"__marshal/0 went back: the replay applied up to offset {halt.before - 1}" in lines[0]
    # the log end below the replay, or (when a write's answer came after the restart) a
    # record of a's own that the log acknowledged and no longer holds
    assert f"the log now ends at {got['cut']}" in lines[0] or "is not there" in lines[0]
    assert "group reset" in lines[0] and "restart" in lines[0]
    assert got["metric"] == 1.0
    # a hands out nothing of events/0 once it halted; after the rewind no offset is handed
    # out by two members (c, which cannot see the rewind, hands out the log's view)
    assert len(got["a_halted_at"]) == 1
    # (a poll that returned just before the halt appends its records a moment later)
    late = [o for o, t in got["a_handed"] if t > got["a_halted_at"][0] + 0.2]
    assert late == [], late[:10]
    assert got["c"], "c must have consumed (it is the second member)"
    assert not (got["a_after"] & got["c"]), sorted(got["a_after"] & got["c"])[:10]
    assert len(got["a_after"]) <= 10 * 2, "a handed out more than its reserved window after it"


def test_without_the_check_members_act_on_the_rewound_log(broker, caplog) -> None:
    caplog.set_level(logging.WARNING)
    got = _run(broker, check=False, caplog=caplog)
    assert got["halts"] == {}
    assert got["metric"] is None
    twice = got["a_after"] & got["c"]
    assert len(twice) > 0, (len(got["a_after"]), len(got["c"]))


def _replace_tail(partition_dir: Path, offset: int, end: int) -> int:
    """Cut the newest segment back to ``offset`` and append other records from there up to
    ``end`` (one batch, log-append time now): the log went back and new records took the old
    offsets before anyone looked. Returns where it cut."""
    offset = cut_segment(partition_dir, offset)
    segment = max(partition_dir.glob("*.log"))
    now = int(time.time() * 1000)
    batch = encode_batch(
        [NewRecord(value=b"not what was applied", key=b"g", timestamp=now)] * (end - offset),
        base_offset=offset,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    with open(segment, "ab") as f:
        f.write(batch)
    return offset


def test_offsets_taken_again_before_the_replay_looked_are_seen(broker, caplog) -> None:
    """The log end is past the replay again when the broker comes back, so the log end
    tells nothing: ``a`` (holding ``events/0``, writing all the time) sees it because the
    record it applied last, read back after the fetch errors of the restart, or a record of
    its own, read back where the log acknowledged it, is not there any more."""
    caplog.set_level(logging.WARNING)
    address = broker.bootstrap
    admin = NetworkCluster(address)
    a = None
    try:
        admin.create_topic(TOPIC, partitions=1)
        now = int(time.time() * 1000)
        admin.produce(TOPIC, 0, [NewRecord(value=b"%d" % i, timestamp=now) for i in range(5000)])
        a = _member(address, "a", 0.1, check=True)
        assert wait_until(lambda: admin.latest_offset("__marshal", 0) >= 60, 60)
        caplog.clear()
        broker.stop(timeout=15)
        end = admin_end = a.marshaler.replay_offsets()[0]
        _replace_tail(broker.data_dir / "__marshal-0", end // 2, end + 50)
        # down long enough that the replay's fetch fails or is slow (the reader retries a
        # lost connection by itself: a restart faster than that is not seen; PROTOCOL.md)
        time.sleep(2.0)
        broker.start()
        admin_end = admin.latest_offset("__marshal", 0)
        assert admin_end == end + 50
        assert wait_until(lambda: 0 in a.marshaler.halts(), 20), "the rewind was not seen"
        halt = a.marshaler.halts()[0]
        assert halt.why == "rewound" and halt.after < halt.before <= end + 50
        lines = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR and "went back" in r.getMessage()
        ]
        assert len(lines) == 1, lines
        assert "is not there" in lines[0], lines[0]  # not the log end: it is past the replay
        # (the listener is called on the replay thread right after halts() shows the halt)
        assert wait_until(lambda: len(a.halted_at) == 1, 5), a.halted_at
        time.sleep(4 * HB)
        late = [o for o, t in a.handed if t > a.halted_at[0] + 0.2]
        assert late == [], late[:10]
        assert a.consumer.claims() == []
        # a's durable producer may have written records whose sequence numbers the log lost
        # (most runs): librdkafka then fails it for good, and the connection's next durable
        # writes go through a new one (before, every coordination write of the process
        # failed from then on); whether it was, the connection writes
        admin.create_topic("after", partitions=1)
        assert write_until(a.cluster, "after", 45) == 0, [r.getMessage() for r in caplog.records]
        failed = [r for r in caplog.records if "failed for good" in r.getMessage()]
        print(f"a's producer failed for good: {bool(failed)}")
    finally:
        if a is not None:
            a.close()
        admin.close()
