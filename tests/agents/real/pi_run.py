"""pi (tests/agents/real/npm.py's pinned release) in a project of its own, against a
scripted model: what the real-program test and bench/agents/pi_cost.py share.

The model is a provider in ``$HOME/.pi/agent/models.json`` (``"api": "openai-completions"``,
no developer role, no reasoning effort: what a local OpenAI-compatible server takes),
served by tests/agents/real/model_server.py. pi starts offline (no version check, no
telemetry). The harness's extension is what ``harness hook pi install`` writes, running
``harness`` as ``command`` says (this checkout by default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.agents.real import npm
from tests.agents.real.model_server import ModelServer

HARNESS_CMD = f"{sys.executable} -m harness"
CONTEXT_WINDOW = 32_000  # pi compacts past this less its reserve (16,384 by default)


class PiProject:
    def __init__(self, root: Path, env: dict[str, str], *, version: str | None = None):
        self.project = root / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        self.home = Path(env["HOME"])
        self.exe = npm.program("pi", version)
        self.env = {**env, "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1",
                    "PI_TELEMETRY": "0", "NO_COLOR": "1"}

    @property
    def extension(self) -> Path:
        return self.project / ".pi" / "extensions" / "todo-harness.ts"

    def harness(self, *args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*HARNESS_CMD.split(), *args], cwd=self.project, env=self.env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def install(self, command: str = HARNESS_CMD) -> subprocess.CompletedProcess[str]:
        return self.harness("hook", "pi", "install", "--command", f"{command} hook pi")

    def serve(self, srv: ModelServer) -> None:
        """pi's model: ``scripted``, at ``srv``."""
        models = self.home / ".pi" / "agent" / "models.json"
        models.parent.mkdir(parents=True, exist_ok=True)
        models.write_text(json.dumps({"providers": {"scripted": {
            "baseUrl": srv.url, "api": "openai-completions", "apiKey": "dummy",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "scripted", "contextWindow": CONTEXT_WINDOW,
                        "maxTokens": 2000}]}}}))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``pi ARGS --provider scripted --model scripted``; it must succeed, and no
        extension may fail."""
        r = subprocess.run([str(self.exe), *args, "--provider", "scripted", "--model",
                            "scripted"], cwd=self.project, env=self.env, capture_output=True,
                           text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert "Extension error" not in r.stderr, r.stderr
        return r

    def sessions(self) -> list[Path]:
        """pi's session files, oldest first."""
        return sorted((self.home / ".pi" / "agent" / "sessions").rglob("*.jsonl"),
                      key=os.path.getmtime)
