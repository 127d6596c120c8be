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
