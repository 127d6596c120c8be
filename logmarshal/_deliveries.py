"""What :meth:`Producer.send <logmarshal.producer.Producer.send>` returns, and the report
callbacks behind it: the outcome of one sent record, over the network (a librdkafka
delivery report, kept without a Python frame per record) or through ``Cluster.produce``
(a record's place in its batch). Apart from the Producer, which sends."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ._batching import _Batch
from ._seconds import seconds

try:
    from ._fastproduce import Report as _FastReport
except ImportError:  # built without a C compiler: _ClientDelivery, _ReportSink
    _FastReport = None

log = logging.getLogger(__name__)

DeliveryCallback = Callable[["RecordMetadata | None", "BaseException | None"], None]


class _ReportOwner(Protocol):
    """What a network Delivery asks of its Producer (which waits on librdkafka's poll)."""

    def _report_result(self, report: Any, timeout: float | None) -> RecordMetadata: ...

    def _report_exception(self, report: Any, timeout: float | None) -> BaseException | None: ...


def _UNTRACKED(metadata: RecordMetadata | None, error: BaseException | None) -> None:
    """send()'s ``on_delivery`` when send_nowait() calls it: no Delivery is wanted."""


@attrs.frozen
class RecordMetadata:
    """Where a sent record was stored."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def _call_back(callback: DeliveryCallback, delivery: Delivery) -> None:
    """Run a user's delivery callback; an exception in it is logged, as Kafka's clients do,
    so that it cannot stop the sender or the poll that served it."""
    try:
        error = delivery.exception(0)
        callback(None if error is not None else delivery.result(0), error)
    except Exception:
        log.exception("a delivery callback raised")


class Delivery(abc.ABC):
    """What :meth:`Producer.send` returns: the outcome of one record, once known.

    Like a :class:`concurrent.futures.Future` for the calls a producer's caller makes
    (``result``, ``exception``, ``done``), without building one per record. (An ABC so that
    ``_fastproduce.Report``, a C type, can be one.)
    """

    __slots__ = ()

    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the record's outcome is known (stored, or failed)."""

    @abc.abstractmethod
    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` s for the record to be stored; its metadata, or the error
        that stopped it. TimeoutError if its outcome is still unknown."""

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like :meth:`result`; the error that stopped the record, or None."""
        if timeout is not None:
            seconds("timeout", timeout, at_least=0)  # (raised: no error of the record's)
        try:
            self.result(timeout)
        except TimeoutError as exc:
            if not self.done():
                raise  # (its outcome is not known yet)
            return exc  # the error that stopped the record (a cluster's own TimeoutError)
        except BaseException as exc:
            return exc
        return None


class _ClientDelivery(dict, Delivery):
    """A record given to librdkafka and its delivery report callback, when the C extension
    (``_fastproduce.Report``, the same without a dict or GC tracking) is not built: calling
    it stores the report as ``{error: message}`` through ``dict.__setitem__``, a C call with
    no Python frame and no bound method per record (the report's cost is most of the
    Producer's over the network: docs/performance.md, "Producer"). Each Producer makes a
    subclass of its own whose ``_owner`` is that Producer, so that no attribute is set per
    record."""

    __slots__ = ()
    __call__ = dict.__setitem__
    _owner: _ReportOwner

    @property
    def error(self) -> Any:
        return next(iter(self)) if self else None

    @property
    def message(self) -> Any:
        return next(iter(self.values())) if self else None

    def done(self) -> bool:
        return bool(self)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        return self._owner._report_result(self, timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._owner._report_exception(self, timeout)


if _FastReport is not None:
    Delivery.register(_FastReport)


class _ReportSink(dict):
    """The one report callback of every send_nowait() record over the network (the Python
    stand-in for ``_fastproduce.ErrorSink``): a failure is kept as ``{error: [a message,
    how many]}`` (equal codes share a key) until the next flush raises it."""

    __slots__ = ()

    def __call__(self, error: Any, message: Any) -> None:
        if error is not None:
            entry = self.get(error)
            if entry is None:
                self[error] = [message, 1]
            else:
                entry[1] += 1


class _BatchDelivery(tuple, Delivery):
    """A record in a batch for ``Cluster.produce``: ``(batch, index in the batch)``. A tuple,
    built by ``tuple.__new__`` in send(): no ``__init__`` frame per record."""

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch: _Batch = self[0]
        return RecordMetadata(*batch.outcome(self[1], timeout))
