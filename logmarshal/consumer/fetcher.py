"""One fetch loop per member, for a consumer core's ``Fetch`` and ``LookUp`` actions.

Every held partition is read through one :class:`~logmarshal.cluster.PartitionReader` (over
the network one librdkafka consumer, assigned and unassigned as claims change; embedded, a
long poll woken by appends), so a member's threads and its idle cost do not grow with the
partitions it holds (docs/architecture.md, "Consumer core: decisions apart from threads"). A fetch
is answered when records arrive, never with an empty answer after a timeout: an idle
partition wakes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ..cluster import Cluster, PartitionReader, Read, bounds_one_by_one
from ..core import Bounds, Event, Fetch, Fetched, LookUp, OutOfRange
from ..errors import ClosedError, NetworkError, OffsetOutOfRange, UnknownPartition, UnknownTopic
from .committed_reads import CommittedReads
from .cut_checks import ReadCommitted, StartChecks

__all__ = ["MemberFetcher", "PollingReader"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: the longest a fetch loop sleeps with nothing to do (a wake ends it at once)
IDLE_WAIT = 1.0
#: how long the fetch thread stays parked after the caller's last pass that answered: a
#: caller that stops polling (a long batch, a pause) leaves the reading to the thread again
CALLER_HOLD = 0.1
#: how long the caller waits for the fetch thread to end its pass and leave it the reader
#: (a pass ends within one librdkafka wait once woken: 2 ms while records flow, 50 ms idle)
TAKEOVER_WAIT = 0.06
#: how long the fetch thread, ending, waits for a read of Kafka's committed offsets in flight
#: (a slow coordinator's read is not waited for to its end: its answer is dropped)
READS_JOIN = 1.0


class PollingReader:
    """A :class:`~logmarshal.cluster.PartitionReader` made of :meth:`Cluster.fetch` calls,
    for a cluster that offers none (a wrapper such as ``FaultyCluster``): it fetches every
    wanted partition in turn and sleeps ``idle`` seconds when none had records, so it polls
    each idle partition; the embedded and network clusters have readers that do not."""

    def __init__(self, cluster: Cluster, max_bytes: int, idle: float) -> None:
        self._cluster = cluster
        self._max_bytes = max_bytes
        self._idle = idle
        self._wanted: dict[Key, int] = {}
        self._cond = threading.Condition()
        self._woken = False

    def want(self, topic: str, partition: int, offset: int) -> None:
        self._wanted[(topic, partition)] = offset

    def drop(self, topic: str, partition: int) -> None:
        self._wanted.pop((topic, partition), None)

    def bounds(self, keys: Sequence[Key]) -> dict[Key, tuple[int, int] | Exception]:
        return bounds_one_by_one(self._cluster, keys)

    def poll(self, timeout: float) -> list[Read]:
        out = []
        for (topic, partition), offset in list(self._wanted.items()):
            try:
                records = self._cluster.fetch(topic, partition, offset, max_bytes=self._max_bytes)
            except Exception as exc:
                out.append(Read(topic, partition, offset, [], exc))
            else:
                if not records:
                    continue
                out.append(Read(topic, partition, offset, records))
            del self._wanted[(topic, partition)]
        if not out:
            with self._cond:
                if not self._woken:
                    self._cond.wait(min(timeout, self._idle))
                self._woken = False
        return out

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def close(self) -> None:
        self._wanted.clear()


def _offsets(committed_epochs: ReadCommitted, keys: Sequence[Key]) -> dict[Key, int]:
    """Kafka's committed offsets of ``keys``, without their leader epochs."""
    return {key: offset for key, (offset, _) in committed_epochs(keys).items()}


