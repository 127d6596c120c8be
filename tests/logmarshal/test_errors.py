"""The errors a user must catch are importable from ``logmarshal`` and are one class each,
whichever module raises them."""

from __future__ import annotations

import logmarshal
from logmarshal import consumer, errors, network, retry


def test_public_errors_are_exported_once() -> None:
    assert logmarshal.NoPosition is consumer.NoPosition
    assert logmarshal.HandlerFailed is retry.HandlerFailed
    assert logmarshal.ClosedError is errors.ClosedError
    assert logmarshal.NetworkError is network.NetworkError is errors.NetworkError
    for name in ("NoPosition", "HandlerFailed", "ClosedError", "NetworkError"):
        assert issubclass(getattr(logmarshal, name), logmarshal.LogmarshalError) or name in (
            "NoPosition",
        )
    assert issubclass(logmarshal.NoPosition, logmarshal.OffsetOutOfRange)
    assert issubclass(logmarshal.OffsetOutOfRange, logmarshal.StorageError)
    assert set(logmarshal.__all__) >= {"NoPosition", "HandlerFailed", "ClosedError", "NetworkError"}


def test_retriable_errors_have_one_home() -> None:
    """The loops that retry (replay, fetch) catch ``errors.RETRIABLE``: transient errors of
    our own, the log's, the OS's; a closed object is not one of them."""
    from logmarshal._faults import InjectedFault

    assert issubclass(logmarshal.NetworkError, logmarshal.RetriableError)
    assert issubclass(InjectedFault, logmarshal.RetriableError)
    for exc in (logmarshal.NetworkError("x"), OSError("x"), logmarshal.UnknownTopic("t")):
        assert isinstance(exc, errors.RETRIABLE)
    assert not isinstance(logmarshal.ClosedError("x"), errors.RETRIABLE)
