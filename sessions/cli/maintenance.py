"""``sessions delete``, ``purge`` and ``migrate``: change what a store holds.

No postponed annotations here: typer reads the command signatures at runtime.
"""

import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

import typer

from .._engine.store import Store
from .._model.validate import MAX_DURATION
from .options import ENV_URL, Db, SessionId, Yes, database_url, opened
from .render import Column, UsageError, confirm, fail, plural, progress, run_async, say, table, when

__all__ = ["delete_cmd", "delete_user_cmd", "migrate_cmd", "parse_duration", "purge_cmd"]


# --------------------------------------------------------------------------- delete


def delete_cmd(
    ctx: typer.Context,
    session_id: SessionId,
    db: Db = None,
    yes: Yes = False,
) -> int:
    """Delete one session (asks first unless --yes).

    \b
    Example:
      sessions delete user-42 --yes --db sqlite:///chat.db
    """
    url = database_url(ctx, db)
    return run_async(lambda: _delete(url, session_id, yes), [url])


async def _delete(url: str, session_id: str, yes: bool) -> None:
    from .inspect import _info

    async with opened(url) as store:
        info = await _info(store, session_id)
        question = (
            f"Delete session {session_id!r} ({plural(info.item_count, 'item')}, "
            f"updated {when(info.updated_at)} UTC)?"
        )
        if not yes and not confirm(question):
            fail("aborted: nothing deleted")
        existed = await store.delete_session(session_id)
    if not existed:
        fail(f"unknown session {session_id!r} (deleted meanwhile)")
    say(f"deleted session {session_id!r} ({plural(info.item_count, 'item')})")


def delete_user_cmd(
    ctx: typer.Context,
    user_id: Annotated[str, typer.Argument(metavar="USER", help="The user id.")],
    db: Db = None,
    yes: Yes = False,
) -> int:
    """Erase every session of one user (asks first unless --yes).

    Items, batch records, run states and catalogue entries go in one transaction.

    \b
    Example:
      sessions delete-user alice --yes --db sqlite:///chat.db
    """
    url = database_url(ctx, db)
    return run_async(lambda: _delete_user(url, user_id, yes), [url])


async def _delete_user(url: str, user_id: str, yes: bool) -> None:
    async with opened(url) as store:
        try:
            count = await store.count_sessions(user_id=user_id)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad user id {user_id!r}: {exc}", "sessions delete-user") from None
        if not count:
            fail(f"no sessions of user {user_id!r}")
        question = f"Delete {plural(count, 'session')} of user {user_id!r}?"
        if not yes and not confirm(question):
            fail("aborted: nothing deleted")
        gone = await store.delete_user(user_id)
    say(f"deleted {plural(len(gone), 'session')} of user {user_id!r}")


