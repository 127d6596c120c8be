"""The restart bug (docs/simulation.md, `--without-restart-fix`): AMO restart recovery handed the same messages out twice.

The new instance read its resume position from the replay *before* its RESTART_TAKEOVER
heartbeat landed; the old instance, fresh and not fenced yet, reserved and handed out a batch
in that window; the new instance then reserved the same range again (a ClaimingMessages equal
to ``claimed_through`` is accepted) and handed it out again. Forced here: the new instance's
takeover heartbeat waits until the old instance has handed out its next batch.

Since protocol version 4 the log refuses that takeover (its position is behind the old
instance's reservation: PROTOCOL.md property a). The new instance then tries again with the
position its replay shows at the refusal (issue 33, item 5: ``claims.retake``), takes the
partition over there and fences the old one: what the old one reserved and never handed out
is lost, as AMO allows, and nothing is handed out twice.

The old instance's reservations run ahead of its polls by one batch (``max_reserved``): what
it reserves in the window is the batch after the one it hands out there.
"""

from __future__ import annotations

import threading
from typing import Any

from logmarshal.consumer import Consumer
from logmarshal.marshaler import COORDINATION_TOPIC, Marshaler
from rationalizer import Heartbeat, MemberHeartbeat, Reason, Verdict, decode

from ..consumer_world import TOPIC, drain, produce, wait_until


class BeforeFirstHeartbeat:
    """The shared cluster, except that ``hook`` runs once, just before this member's first
    heartbeat reaches the log (the restart's takeover: since protocol version 7 a
    MemberHeartbeat of one entry naming the tenure it takes over, property h)."""

    def __init__(self, cluster: Any, hook: Any) -> None:
        self._cluster = cluster
        self._hook = hook
        self._done = threading.Event()
        self.landed: tuple[int, int] | None = None  # (coordination partition, offset) of it

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def produce(self, topic: str, partition: int, records: Any, **kw: Any) -> Any:
        if (
            topic == COORDINATION_TOPIC
            and not self._done.is_set()
            and isinstance(decode(records[0].key, records[0].value), Heartbeat | MemberHeartbeat)
        ):
            self._done.set()
            self._hook()
            result = self._cluster.produce(topic, partition, records, **kw)
            self.landed = (partition, result.base_offset)
            return result
        return self._cluster.produce(topic, partition, records, **kw)


def test_amo_restart_recovery_never_hands_out_what_the_old_instance_did(manual) -> None:
    manual.cluster.create_topic(TOPIC, 1)
    produce(manual.cluster, 0, 300)
    old = manual.consumer("a", mode="amo", batch_size=100, max_reserved=100)
    first = drain(old, 100, commit=False, max_records=100)
    assert [m.offset for m in first] == list(range(100))
    # and 100..199 reserved ahead: the new instance reads 200 as its resume point
    wait_until(lambda: _reserved(old) == 199, what="the reservation of the next batch")

    in_window: list[int] = []

    def old_instance_hands_out_a_batch() -> None:  # between the new one's read and its write
        in_window.extend(m.offset for m in drain(old, 100, commit=False, max_records=100))
        wait_until(lambda: _reserved(old) == 299, what="the reservation behind it")

    wrapped = BeforeFirstHeartbeat(manual.cluster, old_instance_hands_out_a_batch)
    marshaler = Marshaler(wrapped, "a", "g", manual.hb, fetch_wait=0.05, clock=manual.clock)
    manual.marshalers.append(marshaler)
    new = Consumer(marshaler, TOPIC, mode="amo", batch_size=100)
    manual.consumers.append(new)
    wait_until(
        lambda: _takeover_verdict(marshaler, wrapped) is not None, what="the takeover's verdict"
    )
    assert in_window == list(range(100, 200))
    assert _takeover_verdict(marshaler, wrapped).reason is Reason.NOT_HOLDER  # 199 < 299: refused
    # tried again at once with 299, the position the replay shows: taken over, old fenced
    wait_until(lambda: new.claims() == [(TOPIC, 0)], what="the new instance's takeover")
    wait_until(lambda: old.fenced, what="the old instance to see it was fenced")
    state = marshaler.partition_state(TOPIC, 0)
    assert state is not None and state.holder == ("a", marshaler.instance_id)
    assert state.last_offset == 299  # the retry carried the old instance's reservation
    produce(manual.cluster, 0, 100)
    rest = [m.offset for m in drain(new, 100, commit=False)]
    assert rest == list(range(300, 400))  # 200..299: reserved by the old one, lost (AMO)
    handed = [m.offset for m in first] + in_window + rest
    assert len(handed) == len(set(handed)), "an offset was handed out twice"


def _reserved(consumer: Consumer) -> int | None:
    """The log's ``claimed_through`` of the partition, as ``consumer``'s replay shows it."""
    state = consumer.marshaler.partition_state(TOPIC, 0)
    return None if state is None else state.claimed_through


def _takeover_verdict(marshaler: Marshaler, wrapped: BeforeFirstHeartbeat) -> Verdict | None:
    """The verdict of the new instance's first heartbeat (its takeover), once replayed (a
    MemberHeartbeat's: its one entry's)."""
    if wrapped.landed is None:
        return None
    cp, offset = wrapped.landed
    world = marshaler.worlds()[cp]
    v = world.verdict(offset) if world.applied_through >= offset else None
    return v.entries[0] if v is not None and len(v.entries) == 1 else v
