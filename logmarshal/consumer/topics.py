"""What a consumer claims, read from the cluster: (topic, partitions) of each of its topics
and tasks. A task has as many partitions as its sources (the fewest, if they differ:
partition p is a task only if every source has one)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..cluster import Cluster
from ..errors import UnknownTopic

__all__ = ["log_ends", "read_subscription", "tasks_and_sources"]

log = logging.getLogger(__name__)


def _sources(tasks: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(t for sources in tasks.values() for t in sources)


def tasks_and_sources(tasks: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """A consumer's tasks and their sources: names no pattern of it or of anyone's takes."""
    return (*tasks, *_sources(tasks))


def read_subscription(
    cluster: Cluster,
    topics: Sequence[str],
    tasks: Mapping[str, tuple[str, ...]],
    name: str,
    timeout: float | None = None,
) -> tuple[tuple[str, int], ...]:
    """(topic, partitions) of ``topics`` and ``tasks``, in that order (tasks sorted); a
    topic that does not exist (yet) has 0."""
    counts = {}
    for topic in (*topics, *_sources(tasks)):
        try:
            counts[topic] = cluster.partitions(topic, timeout=timeout)
        except UnknownTopic:
            log.debug("%s: topic %s does not exist (yet)", name, topic)
            counts[topic] = 0
    out = [(topic, counts[topic]) for topic in topics]
    for task, sources in sorted(tasks.items()):
        out.append((task, min(counts[t] for t in sources)))
    return tuple(out)


def log_ends(
    cluster: Cluster, held: Sequence[tuple[str, int]]
) -> tuple[tuple[tuple[str, int], int], ...]:
    """The log end of each of ``held`` that the cluster answers for (a partition it cannot
    answer for now is left out: looked up again next time)."""
    ends = []
    for key in held:
        try:
            ends.append((key, cluster.latest_offset(*key)))
        except Exception:
            continue
    return tuple(ends)
