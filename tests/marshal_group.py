"""A live Marshal group for tests that look at one from outside (Kafka's tools, the broker's
group view): one logmarshal Consumer reading a topic until the test ends."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import logmarshal


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "condition"):
    """``check()``'s first truthy result within ``timeout`` seconds (polled every 0.2 s)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def consuming_group(bootstrap: str, topic: str, group: str, records: int) -> Iterator[None]:
    """``records`` records in ``topic`` (2 partitions, created here), consumed (ALO) by
    member ``worker-1`` of Marshal group ``group`` until the block ends; entered once all
    were handed out."""
    cluster = logmarshal.connect(bootstrap=bootstrap)
    cluster.create_topic(topic, partitions=2)
    with logmarshal.Producer(cluster) as producer:
        for i in range(records):
            producer.send(topic, b"m%d" % i, partition=i % 2)
    stop = threading.Event()
    seen: list[int] = []
    marshaler = logmarshal.Marshaler(
        cluster, client_id="worker-1", group_id=group, heartbeat_interval=3.0
    )

    def run() -> None:
        with logmarshal.Consumer(marshaler, [topic], mode="alo") as consumer:
            while not stop.is_set():
                for message in consumer.poll(timeout=0.2):
                    seen.append(message.offset)
                    consumer.commit(message)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(seen) >= records, what="the Marshal group to consume")
        yield
    finally:
        stop.set()
        thread.join(30)
        marshaler.close()
        cluster.close()
