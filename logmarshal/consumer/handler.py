"""``Consumer.run``: a handler called on every message, with retries and a dead-letter
topic, built only on the consumer's public ``poll``, ``commit`` and ``claims``."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from storage import NewRecord

from ..cluster import Cluster, Message
from ..errors import ClosedError, RetriableError, TopicExists, UnknownTopic
from ..marshaler import Marshaler
from ..retry import HandlerFailed, RetryPolicy

__all__ = ["Polled", "dead_letter", "dead_letter_retrying", "run_handler"]

log = logging.getLogger(__name__)


class Polled(Protocol):
    """The public part of a :class:`~logmarshal.Consumer` a handler loop is built on."""

    @property
    def mode(self) -> str: ...

    @property
    def marshaler(self) -> Marshaler: ...

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Message]: ...

    def commit(self, *messages: Message) -> bool: ...

    def claims(self) -> list[tuple[str, int]]: ...

    @property
    def fenced(self) -> bool: ...

    def close(self) -> None: ...

    #: the number of the batch the last poll returned (``HandOut.handout``)
    _handout: int

    def _give_back(self, messages: Sequence[Message], handout: int) -> None:
        """AMO: the end of that batch never reached user code (given back later)."""


def iterate(consumer: Polled) -> Iterator[Message]:
    """See :meth:`Consumer.__iter__`. A consumer that failed raises ConsumerFailed from its
    poll, closed or not: the loop does not end quietly then. AMO: a loop that ends before
    the end of a batch (``break``, an exception) gives the rest of it back."""
    while True:
        try:
            batch = consumer.poll(timeout=0.5)
        except ClosedError:
            return
        if not batch and consumer.fenced:
            return
        if consumer.mode != "amo":
            yield from batch
            continue
        handout = consumer._handout
        for i, message in enumerate(batch):
            try:
                yield message
            except GeneratorExit:  # (maybe long after, from any thread: given back later)
                consumer._give_back(batch[i + 1 :], handout)
                raise


def run_handler(
    consumer: Polled,
    handler: Callable[[Message], object],
    policy: RetryPolicy,
    rng: random.Random,
    *,
    stop: threading.Event | None,
    max_messages: int | None,
    poll_timeout: float,
    batch_size: int,
    closing: threading.Event,
) -> int:
    """See :meth:`Consumer.run`."""
    handled = 0
    while max_messages is None or handled < max_messages:
        if stop is not None and stop.is_set():
            break
        try:
            wanted = batch_size if max_messages is None else max_messages - handled
            batch = consumer.poll(poll_timeout, max_records=min(batch_size, wanted))
        except ClosedError:
            break
        handout = consumer._handout
        if not batch and consumer.fenced:
            # it never hands out again: return, so that whoever runs it restarts it (a new
            # instance) instead of waiting on a loop that polls nothing for good
            log.error("the consumer is fenced: run() returns (restart it as a new instance)")
            break
        for i, message in enumerate(batch):
            if consumer.mode == "alo" and not _holds(consumer, message):
                break  # lost meanwhile: whoever took over handles the rest
            try:
                done = _handle(consumer, handler, message, policy, rng, stop, closing)
            except HandlerFailed:
                # AMO: the rest of the batch never reached the handler: the close below
                # releases it with the partition (ALO: not committed, delivered again)
                consumer._give_back(batch[i + 1 :], handout)
                consumer.close()
                raise
            except BaseException:  # (a KeyboardInterrupt in the handler: it ends run())
                consumer._give_back(batch[i + 1 :], handout)
                raise
            if not done:  # (for a later poll, or the next holder)
                consumer._give_back(batch[i + 1 :], handout)
                break
            handled += 1
    return handled


def _holds(consumer: Polled, message: Message) -> bool:
    return (message.topic, message.partition) in consumer.claims()


def _handle(
    consumer: Polled,
    handler: Callable[[Message], object],
    message: Message,
    policy: RetryPolicy,
    rng: random.Random,
    stop: threading.Event | None,
    closing: threading.Event,
) -> bool:
    """Run the handler on one message with the retry policy; False: stop this batch."""
    attempt = 0
    while True:
        attempt += 1
        try:
            handler(message)
        except Exception as exc:
            if attempt >= policy.max_attempts:
                if policy.dead_letter_topic is not None:
                    if not _dead_letter_until_stored(
                        consumer, message, exc, policy, rng, stop, closing
                    ):
                        return False
                    _commit(consumer, message)
                    return True
                raise HandlerFailed(message, attempt, exc) from exc  # (run_handler closes)
            delay = policy.delay(attempt, rng)
            log.warning(
                "%r: handler failed on %s/%d@%d (attempt %d of %d): %r; retrying in %.3f s",
                consumer,
                message.topic,
                message.partition,
                message.offset,
                attempt,
                policy.max_attempts,
                exc,
                delay,
            )
            if closing.wait(delay) or (stop is not None and stop.is_set()):
                return False
            if consumer.mode == "alo" and not _holds(consumer, message):
                return False  # lost during the backoff: the new holder retries it
            continue
        _commit(consumer, message)
        return True


def _dead_letter_until_stored(
    consumer: Polled,
    message: Message,
    exc: Exception,
    policy: RetryPolicy,
    rng: random.Random,
    stop: threading.Event | None,
    closing: threading.Event,
) -> bool:
    """Write ``message`` to the dead-letter topic (:func:`dead_letter_retrying`): True once
    stored; False when the loop stops or, ALO, the partition moved meanwhile (the message
    stays uncommitted: its next holder handles it). Any other failure closes the consumer
    and raises: before, it escaped ``run()`` with the consumer open, which went on holding
    its partitions, heartbeating and handing out nothing."""
    assert policy.dead_letter_topic is not None
    marshaler = consumer.marshaler

    def give_up(delay: float) -> bool:
        if closing.wait(delay) or (stop is not None and stop.is_set()):
            return True
        return consumer.mode == "alo" and not _holds(consumer, message)

    try:
        failed = dead_letter_retrying(
            marshaler.cluster,
            message,
            exc,
            policy.dead_letter_topic,
            marshaler.now_ms,
            policy,
            rng,
            give_up,
            repr(consumer),
        )
    except BaseException:
        consumer.close()
        raise
    return failed is None


def dead_letter_retrying(
    cluster: Cluster,
    message: Message,
    exc: BaseException,
    topic: str,
    now_ms: Callable[[], int],
    policy: RetryPolicy,
    rng: random.Random,
    give_up: Callable[[float], bool],
    who: str,
) -> BaseException | None:
    """:func:`dead_letter`, a transient failure (a Kafka node restarting) retried with the
    policy's backoff while ``give_up(delay)`` (which waits ``delay``) says to go on: None
    once stored, else the last failure. A refusal (too large, a policy) is raised. Shared
    by ``Consumer.run`` and the streams ``App``."""
    failed = 0
    while True:
        try:
            dead_letter(cluster, message, exc, topic, now_ms())
            return None
        except (RetriableError, OSError) as failure:  # (a refusal, e.g. too large: raised)
            failed += 1
            delay = max(policy.delay(failed, rng), 0.05)  # (a zero backoff must not spin)
            log.warning(
                "%s: cannot write %s/%d@%d to the dead-letter topic %r (%r); retrying in %.3f s",
                who,
                message.topic,
                message.partition,
                message.offset,
                topic,
                failure,
                delay,
            )
            if give_up(delay):
                return failure


def _commit(consumer: Polled, message: Message) -> None:
    """Commit a handled message; closed meanwhile (from another thread, or by the handler),
    the consumer's release carried what was committed before, as a commit then changed
    nothing, and the next poll ends the loop."""
    with contextlib.suppress(ClosedError):
        consumer.commit(message)


def dead_letter(
    cluster: Cluster, message: Message, exc: BaseException, topic: str, timestamp_ms: int
) -> None:
    """Send a message its handler gave up on to ``topic`` (created like its source, same
    partition modulo its count), with where it came from and why in its headers."""
    try:
        count = cluster.partitions(topic)
    except UnknownTopic:
        with contextlib.suppress(TopicExists):  # another member created it first
            cluster.create_topic(topic, cluster.partitions(message.topic))
        count = cluster.partitions(topic)
    headers = (
        *message.headers,
        ("logmarshal.topic", message.topic.encode()),
        ("logmarshal.partition", str(message.partition).encode()),
        ("logmarshal.offset", str(message.offset).encode()),
        ("logmarshal.error", repr(exc).encode()[:1000]),
    )
    cluster.produce(
        topic,
        message.partition % count,
        [
            NewRecord(
                value=message.value,
                key=message.key,
                headers=headers,
                timestamp=timestamp_ms,
            )
        ],
        durable=True,
    )
    log.warning(
        "%s/%d@%d dead-lettered to %s after %r",
        message.topic,
        message.partition,
        message.offset,
        topic,
        exc,
    )
