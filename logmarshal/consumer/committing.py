"""A Consumer's commit (ALO): messages handed out are handled, on the hot path of every
consumer that commits per batch (docs/performance.md, "Consumer"). Apart from the Consumer
so that its one lock and its books are all it touches. And AMO's give-back: messages
handed out that never reached user code (``take_back``)."""

from __future__ import annotations

import logging
import operator
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ..cluster import Message
from ..core import MemberCore

__all__ = ["OFFSET", "commit_messages", "refuse_non_messages", "take_back"]

log = logging.getLogger(__name__)

try:
    from .._fastconsume import offsets_of_one as _offsets_of_one
except ImportError:  # the optional extension is not built: commit() checks in Python
    _offsets_of_one = None

#: a Message's (topic, partition) and offset, as C-speed getters for the per-batch hot path
_TOPIC_PARTITION = operator.itemgetter(0, 1)
_TOPIC = operator.itemgetter(0)
_PARTITION = operator.itemgetter(1)
OFFSET = operator.itemgetter(2)


def commit_messages(
    consumer: Any,
    core: MemberCore,
    lock: threading.RLock | threading.Lock,
    metrics: Any,
    messages: tuple[Message, ...],
) -> bool:
    """Commit ``messages`` in ``core`` under ``lock``; whether any was outstanding."""
    if len(messages) == 1:
        message = messages[0]
        with lock:
            one = core.commit_one(message.topic, message.partition, message.offset)
        if one and metrics is not None:
            _counted(metrics, consumer, message.topic, 1)
        return one
    if _offsets_of_one is not None:  # a polled batch: one partition, checked in C
        got = _offsets_of_one(messages)
        if got is not None:
            with lock:
                n = core.commit(*got)
            if n and metrics is not None:
                _counted(metrics, consumer, got[0], n)
            return n > 0
    # C-speed, and without a tuple per message: a polled batch is of one partition
    topics, partitions = set(map(_TOPIC, messages)), set(map(_PARTITION, messages))
    keys = (
        {(topics.pop(), partitions.pop())}
        if len(topics) == 1 and len(partitions) == 1
        else set(map(_TOPIC_PARTITION, messages))
    )
    done = 0
    with lock:
        for key in keys:
            offsets = (
                map(OFFSET, messages)
                if len(keys) == 1
                else [m.offset for m in messages if (m.topic, m.partition) == key]
            )
            n = core.commit(key[0], key[1], offsets)
            if n and metrics is not None:
                _counted(metrics, consumer, key[0], n)
            done += n
    return done > 0


def _counted(metrics: Any, consumer: Any, topic: str, n: int) -> None:
    """The metrics told of a commit the core made: what they raise is logged, never the
    commit's (the Consumer took it for the core's failure and stopped, the commit made)."""
    try:
        metrics.committed(consumer, topic, n)
    except Exception:
        log.exception("the metrics of a commit of %d on %s failed", n, topic)


def refuse_non_messages(messages: tuple[Any, ...]) -> None:
    """TypeError naming the first of ``messages`` that is no Message (``commit(batch)``
    for ``commit(*batch)`` failed deep inside with AttributeError or IndexError), or a
    Message built by hand whose topic, partition or offset is of the wrong type. A commit
    that failed with none of them failed in the core."""
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(
                f"commit() takes messages (commit(*batch) for a polled batch), got {m!r:.80}"
            )
        if type(m.topic) is not str or not _is_int(m.partition) or not _is_int(m.offset):
            raise TypeError(f"commit() takes messages read by a consumer, got {m!r:.80}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def take_back(
    core: MemberCore,
    command: Callable[..., None],
    returned: deque[tuple[Sequence[Message], int]],
    name: str,
) -> dict[str, int]:
    """Under the Consumer's lock: give back what ``Consumer._give_back`` queued, each the
    end of a hand-out (``MemberCore.give_back``), in order; what the core refuses (a later
    batch of that partition was handed out, or a seek or a reset started its books again:
    it may have reached user code) is lost, as at a crash, and said. ``command`` runs a
    core call as the caller's (its other errors fail the core). Returns how many messages
    of each topic went back (counted as handed out already, and handed out again)."""
    given: dict[str, int] = {}
    while returned:
        messages, handout = returned.popleft()
        one = messages[0]
        try:
            command(core.give_back, one.topic, one.partition, messages, handout, mine=(ValueError,))
        except ValueError as exc:
            log.warning("%s: the rest of a batch was not given back: %s", name, exc)
        else:
            given[one.topic] = given.get(one.topic, 0) + len(messages)
    return given


class GivenBack:
    """(Under the Consumer's lock) messages of each topic given back (:func:`take_back`):
    the metrics counted them handed out when first polled, and do not count them again."""

    def __init__(self) -> None:
        self._owed: dict[str, int] = {}

    def add(self, given: dict[str, int]) -> None:
        for topic, count in given.items():
            self._owed[topic] = self._owed.get(topic, 0) + count

    def first(self, batch: Sequence[Message]) -> tuple[str, int]:
        """The batch's topic and how many of its messages count as handed out now.
        Given-back messages lead their partition's buffer and are handed out again first;
        those released with their partition instead come off a later batch of the topic."""
        topic = batch[0].topic
        owed = self._owed.get(topic)
        if not owed:
            return topic, len(batch)
        taken = min(owed, len(batch))
        if taken == owed:
            del self._owed[topic]
        else:
            self._owed[topic] = owed - taken
        return topic, len(batch) - taken
