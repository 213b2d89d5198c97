"""The serving stages run on bare GPU hosts: they load only the standard library (vLLM,
transformers are imported by a child process or only when a parameter needs them)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

MODULES = ["pipeline.eagle3.preflight", "pipeline.eagle3.serve", "pipeline.eagle3.benchmark",
           "pipeline.eagle3.serving.load_levels", "pipeline.eagle3.serving.report", "pipeline.eagle3.text.heldout",
           "pipeline.eagle3.serving.prompts", "pipeline.eagle3.serving.trials",
           "pipeline.eagle3.serving.tables", "pipeline.eagle3.serving.results",
           "pipeline.vllm.schedule", "pipeline.vllm.ready",
           "pipeline.vllm.compat", "pipeline.vllm.probe", "pipeline.vllm.drafter",
           "pipeline.vllm.metrics",
           "pipeline.vllm.server",
           "pipeline.vllm.openai_client", "pipeline.vllm.service", "pipeline.vllm.model_files"]


def test_serving_stages_import_only_the_standard_library() -> None:
    code = ("import importlib, json, sys\n"
            f"for m in {MODULES!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    loaded = set(json.loads(out.stdout))
    assert not loaded & {"torch", "transformers", "vllm", "yaml", "pydantic", "requests",
                         "aiohttp", "fabric", "invoke", "harness", "state", "numpy"}
