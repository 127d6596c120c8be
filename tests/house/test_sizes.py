"""Size limits of the library (issue 35): no module over 900 lines, no function over 150, so
each stays readable in one sitting; a longer one is split by concept, not by line count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("logmarshal", "rationalizer", "storage")
MAX_MODULE_LINES = 900
MAX_FUNCTION_LINES = 150


def _too_long(source: str, name: str) -> list[str]:
    found = []
    if source.count("\n") > MAX_MODULE_LINES:
        found.append(f"{name}: {source.count(chr(10))} lines")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_over_the_limits() -> None:
    found = [
        line
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _too_long(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, found


def test_the_check_finds_a_long_function() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _too_long(f"def f():\n{body}\n", "m") == ["m:1 f: 151 lines"]
    assert _too_long("def f():\n    pass\n", "m") == []
