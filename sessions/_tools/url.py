"""``open_store(url)``: one URL opens either backend.

* ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``; ``sqlite://`` or
  ``sqlite:///:memory:`` for an in-memory database. Query parameters:
  ``synchronous`` (``FULL``/``NORMAL``/``EXTRA``), ``busy_timeout`` (seconds) and
  ``ttl`` (seconds, at most 3155760000 = 100 years: the store's default idle
  time-to-live, see ``Store.purge``) and
  ``integrity`` (``quarantine``/``reject``/``off``, see ``docs/history.md``).
* ``postgresql://user:password@host:5432/db`` (or ``postgres://``, or
  ``postgresql+asyncpg://``): an asyncpg DSN. Our own query parameters ``schema``,
  ``table_prefix``, ``ttl`` and ``integrity`` are taken out and passed to
  :meth:`PostgresStore.open`; the rest of
  the DSN goes to asyncpg untouched.

A parameter given twice (``?ttl=100&ttl=200``) is refused, never resolved silently.

Passwords never leave this module in clear: every URL and error message goes through
:func:`sessions._model.redact.redact`.
"""

from __future__ import annotations

import asyncio
import os
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from .._engine.store import Store
from .._model.catalogue import MAX_TTL, validate_ttl_seconds
from .._model.options import StoreOptions
from .._model.policy import validate_integrity
from .._model.redact import redact
from ..errors import SessionError, StorageError

__all__ = ["ParsedURL", "open_store", "parse_url"]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_ENCODE_HINT = "percent-encode @ : / ? # % in a user name or password, e.g. %40 for @"

SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg")


class ParsedURL:
    """What :func:`parse_url` understood of a store URL."""

    __slots__ = ("kind", "options", "target", "url")

    def __init__(self, kind: str, target: str, options: dict[str, Any], url: str) -> None:
        self.kind = kind  # "sqlite" or "postgres"
        self.target = target  # SQLite path (":memory:" for memory) or asyncpg DSN
        self.options = options  # keyword arguments for the store's ``open``
        self.url = url

    def __repr__(self) -> str:
        return f"<ParsedURL {self.kind} {redact(self.url)}>"

    @property
    def display(self) -> str:
        """A printable description: the SQLite path, or the redacted URL."""
        if self.kind == "sqlite":
            return self.target
        return redact(self.url)


def parse_url(url: str) -> ParsedURL:
    """Parse a store URL; ``ValueError`` (naming the problem, password masked) if bad."""
    if not isinstance(url, str):
        raise TypeError(f"database URL must be a str, got {type(url).__name__}")
    shown = redact(url)
    if not url.strip():
        raise ValueError("database URL is empty (e.g. sqlite:///sessions.db)")
    match = _SCHEME_RE.match(url)
    if match is None:
        hint = ""
        if "://" not in url and not url.startswith(("postgres", "sqlite")):
            hint = f"; for a SQLite file write sqlite:///{url}"
        raise ValueError(f"database URL {shown!r} has no scheme (sqlite:// or postgresql://){hint}")
    scheme = match.group(1).lower()
    if scheme in SQLITE_SCHEMES:
        return _parse_sqlite(url, shown)
    if scheme in POSTGRES_SCHEMES:
        return _parse_postgres(url, shown, scheme)
    raise ValueError(
        f"database URL {shown!r}: unknown scheme {scheme!r} "
        "(use sqlite:///path.db, sqlite:// for memory, or postgresql://user@host/db)"
    )


_SQLITE_SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")


def _parse_sqlite(url: str, shown: str) -> ParsedURL:
    parts = urlsplit(url)
    if parts.fragment:
        raise ValueError(f"database URL {shown!r}: a SQLite URL has no #fragment")
    if parts.netloc:
        raise ValueError(
            f"database URL {shown!r}: a SQLite URL has no host ({parts.netloc!r}); "
            "write sqlite:///relative.db or sqlite:////absolute/path.db"
        )
    raw_path = parts.path
    if raw_path in ("", "/", "/:memory:"):
        path = ":memory:"
    else:
        if not raw_path.startswith("/"):
            raise ValueError(
                f"database URL {shown!r}: write sqlite:///relative.db or "
                "sqlite:////absolute/path.db (three or four slashes)"
            )
        path = unquote(raw_path[1:])
    options: dict[str, Any] = {}
    for key, value in _query(parts.query, shown):
        if key == "synchronous":
            if value.upper() not in _SQLITE_SYNCHRONOUS:
                raise ValueError(
                    f"database URL {shown!r}: synchronous must be FULL, NORMAL or EXTRA, "
                    f"got {value!r}"
                )
            options["synchronous"] = value.upper()
        elif key == "busy_timeout":
            try:
                timeout = float(value)
            except ValueError:
                timeout = -1.0
            if not timeout >= 0:
                raise ValueError(
                    f"database URL {shown!r}: busy_timeout must be a number of seconds "
                    f">= 0, got {value!r}"
                )
            options["busy_timeout"] = timeout
        elif key == "ttl":
            options["ttl"] = _ttl(value, shown)
        elif key == "integrity":
            options["integrity"] = _integrity(value, shown)
        else:
            raise ValueError(
                f"database URL {shown!r}: unknown SQLite parameter {key!r} "
                "(known: synchronous, busy_timeout, ttl, integrity)"
            )
    return ParsedURL("sqlite", path, options, url)


