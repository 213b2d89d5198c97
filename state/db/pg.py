"""PostgreSQL without SQLAlchemy: a store URL read by hand, and psycopg2 connections set up
as the SQLAlchemy engine sets up its psycopg (3) ones.

A ``todowrite`` on PostgreSQL is a fresh process like any other, and importing SQLAlchemy
(to parse the URL and make the engine) and SQLModel (to list the applied migrations) cost
it ~0.6 s of its ~0.9 s (docs/PERFORMANCE.md, "Everyday commands"). So the everyday
reads and writes (:class:`state.db.connection.Connections`) connect with a driver directly;
the engine (:mod:`state.db.engine`) is still made, on first use, for migrations, ``harness
db`` and change watching.

That driver is psycopg2, not the engine's psycopg 3: ``import psycopg`` alone takes
110-150 ms (its libpq wrapper finds the library through ``ctypes.util``, psycopg-binary
reads its version through ``importlib.metadata``, its errors import ``asyncio``), which
kept a PostgreSQL ``todowrite`` at 245-300 ms; ``import psycopg2`` takes 20-35 ms. Both
speak to the same server through the same libpq, and nothing here depends on which one
wrote a row (every value is text, integer or a timestamp).

Only the plain URLs are read here: ``postgresql://``, ``postgres://`` or
``postgresql+psycopg://``, one host, each query key once. Anything else (another driver,
several hosts) returns None and goes through SQLAlchemy as before. What :func:`render`
writes is what SQLAlchemy's ``URL.render_as_string`` writes for the same URL (the
public URL keys the user's config, so both must agree; tests/cli/test_cli_latency_imports.py
compares them).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from state import retry
from state.errors import StoreUnavailable

DRIVER = "postgresql+psycopg"
CONNECT_TIMEOUT_S = 10
# TCP keepalives on every connection, both ends: a peer that vanished (a cut network, a
# server host gone) is noticed within about idle + interval x count seconds, by libpq on
# our side and by the server on its side (which then ends the dead client's transaction
# and frees the write lock it held). ``tcp_user_timeout`` bounds data left unacknowledged.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
              "keepalives_count": 3, "tcp_user_timeout": 30_000}
# The longest a statement may run on the server, beyond the wait for the write lock
# (``lock_timeout``); our side gives up on an answer a little after it (:func:`_wait`).
STATEMENT_SLACK_MS = 30_000
ANSWER_SLACK_S = 10.0
# What makes an error worth retrying: SQLSTATE classes and codes (connection exceptions,
# serialization failures and deadlocks, an operator or crash shutdown, a server starting
# up, too many connections), and the texts libpq gives when it has no SQLSTATE.
TRANSIENT_CLASSES = ("08",)
TRANSIENT_CODES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03", "53300"})
TRANSIENT_TEXTS = (
    "server closed the connection", "connection refused", "could not connect",
    "timeout expired", "terminating connection", "the database system is starting up",
    "the database system is shutting down", "not yet accepting connections",
    "in recovery mode", "no connection to the server", "connection already closed",
    "could not receive data", "could not send data", "ssl syscall", "eof detected",
    "did not answer", "connection is closed", "consuming input failed",
    "server conn crashed", "lost synchronization", "connection is lost",
    "connection timed out", "no route to host", "network is unreachable",
    "connection reset", "broken pipe",
)
_SCHEMES = ("postgresql", "postgres", DRIVER)
# SQLAlchemy's own pattern (sqlalchemy.engine.url._parse_url), so both read a URL alike.
_URL = re.compile(r"""
    (?P<name>[\w\+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/\?]+)\]|(?P<ipv4host>[^/:\?]+))?(?::(?P<port>[^/\?]*))?)?
    (?:/(?P<database>[^\?]*))?
    (?:\?(?P<query>.*))?
    """, re.X)


@dataclass(frozen=True)
class PgUrl:
    username: str | None
    password: str | None
    host: str | None
    port: int | None
    database: str | None
    query: tuple[tuple[str, str], ...]


def parse(target: str) -> PgUrl | None:
    """The URL's parts, or None when it is not a plain PostgreSQL URL (SQLAlchemy's)."""
    m = _URL.match(target)
    if m is None or m["name"] not in _SCHEMES:
        return None
    port = m["port"]
    if port and not port.isdigit():
        return None
    query = tuple(parse_qsl(m["query"])) if m["query"] is not None else ()
    keys = [k for k, _ in query]
    if len(set(keys)) != len(keys) or "host" in keys or "," in (m["ipv4host"] or ""):
        return None  # repeated keys, several hosts: SQLAlchemy's rules
    return PgUrl(
        username=unquote(m["username"]) if m["username"] is not None else None,
        password=unquote(m["password"]) if m["password"] is not None else None,
        host=m["ipv4host"] or m["ipv6host"], port=int(port) if port else None,
        database=unquote(m["database"]) if m["database"] is not None else None,
        query=tuple(sorted(query)))


def render(url: PgUrl, *, hide_password: bool) -> str:
    """The URL as SQLAlchemy renders it, with the psycopg driver named."""
    s = DRIVER + "://"
    if url.username is not None:
        s += quote(url.username, safe=" +")
        if url.password is not None:
            s += ":" + ("***" if hide_password else quote(url.password, safe=" +"))
        s += "@"
    if url.host is not None:
        s += f"[{url.host}]" if ":" in url.host else url.host
    if url.port is not None:
        s += f":{url.port}"
    if url.database is not None:
        s += "/" + quote(url.database, safe=" +/")
    if url.query:
        s += "?" + "&".join(f"{quote_plus(k)}={quote_plus(v)}" for k, v in url.query)
    return s


# What to install when a PostgreSQL driver is missing (both come with the extra).
INSTALL_HINT = "install the postgres extra: pip install -e '.[postgres]'"


def missing_driver(name: str | None, where: str) -> StoreUnavailable:
    """The one-line error for a PostgreSQL URL in a Python without its driver. The URL it
    prints names the driver it names: ``postgresql://`` (psycopg2's, as SQLAlchemy reads it)
    for the everyday route, ``postgresql+psycopg://`` for the engine's psycopg 3."""
    module = (name or "psycopg2").split(".")[0]
    if module == "psycopg2":
        if where.startswith(DRIVER + "://"):
            where = "postgresql://" + where[len(DRIVER) + 3:]
        driver_name = "psycopg2"
    else:
        driver_name = "psycopg 3" if module.startswith("psycopg") else module
    return StoreUnavailable(f"the PostgreSQL driver {driver_name} is not installed",
                            where=where, hint=INSTALL_HINT)


