"""Every silenced type error says which and why (issue 35, "A checked surface").

The type checker (``python3 -m mypy``, configured in ``mypy.ini``) runs in CI over the
library's packages. A ``# type: ignore`` there must name its error code (mypy enforces that
with ``ignore-without-code``) and be followed by the reason the checker is wrong or cannot
know better, as ``# type: ignore[code]  # reason``: an ignore without its reason cannot be
judged again when the code or the checker changes. Comments are found with ``tokenize``, so
a docstring that mentions the form is not one.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("logmarshal", "rationalizer", "storage")

_IGNORE = re.compile(r"type:\s*ignore")
#: the one accepted form: codes in brackets, two spaces, then a comment with a reason
_GOOD = re.compile(r"type: ignore\[[a-z][a-z-]*(, ?[a-z][a-z-]*)*\]  # \S.*")


def _ignores(source: str) -> list[tuple[int, str]]:
    """(line, comment) of every comment of ``source`` that silences the type checker."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            start = _IGNORE.search(token.string)
            if start is not None:
                found.append((token.start[0], token.string[start.start() :]))
    return found


def _bad(source: str) -> list[tuple[int, str]]:
    """The ignores of ``source`` without a code or without a reason after them."""
    return [(line, text) for line, text in _ignores(source) if not _GOOD.fullmatch(text)]


def _files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    "line",
    [
        "x = f()  # type: ignore",
        "x = f()  # type: ignore[arg-type]",
        "x = f()  # type: ignore[arg-type] # one space",
        "x = f()  # type: ignore[arg-type]  #",
        "x = f()  # type:ignore[arg-type]  # no space after the colon",
        "x = f()  # type: ignore[]  # no code",
    ],
)
def test_an_ignore_without_its_code_or_reason_is_found(line: str) -> None:
    assert _bad(line + "\n") == [(1, line.split("# ", 1)[1])]


@pytest.mark.parametrize(
    "line",
    [
        "x = f()  # type: ignore[arg-type]  # the stub types conf as str values only",
        "x = f()  # type: ignore[arg-type, union-attr]  # checked by the caller",
        'x = "# type: ignore"  # a string, not a comment',
    ],
)
def test_an_ignore_with_its_code_and_reason_passes(line: str) -> None:
    assert _bad(line + "\n") == []


def test_the_packages_are_scanned() -> None:
    files = _files()
    assert {p.relative_to(ROOT).parts[0] for p in files} == set(PACKAGES)
    assert len(files) > 100  # the whole library, not a stray directory


def test_every_type_ignore_names_its_code_and_reason() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in _files()
        for line, text in _bad(path.read_text(encoding="utf-8"))
    ]
    assert not bad, f"{len(bad)} type: ignore comment(s) without '[code]  # reason':\n" + "\n".join(
        bad
    )
