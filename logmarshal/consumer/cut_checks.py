"""Was a partition's log cut below the group's position while no member read it?

An unclean leader election cuts a data partition's log; Kafka writes on from the cut, and
once the log is back past the group's position that offset is in the log again. A member
reading at the time is told by the leader epochs of what it read (``network/epochs.py``).
A member that starts the partition afterwards (a restart, a new holder) read nothing
before: it fetched on from the position, and what was written from the cut up to it was
skipped, ALO too (measured on Apache Kafka 4.4). The position in ``__marshal`` has no leader
epoch; Kafka's own consumer checks the epoch committed with its offset (KIP-320).

The offsets mirror commits, with each position, the leader epoch of the record before it as
its member read it (``consumer/mirror.py``). Here, when a member starts reading a partition,
Kafka's committed offset of the group is read; where it is the offset the member starts at,
the first records read from there tell: written under that same epoch, the log holds what
was read before them (Kafka's replicas keep each epoch's records in one order), and nothing
is asked. Under a newer epoch, the leader is asked where that epoch's log ends now
(OffsetForLeaderEpoch): below the start, the log was cut there, and the core is told as a
live reader would tell it.

Advisory, as the mirror is: only on Apache Kafka with the mirror on, and only where the
mirror had caught up with the position (it commits once per heartbeat interval: a member
killed while its position moved may leave it behind; then nothing is checked). It runs on a
thread of its own; the member fetcher holds a start's first records until its check answers,
for a few seconds at most (``fetcher.CHECK_HOLD``): a cut found later is told then (ALO goes
back to the cut and hands out what was written there since, again).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from ..admin.mirror import MirrorError, ReadInPart
from ..cluster import Read
from ..core import Event, Fetch, Fetched, OutOfRange
from ..errors import NetworkError

__all__ = ["ATTEMPTS", "CHECK_HOLD", "CutChecks", "StartChecks"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: keys -> Kafka's committed (next offset, leader epoch or None) of the group, those it has
ReadCommitted = Callable[[Sequence[Key]], Mapping[Key, tuple[int, "int | None"]]]
#: (topic, {partition: leader epoch}) -> where each epoch's log ends on the leader now, None
#: where it cannot be known, or the error of its ask (NetworkCluster.epoch_ends)
EpochEnds = Callable[[str, Mapping[int, int]], Mapping[int, "int | Exception | None"]]
#: key -> (offset, leader epoch) of the first record its member read since it started, if any
FirstRead = Callable[[Key], "tuple[int, int] | None"]

#: tries of one check (the committed read and the leader's answer) before it is given up
ATTEMPTS = 5
#: the pause after a failed try, doubling
FIRST_PAUSE = 0.2
#: how long the checks' thread gathers checks woken together before it acts on them
GATHER = 0.01
#: how long a start's first records wait for its check before they are answered unchecked
#: (a committed read or a leader that does not answer: the check goes on)
CHECK_HOLD = 5.0


class CutChecks:
    """Checks asked with :meth:`check`, answered on a thread of its own: ``answered(key,
    number, cut)`` is called there once per check (its number, from :meth:`check`), ``cut``
    the offset the log was cut at below its start, or None (not cut, or nothing to tell by)."""

    def __init__(
        self,
        committed: ReadCommitted,
        epoch_ends: EpochEnds,
        first_read: FirstRead,
        answered: Callable[[Key, int, int | None], None],
        name: str,
    ) -> None:
        self._committed = committed
        self._epoch_ends = epoch_ends
        self._first_read = first_read
        self._answered = answered
        self._name = name
        self._lock = threading.Lock()
        self._pending: dict[Key, int] = {}  # key -> the offset its member starts at
        #: checks whose committed epoch is read, waiting for their first records (an idle
        #: partition waits here, costing nothing, until :meth:`seen`)
        self._waiting: dict[Key, int] = {}
        self._epochs: dict[Key, int] = {}  # the committed epoch of those (and of pending)
        self._tries: dict[Key, int] = {}
        self._ids: dict[Key, int] = {}  # each check's number (check())
        self._numbers = itertools.count(1)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: checks that ended without an answer, partitions asked of their leaders, and the
        #: requests that asked them (for tests and metrics)
        self.given_up = 0
        self.asked = 0
        self.requests = 0

    def check(self, key: Key, start: int) -> int:
        """A member starts reading ``key`` at ``start`` (a new claim): check it. Returns the
        check's number, which its answer carries (a claim of the same partition at the same
        offset, after a drop, is another check: the answer of one in flight then is not
        its own)."""
        with self._lock:
            number = next(self._numbers)
            if self._stop.is_set():
                return number
            self._forget(key)
            self._pending[key] = start
            self._ids[key] = number
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"{self._name}-cut-checks", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return number

    def seen(self, key: Key) -> None:
        """Records of ``key`` were read: a check waiting for them goes on."""
        with self._lock:
            start = self._waiting.pop(key, None)
            if start is None:
                return
            self._pending[key] = start
        self._wake.set()

    def forget(self, key: Key) -> None:
        """``key`` is not read any more: its check is not answered."""
        with self._lock:
            self._forget(key)

    def _forget(self, key: Key) -> None:
        for table in (self._pending, self._waiting, self._epochs, self._tries, self._ids):
            table.pop(key, None)

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            self._pending.clear()
            self._waiting.clear()
        self._wake.set()

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        pause = FIRST_PAUSE
        while True:
            self._wake.wait()
            # the starts of a claim come one fetch at a time, their first records too: a
            # moment's wait asks them together (one request per leader, not one each)
            self._stop.wait(GATHER)
            with self._lock:
                self._wake.clear()
                if self._stop.is_set():
                    return
                asked = dict(self._pending)
                epochs = {k: self._epochs[k] for k in asked if k in self._epochs}
                ids = {k: self._ids[k] for k in asked}
            if not asked:
                continue
            if self._check_all(asked, epochs, ids):
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
                self._wake.set()
            else:
                pause = FIRST_PAUSE

    def _check_all(
        self, asked: Mapping[Key, int], epochs: dict[Key, int], ids: Mapping[Key, int]
    ) -> bool:
        """One try of each asked check; True when one failed and is tried again."""
        failed: dict[Key, Exception] = {}
        answers: dict[Key, int | None] = {}
        unread = sorted(k for k in asked if k not in epochs)
        if unread:
            try:
                committed, refused = dict(self._committed(unread)), []
            except ReadInPart as exc:
                committed = {k: (o, exc.epochs.get(k)) for k, o in exc.found.items()}
                refused = exc.failed
            except Exception as exc:
                committed, refused = {}, unread
                failed.update((k, exc) for k in unread)
            for key in unread:
                if key in refused:
                    failed.setdefault(key, MirrorError(f"{key[0]}/{key[1]}: offset refused"))
                    continue
                offset, epoch = committed.get(key, (None, None))
                if offset is None or offset < asked[key] or epoch is None:
                    # the mirror had not caught up, or committed no epoch: nothing to tell by
                    answers[key] = None
                else:
                    # at the start, or above it: the reset policy moved a start whose
                    # position lay past a cut log's end ("latest" skipped what was written
                    # from the cut to the end, silently: an attack on 766b7cb)
                    epochs[key] = epoch
        waiting = []
        to_ask: dict[str, dict[int, int]] = {}
        for key, epoch in epochs.items():
            first = self._first_read(key)
            if first is None:
                waiting.append(key)  # (until its first records are read)
            elif first[1] == epoch and first[0] >= asked[key]:
                answers[key] = None  # written under the epoch of what was read before them
            else:
                to_ask.setdefault(key[0], {})[key[1]] = epoch
        for topic, partitions in to_ask.items():  # (one request per topic and leader)
            self.asked += len(partitions)
            self.requests += 1
            try:
                ends = dict(self._epoch_ends(topic, partitions))
            except Exception as exc:
                ends = dict.fromkeys(partitions, exc)
            for partition in partitions:
                key = (topic, partition)
                end = ends.get(partition, NetworkError(f"{topic}/{partition}: no answer"))
                if isinstance(end, Exception):
                    failed[key] = end
                else:
                    answers[key] = end if end is not None and end < asked[key] else None
        with self._lock:
            told = self._settle(asked, ids, epochs, answers, failed, waiting)
            retry = any(k in self._pending for k in failed)
        for key, start, cut, number in told:
            if cut is not None:
                log.info("%s: %s/%d: its log was cut at %d, below %d where its member starts",
                         self._name, key[0], key[1], cut, start)  # fmt: skip
            self._answered(key, number, cut)
        return retry

    def _settle(
        self,
        asked: Mapping[Key, int],
        ids: Mapping[Key, int],
        epochs: Mapping[Key, int],
        answers: Mapping[Key, int | None],
        failed: Mapping[Key, Exception],
        waiting: Sequence[Key],
    ) -> list[tuple[Key, int, int | None, int]]:
        """(Under the lock) the checks' new states; those answered, to tell. A check
        forgotten or asked anew meanwhile is left as it is."""
        current = [k for k in asked if k in self._pending and self._ids.get(k) == ids[k]]
        told = []
        for key in current:
            if key in epochs:
                self._epochs[key] = epochs[key]
            if key in answers:
                self._forget(key)
                told.append((key, asked[key], answers[key], ids[key]))
            elif key in failed:
                tries = self._tries[key] = self._tries.get(key, 0) + 1
                if tries >= ATTEMPTS:
                    self._forget(key)
                    self.given_up += 1
                    log.warning(
                        "%s: %s/%d: cannot tell whether its log was cut below %d while no "
                        "member read it (%s), %d times: reading on unchecked",
                        self._name, key[0], key[1], asked[key], failed[key], tries,
                    )  # fmt: skip
                    told.append((key, asked[key], None, ids[key]))
            elif key in waiting:
                if self._first_read(key) is not None:  # (read since: seen() found it pending)
                    self._wake.set()
                    continue
                del self._pending[key]
                self._waiting[key] = asked[key]
        return told


class StartChecks:
    """The member fetcher's side of the checks (its fetch thread's, but for the answers):
    which partitions started, their first records held until their check answers
    (``hold`` seconds at most), and the cuts found, each told to the partition's fetch.

    ``wake`` is called (on the checks' thread) when an answer waits to be acted on."""

    def __init__(
        self,
        committed: ReadCommitted,
        epoch_ends: EpochEnds,
        first_read: FirstRead,
        wake: Callable[[], None],
        name: str,
        hold: float | None = None,
    ) -> None:
        self._checks = CutChecks(committed, epoch_ends, first_read, self._answered, name)
        self._wake = wake
        self._hold = CHECK_HOLD if hold is None else hold
        self._lock = threading.Lock()
        self._done: dict[Key, tuple[int, int | None]] = {}  # (under the lock) answers to act on
        self._started: set[Key] = set()  # checked since they were last dropped
        #: key -> (hold until, its check's number); the hold starts with its first records
        #: (an idle start's first records come any time later)
        self._checking: dict[Key, tuple[float | None, int]] = {}
        self._held: dict[Key, Read] = {}
        self._cuts: dict[Key, int] = {}  # found, not told yet (no fetch of it was waiting)

    @property
    def checks(self) -> CutChecks:
        return self._checks

    def fetch(self, key: Key, offset: int, now: float) -> None:
        """A fetch of ``key`` from ``offset`` is asked: the first since it was dropped is a
        start, checked; a held read from another offset is not its answer any more."""
        held = self._held.get(key)
        if held is not None and held.offset != offset:
            del self._held[key]
        if key not in self._started:
            self._started.add(key)
            self._checking[key] = (None, self._checks.check(key, offset))

    def drop(self, key: Key) -> None:
        self._started.discard(key)
        self._checking.pop(key, None)
        self._held.pop(key, None)
        self._cuts.pop(key, None)
        self._checks.forget(key)
        with self._lock:
            self._done.pop(key, None)

    def hold(self, key: Key, read: Read, now: float) -> bool:
        """Whether ``read`` (of ``key``'s records) waits for its start's check."""
        checking = self._checking.get(key)
        if checking is None or read.error is not None:
            return False
        until, number = checking
        if until is None:  # its first records: its check, waiting for them, goes on
            until = now + self._hold
            self._checking[key] = (until, number)
            self._checks.seen(key)
        if until <= now:
            return False
        self._held[key] = read
        return True

    def wait(self, now: float) -> float | None:
        """How long until a held read is answered unchecked, if one is held."""
        if not self._held:
            return None
        return max(0.0, min(self._checking[k][0] or now for k in self._held) - now)

    def answers(self, fetches: dict[Key, Fetch], now: float) -> list[Event]:
        """What the checks' answers and the hold's end answer, to the fetches waiting (each
        answered is taken out of ``fetches``)."""
        if not (self._done or self._held or self._cuts):
            return []
        with self._lock:
            done, self._done = self._done, {}
        out: list[Event] = []
        for key, (number, cut) in done.items():
            checking = self._checking.get(key)
            if checking is None or checking[1] != number:
                continue  # (dropped, or started again since)
            del self._checking[key]
            held = self._held.pop(key, None)
            if cut is not None:
                self._cuts[key] = cut
            elif held is not None:
                _release(held, fetches, out)
        for key in [k for k in self._held if (self._checking[k][0] or now) <= now]:
            # no answer within the hold: answered unchecked (a cut found later is told then)
            _release(self._held.pop(key), fetches, out)
        for key in [k for k in self._cuts if k in fetches]:
            fetch = fetches.pop(key)
            out.append(OutOfRange(fetch.token, key[0], key[1], -1, -1, self._cuts.pop(key)))
        return out

    def close(self) -> None:
        self._checks.close()

    def join(self, timeout: float) -> None:
        self._checks.join(timeout)

    def _answered(self, key: Key, number: int, cut: int | None) -> None:
        with self._lock:
            self._done[key] = (number, cut)
        self._wake()


def _release(read: Read, fetches: dict[Key, Fetch], out: list[Event]) -> None:
    """A held read, answered to its partition's fetch if that still asks from its offset."""
    key = (read.topic, read.partition)
    fetch = fetches.get(key)
    if fetch is not None and fetch.offset == read.offset:
        del fetches[key]
        out.append(Fetched(fetch.token, read.topic, read.partition, read.records, read.log_end))
