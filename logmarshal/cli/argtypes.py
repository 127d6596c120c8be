"""argparse ``type=`` converters that reject bad values with a message naming them."""

from __future__ import annotations

import argparse

from ..admin.times import parse_whole

__all__ = [
    "config_pair",
    "host_name",
    "non_empty_path",
    "non_negative",
    "positive",
    "seconds",
    "seconds_or_zero",
]

#: the longest duration an option takes (about 31 years): longer ones overflow the waits and
#: sleeps they feed ("timestamp out of range for platform time_t")
MAX_SECONDS = 1e9


def _whole_number(text: str) -> int:
    try:
        return parse_whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _duration(text: str, *, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    low = "0 or more" if zero else "above 0"
    lowest_ok = value >= 0 if zero else value > 0
    if not lowest_ok or not value <= MAX_SECONDS:  # nan fails both
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds {low}, at most {MAX_SECONDS:g}, got {text}"
        )
    return value


def seconds(text: str) -> float:
    """A duration in seconds above 0 (inf and nan are no durations)."""
    return _duration(text, zero=False)


def seconds_or_zero(text: str) -> float:
    """A wait in seconds, 0 (do not wait) or more."""
    return _duration(text, zero=True)


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


def host_name(text: str) -> str:
    """A host name or address clients are told to connect to: what an empty one, one with
    spaces or a HOST:PORT (the port is --listen's) would give them is no address."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty host name")
    if any(c.isspace() for c in text) or len(text) > 255:
        raise argparse.ArgumentTypeError(f"not a host name: {text!r}")
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        raise argparse.ArgumentTypeError(
            f"give the host only, not HOST:PORT ({text!r}); clients are told the port it listens on"
        )
    return text