def driver() -> Any:
    """psycopg2, or :class:`ModuleNotFoundError` (turned into :func:`missing_driver` by
    the callers, which know the store's name)."""
    import psycopg2

    return psycopg2


def session_sql(lock_timeout_ms: int) -> str:
    """What every connection sets once connected, in one round trip (not as startup
    ``options``: poolers such as pgbouncer refuse those): the wait for the write lock,
    the longest statement, the longest a transaction may sit idle (a client that vanished
    mid-write frees the lock), and the server's own keepalives."""
    statement = int(lock_timeout_ms) + STATEMENT_SLACK_MS
    return (f"SET lock_timeout = {int(lock_timeout_ms)}; "
            f"SET statement_timeout = {statement}; "
            f"SET idle_in_transaction_session_timeout = {statement}; "
            f"SET tcp_keepalives_idle = {KEEPALIVES['keepalives_idle']}; "
            f"SET tcp_keepalives_interval = {KEEPALIVES['keepalives_interval']}; "
            f"SET tcp_keepalives_count = {KEEPALIVES['keepalives_count']}")


def connect(url: PgUrl, *, lock_timeout_ms: int, retry_s: float | None = None) -> Any:
    """A psycopg2 connection as the engine makes its own (state/db/engine.py): READ COMMITTED,
    not in autocommit, named todo-harness, with a connect timeout and TCP keepalives, and
    :func:`session_sql` run after connecting."""
    global _answer_s, _retry_s
    psycopg2 = driver()

    args: dict[str, Any] = {k: v for k, v in (
        ("user", url.username), ("password", url.password), ("host", url.host),
        ("port", url.port), ("dbname", url.database)) if v is not None}
    args.update(KEEPALIVES)
    args.update(url.query)  # the user's own choices win
    args.update(application_name="todo-harness", connect_timeout=CONNECT_TIMEOUT_S)
    _answer_s = (int(lock_timeout_ms) + STATEMENT_SLACK_MS) / 1000 + ANSWER_SLACK_S
    _retry_s = retry_s
    psycopg2.extensions.set_wait_callback(_wait)
    conn = psycopg2.connect(**args)
    try:
        conn.set_session(isolation_level="READ COMMITTED", autocommit=False)
        with conn.cursor() as cur:
            cur.execute(session_sql(lock_timeout_ms))
        conn.commit()
    except BaseException:
        conn.close()
        raise
    return conn


