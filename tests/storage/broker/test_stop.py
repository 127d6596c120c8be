"""Stopping a broker ends every connection even while its clients keep talking.

A cancelled connection used to go on serving when its cancellation was lost (before Python
3.12, ``asyncio.wait_for`` returns a result that lands in the same loop iteration as the
cancel, and drops the cancel): the broker thread then outlived ``BrokerThread.stop()`` for as
long as a client talked, up to ``idle_timeout`` after, and a later test's check for leftover
``logmarshal-`` threads found it.
"""

from __future__ import annotations

import contextlib
import threading
import time

from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from storage.broker import BrokerConfig, BrokerThread

from .helpers import RawClient

#: clients sending requests back to back; with 4, nine stops in ten lost a cancellation
TALKERS = 4


def _talk(address: tuple[str, int], answered: threading.Barrier, quiet: threading.Event) -> None:
    """ApiVersions requests back to back on one connection until ``quiet`` or closed."""
    with contextlib.suppress(OSError, ConnectionError), RawClient(address) as client:
        frame = client.request_bytes(ApiVersionsRequest[0]())
        client.send_raw(frame)
        client.recv_frame()
        answered.wait(10)
        while not quiet.is_set():
            client.send_raw(frame)
            client.recv_frame()


def test_stop_ends_the_broker_thread_while_clients_keep_talking(tmp_path) -> None:
    for attempt in range(3):
        broker = BrokerThread(BrokerConfig(data_dir=tmp_path / f"d{attempt}", port=0)).start()
        assert broker.address is not None
        address = broker.address
        quiet = threading.Event()
        answered = threading.Barrier(TALKERS + 1)

        talkers = [
            threading.Thread(target=_talk, args=(address, answered, quiet), name=f"talker-{i}")
            for i in range(TALKERS)
        ]
        for t in talkers:
            t.start()
        try:
            answered.wait(10)
            started = time.monotonic()
            broker.stop()
            took = time.monotonic() - started
            assert not broker._thread.is_alive(), f"attempt {attempt}: still serving after stop()"
            assert took < 10, f"attempt {attempt}: stop() took {took:.1f} s"
        finally:
            quiet.set()
            for t in talkers:
                t.join(30)
            broker.stop()
