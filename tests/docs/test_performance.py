"""docs/performance.md leads with the current figures: for each bench its newest measurement,
one table, with its date, its commit or branch where known, and the machine; the history
follows, below."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "performance.md"


def _sections() -> tuple[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    assert text.index("\n## Current figures\n") < text.index("\n## History\n")
    current = text.split("\n## Current figures\n", 1)[1].split("\n## History\n", 1)[0]
    return current, text.split("\n## History\n", 1)[1]


def test_each_current_figure_is_one_dated_table_naming_the_machine() -> None:
    current, _ = _sections()
    entries = re.split(r"^### ", current, flags=re.M)[1:]
    assert len(entries) >= 12
    for entry in entries:
        title = entry.splitlines()[0]
        tables = re.findall(r"(?:^\|.*\n)+", entry, re.M)
        assert len(tables) == 1, f"{title}: {len(tables)} tables"
        assert re.search(r"Measured 20\d\d-\d\d-\d\d", entry), f"{title}: no date"
        assert "this project's machine (2 cores, 24 GiB" in " ".join(entry.split()), title
        assert "Command: `" in entry, f"{title}: no command"


def test_every_current_figure_points_to_a_history_heading() -> None:
    current, history = _sections()
    headings = set(re.findall(r"^### (.+)$", history, re.M))
    pointers = re.findall(
        r'Conditions, method and what the figures mean: "([^"]+)" under History', current
    )
    assert len(pointers) == len(re.findall(r"^### ", current, re.M))
    assert set(pointers) <= headings, set(pointers) - headings
