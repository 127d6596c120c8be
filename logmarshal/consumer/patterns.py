"""The topics a Consumer's pattern reads: matched in full against the cluster's topics at every
claim pass, less those another consumer of its Marshaler reads and its own tasks' sources.

Every consumer of one Marshaler writes as one ``(client_id, instance_id)``: two of them in
one topic would each take the other's claims and reservations for its own, and AMO would
hand out offsets twice. The Marshaler keeps what each has (:meth:`Marshaler.reserve`,
:meth:`Marshaler.take_topics`, atomic: a topic is given to one); a named topic another
consumer reads is refused, a pattern's match is left out, said once in a warning line.
"""

from __future__ import annotations

import logging
import re

from ..cluster import Cluster

__all__ = ["PatternTopics"]

log = logging.getLogger(__name__)


class PatternTopics:
    """One Consumer's pattern and the matches it was left without."""

    def __init__(self, pattern: re.Pattern[str], cluster: Cluster, name: str) -> None:
        self.pattern = pattern
        self._cluster = cluster
        self._name = name
        self._left_out: frozenset[str] = frozenset()

    def match(self, current: tuple[str, ...]) -> tuple[str, ...]:
        """The cluster's topics the pattern matches (``current`` if they cannot be listed
        now). Internal topics (``__marshal``, ``__marshal_snapshots``) never match, as
        Kafka's exclude.internal.topics does for ``__consumer_offsets``."""
        try:
            names = self._cluster.topics()
        except Exception:
            log.debug("%s: cannot list topics", self._name, exc_info=True)
            return current
        return tuple(
            sorted(t for t in names if not t.startswith("__") and self.pattern.fullmatch(t))
        )

    def kept(self, matched: tuple[str, ...], free: tuple[str, ...]) -> tuple[str, ...]:
        """``free``, what the Marshaler gave of ``matched``; a match newly left out is said."""
        left = frozenset(matched).difference(free)
        if left - self._left_out:
            log.warning(
                "%s: pattern %r matches %s, which another consumer of this Marshaler or this "
                "consumer's tasks read: left out (one consumer per topic per Marshaler)",
                self._name,
                self.pattern.pattern,
                sorted(left - self._left_out),
            )
        self._left_out = left
        return free
