"""The shape of the code (docs/ARCHITECTURE.md, "Parts"): no import circles between our
modules, and packages whose top level stays small enough to read.

The graph is grimp's (import-linter's own), so it counts every import a module makes,
inside functions and under ``TYPE_CHECKING`` too: a circle hidden behind a lazy import is
still two files that cannot be understood apart.
"""

from __future__ import annotations

from pathlib import Path

import grimp

from tests.conftest import ROOT

PACKAGES = ("harness", "pipeline", "state", "tui")
FOLDER_MAX = 16  # modules in any one folder, __init__/__main__ not counted
# Tighter for the folders a newcomer opens first: beside their part folders, the tops of
# harness/ and pipeline/ hold the shared pieces, state/'s the store and its transaction,
# and pipeline/eagle3/'s the twelve stages (python -m pipeline.eagle3.<stage>) and common.
TOP_MAX = {"harness": 12, "pipeline": 12, "state": 12, "pipeline/eagle3": 14}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.append(m)
                    if m == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    graph = grimp.build_graph(*PACKAGES)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    circles = _cycles(edges)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def _modules(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_every_package_folder_stays_small() -> None:
    folders = [init.parent for package in PACKAGES for init in (ROOT / package).rglob("__init__.py")]
    assert len(folders) > 20  # the walk found the part folders, not just the four tops
    for folder in folders:
        modules = _modules(folder)
        name = folder.relative_to(ROOT).as_posix()
        most = TOP_MAX.get(name, FOLDER_MAX)
        assert len(modules) <= most, (
            f"{name}/ has {len(modules)} modules (at most {most}): put new ones in the part "
            f"they belong to, or split this one: {modules}")


def test_every_module_sits_in_a_package_folder() -> None:
    # a folder of modules without __init__.py would escape the size check above
    for package in PACKAGES:
        for module in (ROOT / package).rglob("*.py"):
            assert (module.parent / "__init__.py").exists(), f"{module} has no package"
