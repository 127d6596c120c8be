from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from logmarshal import EmbeddedCluster

from .logs import LogClock, Script, story


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session for every Spark test (starting one costs seconds)."""
    pytest.importorskip("pyspark")
    from logmarshal.audit.job import spark_session

    session = spark_session("local[2]", app_name="logmarshal-audit-tests")
    yield session
    session.stop()


@pytest.fixture
def story_cluster(tmp_path) -> Iterator[tuple[EmbeddedCluster, Script, dict]]:
    """An embedded cluster whose __marshal holds the scripted story (see logs.story)."""
    clock = LogClock()
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        cluster.create_topic("events", 3)
        script = Script(cluster=cluster, clock=clock)
        at = story(script)
        yield cluster, script, at
