"""The ``sessions`` command: inspect, export, import, purge and migrate session stores.

Needs the optional ``cli`` extra (typer and rich); without it ``main`` prints how to
install it and exits with status 2. Every failure is one line on standard error and a
non-zero exit status: 1 for an operation that failed, 2 for a usage error (bad option,
bad URL), 130 when interrupted.

This module imports typer lazily and must not use postponed annotations: typer reads
the annotations of the command functions at runtime.
"""

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from ._store import Store

__all__ = ["main"]

ENV_URL = "SESSIONS_DATABASE_URL"
INSTALL_HINT = "pip install 'txsessions[cli]'"
DEBUG_ENV = "SESSIONS_DEBUG"


class CliError(Exception):
    """A failure to report as one line, with an exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        import rich  # noqa: F401
        import typer
    except ImportError as exc:
        print(
            f"error: the sessions command needs {exc.name or 'typer and rich'}: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        args = ["--help"]
    command = typer.main.get_command(_build_app())
    try:
        result = command.main(args, prog_name="sessions", standalone_mode=False)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except Exception as exc:  # noqa: BLE001 - click's usage errors, as one line
        message = getattr(exc, "format_message", None)
        if callable(message) and isinstance(getattr(exc, "exit_code", None), int):
            ctx = getattr(exc, "ctx", None)
            where = getattr(ctx, "command_path", None) or "sessions"
            print(f"error: {message()} (see '{where} --help')", file=sys.stderr)
            return int(exc.exit_code)  # type: ignore[attr-defined]
        if type(exc).__name__ == "Abort":
            print("error: aborted", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


# --------------------------------------------------------------------------- helpers


def _fail(message: str, code: int = 1) -> NoReturn:
    raise CliError(message, code)


def _database_url(db: str | None) -> str:
    url = db if db else os.environ.get(ENV_URL, "")
    if not url:
        _fail(
            f"no database given: pass --db URL or set {ENV_URL} "
            "(e.g. sqlite:///sessions.db or postgresql://user@host/db)",
            2,
        )
    return url


def _execute(work: Awaitable[int | None], urls: Sequence[str | None]) -> None:
    """Run one command's coroutine; turn any failure into one scrubbed line."""
    import typer

    from ._url import scrub
    from .errors import SessionError

    def clean(text: str) -> str:
        for url in urls:
            text = scrub(text, url)
        return " ".join(text.split()) or "failed"

    async def run() -> int | None:
        return await work

    code: int
    try:
        result = asyncio.run(run())
    except CliError as exc:
        print(f"error: {clean(str(exc))}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # the reader went away (``sessions show x | head``): quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 141
    except SessionError as exc:
        print(f"error: {clean(str(exc))}", file=sys.stderr)
        code = 1
    except (ValueError, TypeError) as exc:
        print(f"error: {clean(str(exc))}", file=sys.stderr)
        code = 2
    except OSError as exc:
        text = str(exc)
        if exc.strerror and exc.filename and exc.strerror in text:
            text = f"{exc.filename}: {exc.strerror}"
        print(f"error: {clean(text)}", file=sys.stderr)
        code = 1
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"error: {clean(f'{type(exc).__name__}: {exc}')}", file=sys.stderr)
        code = 1
    else:
        code = result or 0
    if code:
        raise typer.Exit(code)


@asynccontextmanager
async def _opened(url: str, *, create: bool) -> AsyncIterator["Store[Any]"]:
    from ._url import open_store, parse_url

    parsed = parse_url(url)
    options: dict[str, Any] = {}
    if parsed.kind == "postgres":
        options = {"min_size": 1, "max_size": 2}
    store = await open_store(url, create=create, **options)
    try:
        yield store
    finally:
        await store.close()


def _consoles() -> tuple["Console", "Console"]:
    from rich.console import Console

    return Console(highlight=False), Console(stderr=True, highlight=False)


