"""PROTOCOL.md is the normative page and docs/protocol-notes.md its rationale and history:
every section the code and the pages cite by name (``PROTOCOL.md, "Version 6"``,
``docs/protocol-notes.md, "Settling"``) is there, and every pointer PROTOCOL.md leaves to the
notes names a heading of the notes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "PROTOCOL.md"
NOTES = ROOT / "docs" / "protocol-notes.md"
SOURCES = ("logmarshal", "rationalizer", "storage", "scenarios", "bench", "tests")
#: ``PROTOCOL.md, "Name"``, ``PROTOCOL.md "Name"``, ``PROTOCOL.md ("Name")``; a name starts
#: with a capital and may run over a line break of a comment or a docstring
PROTOCOL_CITATION = re.compile(r'PROTOCOL\.md(?:\'s)?,?\s*\(?"([A-Z][^"]{0,100})"')
NOTES_CITATION = re.compile(r'protocol-notes\.md,?\s*\(?"([A-Z][^"]{0,100})"')


def _files() -> list[Path]:
    here = Path(__file__).resolve()
    code = [
        p
        for folder in SOURCES
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in (".py", ".c") and p.resolve() != here
    ]
    return [ROOT / "README.md", PROTOCOL, *sorted((ROOT / "docs").glob("*.md")), *code]


def _name(raw: str) -> str:
    """A cited name with its line breaks, indentation and comment markers dropped."""
    return re.sub(r"\s*\n\s*(?:#:?\s*|\*\s*)?", " ", raw).strip()


def _citations(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), _name(match.group(1)))
        for path in _files()
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]


def _headings(page: Path) -> list[str]:
    return re.findall(r"^#+\s+(.*\S)", page.read_text(encoding="utf-8"), re.M)


def _resolves(name: str, page: Path) -> bool:
    """A heading, the start of one ("Version 6" for "Version 6: releases that name their
    tenure"), or the bold lead of a paragraph ("**Who publishes.**")."""
    headings = _headings(page)
    if any(h == name or re.match(re.escape(name) + r"\b", h) for h in headings):
        return True
    leads = re.findall(r"\*\*([^*]+?)\.?\*\*", page.read_text(encoding="utf-8"))
    return name in leads


def test_every_cited_protocol_section_is_there() -> None:
    citations = _citations(PROTOCOL_CITATION)
    assert len(citations) >= 80  # the pattern still finds the comments that cite the page
    missing = sorted(
        {f"{where}: {name!r}" for where, name in citations if not _resolves(name, PROTOCOL)}
    )
    assert not missing, f"citations of sections PROTOCOL.md does not have: {missing}"


def test_every_pointer_to_the_notes_names_a_heading() -> None:
    citations = _citations(NOTES_CITATION)
    from_protocol = [name for where, name in citations if where == "PROTOCOL.md"]
    assert len(from_protocol) >= 15  # the passages that moved left pointers
    headings = set(_headings(NOTES))
    missing = sorted({f"{where}: {name!r}" for where, name in citations if name not in headings})
    assert not missing, f"citations of sections docs/protocol-notes.md does not have: {missing}"


def test_the_protocol_keeps_no_dated_history() -> None:
    """Dates belong to the notes' history: PROTOCOL.md says what is, the notes when it came."""
    dated = re.findall(r".*\b20\d\d-\d\d-\d\d\b.*", PROTOCOL.read_text(encoding="utf-8"))
    assert not dated, dated
