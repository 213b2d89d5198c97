"""Stage code must run on a bare GPU image: importing it may not pull in the harness stack."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline.eagle3

pytestmark = pytest.mark.ml

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ["sqlmodel", "fabric", "paramiko", "invoke", "textual", "pydantic", "sqlalchemy"]


def test_stage_modules_import_nothing_forbidden():
    modules = ["pipeline.actions", "pipeline.errors"] + [
        f"pipeline.eagle3.{m.name}" for m in pkgutil.iter_modules(pipeline.eagle3.__path__)]
    assert {"pipeline.eagle3.train", "pipeline.eagle3.export", "pipeline.eagle3.generate"} <= set(
        modules)
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps([f for f in {FORBIDDEN!r} if f in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_stage_answers_help():
    for step in ("build_verifier", "generate", "clean", "tokenize", "hidden_states", "vocab", "train",
                 "export", "verify"):
        out = subprocess.run([sys.executable, "-m", f"pipeline.eagle3.{step}", "--help"],
                             cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0 and "--result" in out.stdout, (step, out.stderr[-500:])
