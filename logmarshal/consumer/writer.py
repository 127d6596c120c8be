"""Coordination writes for a consumer core: one thread for every coordination partition
where the cluster writes without waiting (the network one) or cannot fail apart (the
embedded one), else one thread per coordination partition.

Writes to one coordination partition keep their order (a heartbeat never overtakes the
reservation before it), and over the network a partition whose broker is down holds up only
its own writes: claims coordinated elsewhere keep heartbeating (a single writer once blocked
them all). What one step of the core asks for a partition (a heartbeat pass) goes in one
call, and its answers come back together. On the embedded cluster (one directory in this
process: no partition is away while the others answer) one thread writes what a step asks
for every partition, and answers it all at once: a heartbeat pass's records, one per
coordination partition, then cost one wake-up and one step of the core, not one each. Over
the network (``asynchronous``) one thread hands every partition's writes to the cluster
without waiting, and the answers that come together (the cluster's thread serves the
delivery reports: ``network.reports``) come back to it and go to the core in one call: a
dead partition's writes wait for their own answers only, and a write is sent the moment
it is asked for, behind the ones in flight (librdkafka keeps a partition's order).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence

from ..core import Write, WriteFailed, Written
from ..errors import ClosedError
from ..marshaler import Landed, Marshaler

__all__ = ["CoordinationWriter"]

log = logging.getLogger(__name__)

_STOP = None
#: the most records one write carries
MAX_BATCH = 512

#: queued writes: (coordination partition, token, key, value), in the order asked
Item = list[tuple[int, int, bytes, bytes]]
#: the queue of the one thread that writes to every partition (``together``, ``asynchronous``)
_ALL = -1


def _chunks(writes: Item) -> Iterator[dict[int, Item]]:
    """``writes`` by partition (each in the order asked), in rounds of at most ``MAX_BATCH``
    of each partition's: a partition's second round comes after its first."""
    by_cp: dict[int, Item] = {}
    for entry in writes:
        by_cp.setdefault(entry[0], []).append(entry)
    for start in range(0, max(len(w) for w in by_cp.values()), MAX_BATCH):
        yield {cp: w[start : start + MAX_BATCH] for cp, w in by_cp.items() if len(w) > start}


class _Answers:
    """Queued for the asynchronous writer from the cluster's thread: partitions of a
    handed-over call answered together (``finish`` says where each landed: on the writer's
    thread, since it may read the log back)."""

    __slots__ = ("chunk", "finish")

    def __init__(
        self, chunk: dict[int, Item], finish: Callable[[], dict[int, list[Landed] | Exception]]
    ) -> None:
        self.chunk = chunk
        self.finish = finish

    @staticmethod
    def queue_to(
        q: queue.SimpleQueue[Item | _Answers | None], chunk: dict[int, Item]
    ) -> Callable[[Callable[[], dict[int, list[Landed] | Exception]]], None]:
        """The ``done`` of a handed-over call: its answers go to the writer's queue."""

        def done(finish: Callable[[], dict[int, list[Landed] | Exception]]) -> None:
            q.put(_Answers(chunk, finish))

        return done


