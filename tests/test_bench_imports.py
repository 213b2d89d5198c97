"""The benchmarks are the ``bench`` package, run as ``python -m bench.<name>`` from the
repository root (bench/__init__.py): our packages come from the install, ``bench.*`` and
``tests.*`` from the root that ``-m`` puts on sys.path. None patches sys.path itself, none
imports a sibling by its bare name (which only worked with bench/ itself on sys.path), and
a few start as modules from the root with nothing else on the path."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "bench"
SCRIPTS = sorted(p for p in BENCH.rglob("*.py") if p.name != "__init__.py")
# sys.path changed in code, or in the code of a child (`python -c` strings included)
PATH_PATCH = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\b|\[[^\]]*\]\s*=|\+=)")
# Our top-level packages: `tui` is one, and bench/ui/tui.py's stem too.
OURS = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
# Run by path in vLLM's interpreter (bench/serving/served_reference.py's DRIVER), where
# none of ours is.
SELF_CONTAINED = BENCH / "serving" / "vllm_bench_driver.py"


def _imported(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return out


def test_the_benches_are_found() -> None:
    assert len(SCRIPTS) > 25 and (BENCH / "__init__.py").is_file()
    assert all((p.parent / "__init__.py").is_file() for p in SCRIPTS), "a bench folder is no package"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_no_bench_patches_sys_path(path: Path) -> None:
    hits = [f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1) if PATH_PATCH.search(line)]
    assert not hits, ("run it as `python -m bench.<name>` from the root, or give a child "
                      "its tree by PYTHONPATH or cwd (bench/before_tree.py):\n" + "\n".join(hits))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_siblings_are_imported_as_bench_modules(path: Path) -> None:
    stems = {p.stem for p in SCRIPTS} - OURS
    bare = [f"{path.name}:{n}: import {name}" for n, name in _imported(path)
            if name.split(".")[0] in stems]
    assert not bare, "import a sibling as bench.<name>:\n" + "\n".join(bare)


def test_the_vllm_driver_imports_nothing_of_ours() -> None:
    ours = [f"{SELF_CONTAINED.name}:{n}: {name}" for n, name in _imported(SELF_CONTAINED)
            if name.split(".")[0] in OURS | {"bench"}]
    assert not ours, ours


# cheap to import, argparse, and between them: a sibling (bench.process_timing,
# bench.dbarg), our installed packages (harness, state) and the tests.* helpers
@pytest.mark.parametrize("name", ["ui.cli_latency", "store.todowrite", "store.lease_race"])
def test_a_bench_runs_as_a_module_from_the_root(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
