from __future__ import annotations

from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as opened:
        yield opened
