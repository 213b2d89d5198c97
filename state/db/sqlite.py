"""Opening a SQLite store file with the standard library's ``sqlite3``: WAL,
``foreign_keys=ON``, ``busy_timeout`` and ``synchronous=NORMAL`` on every connection, the
driver's own transactions off (a writer says ``BEGIN IMMEDIATE`` itself), and a file we may
not write opened read-only (:mod:`state.db.connection` decides which)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from state.db.dialect import busy_timeout_ms


def read_only_reason(path: Path) -> str | None:
    """Why a store file cannot be written by us (None: it can), checked before opening:
    SQLite would open it and fail only at the first write, deep inside a command."""
    if not path.exists():
        return None
    if not os.access(path, os.W_OK):
        return f"you may not write {path}"
    parent = path.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        # SQLite writes its journal (-wal) and WAL index (-shm) beside the file.
        beside = [Path(f"{path}-wal"), Path(f"{path}-shm")]
        if not all(p.exists() and os.access(p, os.W_OK) for p in beside):
            return f"you may not write its directory {parent}"
    return None


def connect_sqlite(path: Path | None, *, read_only: bool = False,
                   immutable: bool = False) -> sqlite3.Connection:
    """A configured connection to the store file (``None``: a private memory database)."""
    timeout = busy_timeout_ms() / 1000
    if path is None:
        conn = sqlite3.connect(":memory:", timeout=timeout, check_same_thread=False,
                               isolation_level=None)
    elif read_only:
        mode = "immutable=1" if immutable else "mode=ro"
        conn = sqlite3.connect(f"file:{quote(str(path))}?{mode}", uri=True, timeout=timeout,
                               check_same_thread=False, isolation_level=None)
    else:
        conn = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False,
                               isolation_level=None)
    try:
        cur = conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_timeout_ms()}")
        cur.execute("PRAGMA foreign_keys = ON")
        if read_only:
            # A read-only WAL database still needs its WAL index: reading proves it opens.
            cur.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        else:
            _ensure_wal(cur)
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()
    except BaseException:
        conn.close()
        raise
    return conn


def _ensure_wal(cur: sqlite3.Cursor) -> None:
    """Put a (new) database file in WAL mode, waiting out other connections doing the same.

    SQLite fails a journal-mode change at once, without its busy handler, while another
    connection holds a write lock on a file still in rollback mode. So retry until the
    busy timeout, as any other locked statement would wait.
    """
    deadline = time.monotonic() + busy_timeout_ms() / 1000
    pause = 0.002
    while True:
        try:
            mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
            if mode in ("wal", "memory"):
                return
            if cur.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        else:
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError("database is locked (cannot switch to WAL)")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
    return "locked" in str(exc) or "busy" in str(exc)
