"""One long-polling fetch thread per held partition, for a consumer core's ``Fetch`` and
``LookUp`` actions: held partitions are fetched in parallel, and a slow one holds up no
other."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..cluster import Cluster
from ..core import Bounds, Event, Fetch, Fetched, LookUp, OutOfRange
from ..errors import ClosedError, OffsetOutOfRange, UnknownPartition, UnknownTopic

__all__ = ["PartitionFetcher"]

log = logging.getLogger(__name__)


class PartitionFetcher:
    """Answers the newest request for one partition; a newer request replaces an older one
    not started yet (the core asks again with a new token after a move)."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        partition: int,
        answer: Callable[[Event], None],
        *,
        max_bytes: int,
        max_wait: float,
        name: str,
    ) -> None:
        self._cluster = cluster
        self._topic = topic
        self._partition = partition
        self._answer = answer
        self._max_bytes = max_bytes
        self._max_wait = max_wait
        self._name = name
        self._cond = threading.Condition()
        self._request: Fetch | LookUp | None = None
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def request(self, action: Fetch | LookUp) -> None:
        with self._cond:
            self._request = action
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        backoff = 0.02
        while True:
            with self._cond:
                while self._request is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                request, self._request = self._request, None
            try:
                event = self._carry_out(request)
            except ClosedError:
                return
            except (UnknownTopic, UnknownPartition) as exc:
                log.warning("%s: cannot fetch %s/%d: %s", self._name, *self._key, exc)
                self._retry(request, self._max_wait)
                continue
            except Exception as exc:
                log.info("%s: fetching %s/%d failed (%s); retrying", self._name, *self._key, exc)
                self._retry(request, backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.02
            self._answer(event)

    @property
    def _key(self) -> tuple[str, int]:
        return (self._topic, self._partition)

    def _carry_out(self, request: Fetch | LookUp) -> Event:
        topic, partition = self._key
        if isinstance(request, LookUp):
            start = self._cluster.earliest_offset(topic, partition)
            end = self._cluster.latest_offset(topic, partition)
            return Bounds(request.token, topic, partition, start, end)
        try:
            records = self._cluster.fetch(
                topic,
                partition,
                request.offset,
                max_bytes=self._max_bytes,
                max_wait=self._max_wait,
            )
        except OffsetOutOfRange as exc:
            return OutOfRange(
                request.token, topic, partition, exc.log_start_offset, exc.log_end_offset
            )
        return Fetched(request.token, topic, partition, records)

    def _retry(self, request: Fetch | LookUp, delay: float) -> None:
        """Put ``request`` back after ``delay`` unless a newer one came or we were stopped."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopped or self._request is not None, delay)
            if self._request is None:
                self._request = request
