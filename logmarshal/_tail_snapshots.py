"""The bounded log's side of a replay (PROTOCOL.md, "Bounded coordination log";
docs/bounded-log.md): announcing the replay's configuration so no truncator deletes what it
needs, publishing a snapshot when one of our records lands on a snapshot point (or when our
configuration lacks current snapshots of its own), and truncating what the kept snapshots
cover. A mixin of :class:`~logmarshal._tailer.Tailer`, on the replay threads."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rationalizer._world import NO_TIME

from . import _coordlog as coordlog
from ._coordlog import COORDINATION_TOPIC
from ._tail_state import Tail
from .cluster import Cluster
from .errors import RETRIABLE, ClosedError

__all__ = ["RETRIABLE_OR_CLOSED", "SnapshotKeeping"]

#: the replay's one logger: its lines keep their name whichever module writes them
log = logging.getLogger("logmarshal._tailer")

#: what a replay step survives (it retries): the cluster's transient errors, and a close
RETRIABLE_OR_CLOSED: tuple[type[BaseException], ...] = (*RETRIABLE, ClosedError)


class SnapshotKeeping:
    """Announcements, snapshots and truncation of a :class:`~logmarshal._tailer.Tailer`
    (whose settings these are)."""

    _cluster: Cluster
    _n: int
    _admin_keys: dict[str, bytes]
    _now_ms: Callable[[], int]
    _announce_ttl_ms: int | None
    _keep_current_ms: int
    _snapshot_records: int | None
    _snapshot_ms: int | None
    _truncate: bool
    #: what was last found wrong in ``__marshal``'s configs while the replay runs
    _topic_problems: list[str]

    def _announce_config(self, tail: Tail, *, starting: bool = False) -> None:
        """Announce this replay's configuration for ``tail``'s partition (PROTOCOL.md,
        "Bounded coordination log"). At a cold start an unreachable log is raised (the start
        is retried: it must not read the log unannounced); any other failure is a warning and
        the next try comes sooner (the cold-start refusal keeps an unannounced replay safe)."""
        ttl = self._announce_ttl_ms
        if ttl is None:
            return
        cp = tail.partition
        now = self._now_ms()
        try:
            coordlog.ensure_snapshot_topic(self._cluster, self._n)
            coordlog.announce(self._cluster, cp, self._admin_keys, now_ms=now, ttl_ms=ttl)
        except RETRIABLE_OR_CLOSED:
            if starting:
                raise
            tail.announce_at = now + max(1, ttl // 16)
            return
        except Exception as exc:
            log.warning(
                "%s/%d: cannot announce this replay's configuration: %s",
                COORDINATION_TOPIC,
                cp,
                exc,
            )
            tail.announce_at = now + max(1, ttl // 16)
            return
        tail.announce_at = now + ttl // 4
        if cp == 0 and not starting:
            self._check_topic()

    def _check_topic(self) -> None:
        """``__marshal``'s configs, checked again while the replay runs (with the first
        coordination partition's announcement): a start refuses a wrong one, but one altered
        later (a retention that deletes records a cold start needs, CreateTime) went unsaid
        while the members ran. One ERROR line when it goes wrong, one when it is right again."""
        try:
            config = self._cluster.describe_topic(COORDINATION_TOPIC).config
        except Exception as exc:  # (only a check is lost; the next announcement tries again)
            log.debug("cannot check %s's configs now: %s", COORDINATION_TOPIC, exc)
            return
        problems = coordlog.coordination_topic_problems(config)
        if problems and problems != self._topic_problems:
            log.error(
                "%s's configs were changed while this member runs: it has %s; alter them "
                "back (a member started now is refused)",
                COORDINATION_TOPIC,
                "; ".join(problems),
            )
        elif self._topic_problems and not problems:
            log.info("%s's configs are right again", COORDINATION_TOPIC)
        self._topic_problems = problems

    def _housekeeping(self, tail: Tail, now: int | None = None) -> None:
        """On the replay thread of ``tail``, between fetches: renew the announcement when
        due, and keep our configuration's snapshots current (:meth:`_keep_current`).
        ``now``: the wall clock read once for every partition of one replay thread."""
        if now is None:
            now = self._now_ms()
        if tail.announce_at is not None and now >= tail.announce_at:
            self._announce_config(tail)
        if tail.keep_current_at is not None and tail.caught_up and now >= tail.keep_current_at:
            self._keep_current(tail)

    def _keep_current(self, tail: Tail) -> None:
        """Once caught up, and then every snapshot interval: when another configuration's
        snapshots cover more than ours and ours are fewer than ``KEEP_SNAPSHOTS`` valid ones
        of this partition, or our newest lags the replay by ``snapshot_records`` or more,
        publish one (then truncate, if asked). Without it a configuration whose members
        rarely write on a snapshot point (a small group beside a busy one) would hold every
        truncation back while it is announced (PROTOCOL.md, "Bounded coordination log")."""
        cp = tail.partition
        if tail.next_offset == 0:
            return  # nothing applied yet: nothing worth publishing
        tail.keep_current_at = self._now_ms() + self._keep_current_ms
        if tail.halt is not None:
            return  # its world misses records: never published
        try:
            own, others = coordlog.own_snapshots(
                cp, coordlog.read_snapshots(self._cluster, cp), self._admin_keys
            )
        except ClosedError:
            return
        except Exception as exc:
            log.warning("%s/%d: cannot read the snapshots: %s", COORDINATION_TOPIC, cp, exc)
            return
        applied = tail.next_offset - 1
        newest = own[0][0] if own else -1
        if others is None or newest >= others or newest >= applied:
            return  # nobody is held back by us, or ours covers what we applied
        lag = self._snapshot_records
        if len(own) >= coordlog.KEEP_SNAPSHOTS and (lag is None or applied - newest < lag):
            return
        log.info(
            "%s/%d: this replay configuration has %d valid snapshots of its own (the newest "
            "covering %d, another configuration's %d); publishing one",
            COORDINATION_TOPIC,
            cp,
            len(own),
            newest,
            others,
        )
        self._snapshot(tail)

    def _snapshot_due(
        self, mine: list[int], offsets: list[int], timestamps: list[int], before: int
    ) -> bool:
        """Did one of our records land on a snapshot point? A multiple of
        ``snapshot_records``, or the first record of a new ``snapshot_ms`` of log time
        (clamped, as replay sees it)."""
        n = self._snapshot_records
        if n is not None and any(o > 0 and o % n == 0 for o in mine):
            return True
        t = self._snapshot_ms
        if t is None:
            return False
        wanted = set(mine)
        now = before
        for o, ts in zip(offsets, timestamps, strict=True):
            prev = now
            if ts > now:
                now = ts
            if o in wanted and prev != NO_TIME and now // t > prev // t:
                return True
        return False

    def _snapshot(self, tail: Tail) -> None:
        """Publish the world of ``tail`` and truncate what the kept snapshots cover.

        Runs on the tail's own thread, the only one that changes its world, so the world is
        read without the lock. A failure costs this snapshot only; the next point retries."""
        cp = tail.partition
        if tail.halt is not None:
            # its world misses records (a gap): published, it would be a valid snapshot of
            # this configuration, and a cold start would take it for the whole log's
            log.info(
                "%s/%d: not publishing a snapshot: the replay is halted (%s)",
                COORDINATION_TOPIC,
                cp,
                tail.halt.why,
            )
            return
        try:
            # created on first use, so a group that never reaches a snapshot point (the demo,
            # tests) has no extra topic
            coordlog.ensure_snapshot_topic(self._cluster, self._n)
            coordlog.publish_snapshot(
                self._cluster, cp, tail.world, self._admin_keys, timestamp_ms=self._now_ms()
            )
            if self._truncate:
                coordlog.truncate(self._cluster, cp, self._admin_keys, now_ms=self._now_ms())
        except ClosedError:
            return
        except Exception as exc:
            log.warning("%s/%d: snapshot or truncation failed: %s", COORDINATION_TOPIC, cp, exc)
