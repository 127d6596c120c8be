"""The deterministic replay of one ``__marshal`` partition (ARCHITECTURE, "Transitions").

``WorldState`` folds records in log order into: per (group, topic, partition) the holder,
``last_beat``, ``last_offset`` and ``claimed_through``; per group the pause window; the
fenced instances; and a verdict for every record. It never reads a clock: ``now`` is the
clamped log-append timestamp of the record being applied.

The replay loop is written for speed (it is what every consumer runs all the time): decoded
identities are cached by the identity bytes of the value, verdicts are shared instances,
and the loop keeps its state in locals. ``decode_fields`` is the single source of truth for
what is a valid record; the fast path only ever reuses what it accepted before.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from struct import Struct

import attrs

from .codec import (
    T_CLAIMING_MESSAGES,
    T_CLAIMING_PARTITION,
    T_HEARTBEAT,
    T_RELEASE_GROUP,
    T_RELEASING_PARTITION,
    VERSION_1,
    DecodeError,
    decode_fields,
    record_key,
)
from .messages import MAX_OFFSET
from .verdict import ACCEPTED, REJECTED, Effect, Reason, Verdict

__all__ = ["FRESH", "STALE", "UNKNOWN", "Claim", "PartitionState", "Record", "WorldState"]

FRESH = "fresh"
UNKNOWN = "unknown"
STALE = "stale"

#: ``now`` before any record was applied.
NO_TIME = -(2**63)
MIN_TIMESTAMP = -(2**63)

DEFAULT_VERDICT_WINDOW = 65_536
_CACHE_LIMIT = 1 << 17

_I64 = Struct(">q")
_NUMBERED_TYPES = frozenset({T_HEARTBEAT, T_RELEASING_PARTITION, T_CLAIMING_MESSAGES})

Record = tuple[int, int, "bytes | None", "bytes | None"]

_CLAIMED = ACCEPTED[Effect.CLAIMED]
_RENEWED = ACCEPTED[Effect.RENEWED]
_RENEWED_LATE = ACCEPTED[Effect.RENEWED_LATE]
_RELEASED = ACCEPTED[Effect.RELEASED]
_MESSAGES_CLAIMED = ACCEPTED[Effect.MESSAGES_CLAIMED]
_POSITION_SET = ACCEPTED[Effect.POSITION_SET]
_STILL_OWNED = REJECTED[Reason.STILL_OWNED]
_NOT_HOLDER = REJECTED[Reason.NOT_HOLDER]
_FENCED = REJECTED[Reason.FENCED]
_PAUSED = REJECTED[Reason.GROUP_PAUSED]
_REGRESSION = REJECTED[Reason.OFFSET_REGRESSION]
_INVALID = REJECTED[Reason.INVALID_RECORD]


def fence_key(client_id: str, instance_id: str) -> str:
    """Injective string form of an instance (str hashes are cached, tuples' are not)."""
    return f"{len(client_id)}:{client_id}{instance_id}"


class _Part:
    """Mutable state of one (group, topic, partition)."""

    __slots__ = ("beat", "claimed", "group", "holder", "last", "partition", "topic")

    def __init__(
        self,
        group: str,
        topic: str,
        partition: int,
        holder: tuple[str, str] | None,
        beat: int,
        last: int = -1,
        claimed: int = -1,
    ) -> None:
        self.group = group
        self.topic = topic
        self.partition = partition
        self.holder = holder
        self.beat = beat
        self.last = last
        self.claimed = claimed


@attrs.frozen
class PartitionState:
    """Read-only copy of one partition's coordination state."""

    group_id: str
    topic: str
    partition: int
    holder: tuple[str, str] | None
    last_beat: int
    last_offset: int
    claimed_through: int

    @property
    def resume_offset(self) -> int:
        return max(self.last_offset, self.claimed_through) + 1


@attrs.frozen
class Claim:
    """A partition some instance of a client holds (for restart recovery)."""

    topic: str
    partition: int
    client_id: str
    instance_id: str
    last_beat: int


class WorldState:
    """Replay state of one coordination partition; see PROTOCOL.md for every rule."""

    def __init__(
        self, heartbeat_interval_ms: int, *, verdict_window: int = DEFAULT_VERDICT_WINDOW
    ) -> None:
        if type(heartbeat_interval_ms) is not int or heartbeat_interval_ms <= 0:
            raise ValueError(
                f"heartbeat_interval_ms must be a positive int, got {heartbeat_interval_ms!r}"
            )
        if type(verdict_window) is not int or verdict_window <= 0:
            raise ValueError(f"verdict_window must be a positive int, got {verdict_window!r}")
        self._hb = heartbeat_interval_ms
        self._window = verdict_window
        self._applied = -1
        self._now = NO_TIME
        self._parts: dict[bytes, _Part] = {}
        self._groups: dict[str, list[_Part]] = {}
        self._fenced: dict[str, tuple[str, str]] = {}
        # group -> (expires_at, admin). Entries whose window has passed may linger until the
        # group's next record removes them; they are invisible to queries and snapshots.
        self._paused: dict[str, tuple[int, tuple[str, str]]] = {}
        self._rejections: dict[Reason, int] = dict.fromkeys(Reason, 0)
        self._woff = array("q")
        self._wv: list[Verdict] = []
        # identity bytes of a value -> [key, (client, instance), fence key, group, _Part|None]
        self._pcache: dict[bytes, list] = {}

    # ------------------------------------------------------------------ replay

    def apply(
        self, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None
    ) -> Verdict | None:
        """Apply the record at ``offset``; return its verdict.

        An ``offset <= applied_through`` is a re-delivery: it changes nothing and returns the
        verdict recorded for it (``None`` if it was never applied or left the window).
        Never raises because of ``key``/``value``; raises ValueError/TypeError for an
        offset or timestamp that is not an int64.
        """
        return self.apply_many(((offset, timestamp_ms, key, value),))[0]

    def apply_many(self, records: Iterable[Record]) -> list[Verdict | None]:
        """Apply ``(offset, timestamp_ms, key, value)`` records in order; same as ``apply`` each."""
        hb = self._hb
        hb2 = 2 * hb
        parts = self._parts
        pcache = self._pcache
        fenced = self._fenced
        paused = self._paused
        rej = self._rejections
        woff = self._woff
        wv = self._wv
        window = self._window
        wlimit = 2 * window
        unpack_i64 = _I64.unpack_from
        applied = self._applied
        now = self._now
        out: list[Verdict | None] = []
        push = out.append
        try:
            for offset, ts, key, value in records:
                if offset <= applied:
                    push(self.verdict(offset))
                    continue
                # Bad offsets/timestamps raise here, before anything changed.
                if ts > now:
                    if ts.__class__ is not int or ts > MAX_OFFSET:
                        raise ValueError(f"timestamp_ms must be an int64, got {ts!r}")
                    woff.append(offset)
                    now = ts
                else:
                    woff.append(offset)
                applied = offset
                v = None
                ent = None
                typ = num = 0
                if value.__class__ is bytes and len(value) > 10 and value[0] == VERSION_1:
                    typ = value[1]
                    if typ == T_CLAIMING_PARTITION:
                        ent = pcache.get(value[2:])
                    elif typ in _NUMBERED_TYPES:
                        ent = pcache.get(value[10:])
                        if ent is not None:
                            num = unpack_i64(value, 2)[0]
                            if num < -1:
                                ent = None
                if ent is None or ent[0] != key:
                    ent, typ, num, v = self._slow(key, value, now)
                if v is None:
                    ident = ent[1]
                    if fenced and ent[2] in fenced:
                        v = _FENCED
                    else:
                        part = ent[4]
                        if part is None:
                            part = ent[4] = parts.get(ent[0])
                        if paused:
                            p = paused.get(ent[3])
                            if p is not None:
                                if now < p[0]:
                                    if typ == T_HEARTBEAT and ident == p[1]:
                                        if part is None:
                                            part = self._new_part(ent, None, now)
                                        part.last = part.claimed = num
                                        v = _POSITION_SET
                                    else:
                                        v = _PAUSED
                                else:
                                    del paused[ent[3]]
                        if v is not None:
                            pass
                        elif part is None:
                            if typ == T_CLAIMING_PARTITION:
                                self._new_part(ent, ident, now)
                                v = _CLAIMED
                            else:
                                v = _NOT_HOLDER
                        elif typ == T_HEARTBEAT:
                            h = part.holder
                            if h == ident:
                                v = _RENEWED if now - part.beat <= hb2 else _RENEWED_LATE
                                part.beat = now
                                part.last = num
                            elif h is not None and h[0] == ident[0] and now - part.beat < hb:
                                fenced[fence_key(*h)] = h
                                v = Verdict(True, effect=Effect.RESTART_TAKEOVER, previous_holder=h)
                                part.holder = ident
                                part.beat = now
                                part.last = num
                            else:
                                v = _NOT_HOLDER
                        elif typ == T_CLAIMING_PARTITION:
                            h = part.holder
                            if h is None:
                                v = _CLAIMED
                            elif now - part.beat > hb2:
                                v = Verdict(True, effect=Effect.TOOK_OVER_STALE, previous_holder=h)
                                if h[0] == ident[0] and h[1] != ident[1]:
                                    # A newer instance of the same client: the old one is
                                    # superseded, fence it (PROTOCOL.md, deviation D1).
                                    fenced[fence_key(*h)] = h
                            else:
                                v = _STILL_OWNED
                            if v.accepted:
                                part.holder = ident
                                part.beat = now
                        elif part.holder != ident:
                            v = _NOT_HOLDER
                        elif typ == T_RELEASING_PARTITION:
                            part.holder = None
                            part.beat = now
                            part.last = num
                            v = _RELEASED
                        elif num >= part.claimed:  # ClaimingMessages
                            part.claimed = num
                            part.beat = now
                            v = _MESSAGES_CLAIMED
                        else:
                            v = _REGRESSION
                if not v.accepted:
                    rej[v.reason] += 1
                wv.append(v)
                push(v)
                if len(wv) > wlimit:
                    cut = len(wv) - window
                    del wv[:cut]
                    del woff[:cut]
        finally:
            self._applied = applied
            self._now = now
        return out

    def _slow(
        self, key: object, value: object, now: int
    ) -> tuple[list | None, int, int, Verdict | None]:
        """Cache miss: strict decode; handles invalid records and ReleaseGroup completely."""
        try:
            typ, client, instance, group, topic, partition, num, start = decode_fields(key, value)
        except DecodeError:
            return None, 0, 0, _INVALID
        ident = (client, instance)
        fkey = fence_key(client, instance)
        if typ == T_RELEASE_GROUP:
            if fkey in self._fenced:
                return None, typ, 0, _FENCED
            voided = []
            for part in self._groups.get(group, ()):
                if part.holder is not None:
                    voided.append((part.topic, part.partition, *part.holder))
                    part.holder = None
            assert num is not None
            if num > now:
                self._paused[group] = (num, ident)
            else:  # a window already over replaces (ends) the current one
                self._paused.pop(group, None)
            if not voided:
                return None, typ, 0, ACCEPTED[Effect.GROUP_PAUSED]
            return (
                None,
                typ,
                0,
                Verdict(True, effect=Effect.GROUP_PAUSED, voided=tuple(sorted(voided))),
            )
        canonical = record_key(group, topic, partition)
        ent = [canonical, ident, fkey, group, self._parts.get(canonical), topic, partition]
        if value.__class__ is bytes:
            pcache = self._pcache
            if len(pcache) >= _CACHE_LIMIT:
                pcache.clear()
            pcache[value[start:]] = ent  # type: ignore[index]
        return ent, typ, -1 if num is None else num, None

    def _new_part(self, ent: list, holder: tuple[str, str] | None, now: int) -> _Part:
        part = _Part(ent[3], ent[5], ent[6], holder, now)
        self._parts[ent[0]] = part
        self._groups.setdefault(part.group, []).append(part)
        ent[4] = part
        return part

    # ------------------------------------------------------------------ queries

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._hb

    @property
    def verdict_window(self) -> int:
        return self._window

    @property
    def applied_through(self) -> int:
        """Offset of the last applied record; -1 before any."""
        return self._applied

    @property
    def now(self) -> int:
        """Clamped log time of the last applied record (NO_TIME before any)."""
        return self._now

    @property
    def skipped(self) -> int:
        """Records skipped because they did not decode (INVALID_RECORD)."""
        return self._rejections[Reason.INVALID_RECORD]

    def rejections(self) -> dict[Reason, int]:
        """Count of rejected records by reason, since the beginning of the log."""
        return dict(self._rejections)

    def verdict(self, offset: int) -> Verdict | None:
        """Verdict of the record at ``offset`` if it is among the last ``verdict_window``
        applied records (at least; up to twice as many are kept), else None."""
        woff = self._woff
        i = bisect_left(woff, offset)
        if i < len(woff) and woff[i] == offset:
            return self._wv[i]
        return None

    def _part(self, group: str, topic: str, partition: int) -> _Part | None:
        return self._parts.get(record_key(group, topic, partition))

    def holder(self, group: str, topic: str, partition: int) -> tuple[str, str] | None:
        """``(client_id, instance_id)`` holding the partition, or None. A stale holder is
        still the holder until someone's claim is accepted (its late heartbeat renews)."""
        part = self._part(group, topic, partition)
        return None if part is None else part.holder

    def freshness(self, group: str, topic: str, partition: int, now_ms: int) -> str | None:
        """ "fresh" / "unknown" / "stale" for the holder's last accepted message at ``now_ms``;
        None if nobody holds the partition."""
        part = self._part(group, topic, partition)
        if part is None or part.holder is None:
            return None
        age = now_ms - part.beat
        if age < self._hb:
            return FRESH
        if age <= 2 * self._hb:
            return UNKNOWN
        return STALE

    def claimable(self, group: str, topic: str, partition: int, now_ms: int) -> bool:
        """Would a ClaimingPartition at log time ``now_ms`` be accepted (given no other
        record before it)?"""
        p = self._paused.get(group)
        if p is not None and now_ms < p[0]:
            return False
        part = self._part(group, topic, partition)
        return part is None or part.holder is None or now_ms - part.beat > 2 * self._hb

    def resume_offset(self, group: str, topic: str, partition: int) -> int | None:
        """``max(last_offset, claimed_through) + 1``; None if the log never mentioned the
        partition (the consumer then applies its own reset policy, like Kafka's
        ``auto.offset.reset``)."""
        part = self._part(group, topic, partition)
        return None if part is None else max(part.last, part.claimed) + 1

    def partition_state(self, group: str, topic: str, partition: int) -> PartitionState | None:
        part = self._part(group, topic, partition)
        return None if part is None else _export(part)

    def partitions(self, group: str | None = None) -> list[PartitionState]:
        """All partitions this world knows (of ``group`` if given), sorted."""
        src: Iterable[_Part]
        src = self._parts.values() if group is None else self._groups.get(group, ())
        return sorted((_export(p) for p in src), key=lambda s: (s.group_id, s.topic, s.partition))

    def claims_of(self, group: str, client_id: str) -> list[Claim]:
        """Partitions of ``group`` held by any instance of ``client_id``, sorted."""
        return sorted(
            (
                Claim(p.topic, p.partition, p.holder[0], p.holder[1], p.beat)
                for p in self._groups.get(group, ())
                if p.holder is not None and p.holder[0] == client_id
            ),
            key=lambda c: (c.topic, c.partition),
        )

    def paused_until(self, group: str) -> int | None:
        """End (log ms, exclusive) of the group's pause if it is paused at ``now``, else None."""
        p = self._paused.get(group)
        return p[0] if p is not None and self._now < p[0] else None

    def pause_admin(self, group: str) -> tuple[str, str] | None:
        """The admin whose ReleaseGroup pauses ``group`` at ``now``, else None."""
        p = self._paused.get(group)
        return p[1] if p is not None and self._now < p[0] else None

    def is_fenced(self, client_id: str, instance_id: str) -> bool:
        return fence_key(client_id, instance_id) in self._fenced

    def fenced(self) -> list[tuple[str, str]]:
        return sorted(self._fenced.values())

    def _iter_parts(self) -> Iterator[_Part]:
        return iter(self._parts.values())

    # ------------------------------------------------------------------ snapshots

    def to_bytes(self) -> bytes:
        """Deterministic snapshot (format in PROTOCOL.md); equal states give equal bytes."""
        from .snapshot import dump

        return dump(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> WorldState:
        """Restore a snapshot; raises ``SnapshotError`` on anything but a valid one."""
        from .snapshot import load

        return load(cls, data)


def _export(p: _Part) -> PartitionState:
    return PartitionState(p.group, p.topic, p.partition, p.holder, p.beat, p.last, p.claimed)