def _query(query: str, shown: str) -> list[tuple[str, str]]:
    """The URL's query parameters, in order; one given more than once is refused (which
    of its values was meant cannot be told). Only the parameter's name is shown: a
    value may be a password."""
    pairs = parse_qsl(query, keep_blank_values=True)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(
                f"database URL {shown!r}: parameter {key!r} is given more than once; give it once"
            )
        seen.add(key)
    return pairs


def _ttl(value: str, shown: str) -> timedelta:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    try:
        validate_ttl_seconds(seconds)
    except ValueError as exc:
        raise ValueError(
            f"database URL {shown!r}: ttl must be a number of seconds > 0 and at most "
            f"{MAX_TTL.total_seconds():.0f} (100 years), got {value!r}"
        ) from exc
    return timedelta(seconds=seconds)


def _integrity(value: str, shown: str) -> str:
    try:
        return validate_integrity(value)
    except ValueError:
        raise ValueError(
            f"database URL {shown!r}: integrity must be quarantine, reject or off, got {value!r}"
        ) from None


def _parse_postgres(url: str, shown: str, scheme: str) -> ParsedURL:
    parts = urlsplit(url)
    if not parts.netloc and not parts.query:
        raise ValueError(
            f"database URL {shown!r}: no host (e.g. postgresql://user@127.0.0.1:5432/db)"
        )
    if "," not in parts.netloc:  # asyncpg also takes host1:port1,host2:port2
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise ValueError(
                f"database URL {shown!r}: the port is not a number ({_ENCODE_HINT})"
            ) from None
    options: dict[str, Any] = {}
    keep: list[tuple[str, str]] = []
    for key, value in _query(parts.query, shown):
        if key in ("schema", "table_prefix"):  # validated by PostgresStore.open
            if key == "schema" and not value:
                raise ValueError(f"database URL {shown!r}: schema= is empty")
            options[key] = value
        elif key == "ttl":
            options["ttl"] = _ttl(value, shown)
        elif key == "integrity":
            options["integrity"] = _integrity(value, shown)
        else:
            keep.append((key, value))
    plain_scheme = "postgresql" if scheme.startswith("postgresql") else "postgres"
    dsn = urlunsplit((plain_scheme, parts.netloc, parts.path, urlencode(keep), ""))
    return ParsedURL("postgres", dsn, options, url)


async def open_store(
    url: str, *, create: bool = True, options: StoreOptions | None = None, **settings: Any
) -> Store[Any]:
    """Open a store from a URL (see the module docstring for the forms).

    ``settings`` (keyword arguments) and ``options`` (a :class:`~sessions.StoreOptions`)
    go to the backend's ``open`` (``SQLiteStore.open`` or ``PostgresStore.open``) and
    override what the URL says; a setting given both as a keyword and in ``options``
    is a ``TypeError`` naming it. With ``create=False``
    nothing is created: a SQLite file that does not exist raises
    :class:`FileNotFoundError`, a PostgreSQL schema without our tables raises
    :class:`~sessions.errors.StorageError`. Errors never show the password.
    """
    parsed = parse_url(url)
    from_url = parsed.options
    if isinstance(options, StoreOptions):  # what options= sets overrides the URL
        from_url = {k: v for k, v in from_url.items() if k not in options.given()}
    merged: dict[str, Any] = {**from_url, **settings, "options": options}
    if parsed.kind == "sqlite":
        from ..sqlite import SQLiteStore

        path = parsed.target
        if not create and path != ":memory:" and not await asyncio.to_thread(os.path.exists, path):
            raise FileNotFoundError(f"no SQLite database at {path!r} (the file does not exist)")
        return await SQLiteStore.open(path, **merged)
    try:
        from ..postgres import PostgresStore
    except ImportError as exc:
        raise ImportError(
            f"{redact(url)} needs the PostgreSQL backend ({exc.name} is missing): "
            "pip install 'txsessions[postgres]'"
        ) from None
    try:
        return await PostgresStore.open(parsed.target, create=create, **merged)
    except ValueError as exc:
        raise ValueError(redact(str(exc), [url])) from None
    except TypeError as exc:
        raise TypeError(redact(str(exc), [url])) from None
    except SessionError as exc:
        raise StorageError(redact(str(exc), [url])) from None
    except (OSError, TimeoutError) as exc:
        raise StorageError(
            f"cannot connect to {redact(url)}: {redact(_describe(exc), [url])}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - asyncpg's errors, reworded without secrets
        raise StorageError(f"cannot open {redact(url)}: {redact(_describe(exc), [url])}") from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
