"""How the CLI prints: aligned tables for people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

__all__ = ["emit", "print_table", "said", "shown"]


def print_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], out: TextIO | None = None
) -> None:
    """Left-aligned columns under a header line; nothing but the header for no rows."""
    out = out or sys.stdout
    cells = [[shown(str(row.get(c, ""))) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    header = [c.upper() for c in columns]
    for line in [header, *cells]:
        out.write("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() + "\n")


def shown(text: str) -> str:
    """``text`` for a terminal: characters that do not print (a newline, an ESC) escaped
    as Python writes them. Ids come from the log, and anyone who may write to it could
    break a table's rows or send the operator's terminal escape sequences with them."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def said(text: str) -> str:
    """An error message for a terminal: as :func:`shown`, but its own line breaks kept (a
    message may be several lines; an id from the log in it may not move the cursor)."""
    return "\n".join(shown(line) for line in text.split("\n"))


def emit(as_json: bool, payload: Any, text: str | None = None, out: TextIO | None = None) -> None:
    """Print ``payload`` as JSON, or ``text`` for people."""
    out = out or sys.stdout
    if as_json:
        out.write(json.dumps(payload, sort_keys=True) + "\n")
    elif text is not None:
        out.write(text + "\n")
