"""The opencode plugin in examples/, run by Node with the one Bun call it makes
(`Bun.spawn`) provided by Node's child_process, against the real `harness hook opencode`:
its `todo.updated` event, and its `experimental.session.compacting` hook called as
opencode calls it (input {sessionID}, output {context: [], prompt})."""

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
const { Readable } = require("node:stream")
globalThis.Bun = {
  spawn(cmd, opts) {
    // Bun.spawn throws at once when the program does not exist; child_process would
    // report it later, as an event.
    require("node:fs").accessSync(cmd[0], require("node:fs").constants.X_OK)
    const out = opts.stdout === "pipe" ? "pipe" : "ignore"
    const p = cp.spawn(cmd[0], cmd.slice(1), { cwd: opts.cwd, env: opts.env,
                                               stdio: ["pipe", out, "ignore"] })
    opts.stdin.arrayBuffer().then((b) => p.stdin.end(Buffer.from(b)))
    return { exited: new Promise((resolve) => p.on("exit", resolve)),
             stdout: out === "pipe" ? Readable.toWeb(p.stdout) : undefined }
  },
}
;(async () => {
  const { HarnessTodos } = await import(require("node:url").pathToFileURL(process.argv[1]).href)
  const hooks = await HarnessTodos({ directory: process.cwd() })
  const contexts = []
  for (const step of JSON.parse(process.argv[2])) {
    if (step.compacting) {
      // What opencode hands the hook before it summarises a session.
      const output = { context: [], prompt: undefined }
      await hooks["experimental.session.compacting"]({ sessionID: step.compacting }, output)
      contexts.push(output.context)
    } else {
      await hooks.event({ event: step })
    }
  }
  process.stdout.write(JSON.stringify(contexts))
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


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_compaction_gets_the_list_and_is_recorded(tmp_path: Path, db_path: Path) -> None:
    plugin = tmp_path / "harness-todos.mjs"
    shutil.copy(PLUGIN, plugin)
    wrapper = tmp_path / "harness"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m harness \"$@\"\n")
    wrapper.chmod(0o755)
    todos = [{"content": "Read the safetensors header", "status": "completed",
              "priority": "high"},
             {"content": "Rename midlayer.* to layers.0.*", "status": "in_progress",
              "priority": "medium"}]
    steps = [{"type": "todo.updated", "properties": {"sessionID": "ses_b", "todos": todos}},
             {"compacting": "ses_b"}, {"compacting": "ses_b"}]
    env = {"PATH": "/usr/bin:/bin", "HARNESS_BIN": str(wrapper), "HARNESS_DB": str(db_path),
           "HARNESS_DATA_DIR": str(tmp_path / "data"),
           "HARNESS_CONFIG_DIR": str(tmp_path / "config"), "HARNESS_TODO_PER_SESSION": "1"}
    r = subprocess.run(["node", "-e", DRIVER, str(plugin), json.dumps(steps)], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    contexts = json.loads(r.stdout)
    assert len(contexts) == 2 and all(len(c) == 1 for c in contexts)
    text = contexts[0][0]
    assert text.startswith("Todo list (session opencode-ses_b): 1/2 completed.")
    assert "[x] t1 Read the safetensors header (high)" in text
    assert "[>] t2 Rename midlayer.* to layers.0.* (medium)" in text
    with Store.open(str(db_path)) as s:
        row = s.session_by_name("opencode-ses_b")
        assert row is not None
        cuts = [e for e in s.events(row.id) if e.kind == "agent.context"]
    # Two compactions in a row with nothing between them are one cut in the history.
    assert [(e.actor, e.payload["cut"], e.payload["agent_session"]) for e in cuts] == [
        ("agent:opencode", "compact", "ses_b")]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_compaction_without_a_harness_changes_nothing(tmp_path: Path) -> None:
    plugin = tmp_path / "harness-todos.mjs"
    shutil.copy(PLUGIN, plugin)
    env = {"PATH": "/usr/bin:/bin", "HARNESS_BIN": str(tmp_path / "no-such-harness")}
    r = subprocess.run(["node", "-e", DRIVER, str(plugin), json.dumps([{"compacting": "s"}])],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [[]]
