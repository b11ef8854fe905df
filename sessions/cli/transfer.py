"""``sessions export`` and ``import``: move sessions through JSON Lines files.

No postponed annotations here: typer reads the command signatures at runtime.
"""

import asyncio
import os
from typing import Annotated, Any

import typer

from .._tools.transfer import IMPORT_MODES, export_sessions, import_sessions, plan_export
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
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            metavar="skip|append|replace",
            help="Sessions the store already has: leave them alone (skip, the default), "
            "add the file's items after theirs (append), or delete and import (replace).",
        ),
    ] = "skip",
    db: Db = None,
) -> int:
    """Import an export file. Running it twice adds nothing.

    Sessions the store already has are skipped (and listed) unless an earlier import
    of the same history wrote them, which is then completed.

    \b
    Example:
      sessions import backup.jsonl --db postgresql://app@db.internal/app
      sessions --db postgresql://app@db.internal/app import backup.jsonl
      sessions import backup.jsonl --mode replace
    """
    if mode not in IMPORT_MODES:
        raise UsageError(
            f"import: --mode must be one of {', '.join(IMPORT_MODES)}, got {mode!r}",
            "sessions import",
        )
    url = database_url(ctx, db)
    return run_async(lambda: _import(url, path, mode), [url])


async def _import(url: str, path: str, mode: Any) -> None:
    if not await asyncio.to_thread(os.path.isfile, path):
        fail(f"no such file: {path}")
    async with opened(url, create=True) as store:
        with progress("importing", None) as bar:
            result = await import_sessions(
                store, path, mode=mode, progress=bar.advance, on_total=bar.total
            )
    message = (
        f"imported {plural(result.added, 'item')} into "
        f"{plural(result.sessions, 'session')} ({result.already_present} already present)"
    )
    if result.replaced:
        message += f"; replaced {plural(len(result.replaced), 'session')}"
    say(message)
    if result.skipped:
        shown = ", ".join(repr(s) for s in result.skipped[:5])
        more = f" and {len(result.skipped) - 5} more" if len(result.skipped) > 5 else ""
        say(
            f"skipped {plural(len(result.skipped), 'session')} already in the store "
            f"({plural(result.skipped_items, 'item')} not imported): {shown}{more}; "
            "--mode append adds to them, --mode replace overwrites them"
        )
