from __future__ import annotations

from collections.abc import Iterator

import pytest

from logmarshal import EmbeddedCluster
from logmarshal.clock import ManualClock

from .consumer_world import World, no_threads_left


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", maintenance_interval=0) as opened:
        yield opened


@pytest.fixture
def realtime(cluster) -> Iterator[World]:
    """Real clock, small HB: the background threads really run."""
    world = World(cluster, hb=0.3)
    yield world
    world.close()
    no_threads_left()


@pytest.fixture
def manual(tmp_path) -> Iterator[World]:
    """One ManualClock drives log-append time and every prediction; HB is 1 s of it."""
    clock = ManualClock()
    with EmbeddedCluster(tmp_path / "m", clock=clock.time_ms, maintenance_interval=0) as cluster:
        world = World(cluster, hb=1.0, clock=clock)
        yield world
        world.close()
    no_threads_left()
