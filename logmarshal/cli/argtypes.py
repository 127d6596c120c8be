"""argparse ``type=`` converters that reject bad values with a message naming them."""

from __future__ import annotations

import argparse

__all__ = ["config_pair", "non_empty_path", "non_negative", "positive", "seconds"]


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds: a finite number above 0 (inf and nan are no durations)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def non_negative(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {value}")
    return value


def non_empty_path(text: str) -> str:
    """A file or directory to write: an empty one is the current directory to ``open`` and
    ``Path``, which is never what ``--out ""`` (an unset variable, say) meant."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path; give a file or directory name")
    return text


def config_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()
