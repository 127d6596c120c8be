"""The README's Python examples run as written (those that need no external cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
EMBEDDED = [block for block in BLOCKS if "bootstrap=" not in block]


def test_the_readme_has_runnable_examples() -> None:
    assert len(EMBEDDED) >= 2


@pytest.mark.parametrize("block", EMBEDDED, ids=[f"block{i}" for i in range(len(EMBEDDED))])
def test_readme_example_runs(block: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(README), "exec"), {"__name__": "readme_example"})
