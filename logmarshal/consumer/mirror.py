"""A member's positions mirrored into Kafka's group offsets, for Kafka's tools (Apache Kafka).

kafka-consumer-groups, Burrow and the admin clients see a group's offsets and lag only in
Kafka's committed offsets. On Apache Kafka each Consumer copies the positions its heartbeats
carry, for the partitions it holds, into the committed offsets of the Kafka group of the same
name: an OffsetCommit as a group with no members (generation -1), as a standalone consumer
commits. Each member writes only what it holds, so together they write the whole group.

The copy is advisory: ``__marshal`` stays the truth. It is read back only for a partition the
log has no position for, where a Kafka consumer would resume at its committed offset (a
group moving from Kafka's consumer groups, or a ``__marshal`` deleted and made again). It runs
in a thread of its own, at most once per heartbeat interval and only for positions that
moved, so a slow or refusing Kafka never delays a heartbeat or a poll; failures are logged
(rate-limited) and retried at the next interval.

On logmarshal's own broker there is nothing to mirror (it refuses OffsetCommit and serves the
positions itself), so ``mirror_offsets=None`` (auto) turns the mirror on only on a network
cluster whose brokers are Apache Kafka.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..admin.mirror import (
    KafkaOffsetSink,
    MirrorError,
    OffsetSink,
    ReadInPart,
    broker_of,
    changed_positions,
)
from ..errors import LogmarshalError

__all__ = [
    "GroupSink",
    "MirrorConflict",
    "MirrorSetting",
    "OffsetMirror",
    "open_mirror",
    "positions_held",
]

log = logging.getLogger(__name__)

Positions = dict[tuple[str, int], int]
#: (partition, offset) -> the leader epoch of its record at that offset as read, if known
EpochOf = Callable[[tuple[str, int], int], "int | None"]

#: seconds between two warnings of a failing mirror (failures in between are counted)
LOG_EVERY = 60.0


class GroupSink(OffsetSink, Protocol):
    """Where a member's positions go: Kafka's committed offsets of a group."""

    def live(self, group: str) -> str | None:
        """Why ``group`` is a live Kafka consumer group (it has members), or None."""
        ...


#: Consumer(mirror_offsets=...): None auto, False off, True on, or a sink of one's own
MirrorSetting = bool | GroupSink | None


class MirrorConflict(LogmarshalError, ValueError):
    """The Marshal group's name is taken by a live Kafka consumer group."""


