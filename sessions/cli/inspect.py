"""``sessions list``, ``show`` and ``stats``: look into a store without changing it.

No postponed annotations here: typer reads the command signatures at runtime.
"""

import asyncio
import json
import os
import shlex
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

import typer

from .._engine.store import Store
from .._model.backend import AdminBackend, SessionInfo
from .._model.validate import MAX_INT64
from .._tools.transfer import admin_backend
from .options import Db, Json, SessionId, database_url, opened
from .render import (
    Column,
    Entry,
    JsonArray,
    UsageError,
    fail,
    heading,
    iso,
    json_text,
    plural,
    run_async,
    say,
    stored_json,
    table,
    transcript,
    when,
)

__all__ = ["describe_item", "list_cmd", "show_cmd", "stats_cmd"]

_SESSION = Column("SESSION", fold=True)
_ITEMS = Column("ITEMS", right=True)
_CATALOGUE = (Column("USER", fold=True), Column("TITLE", fold=True), Column("TAGS", fold=True))


def _expires(info: SessionInfo, default: timedelta | None) -> str:
    moment = info.expires_at(default)
    return "never" if moment is None else when(moment)


def _page_table(page: list[SessionInfo], default: timedelta | None) -> None:
    """The page as a table: the catalogue columns only when a session of the page has an
    entry, the expiry only when one expires (``CREATED`` then makes room for them)."""
    entries = any(i.user_id or i.title or i.tags for i in page)
    expiring = any(i.expires_at(default) is not None for i in page)
    columns = [_SESSION, *(_CATALOGUE if entries else ()), _ITEMS]
    if not (entries or expiring):
        columns.append(Column("CREATED (UTC)"))
    columns.append(Column("UPDATED (UTC)"))
    if expiring:
        columns.append(Column("EXPIRES (UTC)"))
    rows = []
    for i in page:
        row = [i.session_id]
        if entries:
            row += [i.user_id or "", i.title or "", ",".join(i.tags)]
        row.append(str(i.item_count))
        if not (entries or expiring):
            row.append(when(i.created_at))
        row.append(when(i.updated_at))
        if expiring:
            row.append(_expires(i, default))
        rows.append(row)
    table(columns, rows)


def _record(info: SessionInfo, default: timedelta | None) -> dict[str, Any]:
    expires = info.expires_at(default)
    return {
        "session_id": info.session_id,
        "items": info.item_count,
        "created_at": iso(info.created_at),
        "updated_at": iso(info.updated_at),
        "user_id": info.user_id,
        "title": info.title,
        "tags": list(info.tags),
        "metadata": info.metadata,
        "ttl_seconds": None if info.ttl is None else info.ttl.total_seconds(),
        "expires_at": None if expires is None else iso(expires),
        "version": info.version,
    }


_Filters = tuple[str | None, str | None]

# --------------------------------------------------------------------------- list


def list_cmd(
    ctx: typer.Context,
    db: Db = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=MAX_INT64, help="Sessions per page.")
    ] = 50,
    after: Annotated[
        str | None, typer.Option("--after", metavar="ID", help="Start after this session id.")
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Every page, not just one.")] = False,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="Only this user's sessions.")
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", metavar="TAG", help="Only sessions with this tag.")
    ] = None,
    as_json: Json = False,
) -> int:
    """List sessions, ordered by id: user, title, tags, items, created, last updated
    and when the session expires (its own TTL, else the store's ttl= URL parameter).

    \b
    Example:
      sessions list --db sqlite:///chat.db --limit 20
      sessions list --user alice --tag support --db sqlite:///chat.db
      sessions --db sqlite:///chat.db list --all --json
    """
    url = database_url(ctx, db)
    lister = _list_json if as_json else _list_table
    filters = (user, tag)
    return run_async(lambda: lister(url, limit, after, show_all, filters), [url])


async def _list_json(
    url: str, limit: int, after: str | None, show_all: bool, filters: _Filters
) -> None:
    async with opened(url) as store:
        array = JsonArray()
        while True:
            page = await _page(store, limit, after, filters)
            for info in page:
                array.add(json_text(_record(info, store.ttl)))
            if not show_all or len(page) < limit:
                break
            after = page[-1].session_id
        array.close()


async def _page(
    store: Store[Any], limit: int, after: str | None, filters: _Filters
) -> list[SessionInfo]:
    user, tag = filters
    try:
        return await store.list_sessions(limit=limit, after=after, user_id=user, tag=tag)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc), "sessions list") from None


