"""Options shared by the commands, where the database URL comes from, opening a store.

No postponed annotations here: typer reads the ``Annotated`` aliases at runtime.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from .._engine.store import Store
from .._model.redact import redact
from .render import UsageError

__all__ = [
    "ENV_URL",
    "Db",
    "Globals",
    "Json",
    "SessionId",
    "Yes",
    "database_url",
    "opened",
]

ENV_URL = "SESSIONS_DATABASE_URL"

DB_HELP = (
    "Database URL: sqlite:///path.db or postgresql://user@host/db "
    f"(default: ${ENV_URL}). May also come before the command name."
)

Db = Annotated[str | None, typer.Option("--db", metavar="URL", help=DB_HELP)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
SessionId = Annotated[str, typer.Argument(metavar="ID", help="The session id.")]


@dataclass
class Globals:
    """What was given before the command name (``sessions --db URL list``)."""

    db: str | None = None


def _globals(ctx: typer.Context) -> Globals:
    found = ctx.find_object(Globals)
    return found if found is not None else Globals()


def given_db(ctx: typer.Context, db: str | None, option: str = "--db") -> str | None:
    """The URL from ``option`` after the command or ``--db`` before it, if any.

    Both given and different: a usage error (neither is silently ignored).
    """
    before = _globals(ctx).db
    if db and before and db != before:
        raise UsageError(
            f"--db {redact(before)!r} (before the command) and {option} {redact(db)!r} "
            "disagree: give the database once",
            ctx.command_path,
        )
    return db or before or None


def database_url(ctx: typer.Context, db: str | None, option: str = "--db") -> str:
    """``option`` (after the command), else ``--db`` before it, else ``$SESSIONS_DATABASE_URL``."""
    url = given_db(ctx, db, option) or os.environ.get(ENV_URL, "")
    if not url:
        raise UsageError(
            f"no database given: pass {option} URL or set {ENV_URL} "
            "(e.g. sqlite:///sessions.db or postgresql://user@host/db)",
            ctx.command_path,
        )
    return url


@asynccontextmanager
async def opened(url: str, *, create: bool = False) -> AsyncIterator[Store[Any]]:
    """A store on ``url`` (a small pool for PostgreSQL), closed on exit.

    ``create=False`` (commands that only read or delete) creates nothing.
    """
    from .._tools.url import open_store, parse_url

    options: dict[str, Any] = {}
    if parse_url(url).kind == "postgres":
        options = {"min_size": 1, "max_size": 2}
    store = await open_store(url, create=create, **options)
    try:
        yield store
    finally:
        await store.close()
