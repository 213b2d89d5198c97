"""The layer arrows of docs/ARCHITECTURE.md ("Layers"), checked two ways: import-linter's contracts, and a
fresh interpreter per layer that must not drag in what it may not use."""

from __future__ import annotations

import json
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
    mods = loaded("state.store,state.fold,state.migrations")
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
