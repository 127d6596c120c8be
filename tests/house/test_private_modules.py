"""Internal modules are marked private (issue 35 item 4): in the three packages, a module
whose name does not begin with an underscore is public surface, listed here on purpose; a new
module is private unless it is added to this list. Docs and README import no private module."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import logmarshal
import rationalizer
import storage

ROOT = Path(__file__).resolve().parents[2]

#: the public modules and subpackages of each package (its ``__init__`` re-exports the rest)
PUBLIC = {
    logmarshal: {
        "__main__",
        "admin",
        "audit",
        "cli",
        "clock",
        "cluster",
        "connect",
        "consumer",
        "core",
        "embedded",
        "errors",
        "localbroker",
        "localkafka",
        "marshaler",
        "metrics",
        "network",
        "partitioners",
        "producer",
        "retry",
        "serializers",
        "streams",
    },
    rationalizer: set(),
    storage: {"broker"},
}


def test_every_module_is_listed_public_or_named_private() -> None:
    for package, public in PUBLIC.items():
        names = {m.name for m in pkgutil.iter_modules(package.__path__)}
        unlisted = {n for n in names if not n.startswith("_")} - public
        assert not unlisted, f"{package.__name__}: public modules not listed: {sorted(unlisted)}"
        assert public <= names, f"{package.__name__}: listed but missing: {public - names}"


def test_packages_export_only_names_they_have() -> None:
    for package in PUBLIC:
        missing = [n for n in package.__all__ if not hasattr(package, n)]
        assert not missing, f"{package.__name__}.__all__ names what it lacks: {missing}"


def test_docs_import_no_private_module() -> None:
    private = re.compile(
        r"(?:from|import)\s+(?:logmarshal|rationalizer|storage)(?:\.\w+)*\._(?!_)\w+"
    )
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{page.name}: {m.group(0)}" for page in pages for m in private.finditer(page.read_text())
    ]
    assert not found, found


def test_the_check_can_fail() -> None:
    """The pattern above finds a private import when there is one."""
    private = re.compile(
        r"(?:from|import)\s+(?:logmarshal|rationalizer|storage)(?:\.\w+)*\._(?!_)\w+"
    )
    assert private.search("from rationalizer._world import WorldState")
    assert not private.search("from rationalizer import WorldState")
