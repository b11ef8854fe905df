"""``sessions turns``, ``fork``, ``rewind`` and ``usage``: turns, forks, rewinds, usage.

No postponed annotations here: typer reads the command signatures at runtime.
"""

from datetime import datetime, timezone
from typing import Annotated, Any

import typer

from .._model.backend import TurnUsage
from .._model.turns import Turn
from .._model.validate import MAX_INT64
from .maintenance import parse_duration
from .options import Db, Json, SessionId, database_url, opened
from .render import (
    Column,
    UsageError,
    fail,
    iso,
    json_text,
    literal,
    plural,
    run_async,
    say,
    table,
)

__all__ = ["fork_cmd", "rewind_cmd", "turns_cmd", "usage_cmd"]


def _turn_json(turn: Turn) -> dict[str, Any]:
    return {
        "number": turn.number,
        "items": turn.items,
        "first_key": turn.first_key,
        "last_key": turn.last_key,
        "created_at": None if turn.created_at is None else iso(turn.created_at),
        "run_id": turn.run_id,
    }


def turns_cmd(
    ctx: typer.Context,
    session_id: SessionId,
    db: Db = None,
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            metavar="N",
            min=1,
            max=MAX_INT64,
            help="Only the newest N turns (numbered as in the whole list).",
        ),
    ] = None,
    as_json: Json = False,
) -> int:
    """A session's turns (one per commit that added items) and its forks.

    \b
    Example:
      sessions turns user-42 --db sqlite:///chat.db
      sessions turns user-42 --last 5 --db sqlite:///chat.db
    """
    url = database_url(ctx, db)
    return run_async(lambda: _turns(url, session_id, last, as_json), [url])


async def _turns(url: str, session_id: str, last: int | None, as_json: bool) -> None:
    async with opened(url) as store:
        session = store.session(session_id)
        try:
            turns = await session.turns(last=last)
            branches = await session.branches()
        finally:
            await session.close()
    if as_json:
        forks = [
            {"session_id": b.session_id, "at_turn": b.at_turn, "created_at": iso(b.created_at)}
            for b in branches
        ]
        say(json_text({"turns": [_turn_json(t) for t in turns], "forks": forks}, indent=2))
        return
    if not turns:
        say(f"session {literal(session_id)} has no turns")
    else:
        columns = (
            Column("TURN", right=True),
            Column("ITEMS", right=True),
            Column("COMMITTED"),
            Column("RUN", fold=True),
        )
        table(
            columns,
            (
                (
                    str(t.number),
                    str(t.items),
                    "-" if t.created_at is None else iso(t.created_at),
                    "-" if t.run_id is None else literal(t.run_id),
                )
                for t in turns
            ),
        )
    for branch in branches:
        say(f"fork {literal(branch.session_id)} at turn {branch.at_turn}")


def fork_cmd(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session to fork.")],
    new_session_id: Annotated[str, typer.Argument(metavar="NEW_ID", help="The new session.")],
    at_turn: Annotated[
        int | None,
        typer.Option(
            "--at-turn",
            metavar="N",
            min=1,
            max=MAX_INT64,
            help="Copy turns 1 to N (default: all).",
        ),
    ] = None,
    db: Db = None,
    as_json: Json = False,
) -> int:
    """Make NEW_ID a new session holding the turns 1 to N of ID (a copy; safe to rerun).

    \b
    Example:
      sessions fork user-42 user-42-edit --at-turn 3 --db sqlite:///chat.db
    """
    url = database_url(ctx, db)
    return run_async(lambda: _fork(url, session_id, new_session_id, at_turn, as_json), [url])


async def _fork(
    url: str, session_id: str, new_session_id: str, at_turn: int | None, as_json: bool
) -> None:
    async with opened(url) as store:
        session = store.session(session_id)
        try:
            try:
                count = await session.fork(new_session_id, at_turn=at_turn)
            except ValueError as exc:
                fail(str(exc))
        finally:
            await session.close()
    if as_json:
        say(json_text({"session_id": new_session_id, "source": session_id, "turns": count}))
        return
    say(f"session {literal(new_session_id)} holds {plural(count, 'turn')} of {literal(session_id)}")


def rewind_cmd(
    ctx: typer.Context,
    session_id: SessionId,
    to_turn: Annotated[
        int | None,
        typer.Option(
            "--to-turn", metavar="N", min=0, max=MAX_INT64, help="Hide the turns after turn N."
        ),
    ] = None,
    undo: Annotated[
        bool, typer.Option("--undo", help="Bring back the turns the newest rewind hid.")
    ] = False,
    db: Db = None,
    as_json: Json = False,
) -> int:
    """Hide the turns after turn N (kept, not deleted), or undo the newest rewind.

    \b
    Example:
      sessions rewind user-42 --to-turn 2 --db sqlite:///chat.db
      sessions rewind user-42 --undo --db sqlite:///chat.db
    """
    if (to_turn is None) == (not undo):
        raise UsageError("give exactly one of --to-turn N and --undo", "sessions rewind")
    url = database_url(ctx, db)
    return run_async(lambda: _rewind(url, session_id, to_turn, as_json), [url])


async def _rewind(url: str, session_id: str, to_turn: int | None, as_json: bool) -> None:
    async with opened(url) as store:
        session = store.session(session_id)
        try:
            try:
                if to_turn is None:
                    count = await session.undo_rewind()
                else:
                    count = await session.rewind(to_turn=to_turn)
            except ValueError as exc:
                fail(str(exc))
        finally:
            await session.close()
        # Nothing hidden or restored wrote nothing: an unknown id stays unknown.
        if count == 0 and await store.session_info(session_id) is None:
            fail(f"unknown session {session_id!r}: nothing to rewind or undo, nothing written")
    what = "restored" if to_turn is None else "hidden"
    if as_json:
        say(json_text({"session_id": session_id, what: count}))
    elif count == 0 and to_turn is None:
        say(f"session {literal(session_id)}: no rewound turns to restore, nothing changed")
    elif count == 0:
        say(f"session {literal(session_id)}: no turns after turn {to_turn}, nothing changed")
    else:
        say(f"session {literal(session_id)}: {plural(count, 'turn')} {what}")


_USAGE_NAMES = ("requests", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")


def usage_cmd(
    ctx: typer.Context,
    session_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="One session (default: all).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="AGE", help="Only turns of the last AGE (30d, 12h)."),
    ] = None,
    db: Db = None,
    as_json: Json = False,
) -> int:
    """Model usage recorded with the turns (record_usage), of one session or all.

    \b
    Example:
      sessions usage user-42 --db sqlite:///chat.db
      sessions usage --since 30d --json --db sqlite:///chat.db
    """
    cutoff = None
    if since is not None:
        cutoff = datetime.now(timezone.utc) - parse_duration(since, "--since", "sessions usage")
    url = database_url(ctx, db)
    return run_async(lambda: _usage(url, session_id, cutoff, as_json), [url])


async def _usage(url: str, session_id: str | None, since: datetime | None, as_json: bool) -> None:
    total: TurnUsage
    async with opened(url) as store:
        if session_id is None:
            total = await store.usage(since=since)
        else:
            session = store.session(session_id)
            try:
                total = await session.usage(since=since)
            finally:
                await session.close()
    counts = dict(zip(_USAGE_NAMES, total.values(), strict=True))
    if as_json:
        scope = {"session_id": session_id, "since": None if since is None else iso(since)}
        say(json_text({**scope, **counts}, indent=2))
        return
    table(
        (Column("USAGE"), Column("TOTAL", right=True)),
        ((name.replace("_", " "), f"{count:,}") for name, count in counts.items()),
    )
