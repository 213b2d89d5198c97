"""The layer arrows of docs/ARCHITECTURE.md ("Layers"), checked two ways: import-linter's contracts, and a
fresh interpreter per layer that must not drag in what it may not use."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROBE = """
import importlib, json, sys
for name in sys.argv[1].split(","):
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def loaded(modules: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, modules], capture_output=True,
                         text=True, check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    return set(json.loads(out.stdout))


def test_state_imports_nothing_of_ours() -> None:
    mods = loaded("state.store,state.fold,state.schema.migrations")
    assert not mods & {"harness", "pipeline", "tui", "textual", "fabric", "paramiko"}


def test_pipeline_core_is_standard_library_only() -> None:
    mods = loaded("pipeline.actions,pipeline.errors")
    assert not mods & {"harness", "state", "tui", "sqlmodel", "sqlalchemy", "fabric",
                       "paramiko", "invoke", "textual", "pydantic", "yaml"}


def test_cli_does_not_load_the_tui() -> None:
    mods = loaded("harness.cli.main")
    assert not mods & {"tui", "textual"}


@pytest.mark.skipif(shutil.which("lint-imports") is None and
                    not (ROOT / ".venv/bin/lint-imports").exists(),
                    reason="import-linter not installed")
def test_import_linter_contracts() -> None:
    exe = shutil.which("lint-imports") or str(ROOT / ".venv/bin/lint-imports")
    r = subprocess.run([exe, "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


@pytest.mark.skipif(shutil.which("lint-imports") is None and
                    not (ROOT / ".venv/bin/lint-imports").exists(),
                    reason="import-linter not installed")
@pytest.mark.parametrize("planted", ["from harness.agents.pi import hooks",
                                     "import harness.agents.claude.task_files"])
def test_the_cli_contract_fails_on_a_planted_import(tmp_path, planted: str) -> None:
    """The CLI reaches an agent only through the registry: a CLI module that imports a
    module of an agent's folder breaks the contract (a copy of the tree, one line added)."""
    exe = shutil.which("lint-imports") or str(ROOT / ".venv/bin/lint-imports")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "runs")
    for package in ("harness", "pipeline", "state", "tui"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    hot = tmp_path / "harness" / "cli" / "hot.py"
    hot.write_text(hot.read_text() + f"\n{planted}  # noqa\n")
    r = subprocess.run([exe, "--no-cache"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1, r.stdout
    assert "the CLI reaches an agent only through the registry" in r.stdout
    assert "harness.cli.hot is not allowed to import harness.agents." in r.stdout



# A name that holds a write transaction (state.tx.Tx): tx, new_tx, txn.
_TX_NAME = re.compile(r"(\w+_)?txn?")


def private_tx_uses(source: str, where: str) -> list[str]:
    """Each ``tx._name`` in ``source``: a private member of a Tx used from outside it."""
    return [f"{where}:{node.lineno}: {node.value.id}.{node.attr}"
            for node in ast.walk(ast.parse(source, filename=where))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and _TX_NAME.fullmatch(node.value.id) and node.attr.startswith("_")
            and not node.attr.startswith("__")]


def test_no_module_uses_a_private_member_of_the_write_transaction() -> None:
    """What the store and the use cases need of a Tx is public (``Tx.write_out`` for the
    store's end of a block), so its private parts may change with state/tx.py alone."""
    assert private_tx_uses("def end(tx):\n    tx._flush()\n    tx.flush()\n", "x.py") \
        == ["x.py:2: tx._flush"]
    found = [hit for package in ("harness", "state", "tui", "pipeline")
             for path in sorted((ROOT / package).rglob("*.py"))
             if path != ROOT / "state" / "tx.py"
             for hit in private_tx_uses(path.read_text(encoding="utf-8"),
                                        str(path.relative_to(ROOT)))]
    assert found == []
