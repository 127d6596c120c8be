"""The replay's own ListOffsets (``network.fetch_client``, packed and read by hand) against
both brokers: a partition's log start and end as its leader says them, and a fetch below the
log start or past its end answered with both (Apache Kafka leaves them out of a Fetch answer
out of range: the replay asks ListOffsets at once). A client process never imports
kafka-python for it."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from logmarshal.errors import OffsetOutOfRange
from logmarshal.network import NetworkCluster
from storage import NewRecord


@pytest.fixture(params=["logmarshal", pytest.param("kafka", marks=pytest.mark.kafka)])
def bootstrap_of(request) -> str:
    """The bootstrap of logmarshal's broker (in this process) or of the session's Kafka."""
    if request.param == "kafka":
        return request.getfixturevalue("bootstrap")
    return request.getfixturevalue("broker").bootstrap


@pytest.fixture
def broker(tmp_path) -> Iterator[object]:
    from storage.broker import BrokerConfig, BrokerThread

    with BrokerThread(BrokerConfig(data_dir=tmp_path / "data", port=0)) as running:
        yield running


def _records(n: int) -> list[NewRecord]:
    return [NewRecord(value=b"v%d" % i, timestamp=int(time.time() * 1000)) for i in range(n)]


def test_bounds_and_out_of_range_fetches_name_the_log_start_and_end(bootstrap_of: str) -> None:
    topic = f"bounds-{uuid.uuid4().hex[:8]}"
    with NetworkCluster(bootstrap_of, timeout=30.0) as cluster:
        cluster.create_topic(topic, 3)
        cluster.produce(topic, 0, _records(10))
        cluster.produce(topic, 1, _records(3))
        assert cluster.delete_records(topic, {0: 4}) == {0: 4}
        assert cluster.log_bounds(topic, 0) == (4, 10)
        assert cluster.log_bounds(topic, 1) == (0, 3)
        assert cluster.log_bounds(topic, 2) == (0, 0)
        for offset in (2, 11):
            with pytest.raises(OffsetOutOfRange) as caught:
                cluster.fetch_batches(topic, 0, offset)
            assert (caught.value.log_start_offset, caught.value.log_end_offset) == (4, 10)
        assert cluster.fetch_batches(topic, 0, 4)  # in range: its batches


def test_a_client_process_does_not_import_kafka_python(bootstrap_of: str) -> None:
    """Its protocol classes are the broker's and the tests'; a client that imported them
    carried 18,000 more objects through every full collection (docs/performance.md)."""
    script = (
        "import sys\n"
        "from logmarshal.network import NetworkCluster\n"
        "from logmarshal.consumer import Consumer\n"
        "from logmarshal.marshaler import Marshaler\n"
        f"with NetworkCluster({bootstrap_of!r}, timeout=30.0) as c:\n"
        "    c.create_topic('t', 1)\n"
        "    print(c.log_bounds('t', 0))\n"
        "    m = Marshaler(c, 'g', 'm', 2.0)\n"
        "    m.wait_caught_up(30)\n"
        "    m.close()\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'kafka'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == ["(0, 0)", "[]"]
