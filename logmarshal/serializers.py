"""Ready-made serializers for :class:`~logmarshal.producer.Producer` keys and values.

A serializer is any callable ``(obj) -> bytes | None``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_serializer", "string_serializer"]


def string_serializer(obj: str | None) -> bytes | None:
    """UTF-8 text; None stays None (a null key or a tombstone)."""
    if obj is None:
        return None
    if not isinstance(obj, str):
        raise TypeError(f"string_serializer takes str, got {type(obj).__name__}")
    return obj.encode("utf-8")


def json_serializer(obj: Any) -> bytes:
    """Compact JSON in UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
