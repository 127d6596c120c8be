"""The packages' imports run one way: no module reaches itself through its imports.

A circle means two modules that cannot be read, tested or changed one without the other. The
graph is grimp's (the library behind import-linter), which counts every import statement:
inside functions and under ``if TYPE_CHECKING:`` too, since both still tie the modules
together.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import grimp
import pytest

PACKAGES = ("logmarshal", "rationalizer", "scenarios", "storage")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself
    (Tarjan's algorithm, iterative, so deep graphs do not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    selfloop = graph.direct_import_exists(importer=node, imported=node)
                    if len(component) > 1 or selfloop:
                        found.append(sorted(component))
    return found


def _describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    """One circle of the component, with the file line of every import on it."""
    first, second = component[0], None
    for candidate in sorted(graph.find_modules_directly_imported_by(first)):
        if candidate in component:
            second = candidate
            break
    lines = []
    path = [first, *list(graph.find_shortest_chain(importer=second, imported=first) or [])]
    for importer, imported in itertools.pairwise(path):
        for detail in graph.get_import_details(importer=importer, imported=imported):
            lines.append(f"  {importer}:{detail['line_number']}  {detail['line_contents']}")
            break
    return f"circle among {', '.join(component)}:\n" + "\n".join(lines)


def _extension_modules() -> dict[str, str]:
    """Compiled submodules (``storage/_fastrecords.c``): name -> package. grimp sees only
    ``.py`` files, so it records ``from storage import _fastrecords`` as an import of the
    package ``storage`` itself; a C extension imports nothing of ours, so it is a leaf."""
    root = Path(__file__).resolve().parents[2]
    return {
        f"{source.parent.name}.{source.stem}": source.parent.name
        for package in PACKAGES
        for source in (root / package).glob("_*.c")
    }


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    for extension, package in _extension_modules().items():
        short = extension.rsplit(".", 1)[1]
        for importer in graph.find_modules_that_directly_import(package):
            details = graph.get_import_details(importer=importer, imported=package)
            if details and all(short in d["line_contents"] for d in details):
                graph.remove_import(importer=importer, imported=package)
    return graph


def test_no_import_circles(graph: grimp.ImportGraph) -> None:
    circles = _cycles(graph)
    assert not circles, "\n\n".join(_describe(graph, c) for c in circles)


def test_the_walk_finds_a_circle_when_there_is_one(graph: grimp.ImportGraph) -> None:
    """The check itself can fail: add an import that closes a circle and it is reported."""
    graph.add_import(importer="rationalizer._codec", imported="rationalizer._world")
    graph.add_import(importer="rationalizer._world", imported="rationalizer._codec")
    try:
        circles = _cycles(graph)
    finally:
        graph.remove_import(importer="rationalizer._codec", imported="rationalizer._world")
    assert any({"rationalizer._codec", "rationalizer._world"} <= set(c) for c in circles)
