"""The shape of the code (docs/ARCHITECTURE.md, "Parts"): no import circles between our
modules, and packages whose top level stays small enough to read.

The graph is grimp's (import-linter's own), so it counts every import a module makes,
inside functions and under ``TYPE_CHECKING`` too: a circle hidden behind a lazy import is
still two files that cannot be understood apart.
"""

from __future__ import annotations

import grimp

from tests.conftest import ROOT

PACKAGES = ("harness", "pipeline", "state", "tui")
TOP_LEVEL_MAX = 12  # modules beside a package's part folders, __init__/__main__ not counted


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


def test_package_top_levels_stay_small() -> None:
    for package in ("harness", "pipeline"):
        modules = sorted(p.stem for p in (ROOT / package).glob("*.py")
                         if p.stem not in ("__init__", "__main__"))
        assert len(modules) <= TOP_LEVEL_MAX, (
            f"{package}/ has {len(modules)} modules at its top level (at most "
            f"{TOP_LEVEL_MAX}): put new ones in the part they belong to: {modules}")
