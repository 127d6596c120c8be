"""One fetch loop per member, for a consumer core's ``Fetch`` and ``LookUp`` actions.

Every held partition is read through one :class:`~logmarshal.cluster.PartitionReader` (over
the network one librdkafka consumer, assigned and unassigned as claims change; embedded, a
long poll woken by appends), so a member's threads and its idle cost do not grow with the
partitions it holds (docs/architecture.md, "Consumer core: decisions apart from threads"). A fetch
is answered when records arrive, never with an empty answer after a timeout: an idle
partition wakes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..cluster import Cluster, PartitionReader, Read, bounds_one_by_one
from ..core import Bounds, Event, Fetch, Fetched, LookUp, OutOfRange
from ..errors import ClosedError, OffsetOutOfRange, UnknownPartition, UnknownTopic

__all__ = ["MemberFetcher", "PollingReader"]

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: the longest a fetch loop sleeps with nothing to do (a wake ends it at once)
IDLE_WAIT = 1.0


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


class MemberFetcher:
    """Carries a core's ``Fetch`` and ``LookUp`` actions out with one thread and one
    :class:`~logmarshal.cluster.PartitionReader`; answers with ``Fetched``, ``OutOfRange``
    and ``Bounds`` through ``answer`` (several at once when they came together).

    A newer request for a partition replaces an older one not answered yet (the core asks
    again with a new token after a move); :meth:`drop` forgets a partition's request and
    stops reading it (a revoked claim: nothing of it is answered after that)."""

    def __init__(
        self,
        cluster: Cluster,
        answer: Callable[[Sequence[Event]], None],
        *,
        max_bytes: int,
        max_wait: float,
        name: str,
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
        self._drops: set[Key] = set()
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # -- any thread -------------------------------------------------------------------

    def request(self, action: Fetch | LookUp) -> None:
        with self._lock:
            self._requests[(action.topic, action.partition)] = action
        self._reader.wake()

    def drop(self, keys: Sequence[Key]) -> None:
        with self._lock:
            for key in keys:
                self._requests.pop(key, None)
                self._drops.add(key)
        self._reader.wake()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._reader.wake()

    # -- the fetch thread -------------------------------------------------------------

    def _run(self) -> None:
        tokens: dict[Key, int] = {}  # the Fetch each wanted partition answers
        retries: dict[Key, tuple[float, Fetch | LookUp]] = {}
        backoff: dict[Key, float] = {}
        reader = self._reader
        try:
            while True:
                with self._lock:
                    if self._stopped:
                        return
                    requests, self._requests = self._requests, {}
                    drops, self._drops = self._drops, set()
                now = time.monotonic()
                for key in drops:
                    tokens.pop(key, None)
                    retries.pop(key, None)
                    backoff.pop(key, None)
                    reader.drop(*key)
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
                        tokens[key] = action.token
                        reader.want(key[0], key[1], action.offset)
                    else:
                        tokens.pop(key, None)
                if lookups:
                    for key, found in reader.bounds(list(lookups)).items():
                        lookup = lookups[key]
                        if isinstance(found, ClosedError):
                            return
                        if isinstance(found, Exception):
                            self._failed(key, lookup, found, retries, backoff, now)
                        else:
                            events.append(Bounds(lookup.token, key[0], key[1], *found))
                if events:
                    self._answer(events)
                    events = []
                wait = IDLE_WAIT
                if retries:
                    wait = max(0.0, min(wait, min(at for at, _ in retries.values()) - now))
                reads = reader.poll(wait)
                with self._lock:
                    dropping = set(self._drops) if self._drops else ()
                for read in reads:
                    key = (read.topic, read.partition)
                    token = tokens.pop(key, None)
                    if token is None or key in dropping:
                        continue  # dropped (maybe while it was read)
                    error = read.error
                    if error is None:
                        backoff.pop(key, None)
                        events.append(Fetched(token, read.topic, read.partition, read.records))
                    elif isinstance(error, OffsetOutOfRange):
                        events.append(
                            OutOfRange(
                                token,
                                read.topic,
                                read.partition,
                                error.log_start_offset,
                                error.log_end_offset,
                            )
                        )
                    elif isinstance(error, ClosedError):
                        return
                    else:
                        action = Fetch(token, read.topic, read.partition, read.offset)
                        self._failed(key, action, error, retries, backoff, time.monotonic())
                if events:
                    self._answer(events)
        except Exception:
            log.exception("%s: the fetch loop stopped", self._name)
        finally:
            reader.close()

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
