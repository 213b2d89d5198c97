"""The real Claude Code, run as a user would: ``claude -p`` in a project whose hooks were
written by ``harness hook claude-code install``, against a scripted model
(:mod:`tests.agents.real.anthropic_server`), with a home, a Claude config directory and
a harness store of its own."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from state.fold import TodoState
from state.store import Store
from tests.agents.real.anthropic_server import AnthropicServer
from tests.agents.real.conftest import harness, hook_log
from tests.agents.real.npm import claude_code, versions
from tests.conftest import ROOT

PROJECT = "eagle3"  # the project directory's name: the harness session the hooks use
TIMEOUT = 120


@dataclass
class Result:
    code: int
    session_id: str
    lines: list[dict[str, Any]]
    stderr: str
    seconds: float


def stored_todos(db: Path, session: str = PROJECT) -> list[TodoState]:
    """The session's list in the store a real program's hooks wrote, in its order."""
    with Store.open(str(db)) as s:
        row = s.session_by_name(session)
        assert row is not None, "no hook ever wrote to the session"
        return sorted(s.todos(row.id), key=lambda t: (t.position, t.num))


class ClaudeProject:
    """One project directory with Claude Code's hooks installed, and a harness store."""

    def __init__(self, tmp: Path, api: AnthropicServer, *, version: str | None = None,
                 install: tuple[str, ...] | None = (), **env: str):
        self.version = version or versions("claude-code")[0]
        self.claude = claude_code(self.version)
        self.root = tmp
        self.dir = tmp / PROJECT
        self.dir.mkdir()
        self.config = tmp / "claude-config"
        self.db = tmp / "state.db"
        (tmp / "home").mkdir()
        self.env = {
            **os.environ, "HOME": str(tmp / "home"), "CLAUDE_CONFIG_DIR": str(self.config),
            "PYTHONPATH": str(ROOT), "HARNESS_DB": str(self.db),
            "HARNESS_DATA_DIR": str(tmp / "data"), "HARNESS_CONFIG_DIR": str(tmp / "cfg"),
            "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "NO_COLOR": "1",
            **env}
        # No switch from outside: what the installer writes is what runs.
        for key in ("CLAUDE_CODE_TASK_LIST_ID", "HARNESS_SESSION", "CLAUDE_PROJECT_DIR",
                    "CLAUDE_CODE_ENABLE_TODO_TOOLS", "CLAUDE_CODE_ENABLE_TASKS",
                    "ANTHROPIC_MODEL"):
            if key not in env:
                self.env.pop(key, None)
        # The real installer, as a user runs it in the project (None: no harness at all).
        self.installed = ""
        if install is not None:
            done = self.harness("hook", "claude-code", "install", *install)
            assert "added the harness hooks" in done.stdout, done.stdout
            self.installed = done.stdout

    def trust(self) -> None:
        """What accepting Claude Code's trust dialog in the project once records (in
        ``<config>/.claude.json``): only then does it read the project's permissions."""
        path = self.config / ".claude.json"
        doc = json.loads(path.read_text()) if path.exists() else {}
        doc.setdefault("projects", {}).setdefault(str(self.dir), {})[
            "hasTrustDialogAccepted"] = True
        self.config.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2))

    def harness(self, *args: str) -> subprocess.CompletedProcess[str]:
        return harness(self.env, *args, cwd=self.dir)

    def person(self, *args: str) -> None:
        """A person's change, from another shell: ``harness -s eagle3 ...``."""
        self.harness("-s", PROJECT, *args)

    def run(self, prompt: str, *args: str, resume: str | None = None) -> Result:
        argv = [str(self.claude), "-p", prompt, "--output-format", "stream-json", "--verbose",
                *(["--resume", resume] if resume else []), *args]
        start = time.monotonic()
        p = subprocess.run(argv, cwd=self.dir, env=self.env, capture_output=True, text=True,
                           timeout=TIMEOUT)
        took = time.monotonic() - start
        lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        sid = next((x.get("session_id") for x in reversed(lines) if x.get("session_id")), "")
        return Result(p.returncode, sid, lines, p.stderr, took)

    def todos(self) -> list[TodoState]:
        return stored_todos(self.db)

    def hook_log(self) -> str:
        return hook_log(self.env)

    def task_file(self, list_id: str, task_id: str) -> dict[str, Any]:
        path = self.config / "tasks" / list_id / f"{task_id}.json"
        return dict(json.loads(path.read_text()))
