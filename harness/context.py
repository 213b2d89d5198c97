"""The harness as the CLI, the MCP server and the TUI see it: a store and a session."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from harness.errors import NoSession
from harness.paths import (
    DEFAULT_SESSION,
    DEFAULT_STORE_HOW,
    Resolved,
    resolve_session,
    resolve_store,
)
from state.errors import InvalidChange, ReadOnlyStore
from state.store import SessionInfo, Store

# Notes for the person at the CLI edge, printed there once a command succeeded (a failed
# command's one line of error stays one line).
NOTES: list[str] = []


class Harness:
    """Resolves the store and the session once, opens the store lazily.

    A missing store is created where the default (the user data directory) puts it, with
    its directories; one named by ``--db`` or ``HARNESS_DB`` only in a directory that
    exists, and ``announce`` leaves a note for the CLI to print (a mistyped path must not
    go unnoticed).
    """

    def __init__(self, db: str | None = None, session: str | None = None, *,
                 announce: bool = True, cwd: Path | None = None):
        self.store_source: Resolved = resolve_store(db, cwd)
        self._session_opt = session
        self._session: SessionInfo | None = None
        self.announce = announce

    @cached_property
    def store(self) -> Store:
        src = self.store_source
        store = Store.open(src.value, make_dirs=src.how == DEFAULT_STORE_HOW)
        if store.created and self.announce and src.how in ("--db", "HARNESS_DB"):
            NOTES.append(f"note: {store.where}: created a new, empty store (from {src.how})")
        return store

    @property
    def session_source(self) -> Resolved:
        return resolve_session(self._session_opt, self.store.public_url)

    def session(self, *, create: bool = False) -> SessionInfo:
        """The session to act on. The default session is created on first use; another
        unknown name is an error unless ``create`` (``harness run``, ``harness import``)."""
        if self._session is not None:
            return self._session
        src = self.session_source
        row = self.store.session_by_name(src.value)
        if row is None:
            if not (create or src.value == DEFAULT_SESSION):
                raise NoSession(f"no session named {src.value!r} (from {src.how})",
                                where=self.store.where,
                                hint=f"create it with `harness session new {src.value}`")
            if self.store.read_only is not None:
                raise ReadOnlyStore(f"no session named {src.value!r}, and the store is "
                                    f"read-only ({self.store.read_only})",
                                    where=self.store.where,
                                    hint="name one that exists with --session "
                                         "(`harness session list`)")
            try:
                self.store.create_session(src.value, actor="human")
            except InvalidChange:
                pass  # another process created it since we looked: use theirs
            row = self.store.session_by_name(src.value)
            assert row is not None
        self._session = row
        return row

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