# How long to wait for any answer of the server, and the retry budget the store's URL
# sets (both set by :func:`connect`).
_answer_s = (30_000 + STATEMENT_SLACK_MS) / 1000 + ANSWER_SLACK_S
_retry_s: float | None = None
MIN_WAIT_S = 2.0


def _wait(conn: Any) -> None:
    """psycopg2's wait callback: libpq's waits happen here, in Python.

    Without one, psycopg2 blocks in C for a whole connect (to ``connect_timeout``: 10 s
    on a server that accepts and never answers) and a Ctrl-C waits that long. Here it
    lands at once. libpq does not time out a connect made this way, so the deadline is
    kept here. A query interrupted here is cancelled on the server; its connection is
    not reused (its transaction is not idle).

    Every other wait has a deadline too, a little past the server's own
    ``statement_timeout``: a connection whose server went silent (a network that drops
    packets, a server host frozen) used to wait for its answer for ever. Past it the
    connection is closed, and the error is one that :mod:`state.retry` retries."""
    import select

    import psycopg2
    from psycopg2.extensions import POLL_OK, POLL_READ, STATUS_SETUP

    connecting = conn.status == STATUS_SETUP
    limit = CONNECT_TIMEOUT_S if connecting else _answer_s
    op = retry.current()
    if op is not None:  # the operation's budget ends every wait (a short floor: one try)
        limit = min(limit, max(op.left(_retry_s), MIN_WAIT_S))
    deadline = time.monotonic() + limit
    try:
        while True:
            state = conn.poll()
            if state == POLL_OK:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                if connecting:
                    raise psycopg2.OperationalError("connection timeout expired")
                _hang_up(conn)
                raise psycopg2.OperationalError(
                    f"the server did not answer within {limit:g} s")
            fd = [conn.fileno()]
            select.select(fd if state == POLL_READ else [], [] if state == POLL_READ else fd,
                          [], left)
    except KeyboardInterrupt:
        if not connecting:
            try:
                conn.cancel()
            except Exception:  # the Ctrl-C is the news, not a failed cancel
                pass
        raise


def _hang_up(conn: Any) -> None:
    """End a connection from inside psycopg2's wait callback, where calling any of its
    methods would deadlock on its own lock: shut its socket, so libpq sees it closed."""
    import socket

    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def transient(exc: BaseException, conn: Any = None) -> bool:
    """Whether trying again may work: the connection dropped or could not be made, or
    the server said so (psycopg2's ``pgcode``, psycopg 3's ``sqlstate``)."""
    code = getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None) or ""
    if code in TRANSIENT_CODES or code.startswith(TRANSIENT_CLASSES):
        return True
    if code:
        return False  # the server answered with a reason of its own
    if conn is not None and dropped(conn):
        return True
    text = str(exc).lower()
    return any(t in text for t in TRANSIENT_TEXTS)


def errors() -> tuple[type[BaseException], type[BaseException]]:
    """(Error, OperationalError) of the driver these connections use."""
    psycopg2 = driver()
    return psycopg2.Error, psycopg2.OperationalError


def dropped(conn: Any) -> bool:
    """Whether the connection is closed, or broken by the server going away (psycopg2's
    ``closed`` is 2 then)."""
    return conn is None or bool(conn.closed)


def ping(conn: Any) -> bool:
    """Whether a pooled connection still answers (the engine's ``pool_pre_ping``): one
    round trip, outside any transaction."""
    if dropped(conn):
        return False
    try:
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
        finally:
            conn.autocommit = False
    except Exception:
        return False
    return True


def idle(conn: Any) -> bool:
    """Whether a connection has no transaction open (and is fit to pool)."""
    from psycopg2.extensions import TRANSACTION_STATUS_IDLE

    return not dropped(conn) and conn.info.transaction_status == TRANSACTION_STATUS_IDLE


__all__ = ["DRIVER", "KEEPALIVES", "PgUrl", "connect", "dropped", "errors", "idle", "parse",
           "ping", "render", "session_sql", "transient"]