@contextmanager
def _progress(err: "Console", description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on stderr (drawn only on a terminal); yields the task handle."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with bar:
        task = bar.add_task(description, total=total)

        class Handle:
            def advance(self, n: int) -> None:
                bar.advance(task, n)

            def total(self, n: int) -> None:
                bar.update(task, total=n)

        yield Handle()


def _when(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _confirm(question: str) -> bool:
    """Ask on stderr, read an answer from stdin (no answer, or end of input: no)."""
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():  # the answer was not echoed: end the prompt's line
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or combinations such as ``1d12h``."""
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION_PART.sub("", compact):
        raise CliError(
            f"--older-than {text!r}: expected a duration such as 30d, 12h, 90m, 45s or 2w", 2
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(compact))
    return timedelta(seconds=seconds)


async def _info_or_fail(store: "Store[Any]", session_id: str) -> Any:
    from .errors import InvalidSessionIdError

    try:
        info = await store.session_info(session_id)
    except InvalidSessionIdError as exc:
        _fail(f"bad session id {session_id!r}: {exc}", 2)
    if info is None:
        _fail(f"unknown session {session_id!r}")
    return info


# --------------------------------------------------------------------------- rendering


_TEXT_KEYS = ("text", "refusal", "transcript")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                kind = part.get("type", "")
                text = next((part[k] for k in _TEXT_KEYS if isinstance(part.get(k), str)), None)
                if text is not None:
                    parts.append(text if kind != "refusal" else f"[refusal] {text}")
                elif kind == "input_image":
                    parts.append("[image]")
                elif kind == "input_file":
                    name = part.get("filename")
                    parts.append(f"[file {name}]" if name else "[file]")
                else:
                    parts.append(f"[{kind or 'part'}]")
        return "\n".join(parts)
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


def _truncate(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


_LABEL_STYLES = {
    "user": "bold cyan",
    "assistant": "bold green",
    "system": "bold magenta",
    "developer": "bold magenta",
    "tool call": "yellow",
    "tool output": "yellow",
    "reasoning": "dim",
}


# --------------------------------------------------------------------------- commands


async def _cmd_list(url: str, limit: int, after: str | None, show_all: bool, as_json: bool) -> None:
    from rich import box
    from rich.table import Table

    out, _ = _consoles()
    async with _opened(url, create=False) as store:
        if as_json:
            sys.stdout.write("[")
            first = True
            cursor = after
            while True:
                page = await store.list_sessions(limit=limit, after=cursor)
                for info in page:
                    record = {
                        "session_id": info.session_id,
                        "items": info.item_count,
                        "created_at": _iso(info.created_at),
                        "updated_at": _iso(info.updated_at),
                    }
                    sys.stdout.write(("\n  " if first else ",\n  ") + json.dumps(record))
                    first = False
                if not show_all or len(page) < limit:
                    break
                cursor = page[-1].session_id
            sys.stdout.write("\n]\n" if not first else "]\n")
            return
        cursor = after
        shown = 0
        while True:
            page = await store.list_sessions(limit=limit + 1, after=cursor)
            more = len(page) > limit
            page = page[:limit]
            if page or shown == 0:
                table = Table(
                    box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold"
                )
                table.add_column("SESSION", overflow="fold")
                table.add_column("ITEMS", justify="right")
                table.add_column("CREATED (UTC)", no_wrap=True)
                table.add_column("UPDATED (UTC)", no_wrap=True)
                for info in page:
                    table.add_row(
                        info.session_id,
                        str(info.item_count),
                        _when(info.created_at),
                        _when(info.updated_at),
                    )
                if page:
                    out.print(table)
            shown += len(page)
            if not more:
                break
            cursor = page[-1].session_id
            if not show_all:
                out.print(
                    f"{shown} sessions shown; next page: sessions list --after {cursor!r}",
                    markup=False,
                )
                return
        out.print(_plural(shown, "session") if shown else "no sessions", markup=False)


async def _cmd_show(url: str, session_id: str, as_json: bool, max_chars: int | None) -> None:
    from rich.text import Text

    from ._transfer import admin_backend

    out, _ = _consoles()
    async with _opened(url, create=False) as store:
        info = await _info_or_fail(store, session_id)
        admin = admin_backend(store, "show")
        after: int | None = None
        page_size = 500
        first = True
        if as_json:
            sys.stdout.write("[")
        else:
            out.print(Text(session_id, "bold"), end="")
            out.print(
                f" · {_plural(info.item_count, 'item')} · updated {_when(info.updated_at)} UTC",
                markup=False,
            )
        number = 0
        call_names: dict[str, str] = {}
        width = len(str(max(info.item_count, 1))) + 1
        indent = " " * (width + 13)
        wrap_at = max(out.width - len(indent), 20)
        while True:
            rows = await admin.read_range(session_id, after=after, limit=page_size)
            block = Text()
            for _key, text in rows:
                if as_json:
                    sys.stdout.write(("\n  " if first else ",\n  ") + text)
                    first = False
                    continue
                number += 1
                try:
                    label, body, call_id = describe_item(json.loads(text), call_names)
                    style = _LABEL_STYLES.get(label, "")
                except ValueError:
                    label, body, call_id, style = "corrupt", text, "", "red"
                body = _truncate(body, max_chars)
                if call_id:
                    body += f"  [{call_id}]"
                if block:
                    block.append("\n")
                block.append(f"#{number}".rjust(width) + " ", "dim")
                block.append(label.ljust(12), style)
                block.append(_hang(body, indent, wrap_at))
            if block:  # one print per page: printing line by line is slow
                out.print(block, soft_wrap=True)
            if len(rows) < page_size:
                break
            after = rows[-1][0]
        if as_json:
            sys.stdout.write("\n]\n" if not first else "]\n")


def _hang(text: str, indent: str, width: int) -> str:
    """``text`` wrapped to ``width`` columns, continuation lines indented."""
    import textwrap

    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.extend(
            textwrap.wrap(paragraph, width, break_long_words=True, replace_whitespace=False) or [""]
        )
    return ("\n" + indent).join(lines)


async def _cmd_stats(url: str, as_json: bool) -> None:
    from ._url import parse_url

    out, _ = _consoles()
    parsed = parse_url(url)
    async with _opened(url, create=False) as store:
        sessions = items = 0
        largest: tuple[str, int] | None = None
        oldest: datetime | None = None
        newest: datetime | None = None
        idle_30d = 0
        cutoff = datetime.now(timezone.utc) - timedelta(days=30)
        async for info in store.iter_sessions():
            sessions += 1
            items += info.item_count
            if largest is None or info.item_count > largest[1]:
                largest = (info.session_id, info.item_count)
            created = info.created_at
            updated = info.updated_at
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            if updated.tzinfo is None:
                updated = updated.replace(tzinfo=timezone.utc)
            oldest = created if oldest is None or created < oldest else oldest
            newest = updated if newest is None or updated > newest else newest
            if updated < cutoff:
                idle_30d += 1
    size: int | None = None
    if parsed.kind == "sqlite" and parsed.target != ":memory:":
        size = _file_size(parsed.target)
    stats: dict[str, Any] = {
        "backend": parsed.kind,
        "database": parsed.display,
        "sessions": sessions,
        "items": items,
        "average_items": round(items / sessions, 1) if sessions else 0,
        "largest_session": {"session_id": largest[0], "items": largest[1]} if largest else None,
        "oldest_created_at": _iso(oldest) if oldest else None,
        "last_updated_at": _iso(newest) if newest else None,
        "idle_30_days": idle_30d,
    }
    if size is not None:
        stats["file_bytes"] = size
    if as_json:
        print(json.dumps(stats, indent=2))
        return
    rows = [
        ("backend", parsed.kind),
        ("database", parsed.display),
        ("sessions", str(sessions)),
        ("items", str(items)),
        ("items per session", str(stats["average_items"])),
        ("largest session", f"{largest[0]} ({largest[1]} items)" if largest else "-"),
        ("oldest session", f"{_when(oldest)} UTC" if oldest else "-"),
        ("last update", f"{_when(newest)} UTC" if newest else "-"),
        ("idle for 30+ days", str(idle_30d)),
    ]
    if size is not None:
        rows.append(("file size", f"{size / 1024:.1f} KiB"))
    for key, value in rows:
        print(f"{key + ':':<19} {value}")


def _file_size(path: str) -> int:
    """Bytes of a SQLite database and its write-ahead log."""
    return sum(
        os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix)
    )


async def _cmd_export(url: str, session_ids: list[str], output: str) -> None:
    from ._transfer import export_sessions, plan_export

    _, err = _consoles()
    async with _opened(url, create=False) as store:
        sessions, items = await plan_export(store, session_ids)
        with _progress(err, "exporting", items) as bar:
            result = await export_sessions(store, output, session_ids, progress=bar.advance)
    where = "standard output" if output == "-" else output
    message = (
        f"exported {_plural(result.sessions, 'session')} "
        f"({_plural(result.items, 'item')}) to {where}"
    )
    if result.skipped_corrupt:
        message += f"; skipped {result.skipped_corrupt} corrupt stored rows"
    err.print(message, markup=False) if output == "-" else print(message)


async def _cmd_import(url: str, path: str) -> None:
    from ._transfer import import_sessions

    _, err = _consoles()
    if not await asyncio.to_thread(os.path.isfile, path):
        _fail(f"no such file: {path}")
    async with _opened(url, create=True) as store:
        with _progress(err, "importing", None) as bar:
            result = await import_sessions(store, path, progress=bar.advance, on_total=bar.total)
    print(
        f"imported {_plural(result.added, 'item')} into "
        f"{_plural(result.sessions, 'session')} ({result.already_present} already present)"
    )


async def _cmd_delete(url: str, session_id: str, yes: bool) -> None:
    async with _opened(url, create=False) as store:
        info = await _info_or_fail(store, session_id)
        if not yes and not _confirm(
            f"Delete session {session_id!r} ({_plural(info.item_count, 'item')}, "
            f"updated {_when(info.updated_at)} UTC)?"
        ):
            _fail("aborted: nothing deleted")
        existed = await store.delete_session(session_id)
    if not existed:
        _fail(f"unknown session {session_id!r} (deleted meanwhile)")
    print(f"deleted session {session_id!r} ({_plural(info.item_count, 'item')})")


async def _cmd_purge(url: str, older_than: str, dry_run: bool, yes: bool) -> None:
    from rich import box
    from rich.table import Table

    age = parse_duration(older_than)
    out, _ = _consoles()
    async with _opened(url, create=False) as store:
        stale = await store.purge(age, dry_run=True)
        cutoff = _when(datetime.now(timezone.utc) - age)
        items = sum(info.item_count for info in stale)
        if not stale:
            print(f"nothing to purge: no session was last updated before {cutoff} UTC")
            return
        if dry_run:
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
            table.add_column("SESSION", overflow="fold")
            table.add_column("ITEMS", justify="right")
            table.add_column("UPDATED (UTC)", no_wrap=True)
            for info in stale[:50]:
                table.add_row(info.session_id, str(info.item_count), _when(info.updated_at))
            out.print(table)
            if len(stale) > 50:
                out.print(f"... and {len(stale) - 50} more", markup=False)
            print(
                f"dry run: would delete {_plural(len(stale), 'session')} "
                f"({_plural(items, 'item')}) "
                f"not updated since {cutoff} UTC"
            )
            return
        if not yes and not _confirm(
            f"Delete {_plural(len(stale), 'session')} ({_plural(items, 'item')}) "
            f"not updated since {cutoff} UTC?"
        ):
            _fail("aborted: nothing deleted")
        gone = await store.purge(age)
    gone_items = sum(info.item_count for info in gone)
    print(f"deleted {_plural(len(gone), 'session')} ({_plural(gone_items, 'item')})")


async def _cmd_migrate(
    source_url: str,
    target_url: str,
    sessions_table: str,
    messages_table: str,
    source_schema: str | None,
) -> int:
    from ._migrate import migrate, open_source
    from ._url import parse_url

    out, err = _consoles()
    parse_url(target_url)  # a bad target URL fails before the source is touched
    source = await open_source(
        source_url,
        sessions_table=sessions_table,
        messages_table=messages_table,
        schema=source_schema,
    )
    try:
        async with _opened(target_url, create=True) as store:
            with _progress(err, "migrating", None) as bar:
                report = await migrate(source, store, progress=bar.advance, on_total=bar.total)
    finally:
        await source.close()
    print(
        f"migrated {_plural(report.sessions, 'session')} from {source.description}: "
        f"{_plural(report.copied, 'item')} copied, {report.already_present} already present"
    )
    if report.corrupt_skipped:
        print(
            f"skipped {report.corrupt_skipped} source rows that are not JSON objects "
            "(the SDK's sessions skip them when reading too)"
        )
    if report.ok:
        print(f"verified: item counts match ({_plural(report.sessions, 'session')} checked)")
        return 0
    for mismatch in report.mismatches:
        out.print(f"  mismatch: {mismatch.describe()}", markup=False)
    _fail(
        f"{len(report.mismatches)} of {report.sessions} sessions do not match after the "
        "migration (listed above)"
    )


def _cmd_demo(db: str | None) -> int:
    try:
        from ._demo import run_demo
    except ImportError as exc:
        _fail(
            f"the demo needs an openai-agents release with agents.testing.ScriptedModel "
            f"(pip install -U openai-agents): {exc}"
        )
    code: int = run_demo(db)
    return code


# --------------------------------------------------------------------------- the app


def _build_app() -> "typer.Typer":
    import typer

    app = typer.Typer(
        name="sessions",
        help=(
            "Inspect and maintain txsessions stores (SQLite or PostgreSQL).\n\n"
            "The database is given with --db URL or the SESSIONS_DATABASE_URL "
            "environment variable: sqlite:///relative.db, sqlite:////abs/path.db, "
            "postgresql://user:password@host:5432/db?schema=public&table_prefix=txs_.\n\n"
            "\b\nExample:\n  sessions list --db sqlite:///chat.db\n"
            "  sessions show user-42 --db sqlite:///chat.db"
        ),
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    Db = Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar=ENV_URL,
            show_envvar=True,
            metavar="URL",
            help="Database URL: sqlite:///path.db or postgresql://user@host/db.",
        ),
    ]
    Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]

    @app.command("list")
    def list_cmd(
        db: Db = None,
        limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Sessions per page.")] = 50,
        after: Annotated[
            str | None,
            typer.Option("--after", metavar="ID", help="Start after this session id."),
        ] = None,
        show_all: Annotated[bool, typer.Option("--all", help="Every page, not just one.")] = False,
        as_json: Json = False,
    ) -> None:
        """List sessions, ordered by id: items, created and last updated.

        \b
        Example:
          sessions list --db sqlite:///chat.db --limit 20
        """
        url = _database_url(db)
        _execute(_cmd_list(url, limit, after, show_all, as_json), [url])

    @app.command("show")
    def show_cmd(
        session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id.")],
        db: Db = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the stored items as a JSON array.")
        ] = False,
        max_chars: Annotated[
            int, typer.Option("--max-chars", min=10, help="Truncate longer texts.")
        ] = 300,
        full: Annotated[bool, typer.Option("--full", help="Never truncate.")] = False,
    ) -> None:
        """Show one conversation: roles, tool calls and their outputs.

        \b
        Example:
          sessions show user-42 --db sqlite:///chat.db
          sessions show user-42 --json > user-42.json
        """
        url = _database_url(db)
        _execute(_cmd_show(url, session_id, as_json, None if full else max_chars), [url])

    @app.command("stats")
    def stats_cmd(db: Db = None, as_json: Json = False) -> None:
        """Totals: sessions, items, largest session, oldest and idle sessions.

        \b
        Example:
          sessions stats --db postgresql://app@db.internal/app
        """
        url = _database_url(db)
        _execute(_cmd_stats(url, as_json), [url])

    @app.command("export")
    def export_cmd(
        session_ids: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="ID", help="Sessions to export (default: all).", show_default=False
            ),
        ] = None,
        output: Annotated[
            str,
            typer.Option(
                "--output", "-o", metavar="FILE", help="JSON Lines file to write ('-': stdout)."
            ),
        ] = "",
        db: Db = None,
    ) -> None:
        """Export sessions to a JSON Lines file (streamed, constant memory).

        \b
        Example:
          sessions export -o backup.jsonl --db sqlite:///chat.db
          sessions export user-1 user-2 -o two.jsonl
        """
        if not output:
            _usage("export: missing option -o/--output FILE", "sessions export")
        url = _database_url(db)
        _execute(_cmd_export(url, list(session_ids or []), output), [url])

    @app.command("import")
    def import_cmd(
        path: Annotated[str, typer.Argument(metavar="FILE", help="A file made by export.")],
        db: Db = None,
    ) -> None:
        """Import an export file. Running it twice adds nothing.

        \b
        Example:
          sessions import backup.jsonl --db postgresql://app@db.internal/app
        """
        url = _database_url(db)
        _execute(_cmd_import(url, path), [url])

    @app.command("delete")
    def delete_cmd(
        session_id: Annotated[str, typer.Argument(metavar="ID", help="The session id.")],
        db: Db = None,
        yes: Yes = False,
    ) -> None:
        """Delete one session (asks first unless --yes).

        \b
        Example:
          sessions delete user-42 --yes --db sqlite:///chat.db
        """
        url = _database_url(db)
        _execute(_cmd_delete(url, session_id, yes), [url])

    @app.command("purge")
    def purge_cmd(
        older_than: Annotated[
            str,
            typer.Option(
                "--older-than",
                metavar="AGE",
                help="Sessions not updated for this long: 30d, 12h, 90m, 2w...",
            ),
        ] = "",
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Only list what would be deleted.")
        ] = False,
        yes: Yes = False,
        db: Db = None,
    ) -> None:
        """Delete sessions not updated for a while (asks first unless --yes).

        \b
        Example:
          sessions purge --older-than 30d --dry-run --db sqlite:///chat.db
          sessions purge --older-than 30d --yes
        """
        if not older_than:
            _usage("purge: missing option --older-than AGE (e.g. 30d)", "sessions purge")
        url = _database_url(db)
        _execute(_cmd_purge(url, older_than, dry_run, yes), [url])

    @app.command("migrate")
    def migrate_cmd(
        source: Annotated[
            str,
            typer.Option(
                "--from",
                metavar="URL",
                help="The SDK's store: sqlite:///agents.db (SQLiteSession, "
                "AsyncSQLiteSession) or a SQLAlchemy URL (SQLAlchemySession).",
            ),
        ] = "",
        target: Annotated[
            str | None,
            typer.Option(
                "--to",
                metavar="URL",
                envvar=ENV_URL,
                show_envvar=True,
                help="The txsessions store to copy into.",
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
    ) -> None:
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
            _usage("migrate: missing option --from URL", "sessions migrate")
        if not target:
            _usage(f"migrate: missing option --to URL (or set {ENV_URL})", "sessions migrate")
        _execute(
            _cmd_migrate(source, target, sessions_table, messages_table, source_schema),
            [source, target],
        )

    @app.command("demo")
    def demo_cmd(
        db: Annotated[
            str | None,
            typer.Option("--db", metavar="PATH", help="SQLite file to use (default: temporary)."),
        ] = None,
    ) -> None:
        """Run an offline demo: a streamed run cancelled midway leaves history whole.

        \b
        Example:
          sessions demo --db demo.db
        """
        try:
            code = _cmd_demo(db)
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(exc.code) from None
        if code:
            raise typer.Exit(code)

    return app


def _usage(message: str, command: str) -> NoReturn:
    import typer

    print(f"error: {message} (see '{command} --help')", file=sys.stderr)
    raise typer.Exit(2)