class OffsetMirror:
    """Commits the changed positions of ``positions()`` to ``sink``, at most once per
    ``interval`` of ``clock`` (seconds; injected so the throttle is tested without sleeping).

    :meth:`mirror_once` is one pass; :meth:`start` runs passes in a daemon thread, one per
    ``interval`` of real time, and :meth:`close` stops it after a last, unthrottled pass.
    """

    def __init__(
        self,
        group: str,
        sink: OffsetSink,
        positions: Callable[[], Mapping[tuple[str, int], int]],
        *,
        interval: float,
        clock: Callable[[], float],
        name: str = "logmarshal-consumer-mirror",
        log_every: float = LOG_EVERY,
        close_sink: bool = False,
        epoch_of: EpochOf | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.group = group
        self._sink = sink
        self._positions = positions
        self._interval = interval
        self._clock = clock
        self._name = name
        self._log_every = log_every
        self._close_sink = close_sink  # the sink is the mirror's own (open_mirror made it)
        #: the leader epoch of a partition's record before a position, as the member read it:
        #: committed with the position where the sink takes it, for a later start to check
        #: that the log was not cut below it (KIP-320: consumer/cut_checks.py)
        self._epoch_of = epoch_of
        self._epoch_sink = sink if isinstance(sink, KafkaOffsetSink) else None
        self._mirrored: Positions = {}
        self._next_at: float | None = None  # no commit before this (None: none yet)
        self._failing_since: float | None = None
        self._next_warning = 0.0
        self._suppressed = 0
        self._stop = threading.Event()
        self._final: Mapping[tuple[str, int], int] | None = None
        self._thread: threading.Thread | None = None
        #: commits attempted / that failed (for metrics and tests)
        self.attempts = 0
        self.failures = 0

    def committed(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Kafka's committed offsets of the group for ``keys`` (those it has): where a
        partition the coordination log has no position for starts. A sink that cannot read
        them (one of the user's own without ``committed``) gives none."""
        read = getattr(self._sink, "committed", None)
        return {} if read is None else dict(read(self.group, keys))

    def committed_epochs(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """:meth:`committed`, each with the leader epoch committed with it, or None."""
        read = getattr(self._sink, "committed_epochs", None)
        if read is None:
            return {key: (offset, None) for key, offset in self.committed(keys).items()}
        return dict(read(self.group, keys))

    def mirrored(self) -> Positions:
        """What Kafka was last told, per partition still held (next offsets)."""
        return dict(self._mirrored)

    def mirror_once(
        self, positions: Mapping[tuple[str, int], int] | None = None, *, force: bool = False
    ) -> int:
        """One pass: commit what moved since the last successful commit, unless a commit was
        attempted less than ``interval`` ago (``force``: regardless). Returns how many
        partitions were committed; never raises (a failure is logged, then retried)."""
        now = self._clock()
        if not force and self._next_at is not None and now < self._next_at:
            return 0
        try:
            current = dict(self._positions() if positions is None else positions)
        except Exception:
            log.debug("%s: cannot read the positions", self._name, exc_info=True)
            return 0
        for key in [k for k in self._mirrored if k not in current]:
            del self._mirrored[key]  # no longer ours: its next holder mirrors it
        changed = changed_positions(current, self._mirrored)
        if not changed:
            return 0
        self._next_at = now + self._interval
        self.attempts += 1
        try:
            if self._epoch_of is None or self._epoch_sink is None:
                self._sink.commit(self.group, changed)
            else:
                epoch_of = self._epoch_of
                epochs = {k: e for k, o in changed.items() if (e := epoch_of(k, o - 1)) is not None}
                changed = self._keep_epochs(changed, epochs, now, force)
                if not changed:
                    return 0
                self._epoch_sink.commit(self.group, changed, epochs)
        except Exception as exc:
            self._failed(now, exc)
            return 0
        self._mirrored.update(changed)
        if self._failing_since is not None:
            log.info(
                "%s: mirroring offsets of group %r to Kafka works again (%.1f s of failures)",
                self._name,
                self.group,
                now - self._failing_since,
            )
            self._failing_since = None
            self._suppressed = 0
        return len(changed)

    def _keep_epochs(
        self, changed: Positions, epochs: dict[tuple[str, int], int], now: float, last: bool
    ) -> Positions:
        """What to commit of ``changed``, ``epochs`` completed: a claim's first position,
        not read there yet (its epoch unknown), erased the epoch its last holder committed
        with that same offset, and the next start was not checked (an attack on 766b7cb).
        Where Kafka has the same offset, its epoch is committed again; a position whose
        Kafka offset cannot be read now waits for the next pass (a failure, said as one),
        but for the ``last`` pass (closing), which commits it without one."""
        unknown = [k for k, o in changed.items() if k not in epochs and k not in self._mirrored]
        if not unknown:
            return changed
        try:
            kafka = self.committed_epochs(unknown)
        except ReadInPart as exc:
            kafka = {k: (o, exc.epochs.get(k)) for k, o in exc.found.items()}
            if not last:
                changed = {k: o for k, o in changed.items() if k not in exc.failed}
        except Exception as exc:
            if last:
                return changed
            self._failed(now, exc)
            return {k: o for k, o in changed.items() if k not in unknown}
        for key in unknown:
            offset, epoch = kafka.get(key, (None, None))
            if epoch is not None and offset == changed.get(key):
                epochs[key] = epoch
        return changed

    def _failed(self, now: float, exc: Exception) -> None:
        self.failures += 1
        if self._failing_since is None:
            self._failing_since = now
        if now < self._next_warning:
            self._suppressed += 1
            return
        more = (
            f" ({self._suppressed} more failure(s) since the last warning)"
            if self._suppressed
            else ""
        )
        log.warning(
            "%s: cannot mirror offsets of group %r to Kafka (consumption goes on; "
            "retried every %.1f s): %s%s",
            self._name,
            self.group,
            self._interval,
            exc if isinstance(exc, MirrorError) else repr(exc),
            more,
        )
        self._suppressed = 0
        self._next_warning = now + self._log_every

    # -- the thread -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.mirror_once()
        if self._final is not None:
            self.mirror_once(self._final, force=True)
        self._close_own_sink()

    def _close_own_sink(self) -> None:
        close = getattr(self._sink, "close", None) if self._close_sink else None
        if close is not None:
            try:
                close()
            except Exception:
                log.debug("%s: closing the mirror's client failed", self._name, exc_info=True)

    def close(
        self, final: Mapping[tuple[str, int], int] | None = None, timeout: float = 5.0
    ) -> None:
        """Stop, after committing ``final`` (the positions released with, if any); waits up
        to ``timeout`` seconds for that last commit, then leaves it to the daemon thread."""
        self._final = final
        self._stop.set()
        if self._thread is None:
            if final is not None:
                self.mirror_once(final, force=True)
            self._close_own_sink()
            return
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


def positions_held(
    core: Any, tasks: Mapping[str, tuple[str, ...]], amo_releasing: bool
) -> dict[tuple[str, int], int]:
    """Next offsets (Kafka's committed offsets) of what ``core`` holds and the log knows it
    holds: the position its heartbeats carry, plus one; per source partition of a task.
    ``amo_releasing``: AMO gives back what it reserved and did not hand out."""
    out = {}
    for topic, partition in core.assigned():
        for source in tasks.get(topic, (topic,)):
            if core.unpositioned(source, partition):
                # no position (none under "error"): nothing to mirror. Its -1 mirrored as
                # offset 0 was read back as the group's place by the next member to start it
                continue
            position = (
                core.handed_through(source, partition)
                if amo_releasing
                else core.position(source, partition)
            )
            if position is not None:
                out[(source, partition)] = position + 1
    return out


def lag_of(
    cluster: Any, positions: Mapping[tuple[str, int], int | None], name: str
) -> dict[tuple[str, int], int]:
    """Kafka's consumer-group lag of each partition at its ``positions`` (the last offset
    heartbeats carry): its log end minus the committed next offset. A partition without a
    position, or whose end cannot be read right now, has no known lag."""
    out = {}
    for (topic, partition), position in sorted(positions.items()):
        if position is None:
            continue
        try:
            end = cluster.latest_offset(topic, partition)
        except Exception:
            log.debug("%s: no lag for %s/%d", name, topic, partition, exc_info=True)
            continue
        out[(topic, partition)] = max(0, end - position - 1)
    return out


def open_mirror(
    group: str,
    cluster: Any,
    setting: MirrorSetting,
    positions: Callable[[], Mapping[tuple[str, int], int]],
    *,
    interval: float,
    clock: Callable[[], float],
    name: str,
    epoch_of: EpochOf | None = None,
) -> OffsetMirror | None:
    """The member's mirror, not started, or None when off. ``setting``: None mirrors on
    Apache Kafka only, True requires it, False is off, a :class:`GroupSink` is used as given.

    Raises :class:`MirrorConflict` when a live Kafka consumer group has the group's name (its
    members would fight our commits and Kafka's tools would show a mixture), and ValueError
    for ``True`` where there is nothing to mirror into."""
    if setting is False:
        return None
    sink: GroupSink
    if setting is None or setting is True:
        kafka = _kafka_sink(group, cluster, required=setting is True)
        if kafka is None:
            return None
        sink = kafka
    else:
        sink = setting
    try:
        live = sink.live(group)
    except MirrorError as exc:
        log.warning("%s: %s; mirroring anyway (Kafka refuses commits to a live group)", name, exc)
        live = None
    if live is not None:
        raise MirrorConflict(
            f"group {group!r} is also a live Kafka consumer group ({live}): its offsets "
            "cannot mirror the Marshal group's; rename one group, or pass "
            "mirror_offsets=False"
        )
    return OffsetMirror(
        group,
        sink,
        positions,
        interval=interval,
        clock=clock,
        name=name,
        close_sink=setting is None or setting is True,
        epoch_of=epoch_of,
    )


def _kafka_sink(group: str, cluster: Any, *, required: bool) -> KafkaOffsetSink | None:
    """A sink on the cluster's brokers if they are Apache Kafka, else None (``required``:
    ValueError saying why not)."""
    bootstrap = getattr(cluster, "bootstrap", None)
    if not isinstance(bootstrap, str):
        if required:
            raise ValueError(
                "mirror_offsets=True needs a network cluster on Apache Kafka "
                "(an embedded cluster has no Kafka group offsets)"
            )
        return None
    sink = KafkaOffsetSink(bootstrap, _client_config(cluster), timeout=10.0)
    known = getattr(cluster, "cluster_id", None)
    try:
        # the id the cluster read when it connected, if it has one: asking again could fail
        # (brokers away for the sink's timeout), and under auto that turned the mirror, and
        # so the committed-offset start, off for the Consumer's life
        broker = broker_of(known) if isinstance(known, str) else sink.broker()
    except MirrorError as exc:
        if required:
            raise ValueError(f"mirror_offsets=True: {exc}") from None
        log.warning("group %s: not mirroring offsets to Kafka: %s", group, exc)
        return None
    if broker == "logmarshal":
        if required:
            raise ValueError(
                "mirror_offsets=True: logmarshal's broker refuses OffsetCommit; it serves the "
                "group's positions to Kafka's tools itself, so there is nothing to mirror"
            )
        return None
    return sink


def _client_config(cluster: Any) -> dict[str, Any]:
    """The connection settings the cluster's own clients use (TLS, SASL, ...), minus its
    bootstrap (given apart): a NetworkCluster's ``client_config``."""
    base = getattr(cluster, "client_config", None) or {}
    return {k: v for k, v in base.items() if k != "bootstrap.servers"}
