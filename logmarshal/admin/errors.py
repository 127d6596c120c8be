"""The admin's one error type: a mistake or refusal the CLI prints as one line."""

from __future__ import annotations

from ..errors import LogmarshalError

__all__ = ["AdminError"]


class AdminError(LogmarshalError):
    """An admin request that cannot be carried out as asked (unknown group, bad target...)."""
