"""A coordination log that loses records (docs/bounded-log.md, "A coordination log that
loses records"): the checks of a replay that the log still holds what it applied and what
this process wrote (it may go back: an unclean leader election, a restored disk), and that
nothing was deleted before the replay saw it with no snapshot covering it; and the halt that
either finding puts on the partition (:class:`~logmarshal._tail_state.Halt`). A mixin of
:class:`~logmarshal._tailer.Tailer`, on the replay threads and the writers'."""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Sequence

from storage import CorruptBatch

from . import _coordlog as coordlog
from ._coordlog import COORDINATION_TOPIC
from ._tail_state import Halt, HaltListener, Tail
from .cluster import BoundsAsker, Cluster, Columns
from .core.rewind import Regained
from .errors import OffsetOutOfRange, RetriableError

__all__ = ["READ_BACK_BYTES", "RECOVERY", "LossChecking"]

#: the replay's one logger: its lines keep their name whichever module writes them
log = logging.getLogger("logmarshal._tailer")

#: where an operator reads what to do about a halt (named in its error line)
RECOVERY = 'docs/bounded-log.md, "A coordination log that loses records"'
#: how much a read-back of one record fetches (a coordination record is far smaller)
READ_BACK_BYTES = 1 << 16


class _Rewound(Exception):
    """_recover found the log went back (already reported): this replay ends."""


