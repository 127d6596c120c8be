"""The audit's fold with its bookkeeping on columns: Arrow batches in, the same rows out.

:class:`ColumnarAudit` is :class:`.replay.PartitionAudit` (same state, same rare-record code,
same tables) fed one Arrow record batch at a time. Why: most records are the holder's own
heartbeats and reservations (``RENEWED``, ``RENEWED_LATE``, ``MESSAGES_CLAIMED``: 93% of
bench/audit.py's log) and lost races (``STILL_OWNED``: 4%), and handling each as a Python
object cost the per-record fold about as much time as the rationalizer's own replay. Here a
batch goes through ``WorldState.apply_many`` once, and then:

- each verdict becomes a small integer code (by the identity of the rationalizer's shared
  verdict instances; any other verdict is classified by its effect or reason), each key a
  slot number (Arrow's dictionary encoding), each timestamp the clamped log time
  (``maximum.accumulate``);
- lost races are only counted (per key, with numpy), as the per-record fold counts them;
- every other record that is neither a renewal nor a lost race (claims, releases, pauses,
  membership, every other rejection, any effect this module does not know) goes through
  the per-record fold's own code, in log order;
- renewals are *deferred*: sorted by key once per batch, they are folded into their key's
  ownership interval (message count, last seen, largest gap, the records that set the
  position) a whole run at a time, when a rare record is about to read or change that key
  (:meth:`ColumnarAudit._sync`) and at the end of the batch. A renewal never changes who
  holds a partition, so only its key's next rare record can need it.

The per-record fold stays the reference (and the fallback without numpy and pyarrow): the
tests feed both the same logs, chunked at random, and compare every table.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise, repeat
from typing import Any

from rationalizer import Effect, Reason, Verdict
from rationalizer._rules import RENEWED_KEPT, RENEWED_LATE_KEPT
from rationalizer._verdict import ACCEPTED, REJECTED

from .deps import require
from .replay import PartitionAudit, ReplayConfig
from .tracks import Track

__all__ = ["ColumnarAudit"]

# What the columns do with a record: its verdict's code (int8)
_RARE = 0  # the per-record fold's code handles it
_LOST = 1  # a lost race (STILL_OWNED): counted only
#: the renewals, deferred: code 2 + their index here; (effect, the Track counter the
#: per-record fold counts it in, what it sets: "last" last_offset, "claimed"
#: claimed_through, "none" nothing: a holder's late heartbeat, version 6 property g, whose
#: verdicts are the rules' RENEWED_KEPT and RENEWED_LATE_KEPT objects)
_RENEWALS = (
    (Effect.RENEWED, "n_renewed", "last"),
    (Effect.RENEWED_LATE, "n_late", "last"),
    (Effect.MESSAGES_CLAIMED, "n_messages", "claimed"),
    (Effect.RENEWED, "n_renewed", "none"),
    (Effect.RENEWED_LATE, "n_late", "none"),
)
#: the codes of property g's verdicts (identity: equal to RENEWED / RENEWED_LATE)
_KEPT_CODES = {id(RENEWED_KEPT): 2 + 3, id(RENEWED_LATE_KEPT): 2 + 4}
_FIRST_RENEWAL = 2
#: a run of renewals this short is folded in Python; longer ones with numpy
_SHORT_RUN = 12


def _classify(v: Verdict) -> int:
    """The code of a verdict."""
    if v.entries:  # a MemberHeartbeat (version 7): folded entry by entry, as a rare record
        return _RARE
    if v.accepted:
        kept = _KEPT_CODES.get(id(v))
        if kept is not None:
            return kept
        for index, (effect, _counter, _sets) in enumerate(_RENEWALS):
            if v.effect is effect:
                return _FIRST_RENEWAL + index
        return _RARE
    if v.reason is Reason.STILL_OWNED:
        return _LOST
    return _RARE


def _ints(column: Any) -> array[int]:
    """A numpy integer column as ``array('q')``."""
    return array("q", column.astype("int64", copy=False).tobytes())


class ColumnarAudit(PartitionAudit):
    """One coordination partition's fold, fed Arrow batches (``offset``, ``timestamp_ms``,
    ``key``, ``value``) in offset order; :meth:`finish` gives the per-record fold's rows."""

    def __init__(self, coord_partition: int, config: ReplayConfig) -> None:
        self._np = require("numpy")
        self._pa = require("pyarrow")
        self._pc = require("pyarrow.compute")
        # the rationalizer's shared verdicts by identity -> code; they live as long as the
        # process, so their ids are stable (any other verdict is classified)
        self._shared = {id(v): _classify(v) for v in (*ACCEPTED.values(), *REJECTED.values())}
        self._shared.update(_KEPT_CODES)
        #: code -> whether that renewal sets claimed_through; whether it sets last_offset
        self._claims = self._np.array(
            [False] * _FIRST_RENEWAL + [sets == "claimed" for _e, _c, sets in _RENEWALS]
        )
        self._beats = self._np.array(
            [False] * _FIRST_RENEWAL + [sets == "last" for _e, _c, sets in _RENEWALS]
        )
        # key -> slot (a small int per distinct key seen), and back
        self._slot_of: dict[bytes | None, int] = {}
        self._slot_keys: list[bytes | None] = []
        # the batch being fed: its renewals sorted by (slot, position), and per slot the
        # [next, end) range of them not yet folded into the slot's track
        self._n = 0
        self._cursor = 0
        self._ranges: dict[int, list[int]] = {}
        self._hot_at: Sequence[int] = ()  # batch positions of the sorted renewals
        self._hot_now: Sequence[int] = ()  # their clamped log times
        self._hot_gap: Any = None  # log time since the previous renewal (numpy)
        self._last_beat: Any = None  # per sorted renewal: the latest setting last_offset
        self._last_msg: Any = None  # per sorted renewal: the latest setting claimed_through
        self._values: list[bytes | None] = []
        super().__init__(coord_partition, config)

    # ------------------------------------------------------------------ feeding

    def feed(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
    ) -> None:
        """Python columns in (as :meth:`PartitionAudit.feed`): made a batch, then fed."""
        if not offsets:
            return
        pa = self._pa
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(offsets, pa.int64()),
                pa.array(timestamps, pa.int64()),
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
            ],
            names=["offset", "timestamp_ms", "key", "value"],
        )
        self.feed_arrow(batch)

    def feed_arrow(self, batch: Any) -> None:
        """Apply the next records: a record batch (or table) with columns ``offset``,
        ``timestamp_ms``, ``key``, ``value``, offsets ascending."""
        np = self._np
        if self._stopped or batch.num_rows == 0:
            return
        offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
        # a re-delivery (offset not above every earlier one) changes nothing: drop it
        before = np.maximum.accumulate(np.concatenate(([self._last_offset], offsets[:-1])))
        keep = offsets > before
        if not keep.all():
            batch = batch.filter(self._pa.array(keep))
            offsets = offsets[keep]
            if not offsets.size:
                return
        stamps = batch.column("timestamp_ms").to_numpy(zero_copy_only=False).astype(np.int64)
        now = np.maximum.accumulate(np.maximum(stamps, self._now))
        if self._until is not None:
            n = int(np.searchsorted(now, self._until, side="right"))
            if n < len(now):  # log time is clamped, so nothing later is in the window
                self._stopped = True
                if n == 0:
                    return
                batch = batch.slice(0, n)
                offsets, stamps, now = offsets[:n], stamps[:n], now[:n]
        if not self._checks or self._checks[0][0] >= offsets[-1]:
            self._fold(batch, offsets, stamps, now)  # no snapshot to compare inside it
            return
        # stop at each pending snapshot's covered offset to compare the world with it
        lo = 0
        for hi in [*self._check_cuts(0, offsets.tolist()), len(offsets)]:
            self._run_checks(int(offsets[lo]))
            self._fold(batch.slice(lo, hi - lo), offsets[lo:hi], stamps[lo:hi], now[lo:hi])
            lo = hi

    def _fold(self, batch: Any, offsets: Any, stamps: Any, now: Any) -> None:
        """Replay the batch, handle its rare records in order, fold the renewals, count."""
        np = self._np
        n = len(offsets)
        keys, slots = self._keys(batch.column("key"))
        values = batch.column("value").to_pylist()
        # int columns as array('q'): Python ints on access, but not objects the cyclic GC
        # walks (lists of a batch's length made a third of the fold's GC time)
        offset_list = _ints(offsets)
        verdicts = self._world.apply_many(
            zip(offset_list, _ints(stamps), keys, values, strict=True)
        )
        if self._first_offset is None:
            self._first_offset = offset_list[0]
            self._first_ms = int(now[0])
        codes = np.fromiter(map(self._shared.get, map(id, verdicts), repeat(-1)), np.int8, n)
        for i in np.flatnonzero(codes < 0).tolist():  # not a shared verdict: classify it
            codes[i] = _classify(verdicts[i])

        # renewals, sorted by slot (stable: in log order within a slot; int16 sorts by radix)
        hot = np.flatnonzero(codes >= _FIRST_RENEWAL)
        hot_slots = slots[hot]
        if len(self._slot_keys) < 1 << 15:
            hot_slots = hot_slots.astype(np.int16)
        order = np.argsort(hot_slots, kind="stable")
        at = hot[order]
        sorted_slots = hot_slots[order]
        hot_now = now[at]
        gap = np.empty_like(hot_now)
        if gap.size:
            gap[0] = 0
            np.subtract(hot_now[1:], hot_now[:-1], out=gap[1:])
        marks = np.arange(len(at))
        claims = self._claims[codes[at]]
        self._last_beat = np.maximum.accumulate(np.where(self._beats[codes[at]], marks, -1))
        self._last_msg = np.maximum.accumulate(np.where(claims, marks, -1))
        firsts = np.flatnonzero(np.diff(sorted_slots, prepend=-1)) if len(at) else marks
        bounds = [*firsts.tolist(), len(at)]
        self._ranges = {
            slot: [lo, hi]
            for slot, (lo, hi) in zip(sorted_slots[firsts].tolist(), pairwise(bounds), strict=True)
        }
        self._hot_at, self._hot_now, self._hot_gap = _ints(at), _ints(hot_now), gap
        self._values = values
        self._n = n

        # the rare records, in log order, through the per-record fold's code
        rare = np.flatnonzero(codes == _RARE).tolist()
        now_list = _ints(now)
        last_now = now_list[-1]
        try:
            for i in rare:
                self._cursor = i
                self._rare(offset_list[i], now_list[i], keys[i], values[i], verdicts[i])
            self._cursor = n
            for slot, (lo, hi) in self._ranges.items():
                if lo < hi:
                    self._sync(self._tracks[self._slot_keys[slot]])
        finally:
            self._now = last_now
            self._last_offset = offset_list[-1]
            self._records += n
            self._values = []
        self._count_columns(codes, slots, now, keys, values)

    def _keys(self, column: Any) -> tuple[list[bytes | None], Any]:
        """The keys as Python objects, one per distinct key (so hashed once), and their slots."""
        np, pc = self._np, self._pc
        encoded = pc.dictionary_encode(column)
        if isinstance(encoded, self._pa.ChunkedArray):
            encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
        distinct = encoded.dictionary.to_pylist()
        distinct.append(None)  # a null key
        indices = pc.fill_null(encoded.indices, len(distinct) - 1)
        index = indices.to_numpy(zero_copy_only=False)
        slot_of, slot_keys = self._slot_of, self._slot_keys
        local = np.empty(len(distinct), np.int32)
        for j, key in enumerate(distinct):
            slot = slot_of.get(key)
            if slot is None:
                slot = slot_of[key] = len(slot_keys)
                slot_keys.append(key)
            local[j] = slot
        keys = list(map(distinct.__getitem__, index.tolist()))
        return keys, local[index]

    def _count_columns(
        self,
        codes: Any,
        slots: Any,
        now: Any,
        keys: list[bytes | None],
        values: list[bytes | None],
    ) -> None:
        """Count the renewals (on their tracks) and the lost races (by group) of the batch,
        within the reporting window, as the per-record fold counts them."""
        np = self._np
        counted = now >= self._since
        hot = np.flatnonzero(counted & (codes >= _FIRST_RENEWAL))
        if hot.size:
            width = len(_RENEWALS)
            per = np.bincount(slots[hot] * width + (codes[hot] - _FIRST_RENEWAL))
            for cell in np.flatnonzero(per).tolist():
                slot, which = divmod(cell, width)
                t = self._tracks[self._slot_keys[slot]]
                counter = _RENEWALS[which][1]
                setattr(t, counter, getattr(t, counter) + int(per[cell]))
        lost = np.flatnonzero(counted & (codes == _LOST))
        if lost.size:
            reason = Reason.STILL_OWNED.value
            lost_slots = slots[lost]
            per = np.bincount(lost_slots)
            for slot in np.flatnonzero(per).tolist():
                seen = self._tracks.get(self._slot_keys[slot])
                group: str | None
                if seen is not None:
                    group = seen.group
                else:  # a race for a partition whose claim this fold never saw start
                    i = int(lost[np.argmax(lost_slots == slot)])
                    msg = self._decode(keys[i], values[i])
                    group = None if msg is None else msg.group_id
                k = (group, "rejected", reason)
                self._counts[k] = self._counts.get(k, 0) + int(per[slot])

    # ------------------------------------------------------------------ deferred renewals

    def _sync(self, t: Track) -> None:
        """Fold ``t``'s renewals before the record being handled into its open interval and
        position: count, last seen, largest gap (the first one wins a tie, as record by
        record), and the last records that set last_offset and claimed_through."""
        r = self._ranges.get(self._slot_of.get(t.key, -1))
        if r is None:
            return
        lo, hi = r
        at = self._hot_at
        cursor = self._cursor
        if lo >= hi or at[lo] > cursor:  # nothing left, or nothing before this record
            return
        end = hi if at[hi - 1] < cursor else bisect_left(at, cursor, lo, hi)
        r[0] = end
        c = t.open
        assert c is not None, "a renewal is the holder's: its claim is open"
        times = self._hot_now
        best_end = times[lo]
        best = best_end - c.last_ms
        if end - lo <= _SHORT_RUN:
            for k in range(lo + 1, end):
                if times[k] - times[k - 1] > best:
                    best, best_end = times[k] - times[k - 1], times[k]
        else:
            gaps = self._hot_gap[lo + 1 : end]
            k = int(gaps.argmax())
            if int(gaps[k]) > best:
                best, best_end = int(gaps[k]), times[lo + 1 + k]
        if c.max_gap is None or best > c.max_gap:
            c.max_gap, c.max_gap_end = best, best_end
        c.last_ms = times[end - 1]
        c.msgs += end - lo
        beat = int(self._last_beat[end - 1])
        if beat >= lo:
            t.last_ref = self._values[at[beat]]
        msg = int(self._last_msg[end - 1])
        if msg >= lo:
            t.claimed_ref = self._values[at[msg]]
