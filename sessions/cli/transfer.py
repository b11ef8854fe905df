"""``sessions export`` and ``import``: move sessions through JSON Lines files.

No postponed annotations here: typer reads the command signatures at runtime.
"""

import asyncio
import os
from typing import Annotated

import typer

from .._transfer import export_sessions, import_sessions, plan_export
from .options import Db, database_url, opened
from .render import UsageError, fail, json_stdout, plural, progress, run_async, say, warn

__all__ = ["export_cmd", "import_cmd"]


def export_cmd(
    ctx: typer.Context,
    session_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="ID", help="Sessions to export (default: all).", show_default=False),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="JSON Lines file to write ('-': stdout)."
        ),
    ] = None,
    db: Db = None,
) -> int:
    """Export sessions to a JSON Lines file (streamed, constant memory).

    \b
    Example:
      sessions export -o backup.jsonl --db sqlite:///chat.db
      sessions export user-1 user-2 -o two.jsonl
    """
    if not output:
        raise UsageError("export: missing option -o/--output FILE", "sessions export")
    url = database_url(ctx, db)
    ids = list(session_ids or [])
    return run_async(lambda: _export(url, ids, output), [url])


async def _export(url: str, session_ids: list[str], output: str) -> None:
    async with opened(url) as store:
        _, items = await plan_export(store, session_ids)
        with progress("exporting", items) as bar:
            if output == "-":
                with json_stdout():
                    result = await export_sessions(store, "-", session_ids, progress=bar.advance)
            else:
                result = await export_sessions(store, output, session_ids, progress=bar.advance)
    where = "standard output" if output == "-" else output
    message = (
        f"exported {plural(result.sessions, 'session')} ({plural(result.items, 'item')}) to {where}"
    )
    if result.skipped_corrupt:
        message += f"; skipped {result.skipped_corrupt} corrupt stored rows"
    warn(message) if output == "-" else say(message)


def import_cmd(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(metavar="FILE", help="A file made by export.")],
    db: Db = None,
) -> int:
    """Import an export file. Running it twice adds nothing.

    \b
    Example:
      sessions import backup.jsonl --db postgresql://app@db.internal/app
      sessions --db postgresql://app@db.internal/app import backup.jsonl
    """
    url = database_url(ctx, db)
    return run_async(lambda: _import(url, path), [url])


async def _import(url: str, path: str) -> None:
    if not await asyncio.to_thread(os.path.isfile, path):
        fail(f"no such file: {path}")
    async with opened(url, create=True) as store:
        with progress("importing", None) as bar:
            result = await import_sessions(store, path, progress=bar.advance, on_total=bar.total)
    say(
        f"imported {plural(result.added, 'item')} into "
        f"{plural(result.sessions, 'session')} ({result.already_present} already present)"
    )
