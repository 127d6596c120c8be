"""The consumer tests' world: a cluster, a group of members, and waits bounded in time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from logmarshal import EmbeddedCluster, Message, NewRecord
from logmarshal.consumer import Consumer
from logmarshal.marshaler import Marshaler

TOPIC = "events"


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.01)


def produce(cluster: EmbeddedCluster, partition: int, count: int) -> None:
    cluster.produce(
        TOPIC,
        partition,
        [NewRecord(value=b"%d-%d" % (partition, i), timestamp=0) for i in range(count)],
    )


def wait_passes(consumer: Consumer, passes: int = 3) -> None:
    """Until the consumer's driver has stepped its core ``passes`` more times: what it would
    decide at the current (manual) time, it has decided by then."""
    target = consumer._ticks + passes
    wait_until(lambda: consumer._ticks >= target, what=f"{passes} driver passes")


def drain(
    consumer: Consumer,
    count: int,
    *,
    commit: bool = True,
    timeout: float = 5.0,
    max_records: int | None = None,
) -> list[Message]:
    """Poll until ``count`` messages were handed out (bounded by ``timeout``)."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {count} messages within {timeout} s")
        for message in consumer.poll(0.05, max_records=max_records or count - len(out)):
            out.append(message)
            if commit:
                consumer.commit(message)
    return out


class World:
    """The test's cluster plus every Marshaler/Consumer it makes; teardown stops them all."""

    def __init__(self, cluster: EmbeddedCluster, hb: float, clock=None) -> None:
        self.cluster = cluster
        self.hb = hb
        self.clock = clock
        self.marshalers: list[Marshaler] = []
        self.consumers: list[Consumer] = []

    def marshaler(self, client_id: str, cls: type[Marshaler] = Marshaler) -> Marshaler:
        kwargs = {} if self.clock is None else {"clock": self.clock}
        marshaler = cls(self.cluster, client_id, "g", self.hb, fetch_wait=0.05, **kwargs)
        self.marshalers.append(marshaler)
        return marshaler

    def consumer(self, client_id: str | Marshaler, **kwargs) -> Consumer:
        marshaler = client_id if isinstance(client_id, Marshaler) else self.marshaler(client_id)
        consumer = Consumer(marshaler, TOPIC, **kwargs)
        self.consumers.append(consumer)
        return consumer

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()
        for marshaler in self.marshalers:
            marshaler.close()


def no_threads_left() -> None:
    left = [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("logmarshal-tail", "logmarshal-consumer"))
    ]
    assert not left, left


def holders(marshaler: Marshaler, partitions: int) -> dict[int, tuple[str, str] | None]:
    return {p: marshaler.holder(TOPIC, p) for p in range(partitions)}


# -- claiming ----------------------------------------------------------------------------------
