"""Errors raised by the state layer.

The tree, drawn once::

    StoreError                    exit 1 unless noted
    ├── StoreUnavailable          exit 3: cannot open, read or lock the database
    │   ├── ReadOnlyStore         the store may be read but not written
    │   └── StoreUnreachable      the server went away for now: retried (state/retry.py)
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


class StoreUnreachable(StoreUnavailable):
    """The server could not be reached, or went away mid-transaction (a dropped or
    refused connection, a server starting up or shutting down, a serialization failure):
    trying again may work, and :mod:`state.retry` does.

    ``retry_s``: the budget the store's URL sets (None: the default). ``diverged``: set
    (to the key) when a write's key was found stored by another write; the operation
    then runs again at once with a fresh key."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 retry_s: float | None = None, diverged: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.retry_s = retry_s
        self.diverged = diverged

    def gave_up(self, budget: float, what: str | None, landed: int) -> StoreUnreachable:
        """The same error once the budget is spent, saying so and what was not written."""
        what = what or "its change"
        done = (f"{what} was not written" if not landed else
                f"{landed} write(s) of {what} had landed, the rest was not written")
        return StoreUnreachable(
            f"{self.message}; gave up after {budget:g} s of retries: {done}",
            where=self.where,
            hint=self.hint or "run it again once the server is back (the budget is "
                              "`retry_s` in the store URL or HARNESS_RETRY_S)")