class LossChecking:
    """The checks of a :class:`~logmarshal._tailer.Tailer` for a log that went back or lost
    records before its replay saw them."""

    _cluster: Cluster
    _admin_keys: dict[str, bytes]
    _check_rewind: bool
    _halted: HaltListener | None
    _tails: list[Tail]

    def _recover(self, tail: Tail, offset: int) -> int:
        """After OffsetOutOfRange (the log was truncated past us): a snapshot that reaches at
        least where we are, else the earliest offset (positions may be lost: warned)."""
        cp = tail.partition
        earliest = self._cluster.earliest_offset(COORDINATION_TOPIC, cp)
        restored = coordlog.load_snapshot(self._cluster, cp, self._admin_keys, earliest=earliest)
        if restored is not None and self._check_rewind:
            end = self._log_end(cp)
            if end < offset:
                # the log ends below what this replay applied (a broker that did not say so
                # in its out-of-range answer): it went back, whatever the snapshots say
                self._rewound(tail, offset, end, f"the log now ends at {end}")
                raise _Rewound
            if restored.covered >= end:
                # a snapshot of records the log no longer holds (published before it went
                # back): restoring it would act on a world the log does not hold
                log.warning("%s/%d: the newest snapshot covers %d but the log ends at %d; "
                            "not restored", COORDINATION_TOPIC, cp, restored.covered, end)  # fmt: skip
                restored = None
        if restored is not None and restored.covered + 1 >= offset:
            with tail.cond:
                tail.world = restored.world
                tail.next_offset = restored.covered + 1
                tail.cond.notify_all()
            return restored.covered + 1
        if earliest <= offset:
            # the log ends below us (OffsetOutOfRange) and the check for that is off: what
            # the replay did before that check (continuing into the same world, which takes
            # every reused offset up to what it applied as a re-delivery)
            log.warning("%s/%d: continuing at %d", COORDINATION_TOPIC, cp, earliest)
            return earliest
        self._gap(tail, offset, earliest)  # before the waiters see it moved (Tailer._start)
        with tail.cond:
            tail.next_offset = earliest
            tail.cond.notify_all()
        return earliest

    def _log_end(self, cp: int) -> int:
        """Where ``__marshal/cp`` ends now, asked of its leader itself where the cluster can
        (after a leader change a cached view may name the old leader for many seconds)."""
        if isinstance(self._cluster, BoundsAsker):
            return self._cluster.log_bounds(COORDINATION_TOPIC, cp)[1]
        return self._cluster.latest_offset(COORDINATION_TOPIC, cp)

    def _still_there(self, tail: Tail, offset: int) -> tuple[int, str] | None:
        """After the log was unreachable: does it still hold the last record this replay
        applied, at its offset? None if it does (or it cannot tell: retention deleted it);
        else from which offset on it does not, and how (it went back: an unclean leader
        election, a disk restored from an older copy; new records may reuse the offsets)."""
        cp = tail.partition
        end = self._log_end(cp)
        if end < offset:
            return end, f"the log now ends at {end}"
        last = tail.last
        if last is None:
            return None
        changed = f"the record it applied at {last[0]} is not there any more"
        try:
            cols = coordlog.fetch_columns(
                self._cluster,
                COORDINATION_TOPIC,
                cp,
                last[0],
                max_bytes=READ_BACK_BYTES,
                skip_damaged=False,
            )
        except OffsetOutOfRange as exc:
            if exc.log_end_offset <= last[0]:
                return exc.log_end_offset, f"the log now ends at {exc.log_end_offset}"
            return None  # deleted from the start (retention): nothing to compare
        except CorruptBatch:
            return last[0], changed  # it does not even decode now: not the same log
        if not cols[0]:
            # nothing came: no evidence while the log ends past the record (a broker slow to
            # answer, a moving leader; taken for "changed", it halted the partition), unless
            # it ends at the record by now
            end = self._log_end(cp)
            if end <= last[0]:
                return end, f"the log now ends at {end}"
            raise RetriableError(
                f"the read-back of offset {last[0]} answered nothing, though the log ends at {end}"
            )
        if cols[0][0] != last[0]:
            return last[0], changed
        if (cols[1][0], cols[2][0], cols[3][0]) != last[1:]:
            return last[0], changed
        return None

    def replayed_to(self, cp: int) -> int:
        """The next offset the replay of ``cp`` applies: a write sent now lands at or past it
        in a log that keeps what it acknowledged (:meth:`mark_written`)."""
        tail = self._tails[cp]
        with tail.cond:
            return tail.next_offset

    def mark_written(
        self,
        cp: int,
        offsets: Sequence[int],
        records: Sequence[tuple[bytes, bytes]],
        sent_at: int = 0,
    ) -> None:
        """Where records this process wrote to ``cp`` landed: the replay checks the log holds
        them there when it reaches them. A write the log acknowledged and then lost (an
        unclean leader election) leaves another record at its offset, whose verdict a
        member would otherwise read as its own. If the replay passed an offset already, the
        log is read there now. ``sent_at`` is :meth:`replayed_to` when the write was sent:
        a record landing below it took an offset whose record the replay had applied
        already, so the log went back, whatever it holds there now (our own record, whose
        verdict the replay's world holds of the record it applied there)."""
        if not self._check_rewind:
            return
        tail = self._tails[cp]
        passed = []
        lost = None
        below = [o for o in offsets if o < sent_at]
        if below:
            self._rewound(
                tail,
                sent_at,
                below[0],
                f"the log acknowledged a record this process wrote at {below[0]}, below offset "
                f"{sent_at} its replay had reached when it was sent",
            )
            return
        with tail.cond:
            if tail.halt is not None and tail.halt.why == "rewound":
                return
            applied, keys, values = tail.recent
            for offset, (key, value) in zip(offsets, records, strict=True):
                if offset >= tail.next_offset:
                    tail.written[offset] = (key, value)
                    continue
                i = bisect_left(applied, offset)
                if i < len(applied) and applied[i] == offset:
                    if (keys[i], values[i]) != (key, value) and lost is None:
                        lost = offset  # the replay applied another record there
                else:
                    passed.append((offset, key, value))  # applied in an earlier chunk
            before = tail.next_offset
        if lost is not None:
            self._rewound(
                tail, before, lost, f"the record this process wrote at {lost} is not there"
            )
            return
        for offset, key, value in passed:
            try:
                cols = coordlog.fetch_columns(
                    self._cluster,
                    COORDINATION_TOPIC,
                    cp,
                    offset,
                    max_bytes=READ_BACK_BYTES,
                    skip_damaged=False,
                )
            except Exception as exc:  # unreadable now: the replay's own checks remain
                log.debug("%s/%d: cannot read back %d: %s", COORDINATION_TOPIC, cp, offset, exc)
                continue
            if not cols[0]:
                # nothing came: evidence only if the log now ends at or below our record (else
                # unreadable now, as above: a slow broker, a moving leader)
                try:
                    end = self._log_end(cp)
                except Exception as exc:
                    log.debug("%s/%d: cannot read back %d: %s", COORDINATION_TOPIC, cp, offset, exc)
                    continue
                if end > offset:
                    log.debug("%s/%d: the read-back of %d answered nothing; not checked",
                              COORDINATION_TOPIC, cp, offset)  # fmt: skip
                    continue
            if not cols[0] or cols[0][0] != offset or (cols[2][0], cols[3][0]) != (key, value):
                with tail.cond:
                    before = tail.next_offset
                self._rewound(
                    tail, before, offset, f"the record this process wrote at {offset} is not there"
                )
                return

    @staticmethod
    def _written_lost(tail: Tail, offset: int, got: Columns) -> int | None:
        """Of our writes at offsets ``got`` covers, the first the log does not hold (another
        record, or none, at its offset); forgets those checked."""
        offsets = got[0]
        last = offsets[-1]
        mine = sorted(o for o in tail.written if o <= last)
        if not mine:
            return None
        lost = None
        for o in mine:
            written = tail.written.pop(o)
            if o < offset or lost is not None:
                continue  # passed before we heard where it landed (mark_written read it)
            i = bisect_left(offsets, o)
            held = (got[2][i], got[3][i]) if i < len(offsets) and offsets[i] == o else None
            if held != written:
                lost = o
        return lost

    def _rewound(self, tail: Tail, before: int, after: int, what: str) -> None:
        """The log no longer holds what this replay applied or this process wrote, from
        ``after`` on (``before``: where the replay was): freeze it and say so once."""
        cp = tail.partition
        halt = Halt(cp, "rewound", before, after)
        with tail.cond:
            if tail.halt is not None and tail.halt.why == "rewound":
                return
            tail.halt = halt
            # nothing is determined again within the process, not by an earlier gap's reset
            tail.regained = None
            tail.cond.notify_all()
        log.error(
            "%s/%d went back: the replay applied up to offset %d and %s (records acknowledged "
            "are gone; new ones may reuse their offsets). Every group coordinated there is "
            "halted: no claims, heartbeats, releases or hand-outs of its partitions. To "
            "recover: stop the group's members, reset its positions (logmarshal group reset "
            "GROUP ... --execute), restart them (%s)",
            COORDINATION_TOPIC,
            cp,
            before - 1,
            what,
            RECOVERY,
        )
        if self._halted is not None:
            self._halted(halt)

    def _gap(self, tail: Tail, offset: int, earliest: int) -> None:
        """Records ``offset..earliest-1`` were deleted before this replay applied them and
        no valid snapshot covers them: halt the partition's groups until the log determines
        them again (:class:`~logmarshal.core.rewind.Regained`), and say so once."""
        cp = tail.partition
        halt = Halt(cp, "gap", offset, earliest)
        with tail.cond:
            if tail.halt is not None and tail.halt.why == "rewound":
                return  # frozen for good within the process (a write's check found it first)
            # a second gap loses what the records since the first one determined again
            tail.halt = halt
            tail.regained = Regained(earliest)
            tail.cond.notify_all()
        log.error(
            "%s/%d: records %d..%d were deleted before this replay applied them and no valid "
            "snapshot of its key configuration covers them. Every group coordinated there is "
            "halted (no claims, heartbeats, releases or hand-outs of its partitions) until an "
            "admin reset of the group written from offset %d on has set a partition's "
            "position and its pause has ended (logmarshal group reset GROUP ... --execute; %s)",
            COORDINATION_TOPIC,
            cp,
            offset,
            earliest - 1,
            earliest,
            RECOVERY,
        )
        if self._halted is not None:
            self._halted(halt)
