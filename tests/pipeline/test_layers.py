"""Imports that must stay cheap: fabric only for SSH, nothing but stdlib for stage code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(statement: str) -> set[str]:
    code = f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    return {name.split(".")[0] for name in json.loads(out.stdout)}


def test_executor_interface_does_not_import_fabric() -> None:
    mods = loaded_after("import pipeline.hosts.executor, pipeline.hosts.local, pipeline.spec.load, pipeline.hosts.ship")
    assert "fabric" not in mods and "paramiko" not in mods
    assert not {"harness", "state", "tui"} & mods


def test_stage_side_modules_need_only_the_standard_library() -> None:
    mods = loaded_after("import pipeline, pipeline.actions, pipeline.errors, "
                        "pipeline.hosts.jobscripts, pipeline.redact, pipeline.spec.durations")
    assert not {"pydantic", "yaml", "invoke", "fabric", "paramiko"} & mods
