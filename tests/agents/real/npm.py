"""The real agent programs for the tests: installed from npm at a pinned version into a
cache folder shared by every run (``$HARNESS_NPM_CACHE``, default
``~/.cache/todo-harness/npm``), one folder per package and version, so a second run (or a
second pytest worker) finds it installed.

Where npm or the registry cannot be had, the test is a named skip; in CI (``CI`` set) it
fails instead, since CI must run these tests.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

# The versions the tests (and docs/agents.md) were written against.
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")
CODEX = ("@openai/codex", "0.171.0", "codex")
OPENCODE = ("opencode-ai", "1.18.33", "opencode")
# opencode installs this into every config folder it loads (.opencode/, ~/.config/opencode)
# with npm at startup; given beforehand, it starts without the registry.
OPENCODE_PLUGIN = ("@opencode-ai/plugin", "1.18.33")


def cache_root() -> Path:
    env = os.environ.get("HARNESS_NPM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "todo-harness" / "npm"


def install_dir(package: str, version: str) -> Path:
    # "@openai/codex" -> "@openai-codex@0.171.0": one folder, no nesting.
    return cache_root() / f"{package.replace('/', '-')}@{version}"


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-program tests: {why}")
    pytest.skip(why)


def npm_program(package: str, version: str, bin: str) -> Path:
    """The path of ``bin`` from ``package@version``, installed on first use."""
    return _installed(package, version, Path("node_modules") / ".bin" / bin)


def npm_package(package: str, version: str) -> Path:
    """The folder ``npm install --prefix`` made for ``package@version`` (its
    ``node_modules`` and ``package.json``), installed on first use."""
    _installed(package, version, Path("node_modules") / package / "package.json")
    return install_dir(package, version)


def _installed(package: str, version: str, marker: Path) -> Path:
    where = install_dir(package, version)
    program = where / marker
    if program.exists():
        return program
    npm = shutil.which("npm")
    if npm is None:
        _unavailable(f"npm is not installed: cannot install {package}@{version}")
    where.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it now
        if not program.exists():
            proc = subprocess.run(
                [npm, "install", "--prefix", str(where), "--no-audit", "--no-fund",
                 "--loglevel=error", f"{package}@{version}"],
                capture_output=True, text=True, timeout=900)
            if proc.returncode != 0 or not program.exists():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                _unavailable(f"npm install {package}@{version} failed: {' / '.join(tail)}")
    return program


def codex() -> Path:
    return npm_program(*CODEX)


def opencode() -> Path:
    return npm_program(*OPENCODE)


def opencode_plugin_sdk() -> Path:
    return npm_package(*OPENCODE_PLUGIN)
