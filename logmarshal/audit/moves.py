"""Why each partition moved: the ``moves`` table, derived from ``ownership`` and ``membership``.

The fold runs per coordination partition, but a group's membership lives in one partition
(``membership_partition``) while its data partitions are spread over all of them, so a move
cannot be explained inside one fold. The driver explains it afterwards, from the two small
tables every engine wrote, with this one function: the in-process and the Spark paths
therefore give the same ``moves`` table by construction.

Every claim that starts an ownership interval is a *took* row, every end of one a *gave_up*
row. The cause, in this order:

1. What the rationalizer decided says it all: a stale takeover is ``failover: holder
   stale`` (both sides), a restart takeover ``restart``, a ReleaseGroup voiding the claim
   ``admin reset`` (and so is the first claim of the partition after the pause).
2. A release followed within ``W`` by the releasing member's own LeavingGroup is
   ``closed`` (the member shut down cleanly).
3. Otherwise a claim or release at log time ``t`` is a **rebalance**, attributed to the
   most recent membership change of its group (joined, left, expired, partitions added;
   see the ``membership`` table) at a time ``e`` with ``t - W <= e <= t``, where
   ``W = CAUSE_WINDOW_HB`` times the mover's heartbeat interval (a member announces every
   HB/3 and counts after HB/4; the over-share member drains and releases, the under-share
   one replays and claims: all within about 2·HB). Changes of the mover or of its
   counterpart (the previous holder for a claim, the next one for a release) are preferred
   over other members' changes in the window, so when several members join at once each
   move names the one it went to.
4. A claim right after a release that was a rebalance (or a ``closed`` release) with no
   change of its own in the window inherits the release's cause (one move, two records);
   after a ``closed`` release it is ``rebalance: member left (X)``.
5. Otherwise: ``claim`` (nobody held it before: first claim, old clients), ``handoff``
   (a claim after a plain release) or ``release`` (a plain release: a protocol version 1
   client, or ``rebalance="none"``).

Claims open at a snapshot genesis started before the history and are not moves.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from .deps import require

__all__ = ["CAUSE_WINDOW_HB", "derive_moves", "event_text", "moves_table", "ownership_since"]

#: a move is attributed to a membership change at most this many mover's HB before it
CAUSE_WINDOW_HB = 3

#: the columns of the folded tables that derive_moves reads
_OWNERSHIP_COLUMNS = (
    "group",
    "topic",
    "partition",
    "coord_partition",
    "client_id",
    "instance_id",
    "start_ms",
    "start_offset",
    "start_cause",
    "end_ms",
    "end_offset",
    "end_reason",
    "hb_ms",
)
_MEMBERSHIP_COLUMNS = ("group", "time_ms", "offset", "client_id", "event", "detail")

_FIXED_END = {
    "stale_taken": ("failover", "failover: holder stale"),
    "fenced_new_instance": ("restart", "restart"),
    "group_reset": ("admin_reset", "admin reset"),
    "unexplained": ("unexplained", "unexplained"),
}
_FIXED_START = {
    "took_over_stale": ("failover", "failover: holder stale"),
    "restart_takeover": ("restart", "restart"),
}


def event_text(event: Mapping[str, Any]) -> str:
    """``member joined (c3)``, ``member left (c2)`` (LeavingGroup or expiry), ``partitions
    added (events 4->6)``."""
    kind = event["event"]
    if kind == "joined":
        return f"member joined ({event['client_id']})"
    if kind in ("left", "expired"):
        return f"member left ({event['client_id']})"
    return f"partitions added ({event['detail']})"


class _Events:
    """One group's membership changes in log order, for window look-ups."""

    def __init__(self, events: list[Mapping[str, Any]]) -> None:
        self.events = sorted(
            events, key=lambda e: (e["time_ms"], -1 if e["offset"] is None else e["offset"])
        )
        self.times = [e["time_ms"] for e in self.events]

    def cause(
        self, t: int, window: int, mover: str, counterpart: str | None
    ) -> Mapping[str, Any] | None:
        """The latest change in ``[t - window, t]``, the mover's or the counterpart's if any."""
        if not self.times:
            return None
        hi = bisect_right(self.times, t)
        best = None
        for i in range(hi - 1, -1, -1):
            e = self.events[i]
            if e["time_ms"] < t - window:
                break
            if e["client_id"] == mover or e["client_id"] == counterpart:
                return e
            if best is None:
                best = e
        return best

    def left_after(self, client: str, t: int, window: int) -> Mapping[str, Any] | None:
        """``client``'s own LeavingGroup in ``[t, t + window]``."""
        i = bisect_right(self.times, t - 1)
        while i < len(self.events) and self.events[i]["time_ms"] <= t + window:
            e = self.events[i]
            if e["event"] == "left" and e["client_id"] == client:
                return e
            i += 1
        return None


