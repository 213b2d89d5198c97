"""The opencode plugin in examples/, run by Node with the one Bun call it makes
(`Bun.spawn`) provided by Node's child_process, against the real `harness hook opencode`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from state.store import Store
from tests.conftest import ROOT

PLUGIN = ROOT / "examples" / "opencode-plugin" / "harness-todos.js"

DRIVER = r"""
const cp = require("node:child_process")
globalThis.Bun = {
  spawn(cmd, opts) {
    const p = cp.spawn(cmd[0], cmd.slice(1), { cwd: opts.cwd, env: opts.env,
                                               stdio: ["pipe", "ignore", "ignore"] })
    opts.stdin.arrayBuffer().then((b) => p.stdin.end(Buffer.from(b)))
    return { exited: new Promise((resolve) => p.on("exit", resolve)) }
  },
}
;(async () => {
  const { HarnessTodos } = await import(require("node:url").pathToFileURL(process.argv[1]).href)
  const hooks = await HarnessTodos({ directory: process.cwd() })
  for (const event of JSON.parse(process.argv[2])) await hooks.event({ event })
})()
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_plugin_pipes_todo_updated_into_the_store(tmp_path: Path, db_path: Path) -> None:
    # Node reads ES modules by extension; opencode (Bun) loads the .js file as it is.
    plugin = tmp_path / "harness-todos.mjs"
    shutil.copy(PLUGIN, plugin)
    wrapper = tmp_path / "harness"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m harness \"$@\"\n")
    wrapper.chmod(0o755)
    todos = [{"content": "Tokenize with the chat template", "status": "in_progress",
              "priority": "high"},
             {"content": "Hidden states at layers 2, N/2, N-3", "status": "pending",
              "priority": "medium"}]
    events = [
        {"type": "session.idle", "properties": {"sessionID": "ses_a"}},
        {"type": "todo.updated", "properties": {"sessionID": "ses_a", "todos": todos}},
        {"type": "todo.updated", "properties": {"sessionID": "ses_a", "todos": [
            {**todos[0], "status": "completed"}, {**todos[1], "status": "in_progress"}]}},
    ]
    env = {"PATH": "/usr/bin:/bin", "HARNESS_BIN": str(wrapper), "HARNESS_DB": str(db_path),
           "HARNESS_DATA_DIR": str(tmp_path / "data"),
           "HARNESS_CONFIG_DIR": str(tmp_path / "config")}
    r = subprocess.run(["node", "-e", DRIVER, str(plugin), json.dumps(events)], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with Store.open(str(db_path)) as s:
        row = s.session_by_name("default")
        assert row is not None
        got = sorted(s.todos(row.id), key=lambda t: t.position)
        actors = {e.actor for e in s.events(row.id) if e.kind.startswith("todo.")}
    assert [(t.content, t.status, t.priority) for t in got] == [
        ("Tokenize with the chat template", "completed", "high"),
        ("Hidden states at layers 2, N/2, N-3", "in_progress", "medium")]
    assert actors == {"agent:opencode"}