# --------------------------------------------------------------------------- purge


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(
    text: str, option: str = "--older-than", command: str = "sessions purge"
) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or combinations such as ``1d12h``, at
    most 100 years (:data:`sessions._model.validate.MAX_DURATION`); else a usage error naming
    ``option``."""
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION_PART.sub("", compact):
        raise UsageError(
            f"{option} {text!r}: expected a duration such as 30d, 12h, 90m, 45s or 2w",
            command,
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(compact))
    if seconds > MAX_DURATION.total_seconds():  # inf too
        raise UsageError(
            f"{option} {text!r} is too long: at most {MAX_DURATION.days}d (100 years)", command
        )
    return timedelta(seconds=seconds)


def purge_cmd(
    ctx: typer.Context,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Sessions not updated for this long: 30d, 12h, 90m, 2w...",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be deleted.")
    ] = False,
    yes: Yes = False,
    db: Db = None,
) -> int:
    """Delete sessions not updated for a while (asks first unless --yes).

    Without --older-than: the expired sessions, those not updated for their own TTL
    or, without one, the store's (the ttl= URL parameter).

    \b
    Example:
      sessions purge --older-than 30d --dry-run --db sqlite:///chat.db
      sessions purge --older-than 30d --yes
      sessions purge --yes --db 'sqlite:///chat.db?ttl=2592000'
    """
    if older_than is not None and not older_than:
        raise UsageError("--older-than is empty: give an AGE such as 30d", "sessions purge")
    if dry_run and yes:
        raise UsageError("--yes does not apply to --dry-run (nothing is deleted)", "sessions purge")
    age = None if older_than is None else parse_duration(older_than)
    url = database_url(ctx, db)
    return run_async(lambda: _purge(url, age, dry_run, yes), [url])


async def _purge(url: str, age: timedelta | None, dry_run: bool, yes: bool) -> None:
    async with opened(url) as store:
        stale = await store.purge(age, dry_run=True)
        if age is None:
            why = "expired"
            none = "nothing to purge: no session has expired"
        else:
            cutoff = when(datetime.now(timezone.utc) - age)
            why = f"not updated since {cutoff} UTC"
            none = f"nothing to purge: no session was last updated before {cutoff} UTC"
        items = sum(info.item_count for info in stale)
        what = f"{plural(len(stale), 'session')} ({plural(items, 'item')})"
        if not stale:
            say(none)
        elif dry_run:
            _list_stale(stale)
            say(f"dry run: would delete {what} {why}")
        else:
            await _purge_confirmed(store, age, f"Delete {what} {why}?", yes)


_SHOWN = 50


def _list_stale(stale: list[Any]) -> None:
    table(
        (Column("SESSION", fold=True), Column("ITEMS", right=True), Column("UPDATED (UTC)")),
        [(i.session_id, str(i.item_count), when(i.updated_at)) for i in stale[:_SHOWN]],
    )
    if len(stale) > _SHOWN:
        say(f"... and {len(stale) - _SHOWN} more")


async def _purge_confirmed(
    store: Store[Any], age: timedelta | None, question: str, yes: bool
) -> None:
    if not yes and not confirm(question):
        fail("aborted: nothing deleted")
    gone = await store.purge(age)
    gone_items = sum(info.item_count for info in gone)
    say(f"deleted {plural(len(gone), 'session')} ({plural(gone_items, 'item')})")


# --------------------------------------------------------------------------- migrate


def migrate_cmd(
    ctx: typer.Context,
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="URL",
            help="The SDK's store: sqlite:///agents.db (SQLiteSession, "
            "AsyncSQLiteSession) or a SQLAlchemy URL (SQLAlchemySession).",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help=f"The txsessions store to copy into (default: --db before the command, "
            f"else ${ENV_URL}).",
        ),
    ] = None,
    sessions_table: Annotated[
        str, typer.Option("--sessions-table", help="The SDK's sessions table.")
    ] = "agent_sessions",
    messages_table: Annotated[
        str, typer.Option("--messages-table", help="The SDK's messages table.")
    ] = "agent_messages",
    source_schema: Annotated[
        str | None,
        typer.Option("--source-schema", help="PostgreSQL schema of the SDK's tables."),
    ] = None,
) -> int:
    """Copy history from the SDK's own sessions into a txsessions store.

    Resumable and idempotent: run it again after an interruption, or twice; item
    counts are verified per session at the end.

    \b
    Example:
      sessions migrate --from sqlite:///agents.db --to sqlite:///chat.db
      sessions migrate --from postgresql+asyncpg://app@db/app \\
                       --to postgresql://app@db/app?schema=txs
    """
    if not source:
        raise UsageError("migrate: missing option --from URL", "sessions migrate")
    to = database_url(ctx, target, "--to")
    tables = (sessions_table, messages_table, source_schema)
    return run_async(lambda: _migrate(source, to, *tables), [source, to])


async def _migrate(
    source_url: str,
    target_url: str,
    sessions_table: str,
    messages_table: str,
    source_schema: str | None,
) -> int:
    from .._tools.migrate import migrate, open_source
    from .._tools.url import parse_url

    parse_url(target_url)  # a bad target URL fails before the source is touched
    source = await open_source(
        source_url,
        sessions_table=sessions_table,
        messages_table=messages_table,
        schema=source_schema,
    )
    try:
        async with opened(target_url, create=True) as store:
            with progress("migrating", None) as bar:
                report = await migrate(source, store, progress=bar.advance, on_total=bar.total)
    finally:
        await source.close()
    say(
        f"migrated {plural(report.sessions, 'session')} from {source.description}: "
        f"{plural(report.copied, 'item')} copied, {report.already_present} already present"
    )
    if report.corrupt_skipped:
        say(
            f"skipped {report.corrupt_skipped} source rows that are not JSON objects "
            "(the SDK's sessions skip them when reading too)"
        )
    if report.ok:
        say(f"verified: item counts match ({plural(report.sessions, 'session')} checked)")
        return 0
    for mismatch in report.mismatches:
        say(f"  mismatch: {mismatch.describe()}")
    fail(
        f"{len(report.mismatches)} of {report.sessions} sessions do not match after the "
        "migration (listed above)"
    )