async def _list_table(
    url: str, limit: int, after: str | None, show_all: bool, filters: _Filters
) -> None:
    async with opened(url) as store:
        shown = 0
        while True:
            page = await _page(store, limit + 1, after, filters)
            more = len(page) > limit
            page = page[:limit]
            if page:
                _page_table(page, store.ttl)
            shown += len(page)
            if not more:
                break
            after = page[-1].session_id
            if not show_all:
                again = "".join(
                    f" {flag} {shlex.quote(value)}"
                    for flag, value in zip(("--user", "--tag"), filters, strict=True)
                    if value is not None
                )
                say(
                    f"{shown} sessions shown; next page: sessions list{again} "
                    f"--after {shlex.quote(after)}"
                )
                return
    say(plural(shown, "session") if shown else "no sessions")


# --------------------------------------------------------------------------- show


def show_cmd(
    ctx: typer.Context,
    session_id: SessionId,
    db: Db = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the stored items as a JSON array.")
    ] = False,
    max_chars: Annotated[
        int | None,
        typer.Option("--max-chars", min=10, help="Truncate longer texts.  [default: 300]"),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Never truncate.")] = False,
) -> int:
    """Show one conversation: roles, tool calls and their outputs.

    With --json, the stored items as a JSON array; a stored row that is not a JSON
    object appears as {"error": "corrupt row", "key": ..., "reason": ..., "raw": ...}.

    \b
    Example:
      sessions show user-42 --db sqlite:///chat.db
      sessions show user-42 --json > user-42.json
    """
    if as_json and (full or max_chars is not None):
        given = "--full" if full else "--max-chars"
        raise UsageError(
            f"{given} does not apply to --json (items are printed whole)", "sessions show"
        )
    if full and max_chars is not None:
        raise UsageError("--full and --max-chars contradict each other", "sessions show")
    url = database_url(ctx, db)
    limit = None if full else (max_chars or 300)
    return run_async(lambda: _show(url, session_id, as_json, limit), [url])


async def _info(store: Store[Any], session_id: str) -> Any:
    from ..errors import InvalidSessionIdError

    try:
        info = await store.session_info(session_id)
    except InvalidSessionIdError as exc:
        fail(f"bad session id {session_id!r}: {exc}", 2)
    if info is None:
        fail(f"unknown session {session_id!r}")
    return info


async def _show(url: str, session_id: str, as_json: bool, max_chars: int | None) -> None:
    async with opened(url) as store:
        info = await _info(store, session_id)
        admin = admin_backend(store, "show")
        if as_json:
            await _show_json(admin, session_id)
            return
        heading(
            [
                (session_id, "bold"),
                (f" · {plural(info.item_count, 'item')} · updated {when(info.updated_at)} UTC", ""),
            ]
        )
        _show_catalogue(info, store.ttl)
        await _show_text(admin, session_id, info.item_count, max_chars)


_PAGE = 500


def _show_catalogue(info: SessionInfo, default: timedelta | None) -> None:
    """The catalogue entry under the heading, one escaped line per field that is set."""
    lines = [
        ("user", info.user_id),
        ("title", info.title),
        ("tags", ", ".join(info.tags) or None),
        ("metadata", None if info.metadata is None else json_text(info.metadata)),
        ("expires", None if info.expires_at(default) is None else _expires(info, default) + " UTC"),
    ]
    for name, value in lines:
        if value is not None:
            say(f"  {name}: {value}")


async def _show_json(admin: AdminBackend, session_id: str) -> None:
    array = JsonArray()
    after: int | None = None
    while True:
        rows = await admin.read_range(session_id, after=after, limit=_PAGE)
        for key, text in rows:
            array.add(stored_json(key, text))
        if len(rows) < _PAGE:
            break
        after = rows[-1][0]
    array.close()


_LABEL_STYLES = {
    "user": "bold cyan",
    "assistant": "bold green",
    "system": "bold magenta",
    "developer": "bold magenta",
    "tool call": "yellow",
    "tool output": "yellow",
    "reasoning": "dim",
}


async def _show_text(
    admin: AdminBackend, session_id: str, count: int, max_chars: int | None
) -> None:
    after: int | None = None
    number = 0
    call_names: dict[str, str] = {}
    while True:
        rows = await admin.read_range(session_id, after=after, limit=_PAGE)
        entries: list[Entry] = []
        for _key, text in rows:
            number += 1
            try:
                label, body, call_id = describe_item(json.loads(text), call_names)
                style = _LABEL_STYLES.get(label, "")
            except ValueError:
                label, body, call_id, style = "corrupt", text, "", "red"
            entries.append(Entry(number, label, _truncate(body, max_chars), call_id, style))
        transcript(entries, count)
        if len(rows) < _PAGE:
            break
        after = rows[-1][0]


