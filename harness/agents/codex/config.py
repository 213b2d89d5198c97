"""What ``harness hook codex install`` changes in Codex's own ``config.toml``
(``$CODEX_HOME/config.toml``, default ``~/.codex``), besides the hooks file.

Measured on Codex 0.171.0, three things must hold before a plan reaches the store:

* ``[tools.update_plan] enabled = true``: the tool is opt-in; without it the model is not
  offered it, and a call gets "unsupported call: update_plan".
* The hooks are trusted: Codex keeps ``[hooks.state."<key>"] trusted_hash = "sha256:..."``
  per hook in the user's config, where the key is ``<hooks file>:<event>:<group>:<hook>``
  and the hash is Codex's own of the hook's definition. Untrusted hooks silently do not
  run under ``codex exec``. The hash is asked of Codex itself (``codex app-server``,
  method ``hooks/list``) on a scratch copy of the hooks file, so it is right for the
  installed version and needs no trust of the real project first.
* The project is trusted (``[projects."<dir>"] trust_level = "trusted"``), or Codex
  ignores ``.codex/``. That is the person's call: install only says how.

The file is edited line by line, so comments and order stay; the result is parsed back
and checked, and a file the edit cannot handle is an error that says what to set.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the core install pulls tomli there
    import tomli as tomllib

from harness.errors import InputError
from harness.paths import codex_home

_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(?:#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")
APP_SERVER_TIMEOUT = 60.0


def config_path() -> Path:
    return codex_home() / "config.toml"


def _split_key(text: str) -> list[str] | None:
    """A dotted TOML key (bare or "quoted" parts) as its parts; None if it is not one."""
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if rest.startswith('"'):
            m = re.match(r'"((?:[^"\\]|\\.)*)"', rest)
            if not m:
                return None
            parts.append(json.loads(m.group(0)))
        elif rest.startswith("'"):
            m = re.match(r"'([^']*)'", rest)
            if not m:
                return None
            parts.append(m.group(1))
        else:
            m = re.match(r"[A-Za-z0-9_-]+", rest)
            if not m:
                return None
            parts.append(m.group(0))
        rest = rest[m.end():].strip()
        if rest.startswith("."):
            rest = rest[1:].strip()
        elif rest:
            return None
    return parts


def _key_text(parts: list[str]) -> str:
    return ".".join(p if re.fullmatch(r"[A-Za-z0-9_-]+", p) else json.dumps(p)
                    for p in parts)


def lookup(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if not isinstance(doc, dict) or p not in doc:
            return None
        doc = doc[p]
    return doc


def set_value(text: str, table: list[str], key: str, value: Any, *, where: str) -> str:
    """``text`` with ``table.key = value`` (a string or a bool), keeping everything else."""
    literal = json.dumps(value) if isinstance(value, str) else str(value).lower()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines)
                  if (m := _HEADER.match(line)) and _split_key(m.group(1)) == table), None)
    if start is None:
        gap = "\n" if lines and lines[-1].strip() else ""
        lines.append(f"{gap}[{_key_text(table)}]\n{key} = {literal}\n")
    else:
        end = next((i for i in range(start + 1, len(lines)) if _ANY_HEADER.match(lines[i])),
                   len(lines))
        own = re.compile(rf"^\s*{re.escape(key)}\s*=")
        found = next((i for i in range(start + 1, end) if own.match(lines[i])), None)
        if found is not None:
            lines[found] = f"{key} = {literal}\n"
        else:
            last = max((i for i in range(start, end) if lines[i].strip()), default=start)
            lines.insert(last + 1, f"{key} = {literal}\n")
    after = "".join(lines)
    try:
        parsed = tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        parsed = None
    if parsed is None or lookup(parsed, [*table, key]) != value:
        raise InputError(f"cannot set {_key_text([*table, key])} = {literal} here (it is "
                         "set another way); set it yourself, then install again", where=where)
    return after


def read(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text (None: it does not exist) and its parsed content."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({getattr(exc, 'strerror', None) or exc})",
                         where=str(path)) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc}); fix it, then install again",
                         where=str(path)) from None


def find_codex(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get("HARNESS_CODEX_BIN") or shutil.which("codex")


def hook_hashes(codex: str, hooks_text: str, *, user_scope: bool) -> dict[str, str]:
    """Codex's hash of every hook in ``hooks_text``, keyed as Codex keys them but relative
    to the hooks file (``post_tool_use:0:0``), as Codex's ``hooks/list`` reports it for a
    scratch copy of the file in a trusted scratch project."""
    # A Codex child may still be closing its logs there when we leave: never a traceback.
    with tempfile.TemporaryDirectory(prefix="harness-codex-", ignore_cleanup_errors=True) as tmp:
        home = Path(tmp) / "home"
        proj = Path(tmp) / "project"
        home.mkdir()
        proj.mkdir()
        hooks = home / "hooks.json" if user_scope else proj / ".codex" / "hooks.json"
        hooks.parent.mkdir(parents=True, exist_ok=True)
        hooks.write_text(hooks_text, encoding="utf-8")
        (home / "config.toml").write_text(
            f"[projects.{json.dumps(str(proj))}]\ntrust_level = \"trusted\"\n",
            encoding="utf-8")
        found = hooks_list(codex, home, proj)
        prefix = f"{hooks}:"
        return {h["key"][len(prefix):]: h["currentHash"] for h in found
                if isinstance(h.get("key"), str) and h["key"].startswith(prefix)
                and isinstance(h.get("currentHash"), str)}


def hooks_list(codex: str, home: Path, cwd: Path) -> list[dict[str, Any]]:
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "todo-harness", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    env = {**os.environ, "CODEX_HOME": str(home)}
    try:
        # Its own process group: the npm launcher starts the native binary as a child,
        # which a kill of the launcher alone would leave writing into CODEX_HOME.
        proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                cwd=cwd, env=env, text=True, start_new_session=True)
    except OSError as exc:
        raise InputError(f"cannot run it ({exc.strerror})", where=codex) from None
    # A Codex that never answers must not hang the install.
    watchdog = threading.Timer(APP_SERVER_TIMEOUT, _kill_group, (proc,))
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("id") == 2:
                if "error" in msg:
                    raise InputError(f"hooks/list failed: {msg['error']}", where=codex)
                data = (msg.get("result") or {}).get("data") or []
                return [h for entry in data for h in (entry.get("hooks") or [])]
        raise InputError("codex app-server ended without listing the hooks", where=codex)
    except BrokenPipeError:
        raise InputError("codex app-server ended at once", where=codex) from None
    finally:
        watchdog.cancel()
        _kill_group(proc)
        proc.wait()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def project_trusted(doc: dict[str, Any], project: Path) -> bool:
    projects = doc.get("projects")
    if not isinstance(projects, dict):
        return False
    for candidate in {str(project), str(project.resolve())}:
        entry = projects.get(candidate)
        if isinstance(entry, dict) and entry.get("trust_level") == "trusted":
            return True
    return False
