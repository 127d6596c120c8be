"""Times and durations as operators type them (the formats kafka-consumer-groups takes).

- Date-times: ISO 8601, e.g. ``2026-11-21T10:00:00.000``, ``2026-11-21T10:00:00Z`` or
  ``...+01:00``. A time without a zone is **UTC** (kafka-consumer-groups would take the
  machine's zone; a coordination log is shared across machines, so UTC is the only reading
  that means the same everywhere). Epoch milliseconds are accepted too.
- Durations: ISO 8601 ``PnDTnHnMnS`` (``P1D``, ``PT1H``, ``PT0.5S``; Java's
  ``Duration.parse``, which Kafka's ``--by-duration`` uses). :func:`parse_span` also takes
  the short forms people type for a pause: ``90s``, ``5m``, ``1h30m``, or plain seconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = [
    "format_ms",
    "parse_datetime_ms",
    "parse_duration_ms",
    "parse_span_ms",
    "parse_whole",
]

_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?\Z",
    re.IGNORECASE,
)
_SHORT = re.compile(
    r"(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+(?:\.\d+)?)s)?(?:(?P<ms>\d+)ms)?\Z"
)


def parse_datetime_ms(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 date-time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"malformed date-time {text!r}: expected ISO 8601 such as 2026-11-21T10:00:00.000 "
            "(UTC) or 2026-11-21T10:00:00+01:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO 8601 duration ``PnDTnHnMnS`` (at least one part, not negative)."""
    match = _ISO_DURATION.match(text.strip())
    if match is None or not any(match.groupdict().values()) or text.strip().upper().endswith("T"):
        raise ValueError(
            f"malformed duration {text!r}: expected ISO 8601 PnDTnHnMnS such as PT1H, P1DT2H "
            "or PT30.5S"
        )
    d, h, m, s = (match.group(k) for k in "dhms")
    return _bounded(
        int(d or 0) * 86_400_000
        + int(h or 0) * 3_600_000
        + int(m or 0) * 60_000
        + round(float(s or 0) * 1000),
        text,
    )


#: the longest duration taken (about 31.7 years, the CLI's longest wait): longer ones are
#: typos, and overflowed the dates and the records they went into
MAX_DURATION_MS = 10**12


def _bounded(ms: int, text: str) -> int:
    if ms > MAX_DURATION_MS:
        raise ValueError(f"duration {text!r} is longer than {MAX_DURATION_MS // 1000} s")
    return ms


def parse_span_ms(text: str) -> int:
    """A pause length: ISO 8601 (``PT30S``), short (``30s``, ``5m``, ``1h30m``, ``500ms``)
    or plain seconds (``30``, ``1.5``)."""
    raw = text.strip()
    if raw[:1] in ("P", "p"):
        return parse_duration_ms(raw)
    try:
        seconds = float(raw)
    except ValueError:
        match = _SHORT.match(raw.lower())
        if not raw or match is None or not any(match.groupdict().values()):
            raise ValueError(
                f"malformed duration {text!r}: expected seconds (30), 30s, 5m, 1h30m or ISO "
                "8601 (PT30S)"
            ) from None
        h, m, s, ms = (match.group(k) for k in ("h", "m", "s", "ms"))
        return _bounded(
            int(h or 0) * 3_600_000
            + int(m or 0) * 60_000
            + round(float(s or 0) * 1000)
            + int(ms or 0),
            text,
        )
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"malformed duration {text!r}: must be a finite, non-negative number")
    return _bounded(round(seconds * 1000), text)


def format_ms(ms: int | None) -> str:
    """ISO 8601 UTC with milliseconds, or ``-``."""
    if ms is None:
        return "-"
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


#: a whole number as an operator types it: ASCII digits, a sign at most
_WHOLE = re.compile(r"[+-]?[0-9]+")


def parse_whole(text: str) -> int:
    """The whole number ``text`` says, or ValueError: ``int()`` alone also reads other
    scripts' digits (``"٣"`` is 3), underscores (``"1_0"`` is 10) and surrounding blanks,
    which the CLI took as an offset, a shift or a partition (an attack, 2026-12-06)."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"not a whole number: {text!r}")
    return int(text)
