"""The Python examples of the README and of docs/ run as written (those that need no external
cluster), and every page the README links to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (page, block)
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
]
EMBEDDED = [(page, block) for page, block in BLOCKS if "bootstrap=" not in block]


def test_the_readme_has_runnable_examples() -> None:
    assert sum(page == README for page, _ in EMBEDDED) >= 2


@pytest.mark.parametrize(
    ("page", "block"),
    EMBEDDED,
    ids=[f"{page.stem}-block{i}" for i, (page, _) in enumerate(EMBEDDED)],
)
def test_example_runs(page: Path, block: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(page), "exec"), {"__name__": "readme_example"})


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_local_links_lead_somewhere(page: Path) -> None:
    """A page moved or renamed breaks no link of the README or of docs/."""
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_readme_stays_a_front_door() -> None:
    """Details belong in docs/; the README says what it is, how to start and where to read on."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400
