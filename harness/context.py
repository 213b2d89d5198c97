"""The harness as the CLI, the MCP server and the TUI see it: a store and a session."""

from __future__ import annotations

from functools import cached_property

from harness.errors import NoSession
from harness.paths import DEFAULT_SESSION, Resolved, resolve_session, resolve_store
from state.errors import InvalidChange
from state.models import SessionRow
from state.store import Store


class Harness:
    """Resolves the store and the session once, opens the store lazily."""

    def __init__(self, db: str | None = None, session: str | None = None):
        self.store_source: Resolved = resolve_store(db)
        self._session_opt = session
        self._session: SessionRow | None = None

    @cached_property
    def store(self) -> Store:
        return Store.open(self.store_source.value)

    @property
    def session_source(self) -> Resolved:
        return resolve_session(self._session_opt, self.store.url)

    def session(self, *, create: bool = False) -> SessionRow:
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
