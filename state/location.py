"""Where a store is: a path or a database URL, normalised, and shown without its password.

SQLite and plain PostgreSQL URLs are read by hand (:mod:`state.db.pg`: no SQLAlchemy on the
everyday paths); any other server URL goes through SQLAlchemy's URL parser, imported only
then.
"""

from __future__ import annotations

from pathlib import Path

from state.errors import StoreUnavailable


def normalize_url(target: str) -> str:
    """A path or an SQLAlchemy URL -> an SQLAlchemy URL."""
    if target.startswith("sqlite:"):
        return target
    if "://" in target:
        from state.db import pg

        plain = pg.parse(target)
        if plain is not None:
            return pg.render(plain, hide_password=False)
        return _server_url(target)
    if target == ":memory:":
        return "sqlite://"
    return "sqlite:///" + str(Path(target).expanduser().resolve())


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for a memory database or another backend)."""
    if not is_sqlite(url):
        return None
    rest = url.split("://", 1)[1] if "://" in url else ""
    rest = rest.split("?", 1)[0]
    if not rest.startswith("/") or rest == "/":
        return None
    return Path(rest[1:]) if rest[1:] else None


def public_url(url: str) -> str:
    """The URL with any password masked: safe to print, log, or key a config file by."""
    if is_sqlite(url):
        return url
    from state.db import pg

    plain = pg.parse(url)
    if plain is not None:
        return pg.render(plain, hide_password=True)
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def display_url(url: str) -> str:
    """For messages: the file path for SQLite, the URL without password otherwise."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    if is_sqlite(url):
        return ":memory:"
    return public_url(url)


def _server_url(target: str) -> str:
    """A server URL (``postgresql://...``) -> the SQLAlchemy URL we connect with."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(target)
    except ArgumentError as exc:
        raise StoreUnavailable(f"not a database URL ({exc})", where=target) from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)
