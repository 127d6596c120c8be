"""Refuse requests that carry null where Kafka's schema does not allow it.

kafka-python's decoder reads a length of -1 as None for every string and array, nullable or
not. Handlers would then fail deep inside (``'NoneType' object is not iterable``), logged as an
unexpected error. Kafka's own parser refuses such a frame as an invalid request and closes the
connection; so does this broker, before any handler runs, with a message that names the field.
"""

from __future__ import annotations

from typing import Any

__all__ = ["null_violation"]


def null_violation(message: Any, version: int, path: str = "") -> str | None:
    """The dotted name of the first field that is null but not nullable at ``version``."""
    fields = getattr(message, "fields", None)
    if not isinstance(fields, dict):
        return None
    for name, field in fields.items():
        if not field.for_version_q(version):
            continue
        value = getattr(message, name, None)
        where = f"{path}{name}"
        if value is None:
            if field.type_str in ("records",) or field.nullable_for_version_q(version):
                continue
            if field.is_array() or field.type_str in ("string", "bytes"):
                return where
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is None:
                    return f"{where}[{i}]"
                found = null_violation(item, version, f"{where}[{i}].")
                if found is not None:
                    return found
        elif hasattr(value, "fields"):
            found = null_violation(value, version, f"{where}.")
            if found is not None:
                return found
    return None