# positions in an ownership row as _derive reads it (_OWNERSHIP_COLUMNS order)
(
    _GROUP,
    _TOPIC,
    _PARTITION,
    _COORD,
    _CLIENT,
    _INSTANCE,
    _START_MS,
    _START_OFFSET,
    _START_CAUSE,
    _END_MS,
    _END_OFFSET,
    _END_REASON,
    _HB,
) = range(len(_OWNERSHIP_COLUMNS))


def _row(
    o: tuple[Any, ...],
    time_ms: int,
    offset: int,
    direction: str,
    counterpart: str | None,
    kind: str,
    text: str,
    trigger: Mapping[str, Any] | None,
) -> tuple[Any, ...]:
    """One ``moves`` row at ``time_ms``/``offset`` (a start or an end) of interval ``o``."""
    return (
        o[_GROUP],
        o[_TOPIC],
        o[_PARTITION],
        o[_COORD],
        time_ms,
        offset,
        o[_CLIENT],
        o[_INSTANCE],
        direction,
        counterpart,
        kind,
        text,
        None if trigger is None else trigger["client_id"],
        None if trigger is None else trigger["time_ms"],
    )


def derive_moves(
    ownership: Iterable[Mapping[str, Any]],
    membership: Iterable[Mapping[str, Any]],
    since_ms: int | None = None,
) -> list[tuple[Any, ...]]:
    """Rows of the ``moves`` table (column order of :data:`.schema.TABLES`), sorted by
    group, topic, partition, time and offset. ``since_ms`` drops moves before it."""
    rows = [tuple(o[c] for c in _OWNERSHIP_COLUMNS) for o in ownership]
    return _derive(rows, membership, since_ms)


