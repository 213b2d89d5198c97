"""Errors raised by the state layer.

The tree, drawn once::

    StoreError                    exit 1 unless noted
    ├── StoreUnavailable          exit 3: cannot open, read or lock the database
    │   └── ReadOnlyStore         the store may be read but not written
    ├── SchemaTooNew              the database was written by a newer harness
    ├── NotFound                  an unknown session, todo or run
    └── InvalidChange             a change the state model forbids (bad status, bad field)

Each carries ``message`` and optionally ``where`` (the database, a session, a todo id) and
``hint``. The harness CLI renders them on one line, once, at its edge.
"""

from __future__ import annotations


class StoreError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (hint: {self.hint})" if self.hint else text


class StoreUnavailable(StoreError):
    exit_code = 3


class ReadOnlyStore(StoreUnavailable):
    pass


class SchemaTooNew(StoreError):
    pass


class NotFound(StoreError):
    pass


class InvalidChange(StoreError):
    pass
