"""The processor API (KIP-28): what a node of a topology sees and may do.

A :class:`Processor` is created per task by its factory, gets a :class:`ProcessorContext` in
``init``, is handed records one at a time in ``process`` and closed with its task. The
context is the processor's only door to the world: forwarding downstream, punctuation,
commit requests, state stores and the metadata of the record being processed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

__all__ = [
    "STREAM_TIME",
    "WALL_CLOCK_TIME",
    "Cancellable",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "StreamRecord",
]

Header = tuple[str, bytes | None]


class PunctuationType(enum.Enum):
    """What time a punctuator is driven by: the task's stream time, or the injected clock."""

    STREAM_TIME = "stream-time"
    WALL_CLOCK_TIME = "wall-clock-time"


STREAM_TIME = PunctuationType.STREAM_TIME
WALL_CLOCK_TIME = PunctuationType.WALL_CLOCK_TIME


class StreamRecord(NamedTuple):
    """A record inside a topology: deserialized key and value plus where it came from.

    ``offset`` is -1 and ``topic`` None for records a punctuator forwards. Immutable, and a
    tuple: a task builds one per input record with ``tuple.__new__`` (a fifth of the cost of
    an attrs class's ``__init__``, the largest per-record cost of the streams layer it
    replaced: docs/performance.md, "Streams"); ``_replace`` makes a changed copy.
    """

    key: Any
    value: Any
    timestamp: int
    topic: str | None = None
    partition: int = -1
    offset: int = -1
    headers: tuple[Header, ...] = ()


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class ProcessorContext(Protocol):
    """What a processor may use; implemented by the task that runs it."""

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def topic(self) -> str | None: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def headers(self) -> tuple[Header, ...]: ...

    def forward(self, key: Any, value: Any, to: str | None = None) -> None: ...

    def schedule(
        self, interval_ms: int, kind: PunctuationType, punctuator: Callable[[int], None]
    ) -> Cancellable: ...

    def commit(self) -> None: ...

    def get_state_store(self, name: str) -> Any: ...


class Processor:
    """Base class: override ``process``; ``init`` keeps the context as ``self.context``."""

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: StreamRecord) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``init`` acquired; stores are closed by the task, not here."""
