"""What a consumer does when the user's handler fails on a message.

A failing message is retried with exponential backoff *in place*: later messages of the same
partition wait, so a partition's order is kept. When the attempts are used up the consumer
either sends the message to a dead-letter topic and moves on (if one is configured) or stops,
leaving the message uncommitted so whoever takes the partition over meets it again.
"""

from __future__ import annotations

import random

import attrs

from .cluster import Message
from .errors import LogmarshalError

__all__ = ["DEAD_LETTER_HEADERS", "HandlerFailed", "RetryPolicy"]

#: Headers added to a dead-lettered record, so it can be traced back and replayed.
DEAD_LETTER_HEADERS = (
    "logmarshal.topic",
    "logmarshal.partition",
    "logmarshal.offset",
    "logmarshal.error",
)


def _positive_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _non_negative(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


@attrs.frozen
class RetryPolicy:
    """``max_attempts`` calls of the handler per message, ``backoff`` seconds before the
    second, growing by ``multiplier`` up to ``max_backoff``, each randomised by ±``jitter``
    (a fraction) so a group does not retry in step. ``dead_letter_topic``: where a message
    goes once its attempts are used up; None means stop instead."""

    max_attempts: int = attrs.field(default=3, validator=_positive_int)
    backoff: float = attrs.field(default=0.1, validator=_non_negative)
    max_backoff: float = attrs.field(default=5.0, validator=_non_negative)
    multiplier: float = attrs.field(default=2.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.1, validator=_non_negative)
    dead_letter_topic: str | None = None

    def delay(self, failed_attempts: int, rng: random.Random) -> float:
        """Seconds to wait after ``failed_attempts`` (>= 1) failures before the next call."""
        base = min(self.max_backoff, self.backoff * self.multiplier ** (failed_attempts - 1))
        if self.jitter:
            base *= 1 + rng.uniform(-self.jitter, self.jitter)
        return max(0.0, base)


class HandlerFailed(LogmarshalError):
    """The handler kept failing on ``message`` and no dead-letter topic was configured."""

    def __init__(self, message: Message, attempts: int, cause: BaseException) -> None:
        super().__init__(
            f"handler failed {attempts} time(s) on {message.topic}/{message.partition} "
            f"offset {message.offset}: {cause!r}; the consumer stopped"
        )
        self.message = message
        self.attempts = attempts
        self.cause = cause
