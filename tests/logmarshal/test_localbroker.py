"""logmarshal.localbroker: the one way tests, benches and the process harness start the broker
as a process. It answers once started, keeps its port and data over a restart, stops cleanly
even when paused, and a broker that cannot start is one clear error with no process left."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from logmarshal import connect
from logmarshal.localbroker import BrokerStartError, LocalBroker
from storage import NewRecord


def _records(bootstrap: str, topic: str, produce: int = 0) -> int:
    with connect(bootstrap=bootstrap) as cluster:
        if produce:
            cluster.create_topic(topic, 1)
            cluster.produce(topic, 0, [NewRecord(value=b"v%d" % i, timestamp=1_000 + i) for i in range(produce)],
                            durable=True)  # fmt: skip
        return cluster.latest_offset(topic, 0)


def test_restart_keeps_the_port_and_the_data_and_stop_is_clean(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path, env={"LOCALBROKER_TEST": "given"})
    with broker:
        first = broker.bootstrap
        environ = Path(f"/proc/{broker.pid}/environ")
        if environ.exists():  # the variables given are the broker's
            assert b"LOCALBROKER_TEST=given\0" in environ.read_bytes()
        assert broker.port > 0 and broker.address == ("127.0.0.1", broker.port)
        assert broker.first_line() == f"listening on {first}"
        assert _records(first, "t", produce=5) == 5
        pid = broker.pid
        broker.kill()
        assert broker.pid is None and broker.proc is not None and broker.proc.returncode == -9
        broker.start()
        assert broker.bootstrap == first and broker.pid not in (None, pid)
        assert _records(first, "t") == 5
        assert (tmp_path / "data").is_dir()  # the default data directory
        broker.signal(signal.SIGSTOP)  # stop() must wake it to let it shut down
        assert broker.stop(timeout=20) == 0
    assert broker.pid is None
    assert "broker stopped" in broker.output()  # its stderr, kept in a file


def test_a_broker_that_cannot_start_is_one_error_and_no_process(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = LocalBroker(tmp_path, port=taken.getsockname()[1], data_dir=tmp_path / "d")
        with pytest.raises(BrokerStartError, match=r"exited: (.|\n)*cannot listen"):
            broker.start()
    assert broker.proc is not None and broker.proc.poll() == 1


def test_a_started_broker_as_a_context_manager_is_stopped_at_its_end(tmp_path) -> None:
    """``with LocalBroker(d).start() as b``: ``__enter__`` raised "is running" and left the
    process it had started running, stopped by nobody (an attack on the API)."""
    broker = LocalBroker(tmp_path / "b")
    try:
        with broker.start() as running:
            assert running is broker
            pid = broker.pid
            assert pid is not None
        assert broker.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        broker.stop()  # (stops it by its pid whatever failed above)