def _derive(
    ownership: list[tuple[Any, ...]],
    membership: Iterable[Mapping[str, Any]],
    since_ms: int | None,
) -> list[tuple[Any, ...]]:
    """:func:`derive_moves` over ownership rows as tuples (_OWNERSHIP_COLUMNS order; the
    list is sorted in place): a dict per claim cost most of the time at 10 M records."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for e in membership:
        by_group.setdefault(e["group"], []).append(e)
    events = {g: _Events(es) for g, es in by_group.items()}
    no_events = _Events([])
    # one partition's claims together, in log order (by the offset that started each)
    ownership.sort(key=itemgetter(_GROUP, _TOPIC, _PARTITION, _START_OFFSET, _START_MS))
    rows: list[tuple[Any, ...]] = []
    first = 0
    while first < len(ownership):
        o = ownership[first]
        last = first + 1
        while last < len(ownership) and (
            (r := ownership[last])[_PARTITION] == o[_PARTITION]
            and r[_TOPIC] == o[_TOPIC]
            and r[_GROUP] == o[_GROUP]
        ):
            last += 1
        _derive_partition(ownership, first, last, events.get(o[_GROUP], no_events), rows)
        first = last
    if since_ms is not None:
        rows = [r for r in rows if r[4] >= since_ms]
    # "gave_up" < "took": a claim's end comes before the next one's start at the same offset
    rows.sort(key=itemgetter(0, 1, 2, 4, 5, 8))
    return rows


def _derive_partition(
    intervals: list[tuple[Any, ...]],
    first: int,
    last: int,
    ev: _Events,
    rows: list[tuple[Any, ...]],
) -> None:
    """The moves of one partition's claims ``intervals[first:last]`` (in log order)."""
    prev_release: tuple[str, str, Mapping[str, Any] | None] | None = None
    for i in range(first, last):
        o = intervals[i]
        before = intervals[i - 1] if i > first else None
        after = intervals[i + 1] if i + 1 < last else None
        window = CAUSE_WINDOW_HB * (o[_HB] or 0)
        # ---- took
        if o[_START_CAUSE] != "snapshot":
            counterpart = None if before is None else before[_CLIENT]
            trigger = None
            if o[_START_CAUSE] in _FIXED_START:
                kind, text = _FIXED_START[o[_START_CAUSE]]
            elif before is not None and before[_END_REASON] == "group_reset":
                kind, text = "admin_reset", "admin reset"
            else:
                trigger = ev.cause(o[_START_MS], window, o[_CLIENT], counterpart)
                if trigger is not None:
                    kind, text = "rebalance", "rebalance: " + event_text(trigger)
                elif prev_release is not None:
                    kind, text, trigger = prev_release
                elif before is not None and before[_END_REASON] == "released":
                    kind, text = "handoff", "handoff"
                else:
                    kind, text = "claim", "claim"
            rows.append(
                _row(o, o[_START_MS], o[_START_OFFSET], "took", counterpart, kind, text, trigger)
            )
        prev_release = None
        # ---- gave up
        end = o[_END_REASON]
        if end == "open" or o[_END_MS] is None:
            continue
        counterpart = None if after is None else after[_CLIENT]
        trigger = None
        if end in _FIXED_END:
            kind, text = _FIXED_END[end]
        else:  # released
            left = ev.left_after(o[_CLIENT], o[_END_MS], window)
            if left is not None:
                kind, text, trigger = "closed", "closed", left
                # the next claim, if nothing newer explains it: the member left
                prev_release = ("rebalance", "rebalance: " + event_text(left), left)
            else:
                trigger = ev.cause(o[_END_MS], window, o[_CLIENT], counterpart)
                if trigger is not None:
                    kind, text = "rebalance", "rebalance: " + event_text(trigger)
                    prev_release = (kind, text, trigger)
                else:
                    kind, text = "release", "release"
        rows.append(
            _row(o, o[_END_MS], o[_END_OFFSET], "gave_up", counterpart, kind, text, trigger)
        )


def ownership_since(ownership: Any, since_ms: int | None) -> Any:
    """The ownership table (pyarrow) as reported: without the claims that ended before
    ``since_ms``, which the fold keeps (the last of each partition whose claims the window
    reports) for :func:`moves_table` alone: a move in the window explained by a claim before
    it lost its counterpart and its cause without it."""
    if since_ms is None:
        return ownership
    pc = require("pyarrow.compute")
    end = ownership.column("end_ms")
    return ownership.filter(pc.or_kleene(pc.is_null(end), pc.greater_equal(end, since_ms)))


def moves_table(tables: Mapping[str, Any], since_ms: int | None = None) -> Any:
    """The ``moves`` table (pyarrow, final schema) from the folded tables (pyarrow)."""
    from .arrow import table_from_rows

    # only the columns derive_moves reads: the others (the *_time timestamps above all)
    # cost most of the conversion to Python
    own = tables["ownership"]
    ownership = list(zip(*(own.column(c).to_pylist() for c in _OWNERSHIP_COLUMNS), strict=True))
    members = tables["membership"].select(list(_MEMBERSHIP_COLUMNS))
    return table_from_rows("moves", _derive(ownership, members.to_pylist(), since_ms))
