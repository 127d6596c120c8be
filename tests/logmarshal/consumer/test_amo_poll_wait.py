"""AMO: a poll waits past its timeout only for a verdict that is due.

A poll with nothing to hand out at its time waits up to ``verdict_timeout`` more while a
reservation the log holds awaits our heartbeat's confirmation (``MemberCore.
reserved_waiting``). It waited whenever reserved records were buffered, and since
reservations run ahead of the fetches they nearly always are: with the lease lapsed (our
heartbeats not landing) every ``poll(0.1)`` took ``verdict_timeout`` more (1.1 s each by
default), though no verdict was coming that would let it hand anything out.
"""

from __future__ import annotations

import time

from logmarshal._faults import FaultPlan, FaultyCluster
from logmarshal.consumer import Consumer
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler

from ..consumer_world import TOPIC, produce, wait_until

VERDICT_TIMEOUT = 3.0


def test_a_poll_whose_lease_lapsed_returns_at_its_time(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 2000)
    faulty = FaultyCluster(manual.cluster, FaultPlan())
    marshaler = Marshaler(faulty, "a", "g", manual.hb, fetch_wait=0.05, clock=manual.clock)
    manual.marshalers.append(marshaler)
    consumer = Consumer(
        marshaler, TOPIC, mode="amo", batch_size=100, verdict_timeout=VERDICT_TIMEOUT
    )
    manual.consumers.append(consumer)
    wait_until(lambda: consumer.claims() == [(TOPIC, 0)], what="the claim")
    batch: list = []
    deadline = time.monotonic() + 10
    while not batch and time.monotonic() < deadline:
        batch = consumer.poll(0.5)
    assert [m.offset for m in batch] == list(range(100))
    core = consumer._core
    held = core._st.held[(TOPIC, 0)]
    # reserved ahead and confirmed, more of it buffered: a verdict is due for none of it
    wait_until(lambda: held.buffer and held.confirmed_through >= held.claimed_through > 99)
    faulty.plan = FaultPlan(produce_fail=1.0, topics={COORDINATION_TOPIC})
    manual.clock.advance(10 * manual.hb)  # our heartbeats fail: the lease lapses
    assert not core.may_hand_out(TOPIC, 0, int(manual.clock.time() * 1000))
    for _ in range(2):
        start = time.monotonic()
        assert consumer.poll(0.1) == []
        # (the old rule waited VERDICT_TIMEOUT more, each time)
        assert time.monotonic() - start < VERDICT_TIMEOUT / 2
