from __future__ import annotations

from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster

from .logs import LogClock, Script, story


@pytest.fixture
def story_cluster(tmp_path) -> Iterator[tuple[EmbeddedCluster, Script, dict]]:
    """An embedded cluster whose __marshal holds the scripted story (see logs.story)."""
    clock = LogClock()
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        cluster.create_topic("events", 3)
        script = Script(cluster=cluster, clock=clock)
        at = story(script)
        yield cluster, script, at


@pytest.fixture
def rebalance_cluster(tmp_path) -> Iterator[tuple[EmbeddedCluster, Script]]:
    """An embedded cluster whose __marshal holds the rebalancing story (logs.RebalanceStory:
    joins, a clean leave, a crash, partition growth) plus a protocol version 1 group."""
    from .logs import RebalanceStory

    clock = LogClock()
    with EmbeddedCluster(tmp_path / "data", clock=clock, maintenance_interval=0) as cluster:
        cluster.create_topic("events", 4)
        script = Script(cluster=cluster, clock=clock)
        story = RebalanceStory(script)
        story.run(100)
        script.claim("old:1", 0, 100, group="legacy")  # no membership: plain claims
        script.release("old:1", 0, 7, 200, group="legacy")
        script.claim("new:1", 0, 250, group="legacy")
        story.run(story.END)
        yield cluster, script
