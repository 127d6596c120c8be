"""Serializers for topology edges that touch the log: ``obj -> bytes | None`` and back."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "Deserializer",
    "Serializer",
    "bytes_deserializer",
    "bytes_serializer",
    "json_deserializer",
    "json_serializer",
    "string_deserializer",
    "string_serializer",
]

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]


# one immutable encoder/decoder: json.dumps builds a new encoder per call with these options
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode
_DECODE = json.JSONDecoder().decode


def json_serializer(obj: Any) -> bytes | None:
    """Compact UTF-8 JSON; None stays None (a null key, or a delete in a changelog).

    An int (not a bool: ``type`` is exact) is its decimal digits, as the encoder writes it
    (``int.__repr__``), without the encoder's Python-level dispatch: a sink's count, or a
    store's value at a commit, in a sixth of the time."""
    if obj is None:
        return None
    if type(obj) is int:
        return repr(obj).encode()
    return _ENCODE(obj).encode()


def json_deserializer(data: bytes | None) -> Any:
    return None if data is None else _DECODE(data.decode())


def string_serializer(obj: str | None) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, str):
        raise TypeError(f"string_serializer takes str, got {type(obj).__name__}")
    return obj.encode()


def string_deserializer(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def bytes_serializer(obj: bytes | None) -> bytes | None:
    return obj


def bytes_deserializer(data: bytes | None) -> bytes | None:
    return data
