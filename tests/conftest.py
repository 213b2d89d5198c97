"""Shared fixtures: a real SQLite store on disk, the real CLI run in-process, and a real
sshd on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from state.store import Store
from tests.sshd import ssh_host, sshd  # noqa: F401  (real-sshd fixtures, re-exported)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the developer's own store, config or session."""
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.delenv("HARNESS_SESSION", raising=False)


@pytest.fixture
def db_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state.db"
    monkeypatch.setenv("HARNESS_DB", str(path))
    return path


@pytest.fixture
def store(db_path: Path):
    s = Store.open(str(db_path))
    yield s
    s.close()


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(args: list[str], stdin: str | bytes = b"") -> CliResult:
    """Run `harness ARGS` in this process, through the real entry point (errors included)."""
    from harness.cli.main import main

    data = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    code = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        sys.stdin = old_stdin
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli(db_path: Path):
    return run_cli


def harness_subprocess(args: list[str], *, stdin: bytes = b"", env: dict[str, str] | None = None,
                       timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` in a fresh interpreter (for exit codes, streams, races)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], input=stdin,
                          capture_output=True, env=full_env, timeout=timeout, cwd=cwd)
