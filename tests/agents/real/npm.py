"""The real agent programs the tests drive, from npm at pinned versions.

Each ``package@version`` is installed once into a folder of its own under
``$HARNESS_NPM_CACHE`` (default ``~/.cache/todo-harness/npm``), named
``<package with / as ->@<version>``; ``scripts/test`` fills the cache before the suite by
running this file (``python3 tests/agents/real/npm.py``: every pinned program, the
versions written only here), and a test that finds it filled starts at once. An install is done under a lock, so parallel pytest workers wait for one install
instead of racing it, and it is marked done (``.installed``) only when it finished: an
interrupted one is redone.

Without npm, or when the registry cannot be reached, the test is a named skip; with
``CI`` set it fails, because CI must run these tests.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")
CODEX = ("@openai/codex", "0.171.0", "codex")
OPENCODE = ("opencode-ai", "1.18.33", "opencode")
GEMINI_CLI = ("@google/gemini-cli", "0.61.0", "gemini")
# opencode npm-installs this into every config folder it loads (.opencode/,
# ~/.config/opencode) at startup; given beforehand, it starts without the registry.
OPENCODE_PLUGIN = ("@opencode-ai/plugin", "1.18.33")
DONE = ".installed"
_AS_SCRIPT = False  # run by scripts/test, where pytest is not installed yet


class Unavailable(Exception):
    """A program that cannot be installed here, when this file runs as a script."""


def npm_cache() -> Path:
    raw = os.environ.get("HARNESS_NPM_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "todo-harness" / "npm"


def program_dir(package: str, version: str) -> Path:
    return npm_cache() / f"{package.replace('/', '-')}@{version}"


def _cannot(why: str) -> None:
    if _AS_SCRIPT:
        raise Unavailable(why)
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"the real-program tests must run in CI, but {why}")
    pytest.skip(why)


def npm_program(package: str, version: str, bin: str) -> Path:
    """``bin`` of ``package@version``, installed into the cache on first use."""
    return _installed(package, version, Path("node_modules") / ".bin" / bin)


def npm_package(package: str, version: str) -> Path:
    """The folder ``npm install --prefix`` made for ``package@version`` (its
    ``node_modules``, ``package.json`` and ``package-lock.json``), installed on first use."""
    _installed(package, version, Path("node_modules") / package / "package.json")
    return program_dir(package, version)


def _installed(package: str, version: str, marker: Path) -> Path:
    where = program_dir(package, version)
    program = where / marker
    if (where / DONE).exists() and program.exists():
        return program
    npm = shutil.which("npm")
    if npm is None:
        _cannot(f"npm is not on PATH, so {package}@{version} cannot be installed")
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel worker may be installing it now
        if (where / DONE).exists() and program.exists():
            return program
        shutil.rmtree(where, ignore_errors=True)  # what an interrupted install left
        try:
            proc = subprocess.run(
                [npm, "install", "--prefix", str(where), "--no-audit", "--no-fund",
                 "--loglevel=error", f"{package}@{version}"],
                capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            _cannot(f"npm install {package}@{version} took over 10 minutes")
        if proc.returncode != 0 or not program.exists():
            last = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
            _cannot(f"npm install {package}@{version} failed ({proc.returncode}): "
                    + " / ".join(last))
        (where / DONE).write_text(f"{package}@{version}\n")
    return program


def claude_code() -> Path:
    return npm_program(*CLAUDE_CODE)


def codex() -> Path:
    return npm_program(*CODEX)


def opencode() -> Path:
    return npm_program(*OPENCODE)


def gemini_cli() -> Path:
    return npm_program(*GEMINI_CLI)


def opencode_plugin_sdk() -> Path:
    return npm_package(*OPENCODE_PLUGIN)


def install_all() -> int:
    """Every pinned program into the cache; the number that could not be installed."""
    failed = 0
    for install, spec in [(npm_program, CLAUDE_CODE), (npm_program, CODEX),
                          (npm_program, OPENCODE), (npm_program, GEMINI_CLI),
                          (npm_package, OPENCODE_PLUGIN)]:
        try:
            install(*spec)
        except Unavailable as exc:
            print(f"!! {exc} (its tests will say so)", file=sys.stderr)
            failed += 1
    return failed


if __name__ == "__main__":
    _AS_SCRIPT = True
    raise SystemExit(1 if install_all() else 0)
