"""Cheap "did anything change?" for long-running readers (the TUI, a live `log -f`).

:func:`watch` gives a :class:`Watch` whose :meth:`Watch.changed` answers without reading
any table, on a connection of its own:

* SQLite: ``PRAGMA data_version``, which moves when another connection commits. The
  watch's connection runs in autocommit and never holds a read transaction open (an open
  one would pin the WAL and hide later commits from it).
* PostgreSQL: ``LISTEN``. Every write transaction of the store runs ``pg_notify`` on
  :data:`state.db.connection.PG_CHANGE_CHANNEL`, which the server delivers only when it commits,
  and only then: a rolled-back write wakes nobody. Asking is a non-blocking read of the
  socket, no round trip. A dropped connection is reopened and reported as a change (a
  notification may have been missed in between).

Both cover every write the store makes (events, run logs, agent views), not only events.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from state.db.connection import PG_CHANGE_CHANNEL
from state.errors import StoreUnavailable, StoreUnreachable


class Watch:
    """Tells a poller whether the store changed since the last call. Not thread-safe:
    one watch per polling loop."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._conn: Any = None
        self._last: Any = None
        self.dialect = engine.dialect.name

    def _open(self) -> None:
        raw = self._engine.raw_connection()
        raw.detach()  # ours for good: the pool must not reset or share it
        dbapi = raw.dbapi_connection
        if self.dialect == "postgresql":
            dbapi.rollback()
            dbapi.autocommit = True
            dbapi.execute(f"LISTEN {PG_CHANGE_CHANNEL}")
        self._conn = dbapi

    def changed(self) -> bool:
        """True if another connection committed a write since the previous call (the
        first call answers True). Raises the driver's error only if reconnecting fails."""
        if self._conn is None:
            self._reopen()
            return True
        try:
            token = self._token()
        except Exception:
            self.close()
            self._reopen()
            return True
        if self.dialect == "postgresql":
            return bool(token)
        moved = token != self._last
        self._last = token
        return moved

    def _reopen(self) -> None:
        try:
            self._open()
            self._last = self._token()
        except Exception as exc:
            self.close()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            kind = StoreUnreachable if self.dialect == "postgresql" else StoreUnavailable
            raise kind(f"cannot watch the database ({first})") from None

    def _token(self) -> Any:
        if self.dialect == "postgresql":
            # timeout=0: take what has arrived, never wait.
            return sum(1 for _ in self._conn.notifies(timeout=0))
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
