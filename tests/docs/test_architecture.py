"""Code cites docs/architecture.md by section (``docs/architecture.md, "Connections"``): every
cited section is a heading of that page, and nothing cites the old, external "ARCHITECTURE"
document any more."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
SOURCES = ("logmarshal", "rationalizer", "storage", "scenarios", "bench", "tests")
#: ``docs/architecture.md, "Name"``; the name may run over a line break of a comment
CITATION = re.compile(r'docs/architecture\.md,\s+"([^"]+)"')
BARE = re.compile(r"\bARCHITECTURE\b")


def _code() -> list[Path]:
    here = Path(__file__).resolve()
    return [
        path
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.resolve() != here
    ]


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "PROTOCOL.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sections() -> set[str]:
    """Every heading, and for "Short: long" headings the short name as well."""
    names = set()
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#+\s+(.*\S)", line)
        if heading:
            names.add(heading.group(1))
            names.add(heading.group(1).partition(":")[0])
    return names


def _citations(paths: list[Path]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        for match in CITATION.finditer(path.read_text(encoding="utf-8")):
            # a name broken over lines: drop the indentation and comment markers of the next line
            name = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", match.group(1)).strip()
            found.append((str(path.relative_to(ROOT)), name))
    return found


def test_every_cited_section_is_a_heading() -> None:
    citations = _citations(_code() + _pages())
    assert len(citations) >= 25  # the pattern still finds the comments that cite the page
    sections = _sections()
    missing = sorted({f"{where}: {name!r}" for where, name in citations if name not in sections})
    assert not missing, f"citations of sections docs/architecture.md does not have: {missing}"


def test_the_sections_named_by_the_code_are_there() -> None:
    """The headings comments lean on most; renaming one must rename its citations."""
    sections = _sections()
    for name in (
        "Consumer core: decisions apart from threads",
        "Consumer core",
        "Connections",
        "Transitions",
        "Deterministic simulation",
        "At-most-once, enforced by the log",
        "Membership and rebalancing",
        "Consumer algorithms",
        "One record format end to end",
    ):
        assert name in sections


def test_nothing_cites_the_external_document() -> None:
    """Neither the code nor a page (PROTOCOL.md included) names the old contract."""
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _code() + _pages()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BARE.search(line)
    ]
    assert not bare, f"cite docs/architecture.md instead of ARCHITECTURE: {bare}"
