from __future__ import annotations

from collections.abc import Iterator

import pytest

from storage import DataDir, TopicConfig
from storage.broker import BrokerConfig, BrokerThread


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerThread]:
    """A broker on a free port with topics 't' (2 partitions) and 'lat' (LogAppendTime)."""
    data = tmp_path / "data"
    with DataDir(data) as d:
        d.create_topic("t", 2)
        d.create_topic("lat", 1, TopicConfig(timestamp_type="LogAppendTime"))
    with BrokerThread(BrokerConfig(data_dir=data, port=0, max_frame_bytes=8 << 20)) as running:
        yield running
