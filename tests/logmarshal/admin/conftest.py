from __future__ import annotations

from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster, NewRecord
from tests.logmarshal.audit.logs import LogClock, Script

BASE = 1_700_000_000_000
TOPIC = "events"


@pytest.fixture
def scripted(tmp_path) -> Iterator[tuple[EmbeddedCluster, Script]]:
    """An embedded cluster with log time under the test's control, ``events`` (3 partitions,
    50 records each, stamped 1 s before the script starts) and an empty ``__marshal``."""
    clock = LogClock(BASE)
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        cluster.create_topic(TOPIC, 3)
        for p in range(3):
            cluster.produce(
                TOPIC, p, [NewRecord(value=b"%d" % i, timestamp=BASE - 1000) for i in range(50)]
            )
        yield cluster, Script(cluster=cluster, clock=clock, base_ms=BASE)
