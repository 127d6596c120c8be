"""The release protocol of a graceful close, bounded.

Each held partition gets a ReleasingPartition with its exact position (a task: a
ReleasingTask with its sources' positions). A rejection is an answer (we no longer held it:
nothing to release); only an unknown outcome is retried, at most ``attempts`` times, so a
fenced or refused close cannot rewrite its releases without end. A fenced instance writes
nothing (``closing``; docs/architecture.md, "Consumer algorithms": release).
"""

from __future__ import annotations

import attrs

__all__ = ["Position", "Releases"]

#: what a release carries: ``last_offset``, or a task's (source topic, last_offset) vector
Position = int | tuple[tuple[str, int], ...]


@attrs.define
class Releases:
    attempts: int
    #: (topic, partition) -> [position, cp, attempts made, not before, tenure]; tenure: the
    #: offset of the claim or restart takeover that began the tenure the release ends, which
    #: a version 6 release names (None: unknown, a version 1 release is written)
    pending: dict[tuple[str, int], list] = attrs.field(factory=dict)
    #: (topic, partition) -> the tenure whose release was given up (every attempt's outcome
    #: unknown): any attempt may still land, and a release names its tenure, so that tenure
    #: is never taken up again by us (``claims.adopt_orphans``), only claimed anew once it
    #: lapsed or ended
    given_up: dict[tuple[str, int], int | None] = attrs.field(factory=dict)

    def add(
        self,
        key: tuple[str, int],
        position: Position,
        cp: int,
        not_before: int = 0,
        tenure: int | None = None,
    ) -> None:
        self.pending[key] = [position, cp, 0, not_before, tenure]

    def unknown(self, key: tuple[str, int], retry_at: int) -> None:
        """The last attempt's outcome is unknown: it may have landed. Look again at
        ``retry_at``, when the replay will have shown it if it did."""
        entry = self.pending.get(key)
        if entry is not None:
            entry[3] = retry_at

    def due(
        self, in_flight: set[tuple[str, int]], now: int
    ) -> list[tuple[tuple[str, int], Position, int, int | None]]:
        """Releases to (re)write now: ``(key, position, cp, tenure)``; counts the attempt."""
        out = []
        for key, entry in list(self.pending.items()):
            if key in in_flight or now < entry[3]:
                continue
            if entry[2] >= self.attempts:
                del self.pending[key]  # given up: the claim lapses after 2·HB instead
                self.given_up[key] = entry[4]
                continue
            entry[2] += 1
            out.append((key, entry[0], entry[1], entry[4]))
        return out

    def answered(self, key: tuple[str, int]) -> None:
        self.pending.pop(key, None)

    @property
    def done(self) -> bool:
        return not self.pending
