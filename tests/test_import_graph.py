"""The shape of the code (docs/ARCHITECTURE.md, "Parts"): no import circles between our
modules, and packages whose top level stays small enough to read.

The graph is grimp's (import-linter's own), so it counts every import a module makes,
inside functions and under ``TYPE_CHECKING`` too: a circle hidden behind a lazy import is
still two files that cannot be understood apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import grimp

from tests.conftest import ROOT

PACKAGES = ("harness", "pipeline", "state", "tui")
# The size rule holds for the benchmarks and the tests as well: they are read as often.
FOLDERS = (*PACKAGES, "bench", "tests")
# Data, not our code: modules that children run by path (tests/data/interrupt_at.py) and
# stand-in vLLM packages put on a child's path (tests/data/fake_vllm_pkg/).
DATA = ("tests/data",)
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


def _in_data(folder: Path) -> bool:
    return folder.relative_to(ROOT).as_posix().startswith(DATA)


def _package_folders(top: str) -> list[Path]:
    return [init.parent for init in (ROOT / top).rglob("__init__.py") if not _in_data(init.parent)]


def _modules(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_every_package_folder_stays_small() -> None:
    folders = [folder for top in FOLDERS for folder in _package_folders(top)]
    assert len(folders) > 40  # the walk found the part folders, not just the tops
    for folder in folders:
        modules = _modules(folder)
        name = folder.relative_to(ROOT).as_posix()
        most = TOP_MAX.get(name, FOLDER_MAX)
        assert len(modules) <= most, (
            f"{name}/ has {len(modules)} modules (at most {most}): put new ones in the part "
            f"they belong to, or split this one: {modules}")


def test_every_module_sits_in_a_package_folder() -> None:
    # a folder of modules without __init__.py would escape the size check above
    for top in FOLDERS:
        for module in (ROOT / top).rglob("*.py"):
            if _in_data(module.parent):
                continue
            assert (module.parent / "__init__.py").exists(), f"{module} has no package"


def _parts_tables() -> dict[str, set[str]]:
    """The first cell of every row of each `### `top/`` table under "## Parts", by top."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    parts = text[text.index("\n## Parts\n"):]
    parts = parts[:parts.index("\n## ", 1)]
    found: dict[str, set[str]] = {}
    for section in parts.split("\n### `")[1:]:
        top = section[:section.index("/`")]
        found[top] = {line.split("|")[1].strip() for line in section.splitlines()
                      if line.startswith("| ") and not line.startswith(("| part ", "| ---"))}
    return found


def test_architecture_lists_every_folder() -> None:
    tables = _parts_tables()
    assert set(tables) == set(FOLDERS), f"ARCHITECTURE's Parts has tables for {sorted(tables)}"
    for top in FOLDERS:
        names = {f.relative_to(ROOT / top).as_posix() for f in _package_folders(top)} - {"."}
        cells = tables[top]
        listed = {re.sub(r"`(.+)/`.*", r"\1", c) for c in cells if c.startswith("`")}
        assert any(c.startswith("top level") or c.endswith(" top") for c in cells), top
        missing = sorted(n for n in names if n not in listed)
        assert not missing, f"docs/ARCHITECTURE.md's {top}/ table lacks {missing}"
        stale = sorted(n for n in listed if n not in names)
        assert not stale, f"docs/ARCHITECTURE.md's {top}/ table lists folders that are gone: {stale}"