class CoordinationWriter:
    """Carries ``Write`` actions out; answers each with ``Written`` or ``WriteFailed``.

    ``together``: one thread writes to every coordination partition (a cluster whose
    partitions cannot be down apart: the embedded one); ``asynchronous``: one thread hands
    every partition's writes over without waiting (:attr:`Marshaler.writes_async`: the
    network one); else a thread per partition."""

    def __init__(
        self,
        marshaler: Marshaler,
        answer: Callable[[Sequence[Written | WriteFailed]], None],
        name: str,
        *,
        together: bool = False,
        asynchronous: bool = False,
        on_closed: Callable[[ClosedError], None] | None = None,
    ) -> None:
        self._marshaler = marshaler
        self._answer = answer
        #: a write met the cluster (or the Marshaler) closed while we were not stopping: each
        #: failed at once, the core wrote it again at once, and the thread spun a core
        self._on_closed = on_closed
        self._name = name
        self._together = together
        self._async = asynchronous
        self._one = together or asynchronous
        self._queues: dict[int, queue.SimpleQueue[Item | _Answers | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False
        # every thread from the start: a member's threads are the same whatever it holds
        for cp in [_ALL] if self._one else range(marshaler.coordination_partitions):
            self._queue(cp)

    def _queue(self, cp: int) -> queue.SimpleQueue[Item | _Answers | None]:
        """Under the lock (or before any other thread): ``cp``'s queue and thread."""
        if self._one:
            cp = _ALL
        q = self._queues.get(cp)
        if q is None:
            q = self._queues[cp] = queue.SimpleQueue()
            what = "all" if cp == _ALL else str(cp)
            thread = threading.Thread(
                target=self._run_async if self._async else self._run,
                args=(q,),
                name=f"{self._name}:write:{what}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        return q

    def write(self, writes: Sequence[Write]) -> None:
        """Queue ``writes`` (in order); each partition's share goes out as one call."""
        by_queue: dict[int, Item] = {}
        for w in writes:
            by_queue.setdefault(_ALL if self._one else w.cp, []).append(
                (w.cp, w.token, w.key, w.value)
            )
        for cp, item in by_queue.items():
            with self._lock:
                if self._stopped:
                    return  # closed: nothing more is written, and nobody waits for an answer
                q = self._queue(cp)
            q.put(item)

    def _run(self, q: queue.SimpleQueue[Item | _Answers | None]) -> None:
        while True:
            item = q.get()
            batch: Item = []
            while item is not _STOP:
                assert not isinstance(item, _Answers)  # (only the asynchronous writer's)
                batch.extend(item)
                if len(batch) >= MAX_BATCH or q.empty():
                    break
                item = q.get()
            if batch:
                self._send(batch)
            if item is _STOP:
                return

    def _run_async(self, q: queue.SimpleQueue[Item | _Answers | None]) -> None:
        """Hand over what is queued, and pass on the answers that came meanwhile in one
        call; once stopped, until every write handed over was answered."""
        in_flight = 0  # partitions' writes handed over and not answered
        stopping = False
        while True:
            item = q.get()
            writes: Item = []
            answers: list[Written | WriteFailed] = []
            while True:
                if item is _STOP:
                    stopping = True
                elif isinstance(item, _Answers):
                    results = item.finish()
                    for cp, written in results.items():
                        answers.extend(self._answers(cp, item.chunk[cp], written))
                    in_flight -= len(results)
                else:
                    writes.extend(item)
                if q.empty():
                    break
                item = q.get()
            if writes:
                in_flight += self._hand_over(q, writes, answers)
            if answers:
                self._answer(answers)
            if stopping and in_flight <= 0:
                return

    def _hand_over(
        self,
        q: queue.SimpleQueue[Item | _Answers | None],
        writes: Item,
        answers: list[Written | WriteFailed],
    ) -> int:
        """Hand ``writes`` to the cluster, each partition's share in calls of ``MAX_BATCH``
        (in order); how many partitions' writes are now in flight (a call refused at once is
        answered into ``answers``)."""
        handed = 0
        for chunk in _chunks(writes):
            try:
                self._marshaler.write_records_async(
                    {cp: [(k, v) for _, _, k, v in w] for cp, w in chunk.items()},
                    _Answers.queue_to(q, chunk),
                )
            except Exception as exc:
                for cp, w in chunk.items():
                    answers.extend(self._answers(cp, w, exc))
            else:
                handed += len(chunk)
        return handed

    def _send(self, batch: Item) -> None:
        """What queued up meanwhile, each partition's share in calls of ``MAX_BATCH`` (in
        order, one flush each; together, every partition's in one call); answered all
        together."""
        answers: list[Written | WriteFailed] = []
        for chunk in _chunks(batch):
            if self._together:
                answers.extend(self._write_many(chunk))
            else:
                for cp, writes in chunk.items():
                    answers.extend(self._write(cp, writes))
        self._answer(answers)

    def _write(self, cp: int, writes: Item) -> list[Written | WriteFailed]:
        written: list[Landed] | Exception
        try:
            written = self._marshaler.write_records(cp, [(k, v) for _, _, k, v in writes])
        except Exception as exc:
            written = exc
        return self._answers(cp, writes, written)

    def _write_many(self, chunk: dict[int, Item]) -> list[Written | WriteFailed]:
        try:
            landed = self._marshaler.write_records_many(
                {cp: [(k, v) for _, _, k, v in writes] for cp, writes in chunk.items()}
            )
        except Exception as exc:
            landed = dict.fromkeys(chunk, exc)
        out: list[Written | WriteFailed] = []
        for cp, writes in chunk.items():
            out.extend(self._answers(cp, writes, landed[cp]))
        return out

    def _answers(
        self, cp: int, writes: Item, written: list[Landed] | Exception
    ) -> list[Written | WriteFailed]:
        if isinstance(written, Exception):
            if not isinstance(written, ClosedError):
                log.info("%s: coordination write to %d failed: %s", self._name, cp, written)
            elif self._on_closed is not None and not self._stopped:
                self._on_closed(written)
            return [WriteFailed(token) for _, token, _, _ in writes]
        return [Written(token, written[i].offset) for i, (_, token, _, _) in enumerate(writes)]

    def stop(self, timeout: float | None) -> None:
        """Stop after the writes queued so far."""
        with self._lock:
            self._stopped = True
            for q in self._queues.values():
                q.put(_STOP)
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
