"""The real Gemini CLI, run as a user would: ``gemini -p`` in a project whose settings
``harness hook gemini-cli install`` wrote, against a scripted Gemini API
(:mod:`tests.agents.real.gemini_server`), with a home and a harness store of its own."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from state.fold import Event, TodoState
from state.store import Store
from tests.agents.real.claude_run import Result, stored_todos
from tests.agents.real.conftest import HARNESS_CMD, harness, hook_log
from tests.agents.real.gemini_server import GeminiServer
from tests.agents.real.npm import gemini_cli
from tests.conftest import ROOT

PROJECT = "eagle3"  # the project directory's name: the harness session the hooks use
TIMEOUT = 120
# What a user sets once for a Gemini API key (the key itself comes from the environment),
# and what keeps a test run off the network.
USER_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                 "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                 "privacy": {"usageStatisticsEnabled": False}}


class GeminiProject:
    """One project directory with Gemini CLI's hooks installed, and a harness store."""

    def __init__(self, tmp: Path, api: GeminiServer, *install: str, **env: str):
        self.gemini = gemini_cli()
        self.dir = tmp / PROJECT
        self.dir.mkdir()
        subprocess.run(["git", "init", "-q", str(self.dir)], check=True)
        self.home = tmp / "home"
        (self.home / ".gemini").mkdir(parents=True)
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS))
        self.db = tmp / "state.db"
        self.env = {
            **os.environ, "HOME": str(self.home), "PYTHONPATH": str(ROOT),
            "HARNESS_DB": str(self.db), "HARNESS_DATA_DIR": str(tmp / "data"),
            "HARNESS_CONFIG_DIR": str(tmp / "cfg"), "GOOGLE_GEMINI_BASE_URL": api.url,
            "GEMINI_API_KEY": "test-dummy-key", "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "NO_COLOR": "1", **env}
        # Gemini CLI strips every variable but a few from a hook's environment when it
        # thinks it runs in GitHub Actions; the hooks here need HARNESS_DB.
        for key in ("GITHUB_SHA", "SURFACE", "HARNESS_SESSION", "GEMINI_CLI_HOME",
                    "CLAUDE_PROJECT_DIR"):
            if key not in env:
                self.env.pop(key, None)
        # The real installer, as a user runs it in the project.
        self.installed = self.harness("hook", "gemini-cli", "install", "--command",
                                      f"{HARNESS_CMD} hook gemini-cli", *install).stdout
        assert "added the harness hooks" in self.installed, self.installed

    def harness(self, *args: str) -> subprocess.CompletedProcess[str]:
        return harness(self.env, *args, cwd=self.dir)

    def person(self, *args: str) -> None:
        """A person's change, from another shell: ``harness -s eagle3 ...``."""
        self.harness("-s", PROJECT, *args)

    def run(self, prompt: str, *args: str, resume: bool = False) -> Result:
        argv = [str(self.gemini), "-p", prompt, "--output-format", "stream-json",
                *(["--resume", "latest"] if resume else []), *args]
        start = time.monotonic()
        p = subprocess.run(argv, cwd=self.dir, env=self.env, capture_output=True, text=True,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        took = time.monotonic() - start
        lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        sid = next((x.get("session_id") for x in lines if x.get("session_id")), "")
        return Result(p.returncode, sid, lines, p.stderr, took)

    def todos(self) -> list[TodoState]:
        return stored_todos(self.db)

    def events(self) -> list[Event]:
        with Store.open(str(self.db)) as s:
            row = s.session_by_name(PROJECT)
            assert row is not None
            return s.events(row.id)

    def hook_log(self) -> str:
        return hook_log(self.env)

    def chats(self) -> list[Path]:
        """Gemini CLI's saved chats of this project (its chat recordings)."""
        return sorted((self.home / ".gemini" / "tmp").glob("*/chats/session-*.json*"))
