"""The everyday PostgreSQL route's connections (state/db/pg.py, psycopg2) answer Ctrl-C at once
and keep their connect timeout: a server that accepts and never answers, then a real one
running a long query."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT

pytest.importorskip("psycopg2")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a hung server, a
    firewall that swallows the reply)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.mark.parametrize("args", [["list"], ["todowrite"], ["add", "x"]])
def test_ctrl_c_while_connecting_ends_the_command_at_once(silent_server: int, tmp_path,
                                                          args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "HARNESS_DB": f"postgresql://u@127.0.0.1:{silent_server}/db",
           "HARNESS_DATA_DIR": str(tmp_path / "data"),
           "HARNESS_CONFIG_DIR": str(tmp_path / "config"), "HARNESS_SESSION": "s"}
    p = subprocess.Popen([sys.executable, "-m", "harness", *args], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # well inside the connect: its timeout is 10 s
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate('{"todos": []}', timeout=30)
    waited = time.monotonic() - t0
    assert p.returncode == 130, err
    assert err.strip() == "error: interrupted", err
    assert waited < 3.0, f"Ctrl-C took {waited:.1f}s to end `harness {' '.join(args)}`"


def test_a_server_that_never_answers_times_out(silent_server: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg2

    from state.db import pg

    monkeypatch.setattr(pg, "CONNECT_TIMEOUT_S", 1)
    t0 = time.monotonic()
    with pytest.raises(psycopg2.OperationalError, match="timeout"):
        pg.connect(pg.parse(f"postgresql://u@127.0.0.1:{silent_server}/db"),
                   lock_timeout_ms=100)
    assert 0.9 < time.monotonic() - t0 < 5


# Runs in its own process: the Ctrl-C goes to that process's main thread, not pytest's.
LONG_QUERY = textwrap.dedent("""
    import os, signal, sys, threading, time
    from state.db import pg
    conn = pg.connect(pg.parse(sys.argv[1]), lock_timeout_ms=1000)
    print(conn.info.backend_pid, flush=True)
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_sleep(60)")
        print("finished", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - t0:.2f}", flush=True)
        time.sleep(3)  # still alive: the query must have been stopped by the server
""")


@pytest.mark.postgres
def test_ctrl_c_cancels_a_running_query_on_the_server(pg_url: str, pg_cluster) -> None:
    p = subprocess.Popen([sys.executable, "-c", LONG_QUERY, pg_url.replace("+psycopg", "")],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline())
        line = p.stdout.readline().split()
        assert line and line[0] == "interrupted", line
        assert float(line[1]) < 3.0
        # psycopg2 drops the interrupted connection; the server would not notice that
        # while pg_sleep runs, so a backend gone or idle means the query was cancelled.
        rows = pg_cluster.sql(f"SELECT state FROM pg_stat_activity WHERE pid = {pid}")
        assert not rows or rows[0][0] != "active", rows
    finally:
        p.kill()
        p.communicate()