class MemberFetcher:
    """Carries a core's ``Fetch`` and ``LookUp`` actions out with one thread and one
    :class:`~logmarshal.cluster.PartitionReader`; answers with ``Fetched``, ``OutOfRange``
    and ``Bounds`` through ``answer`` (several at once when they came together).

    A newer request for a partition replaces an older one not answered yet (the core asks
    again with a new token after a move); :meth:`drop` forgets a partition's request and
    stops reading it (a revoked claim: nothing of it is answered after that).

    The caller's thread may drive the reader itself (:meth:`pump`, from ``poll()`` when the
    core has nothing to hand out), as a raw confluent-kafka loop does: while its passes
    find records the fetch thread stays parked, so records go from librdkafka to the core
    on one thread, without a hand-over (and the GIL lost) at every answer. Whichever thread
    holds the role runs the same pass, so what is answered, dropped and retried is the
    same; the fetch thread takes over again when a caller's pass finds nothing, when a
    ``LookUp`` waits, and when the caller has not pumped for ``CALLER_HOLD``."""

    def __init__(
        self,
        cluster: Cluster,
        answer: Callable[[Sequence[Event]], None],
        *,
        max_bytes: int,
        max_wait: float,
        name: str,
        committed: Callable[[Sequence[Key]], Mapping[Key, int]] | None = None,
        committed_epochs: ReadCommitted | None = None,
    ) -> None:
        opener = getattr(cluster, "open_reader", None)
        self._reader: PartitionReader = (
            opener(max_bytes=max_bytes)
            if callable(opener)
            else PollingReader(cluster, max_bytes, max_wait)
        )
        self._answer = answer
        self._max_wait = max_wait
        self._name = name
        self._lock = threading.Lock()
        self._requests: dict[Key, Fetch | LookUp] = {}
        #: Kafka's committed offsets of the group, read for a LookUp of a partition the log
        #: has no position for, off this thread; such a look-up waits here for its answer
        if committed is None and committed_epochs is not None:
            committed = functools.partial(_offsets, committed_epochs)
        self._reads = None if committed is None else CommittedReads(committed, self._unparked, name)
        #: with the leader epochs committed with them, where the cluster can ask a leader
        #: where an epoch ends: is a partition's start below a cut made while no member
        #: read it (:mod:`.cut_checks`)? Its first records wait for the answer
        epoch_ends = getattr(cluster, "epoch_ends", None)
        self._starts = (
            StartChecks(committed_epochs, epoch_ends, self._first_read, self._checked, name)
            if committed_epochs is not None and callable(epoch_ends)
            else None
        )
        self._parked: dict[Key, LookUp] = {}
        self._drops: set[Key] = set()
        self._stopped = False
        #: whoever holds it uses the reader and the pass state below (fetch thread or caller)
        self._role = threading.Lock()
        self._fetches: dict[Key, Fetch] = {}  # the Fetch each wanted partition answers
        self._retries: dict[Key, tuple[float, Fetch | LookUp]] = {}
        self._backoff: dict[Key, float] = {}
        self._closed = False  # the reader is closed (under the role)
        #: the reader's last poll raised: the fetch thread waits this long before the next
        #: pass (0: it did not), doubling while it goes on failing
        self._failing = 0.0
        self._stopping = threading.Event()
        #: readers whose poll(0) never waits may be driven by the caller (the network one)
        self.pumps = bool(getattr(self._reader, "caller_pumps", False))
        self._hot_at = 0.0  # monotonic time of the caller's last pass that answered (0: none)
        self._claim = False  # the caller asked for the role while the thread held it
        self._unpark = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # -- any thread -------------------------------------------------------------------

    @property
    def renewals(self) -> int:
        """librdkafka consumers the reader replaced after a stall (network readers only)."""
        return int(getattr(self._reader, "renewals", 0))

    def request(self, action: Fetch | LookUp) -> None:
        with self._lock:
            self._requests[(action.topic, action.partition)] = action
            self._parked.pop((action.topic, action.partition), None)  # (replaced)
        if isinstance(action, LookUp) and self._hot_at:
            self._handback()  # the fetch thread answers look-ups, not the caller
        self._reader.wake()

    def drop(self, keys: Sequence[Key]) -> None:
        with self._lock:
            for key in keys:
                self._requests.pop(key, None)
                self._drops.add(key)
                self._parked.pop(key, None)
                if self._reads is not None:
                    self._reads.forget(key)
        self._reader.wake()

    def epoch_of(self, key: Key, offset: int) -> int | None:
        """(Any thread) the leader epoch of ``key``'s record at ``offset`` as it was read,
        where the reader knows it (the offsets mirror commits it: :mod:`.cut_checks`)."""
        epoch_of = getattr(self._reader, "epoch_of", None)
        return None if epoch_of is None else epoch_of(key[0], key[1], offset)

    def _first_read(self, key: Key) -> tuple[int, int] | None:
        """(Any thread) the offset and leader epoch of the first record read of ``key``
        since it was wanted after a drop, where the reader knows it."""
        first_read = getattr(self._reader, "first_read", None)
        return None if first_read is None else first_read(key[0], key[1])

    def _checked(self) -> None:
        """(The checks' thread) a start's check answered: the fetch thread acts on it."""
        if self._hot_at:
            self._handback()
        self._reader.wake()

    def _unparked(self, keys: Sequence[Key]) -> None:
        """(The reads' thread) ``keys``' committed offsets are read: their parked look-ups
        are asked again, and this time answered."""
        with self._lock:
            woken = False
            for key in keys:
                lookup = self._parked.pop(key, None)
                if lookup is not None:
                    self._requests.setdefault(key, lookup)
                    woken = True
        if woken:
            if self._hot_at:
                self._handback()
            self._reader.wake()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        if self._reads is not None:
            self._reads.close()
        if self._starts is not None:
            self._starts.close()
        self._stopping.set()
        self._unpark.set()
        self._reader.wake()

    # -- the caller's thread ------------------------------------------------------------

    def pump(self, wait: float) -> bool:
        """One pass on the caller's thread, without waiting for records: True if it answered
        something (through ``answer``). False when it did not (nothing on hand, a look-up
        waits, or the fetch thread kept the reader longer than ``wait``): the caller then
        waits for the fetch thread's answers; the thread does the waiting again."""
        if not self.pumps:
            return False
        if not self._role.acquire(blocking=False):
            # the fetch thread is in a pass: woken, it ends it within a librdkafka wait's
            # slice and parks instead of starting the next one
            self._claim = True
            self._reader.wake()
            if not self._role.acquire(timeout=max(0.0, min(wait, TAKEOVER_WAIT))):
                self._claim = False
                return False
        try:
            self._claim = False
            if self._closed:
                return False
            with self._lock:
                if self._stopped or any(
                    isinstance(a, LookUp)
                    for a in (*self._requests.values(), *(a for _, a in self._retries.values()))
                ):
                    answered = False
                else:
                    self._hot_at = time.monotonic()
                    answered = None
            if answered is None:
                try:
                    answered = self._pass(0.0) is True
                except Exception:  # as in the fetch thread: reading stops, said once
                    log.exception("%s: the fetch loop stopped", self._name)
                    self.stop()
                    return False
                if self._failing:
                    answered = False  # the fetch thread waits, then tries again
        finally:
            self._role.release()
        if not answered:
            self._handback()
        return answered

    def _handback(self) -> None:
        """The fetch thread drives the reader again (it waits for records, answers look-ups)."""
        self._hot_at = 0.0
        self._unpark.set()

    # -- the fetch thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                hot_at = self._hot_at
                if hot_at:  # the caller drives: park until it hands back or stops pumping
                    left = hot_at + CALLER_HOLD - time.monotonic()
                    if left > 0:
                        self._unpark.wait(left)
                        self._unpark.clear()
                        with self._lock:
                            if self._stopped:
                                return
                        continue
                    self._hot_at = 0.0
                with self._role:
                    if self._pass(IDLE_WAIT) is None:
                        return
                    if self._claim:  # the caller waits for the reader: park
                        self._hot_at = time.monotonic()
                if self._failing:  # the reader failed: not again at once
                    self._stopping.wait(self._failing)
        except Exception:
            log.exception("%s: the fetch loop stopped", self._name)
        finally:
            with self._role:
                self._closed = True
                self._reader.close()
            for reads in (self._reads, self._starts):  # (one in flight: a moment only)
                if reads is not None:
                    reads.close()
                    reads.join(READS_JOIN)

    def _pass(self, wait: float) -> bool | None:
        """Take requests and drops, answer look-ups, wait up to ``wait`` for records and
        answer them: True if it answered something, None once stopped or closed."""
        fetches, retries, backoff = self._fetches, self._retries, self._backoff
        reader = self._reader
        with self._lock:
            if self._stopped:
                return None
            requests, self._requests = self._requests, {}
            drops, self._drops = self._drops, set()
        answered = False
        now = time.monotonic()
        starts = self._starts
        for key in drops:
            if starts is not None:
                starts.drop(key)
            fetches.pop(key, None)
            retries.pop(key, None)
            backoff.pop(key, None)
            try:
                reader.drop(*key)
            except ClosedError:
                return None
            except Exception:  # nothing of it is answered now (its fetch is forgotten)
                log.warning("%s: could not stop reading %s/%d", self._name, *key, exc_info=True)
        for key, (at, action) in list(retries.items()):
            if key in requests:
                del retries[key]  # a newer request replaces the retry
            elif at <= now:
                del retries[key]
                requests[key] = action
        events: list[Event] = []
        lookups = {k: a for k, a in requests.items() if isinstance(a, LookUp)}
        for key, action in requests.items():
            if isinstance(action, Fetch):
                fetches[key] = action
                if starts is not None:
                    starts.fetch(key, action.offset, now)
                try:
                    reader.want(key[0], key[1], action.offset)
                except ClosedError:
                    return None
                except Exception as exc:  # (librdkafka refused the assignment: again later)
                    self._want_failed(key, action, exc)
            else:
                fetches.pop(key, None)
        if lookups:
            try:
                bounds = reader.bounds(list(lookups))
            except ClosedError:
                return None
            except Exception as exc:  # (the reader's own failure: each look-up is retried)
                bounds = {key: exc for key in lookups}
            waiting = []
            for key, lookup in lookups.items():
                found = bounds.get(key)
                if isinstance(found, ClosedError):
                    return None
                if found is None:  # no answer for it: asked again, never left waiting
                    found = NetworkError(f"no bounds of {key[0]}/{key[1]} in the answer")
                if isinstance(found, Exception):
                    self._failed(key, lookup, found, retries, backoff, now)
                    continue
                committed: int | None = None
                if lookup.unpositioned and self._reads is not None:
                    has, committed = self._reads.take(key)
                    if not has:  # parked until it is read (the bounds are read again then)
                        waiting.append(key)
                        continue
                events.append(Bounds(lookup.token, key[0], key[1], *found, committed))
            if waiting and self._reads is not None:
                with self._lock:
                    # (not one replaced or dropped since this pass took its requests)
                    waiting = [
                        k for k in waiting if k not in self._requests and k not in self._drops
                    ]
                    for key in waiting:
                        self._parked[key] = lookups[key]
                # an answer that came since ``take`` is told at once (unparks the look-up)
                self._reads.ask(waiting)
        if events:
            self._answer(events)
            answered = True
            events = []
        if starts is not None:
            events = starts.answers(fetches, now)
            held = starts.wait(now)
            if events or held is not None:  # (answered now: no wait for more records first)
                wait = 0.0 if events else min(wait, held or 0.0)
        if retries:
            wait = max(0.0, min(wait, min(at for at, _ in retries.values()) - now))
        try:
            reads = reader.poll(wait)
        except ClosedError:
            return None
        except Exception as exc:
            self._poll_failed(exc)
            reads = []
        else:
            self._failing = 0.0
        with self._lock:
            dropping = set(self._drops) if self._drops else ()
        read_at = time.monotonic()
        for read in reads:
            key = (read.topic, read.partition)
            fetch = fetches.pop(key, None)
            if fetch is None or key in dropping:
                continue  # dropped (maybe while it was read)
            if starts is not None and starts.hold(key, read, read_at):
                fetches[key] = fetch  # (answered when its start's check answers)
                continue
            token = fetch.token
            error = read.error
            if error is None:
                backoff.pop(key, None)
                events.append(
                    Fetched(token, read.topic, read.partition, read.records, read.log_end)
                )
            elif isinstance(error, OffsetOutOfRange):
                events.append(
                    OutOfRange(
                        token,
                        read.topic,
                        read.partition,
                        error.log_start_offset,
                        error.log_end_offset,
                        getattr(error, "divergence", None),  # (LogTruncated's)
                    )
                )
            elif isinstance(error, ClosedError):
                return None
            else:
                action = Fetch(token, read.topic, read.partition, read.offset)
                self._failed(key, action, error, retries, backoff, time.monotonic())
        if events:
            self._answer(events)
            answered = True
        return answered

    def _poll_failed(self, exc: Exception) -> None:
        """The reader's poll raised (a ListOffsets request that timed out while a Kafka
        node restarted, in CI on 2026-12-06): reading goes on. Every fetch waiting is asked
        of the reader again, at its offset (what the failed poll took from the read-ahead
        is read again), and the next pass waits, doubling up to a second while it fails.
        Before, the fetch loop stopped and the member held its partitions handing out
        nothing, for good."""
        delay = min(max(self._failing * 2, 0.02), 1.0)
        log.warning(
            "%s: reading failed (%s: %s); trying again in %.2f s",
            self._name,
            type(exc).__name__,
            exc,
            delay,
            exc_info=not self._failing,  # the traceback once per run of failures
        )
        self._failing = delay
        for key, fetch in list(self._fetches.items()):
            try:
                self._reader.want(key[0], key[1], fetch.offset)
            except Exception as again:  # (closed: the next poll says so)
                self._want_failed(key, fetch, again)

    def _want_failed(self, key: Key, fetch: Fetch, exc: Exception) -> None:
        """The reader refused a want: no read of ``key`` is answered until it is asked again
        (an earlier want of it, at another offset, must not answer this fetch)."""
        self._fetches.pop(key, None)
        with contextlib.suppress(Exception):
            self._reader.drop(*key)
        self._failed(key, fetch, exc, self._retries, self._backoff, time.monotonic())

    def _failed(
        self,
        key: Key,
        action: Fetch | LookUp,
        exc: Exception,
        retries: dict[Key, tuple[float, Fetch | LookUp]],
        backoff: dict[Key, float],
        now: float,
    ) -> None:
        """Ask again later: a missing topic or partition after ``max_wait``, any other
        failure with a backoff doubling up to a second."""
        if isinstance(exc, UnknownTopic | UnknownPartition):
            log.warning("%s: cannot fetch %s/%d: %s", self._name, *key, exc)
            delay = self._max_wait
        else:
            log.info("%s: fetching %s/%d failed (%s); retrying", self._name, *key, exc)
            delay = backoff.get(key, 0.02)
            backoff[key] = min(delay * 2, 1.0)
        retries[key] = (now + delay, action)