def _truncate(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


_TEXT_KEYS = ("text", "refusal", "transcript")


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return json.dumps(part, ensure_ascii=False)
    kind = part.get("type", "")
    text = next((part[k] for k in _TEXT_KEYS if isinstance(part.get(k), str)), None)
    if text is not None:
        return text if kind != "refusal" else f"[refusal] {text}"
    if kind == "input_image":
        return "[image]"
    if kind == "input_file":
        name = part.get("filename")
        return f"[file {name}]" if name else "[file]"
    return f"[{kind or 'part'}]"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False)


def describe_item(item: Any, call_names: dict[str, str]) -> tuple[str, str, str]:
    """``(label, text, call_id)`` of one stored item, for ``sessions show``."""
    if not isinstance(item, dict):
        return "item", json.dumps(item, ensure_ascii=False), ""
    kind = item.get("type")
    call_id = str(item.get("call_id") or "")
    if "role" in item and kind in (None, "message"):
        return str(item["role"]), _content_text(item.get("content")), ""
    if kind == "function_call":
        name = str(item.get("name", "?"))
        if call_id:
            call_names[call_id] = name
        return "tool call", f"{name}({item.get('arguments', '')})", call_id
    if kind == "function_call_output":
        name = call_names.get(call_id, "")
        output = _content_text(item.get("output"))
        return "tool output", f"{name} → {output}" if name else output, call_id
    if kind == "reasoning":
        summary = item.get("summary")
        return "reasoning", _content_text(summary) if summary else "(no summary)", ""
    if isinstance(kind, str) and kind.endswith("_call_output"):
        return "tool output", _content_text(item.get("output")), call_id
    rest = {k: v for k, v in item.items() if k not in ("type", "id", "status", "call_id")}
    text = json.dumps(rest, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(kind, str) and kind.endswith("_call"):
        if call_id:
            call_names[call_id] = kind
        return "tool call", f"{kind} {text}", call_id
    return str(kind or "item"), text, call_id


# --------------------------------------------------------------------------- stats


def stats_cmd(ctx: typer.Context, db: Db = None, as_json: Json = False) -> int:
    """Totals: sessions, items, largest session, oldest and idle sessions.

    \b
    Example:
      sessions stats --db postgresql://app@db.internal/app
    """
    url = database_url(ctx, db)
    return run_async(lambda: _stats(url, as_json), [url])


async def _totals(store: Store[Any]) -> dict[str, Any]:
    sessions = items = idle = 0
    largest: tuple[str, int] | None = None
    oldest: datetime | None = None
    newest: datetime | None = None
    cutoff = datetime.now(timezone.utc) - timedelta(days=30)
    async for info in store.iter_sessions():
        sessions += 1
        items += info.item_count
        if largest is None or info.item_count > largest[1]:
            largest = (info.session_id, info.item_count)
        created, updated = _utc(info.created_at), _utc(info.updated_at)
        oldest = created if oldest is None or created < oldest else oldest
        newest = updated if newest is None or updated > newest else newest
        idle += updated < cutoff
    return {
        "sessions": sessions,
        "items": items,
        "average_items": round(items / sessions, 1) if sessions else 0,
        "largest_session": {"session_id": largest[0], "items": largest[1]} if largest else None,
        "oldest_created_at": iso(oldest) if oldest else None,
        "last_updated_at": iso(newest) if newest else None,
        "idle_30_days": idle,
    }


def _file_bytes(path: str) -> int:
    """Bytes of a SQLite database and its write-ahead log."""
    return sum(
        os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix)
    )


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


async def _stats(url: str, as_json: bool) -> None:
    from .._tools.url import parse_url

    parsed = parse_url(url)
    async with opened(url) as store:
        totals = await _totals(store)
    stats: dict[str, Any] = {"backend": parsed.kind, "database": parsed.display, **totals}
    if parsed.kind == "sqlite" and parsed.target != ":memory:":
        stats["file_bytes"] = await asyncio.to_thread(_file_bytes, parsed.target)
    if as_json:
        say(json_text(stats, indent=2))
        return
    largest = stats["largest_session"]
    oldest, newest = stats["oldest_created_at"], stats["last_updated_at"]
    rows = [
        ("backend", parsed.kind),
        ("database", parsed.display),
        ("sessions", str(stats["sessions"])),
        ("items", str(stats["items"])),
        ("items per session", str(stats["average_items"])),
        (
            "largest session",
            f"{largest['session_id']} ({largest['items']} items)" if largest else "-",
        ),
        ("oldest session", f"{when(datetime.fromisoformat(oldest))} UTC" if oldest else "-"),
        ("last update", f"{when(datetime.fromisoformat(newest))} UTC" if newest else "-"),
        ("idle for 30+ days", str(stats["idle_30_days"])),
    ]
    if "file_bytes" in stats:
        rows.append(("file size", f"{stats['file_bytes'] / 1024:.1f} KiB"))
    for key, value in rows:
        say(f"{key + ':':<19} {value}")
