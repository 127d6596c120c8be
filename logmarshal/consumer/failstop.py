"""How a consumer stops when its core raises. By design the core never does; if it does (a
bug), what it holds is not to be trusted, so the consumer stops as a crash would: the core is
stepped no more (it writes nothing, hands out nothing), nothing is released, and the
consumer is closed with ``release=False`` on a thread of its own, so its claims go stale and
the group takes them over. ``poll``, ``run`` and a loop over the consumer raise
:class:`ConsumerFailed` from then on; so does the constructor, if the replay stepped the
core into it before the constructor returned.

Before, the thread that stepped it died: a member whose fetch loop died heartbeat claims it
no longer read (the group waited on them for good); one whose writer died went silent while
``poll`` returned nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..errors import ConsumerFailed

__all__ = ["FailStop"]

log = logging.getLogger(__name__)


class FailStop:
    """One consumer's failure, if any: set once, so read without the consumer's lock."""

    def __init__(self, name: str, close: Callable[[], None], thread_name: str) -> None:
        self._name = name
        self._close = close  # the consumer's close(release=False)
        self._thread_name = thread_name
        self.failed: ConsumerFailed | None = None
        self.started = False  # the constructor finished (before that, it raises the failure)

    def fail(self, exc: Exception, why: str = "its core failed") -> bool:
        """Under the consumer's lock: its core raised ``exc`` (or ``why`` else it stops).
        False if it had already."""
        if self.failed is not None:
            return False
        said = f"{self._name} stopped, as a crash would: {why}: {exc!r}"
        failed = ConsumerFailed(said)
        failed.__cause__ = exc
        self.failed = failed  # (whole before it is seen: poll reads it without the lock)
        log.error("%s", said, exc_info=exc)
        if self.started:
            closing = threading.Thread(target=self._close, name=self._thread_name, daemon=False)
            try:
                closing.start()
            except RuntimeError:  # (the interpreter is shutting down: it stops us anyway)
                log.warning("%s: cannot start the close of a failed consumer", self._name)
        return True

    def raise_if_failed(self) -> None:
        """A fresh ConsumerFailed each time (one object raised again grows its traceback,
        shared by every thread that raised it)."""
        failed = self.failed
        if failed is not None:
            raise ConsumerFailed(*failed.args) from failed.__cause__
