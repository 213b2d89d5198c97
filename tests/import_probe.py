"""What the import-cost tests share (tests/cli/test_cli_latency_imports.py for people's
commands, tests/agents/test_latency_imports.py for an agent's): a store made by a real
harness, and a probe that runs one command line through the real entry point in a fresh
interpreter and says which of the heavy modules it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

PROBE = """
import io, json, sys
from harness.cli.main import main
sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[2].encode()), encoding="utf-8")
try:
    main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[3])))
sys.stderr.write("\\nPROBE " + json.dumps({"code": code, "heavy": heavy}) + "\\n")
"""
TODOS = json.dumps({"todos": [{"content": f"step {i}", "status": "pending",
                               "priority": "medium"} for i in range(30)]})


def warm_store(tmp: Path, steps: Iterable[tuple[list[str], str]]) -> dict[str, str]:
    """The environment of a store at ``tmp`` (session ``bench``) that a real harness made,
    running each of ``steps`` (arguments, stdin): the probes then find it exists."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(tmp / "state.db"),
           "HARNESS_DATA_DIR": str(tmp / "data"), "HARNESS_CONFIG_DIR": str(tmp / "config"),
           "HARNESS_SESSION": "bench"}
    for args, stdin in steps:
        subprocess.run([sys.executable, "-m", "harness", *args], input=stdin.encode(),
                       env=env, check=True, capture_output=True, timeout=120)
    return env


def probe(env: dict[str, str], args: list[str], stdin: str,
          heavy: Iterable[str]) -> tuple[dict[str, Any], str]:
    """Run ``harness ARGS`` with ``stdin``: its exit code and the ``heavy`` modules it
    imported (``{"code": ..., "heavy": [...]}``), and its stderr."""
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), stdin,
                        json.dumps(sorted(heavy))], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    line = next(x for x in r.stderr.splitlines() if x.startswith("PROBE "))
    return json.loads(line[len("PROBE "):]), r.stderr
