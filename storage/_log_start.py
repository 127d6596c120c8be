"""A partition's log start offset, kept on disk: where DeleteRecords moved it.

Kafka moves a log's start to exactly the offset DeleteRecords asks for, even inside a
segment, and keeps it in ``log-start-offset-checkpoint`` so that a restart does not bring
the deleted records back (its segments are removed only once wholly below it). This broker
does the same, with one small file per partition directory (beside the cleaner's
checkpoint) written durably before DeleteRecords answers (``replace_durably``: the old
offset or the new one, never a torn file). The file is needed only while
the start lies inside the first segment; once retention passes it, the first segment's
base is the start again and the file says less than that (``max`` of the two is the start).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from storage._files import OFFSET_MAX, read_json, replace_durably

__all__ = ["LOG_START_FILE", "load_log_start", "save_log_start"]

log = logging.getLogger(__name__)

LOG_START_FILE = "log-start-offset.json"
_VERSION = 1


def load_log_start(directory: Path) -> int | None:
    """The log start offset DeleteRecords last set for this partition, or None (none set,
    or the file is unreadable: said in a warning; the first segment's base is then the
    start, so records DeleteRecords removed inside that segment are readable again)."""
    path = directory / LOG_START_FILE
    try:
        raw = read_json(path)
        if not isinstance(raw, dict) or raw.get("version") != _VERSION:
            raise ValueError(
                f"unknown version {raw.get('version') if isinstance(raw, dict) else raw!r}"
            )
        offset = raw["log_start_offset"]
        if type(offset) is not int or not 0 <= offset <= OFFSET_MAX:
            raise ValueError(f"log_start_offset {offset!r} is not an offset")
    except FileNotFoundError:
        return None
    except (ValueError, KeyError) as exc:  # (UnicodeDecodeError is a ValueError)
        log.warning(
            "%s: unreadable log start checkpoint (%s); the log starts at its first segment",
            path,
            exc,
        )
        return None
    return offset


def save_log_start(directory: Path, offset: int) -> None:
    """Write ``offset`` as this partition's log start (durable when this returns)."""
    data = json.dumps({"version": _VERSION, "log_start_offset": offset}).encode()
    replace_durably(directory / LOG_START_FILE, data)
