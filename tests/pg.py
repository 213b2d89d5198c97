"""A throwaway PostgreSQL cluster for tests and benchmarks: initdb + pg_ctl, no mocks.

The cluster lives in a fresh temporary directory, listens on a free port on 127.0.0.1 (and
on a unix socket in that directory), trusts local connections, and is removed on stop.
PostgreSQL refuses to run as root, so when we are root the server runs as an unprivileged
user (``postgres`` when the Debian package created it, else ``nobody``) via ``runuser``.

``HARNESS_TEST_PG_URL`` points the tests at an existing server instead (a URL of a role
that may create databases). ``HARNESS_TEST_PG=require`` turns "PostgreSQL cannot start"
from a loud skip into a failure (for CI machines that must run the PostgreSQL tests).

Run it by hand for a benchmark::

    python -m tests.pg            # starts a cluster, prints its URL, stops on Ctrl-C
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPERUSER = "harness"


class PgUnavailable(RuntimeError):
    """PostgreSQL could not be started here; the message says why."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise PgUnavailable("psycopg is not installed (pip install 'psycopg[binary]')") from None
    return psycopg


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb (Debian's layout), else PATH."""
    env = os.environ.get("HARNESS_PG_BINDIR")
    if env:
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    if which:
        return Path(which).parent
    raise PgUnavailable("no initdb in /usr/lib/postgresql/*/bin or on PATH "
                        "(install Debian's `postgresql`; scripts/test does when run as root)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> str | None:
    """The user to run the server as, or None for ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PgUnavailable("running as root and neither a `postgres` nor a `nobody` user exists")


@dataclass
class PgCluster:
    """A running throwaway cluster. ``url(db)`` gives an SQLAlchemy URL for database ``db``."""

    root: Path
    port: int
    bindir: Path
    user: str | None
    settings: dict[str, str] = field(default_factory=dict)
    external: str | None = None  # a server we did not start (HARNESS_TEST_PG_URL)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres", user: str = SUPERUSER) -> str:
        if self.external:
            from sqlalchemy.engine import make_url
            return make_url(self.external).set(database=dbname).render_as_string(
                hide_password=False)
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{dbname}"

    def conninfo(self, dbname: str = "postgres") -> str:
        return self.url(dbname).replace("postgresql+psycopg://", "postgresql://")

    def sql(self, statement: str, dbname: str = "postgres") -> list[tuple]:
        """Run one statement in autocommit as the superuser (CREATE DATABASE needs that)."""
        with _psycopg().connect(self.conninfo(dbname), autocommit=True) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def create_database(self, prefix: str = "t") -> str:
        """A fresh empty database; returns its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is ended, the server comes back on
        the same port (as an upgrade or a managed service's maintenance window does)."""
        r = _pg_ctl(self, "restart", "-m", "fast", "-w", "-t", "60", "-l",
                    str(self.root / "server.log"))
        if r.returncode != 0:
            raise PgUnavailable(f"pg_ctl restart failed: {(r.stderr or r.stdout).strip()}")

    def stop(self) -> None:
        if self.external:
            return
        if (self.datadir / "postmaster.pid").exists():
            _pg_ctl(self, "stop", "-m", "fast", "-w")
        shutil.rmtree(self.root, ignore_errors=True)


def _as_user(cluster_user: str | None, argv: list[str]) -> list[str]:
    return ["runuser", "-u", cluster_user, "--", *argv] if cluster_user else argv


def _pg_ctl(c: PgCluster, *args: str) -> subprocess.CompletedProcess:
    argv = _as_user(c.user, [str(c.bindir / "pg_ctl"), "-D", str(c.datadir), *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def start(settings: dict[str, str] | None = None, tries: int = 3) -> PgCluster:
    """initdb + pg_ctl start a cluster; raise PgUnavailable with the reason if it cannot."""
    _psycopg()
    external = os.environ.get("HARNESS_TEST_PG_URL")
    if external:
        c = PgCluster(root=Path("/nonexistent"), port=0, bindir=Path(), user=None,
                      external=external)
        try:
            c.sql("SELECT 1")
        except _psycopg().Error as exc:
            raise PgUnavailable(f"HARNESS_TEST_PG_URL does not answer: {exc}") from None
        return c
    bindir = find_bindir()
    user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
    try:
        os.chmod(root, 0o755)
        datadir = root / "data"
        if user:
            shutil.chown(root, user)
        init = subprocess.run(
            _as_user(user, [str(bindir / "initdb"), "-D", str(datadir), "-U", SUPERUSER,
                            "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]),
            capture_output=True, text=True, timeout=300)
        if init.returncode != 0:
            raise PgUnavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
        base = {"listen_addresses": "127.0.0.1", "unix_socket_directories": str(root),
                "max_connections": "100", "shared_buffers": "128MB"}
        base.update(settings or {})
        last = ""
        for _ in range(tries):
            port = free_port()
            c = PgCluster(root=root, port=port, bindir=bindir, user=user, settings=base)
            opts = " ".join(f"-c {k}={v}" for k, v in {**base, "port": str(port)}.items())
            r = _pg_ctl(c, "start", "-w", "-t", "60", "-l", str(root / "server.log"),
                        "-o", opts)
            if r.returncode == 0:
                return c
            log = root / "server.log"
            last = (log.read_text()[-800:] if log.exists() else "") or r.stderr
            time.sleep(0.2)
        raise PgUnavailable(f"pg_ctl start failed: {last.strip()}")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


if __name__ == "__main__":
    import sys
    extra = dict(a.split("=", 1) for a in sys.argv[1:])
    cluster = start(extra)
    print(cluster.create_database("bench"), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
