"""The real agent programs the tests drive, from npm at pinned versions.

:data:`PROGRAMS` is the one list of them: each program's npm package, the versions its
tests run on (Claude Code keeps an older release beside the newest, since people upgrade
slowly and the two differ), the test files that drive it, and the packages that must come
at the same version (opencode's plugin SDK). ``scripts/agents_latest`` reads it too, so a
program added here is installed by ``scripts/test``, tested, and checked against npm's
newest release with no other change.

Each ``package@version`` is installed once into a folder of its own under
``$HARNESS_NPM_CACHE`` (default ``~/.cache/todo-harness/npm``), named
``<package with / as ->@<version>``; ``scripts/test`` fills the cache before the suite by
running this file (``python3 tests/agents/real/npm.py``: every pinned version of every
program), and a test that finds it filled starts at once. An install is done under a
lock, so parallel pytest workers wait for one install instead of racing it, and it is
marked done (``.installed``) only when it finished: an interrupted one is redone.

``HARNESS_AGENT_VERSIONS=claude-code=2.1.400,codex=0.172.0`` runs a program's tests on
the versions named instead of the pinned ones (``scripts/agents_latest`` sets it);
``python3 tests/agents/real/npm.py claude-code=2.1.400`` installs one.

Without npm, or when the registry cannot be reached, the test is a named skip; with
``CI`` set it fails, because CI must run these tests.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Program:
    name: str  # how tests, HARNESS_AGENT_VERSIONS and scripts/agents_latest call it
    package: str
    versions: tuple[str, ...]  # the pinned ones, newest first
    bin: str
    tests: tuple[str, ...]  # its real-program test files, from the repository root
    companions: tuple[str, ...] = ()  # packages installed at the same version


PROGRAMS: dict[str, Program] = {p.name: p for p in (
    Program("claude-code", "@anthropic-ai/claude-code", ("2.1.332", "2.1.197"), "claude",
            ("tests/agents/real/test_claude_code.py",)),
    Program("codex", "@openai/codex", ("0.171.0",), "codex",
            ("tests/agents/real/test_codex_real.py",)),
    # opencode npm-installs its plugin SDK into every config folder it loads (.opencode/,
    # ~/.config/opencode) at startup; given beforehand, it starts without the registry.
    Program("opencode", "opencode-ai", ("1.18.33",), "opencode",
            ("tests/agents/real/test_opencode_real.py",),
            companions=("@opencode-ai/plugin",)),
    Program("gemini-cli", "@google/gemini-cli", ("0.61.0",), "gemini",
            ("tests/agents/real/test_gemini_cli.py",)),
    # A loader and a native binary (its optional dependency, for this platform), which
    # unpacks its JavaScript into $XDG_CACHE_HOME/copilot on its first start.
    Program("copilot", "@github/copilot", ("1.0.102",), "copilot",
            ("tests/agents/real/test_copilot_cli.py",)),
    # No todo tool and no MCP: the harness's extension (`harness hook pi install`) adds one.
    Program("pi", "@mariozechner/pi-coding-agent", ("0.73.1",), "pi",
            ("tests/agents/real/test_pi_real.py",)),
)}
VERSIONS_ENV = "HARNESS_AGENT_VERSIONS"
DONE = ".installed"
_AS_SCRIPT = False  # run by scripts/test, where pytest is not installed yet


class Unavailable(Exception):
    """A program that cannot be installed here, when this file runs as a script."""


def npm_cache() -> Path:
    raw = os.environ.get("HARNESS_NPM_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "todo-harness" / "npm"


def program_dir(package: str, version: str) -> Path:
    return npm_cache() / f"{package.replace('/', '-')}@{version}"


def overrides(raw: str | None = None) -> dict[str, tuple[str, ...]]:
    """``HARNESS_AGENT_VERSIONS`` (``name=version[+version...],...``) by program name."""
    raw = os.environ.get(VERSIONS_ENV, "") if raw is None else raw
    out: dict[str, tuple[str, ...]] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, _, versions = part.partition("=")
        if name.strip() not in PROGRAMS or not versions.strip():
            known = ", ".join(PROGRAMS)
            raise ValueError(f"{VERSIONS_ENV}: {part!r} is not NAME=VERSION (names: {known})")
        out[name.strip()] = tuple(v.strip() for v in versions.split("+") if v.strip())
    return out


def versions(name: str) -> tuple[str, ...]:
    """The versions program ``name``'s tests run on: the pinned ones, or those that
    ``HARNESS_AGENT_VERSIONS`` names."""
    return overrides().get(name) or PROGRAMS[name].versions


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


def program(name: str, version: str | None = None) -> Path:
    """The program ``name`` (``claude-code``, ``codex``, ``opencode``) at ``version``
    (default: the first it is tested on), with its companions, installed on first use."""
    prog = PROGRAMS[name]
    version = version or versions(name)[0]
    for companion in prog.companions:
        npm_package(companion, version)
    return npm_program(prog.package, version, prog.bin)


def companion(name: str, package: str, version: str | None = None) -> Path:
    """The folder of ``package``, a companion of program ``name``, at its version."""
    return npm_package(package, version or versions(name)[0])


def claude_code(version: str | None = None) -> Path:
    return program("claude-code", version)


def codex() -> Path:
    return program("codex")


def opencode() -> Path:
    return program("opencode")


def gemini_cli() -> Path:
    return program("gemini-cli")


def copilot() -> tuple[Path, Path]:
    """Copilot CLI, and the cache folder it has unpacked itself into (its first start
    unpacks 200 MB, so the tests share one, made here under the install's lock)."""
    exe = program("copilot")
    cache = exe.parents[2] / "xdg-cache"
    if not (cache / ".unpacked").exists():
        with open(exe.parents[2] / ".unpack.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (cache / ".unpacked").exists():
                subprocess.run([str(exe), "--version"], capture_output=True, timeout=300,
                               env={**os.environ, "XDG_CACHE_HOME": str(cache),
                                    "COPILOT_AUTO_UPDATE": "false"}, check=True)
                (cache / ".unpacked").write_text("")
    return exe, cache


def opencode_plugin_sdk() -> Path:
    return companion("opencode", "@opencode-ai/plugin")


def install_all(wanted: dict[str, tuple[str, ...]] | None = None) -> int:
    """Every version the tests run on (or those ``wanted`` names) into the cache; the
    number that could not be installed."""
    failed = 0
    for name in PROGRAMS:
        chosen = (wanted or {}).get(name) if wanted else versions(name)
        for version in chosen or ():
            try:
                program(name, version)
            except Unavailable as exc:
                print(f"!! {exc} (its tests will say so)", file=sys.stderr)
                failed += 1
    return failed


if __name__ == "__main__":
    _AS_SCRIPT = True
    try:
        asked = overrides(",".join(sys.argv[1:])) if sys.argv[1:] else None
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    raise SystemExit(1 if install_all(asked) else 0)
