"""Shared fixtures: a real store (a SQLite file, or a database on a throwaway PostgreSQL
cluster), the real CLI run in-process, and a real sshd on 127.0.0.1 (tests/sshd.py).

Backends: a test that uses ``db_url`` (directly, or through ``store`` or ``cli``) runs once
per backend, ``[sqlite]`` and ``[postgres]``. A test that asks for ``db_path`` (a SQLite
file it pokes at) or is marked ``sqlite`` runs on SQLite only. The PostgreSQL cluster is
started once per test session (``tests/pg.py``); if it cannot start, the PostgreSQL tests
are skipped with the reason, a warning, and a banner at the end of the run.

The run fails if its tests leave a process running, or a job in the Slurm cluster's queue
(``tests/leftovers.py``).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from state.store import Store
from tests import leftovers, pg
from tests.slurm import (  # noqa: F401  (real-Slurm fixtures, re-exported)
    slurm,
    slurm_cluster,
    slurm_host,
    slurm_login,
)
from tests.sshd import (  # noqa: F401  (real-sshd fixtures, re-exported)
    any_ssh_host,
    any_sshd,
    ssh_host,
    sshd,
    sshd_no_sftp,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
BACKENDS = ("sqlite", "postgres")
_pg_failure: list[str] = []
# Every action run by a test (in-process or as a job) fails if it reports a number that
# pipeline/actions.py ACTION_METRICS does not declare: gates are checked against that table.
os.environ["HARNESS_CHECK_METRICS"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    # A suite started as a background job of a non-interactive shell inherits SIGINT
    # ignored, and so would every child it starts: the Ctrl-C tests would then test nothing.
    # A handler (unlike SIG_IGN) is reset to the default in each exec'd child.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers", "sqlite: SQLite-specific (pragmas, files); not run on PostgreSQL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    sqlite_only = "db_path" in metafunc.fixturenames or \
        metafunc.definition.get_closest_marker("sqlite") is not None
    params = ["sqlite"] if sqlite_only else list(BACKENDS)
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg.PgCluster]:
    """A throwaway PostgreSQL cluster for the whole run (or a loud skip)."""
    if _pg_failure:
        pytest.skip(_pg_failure[0])
    try:
        cluster = pg.start({"fsync": "off", "synchronous_commit": "off",
                            "full_page_writes": "off"})
    except (pg.PgUnavailable, OSError, subprocess.SubprocessError) as exc:
        reason = f"PostgreSQL could not start, its tests are SKIPPED: {exc}"
        _pg_failure.append(reason)
        if os.environ.get("HARNESS_TEST_PG") == "require":
            pytest.fail(reason + " (HARNESS_TEST_PG=require)")
        warnings.warn(reason, stacklevel=1)
        pytest.skip(reason)
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: pg.PgCluster) -> str:
    """A fresh, empty database on the test cluster."""
    return pg_cluster.create_database()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if _pg_failure:
        terminalreporter.write_sep("!", "PostgreSQL tests were SKIPPED", red=True, bold=True)
        terminalreporter.write_line(_pg_failure[0], red=True)
    from tests.slurm import FAILURE as slurm_failure

    if slurm_failure:
        terminalreporter.write_sep("!", "Slurm tests were SKIPPED", red=True, bold=True)
        terminalreporter.write_line(slurm_failure[0], red=True)


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite leaves no process behind. Set up before any other session fixture, so
    torn down after all of them (the daemons they started are stopped by then): a process
    the tests started that still runs 15 s later fails the run, as an error at the last
    test's teardown naming each one, and is then killed. (tests/slurm.py holds the
    cluster's queue to the same rule.)"""
    os.environ[leftovers.MARK] = mark = str(os.getpid())
    base = tmp_path_factory.getbasetemp()
    yield
    left = leftovers.wait_until_empty(lambda: leftovers.processes_left(mark, base), 15)
    if left:
        leftovers.kill(left)
        pytest.fail("the tests left processes running (killed now): "
                    + "; ".join(f"{pid} {cmd}" for pid, cmd in sorted(left.items())),
                    pytrace=False)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the developer's own store, config or session."""
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.delenv("HARNESS_SESSION", raising=False)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           request: pytest.FixtureRequest) -> str:
    """The test's store (a SQLite path, or a PostgreSQL URL), also set as HARNESS_DB."""
    url = (request.getfixturevalue("pg_url") if backend == "postgres"
           else str(tmp_path / "state.db"))
    monkeypatch.setenv("HARNESS_DB", url)
    return url


@pytest.fixture
def db_path(db_url: str) -> Path:
    """The SQLite file behind ``db_url`` (asking for it makes the test SQLite-only)."""
    return Path(db_url)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
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
def cli(db_url: str):
    return run_cli


def example_copy(name: str, where: Path) -> Path:
    """A copy of ``examples/NAME`` in ``where``. The examples' workdirs are relative
    (``runs/eagle3-tiny``), so the copy's is under ``where`` and empty: a test that reads
    a spec this way gives the same answer before and after the README's main job has run
    in this checkout (``examples/runs/``)."""
    target = where / name
    target.write_text((ROOT / "examples" / name).read_text())
    return target


def harness_subprocess(args: list[str], *, stdin: bytes = b"", env: dict[str, str] | None = None,
                       timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` in a fresh interpreter (for exit codes, streams, races)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], input=stdin,
                          capture_output=True, env=full_env, timeout=timeout, cwd=cwd)


@pytest.fixture
def default_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP at their defaults in this process and its children: a CI run
    under `nohup` starts with SIGHUP ignored, and an ignored signal is inherited on exec."""
    import signal

    saved = [(s, signal.signal(s, signal.SIG_DFL)) for s in (signal.SIGTERM, signal.SIGHUP)]
    yield
    for s, handler in saved:
        signal.signal(s, handler)
