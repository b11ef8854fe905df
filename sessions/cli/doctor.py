"""``sessions doctor``: find stored history the Responses API would reject; repair it.

No postponed annotations here: typer reads the command signatures at runtime.
"""

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer

from .._model.redact import redact
from .options import Db, database_url, opened
from .render import (
    JsonObjectStream,
    UsageError,
    fail,
    json_text,
    literal,
    plural,
    progress,
    run_async,
    say,
)

if TYPE_CHECKING:
    from .._tools.doctor import IndexMismatch, Problem, SessionCheck

__all__ = ["doctor_cmd"]

_HELP_SDK = (
    "Read the database as the SDK's own session tables (SQLiteSession / "
    "AsyncSQLiteSession file, or SQLAlchemySession tables through a SQLAlchemy URL), "
    "read-only. Automatic for a SQLite file holding the SDK's tables and not ours, and "
    "for URLs only SQLAlchemy reads (sqlite+aiosqlite://...)."
)

_OUR_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg")


def doctor_cmd(
    ctx: typer.Context,
    session_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="Check only this session.", show_default=False),
    ] = None,
    db: Db = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Move every offending row into its session's quarantine (one idempotent "
            "commit per session; nothing is deleted for good), and recompute a turn index "
            "that disagrees with the rows (one transaction per session).",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON object.")
    ] = False,
    sdk: Annotated[bool, typer.Option("--sdk", help=_HELP_SDK)] = False,
    sessions_table: Annotated[
        str | None,
        typer.Option("--sessions-table", help="The SDK's sessions table (SDK databases)."),
    ] = None,
    messages_table: Annotated[
        str | None,
        typer.Option("--messages-table", help="The SDK's messages table (SDK databases)."),
    ] = None,
    source_schema: Annotated[
        str | None,
        typer.Option(
            "--source-schema", help="PostgreSQL schema of the SDK's tables (SDK databases)."
        ),
    ] = None,
) -> int:
    """Find history the Responses API would reject: orphan tool outputs, calls without
    outputs, duplicate item ids, rows that are not JSON objects; and turn indexes
    (turn counts kept per session and turn) that disagree with the rows.

    Exit status 1 while problems or wrong turn indexes remain, 0 when clean. --repair
    (txsessions stores only) moves the offending rows into each session's quarantine,
    listed in the report, and recomputes a wrong turn index from the rows. An SDK
    session database is read only: migrate it first (sessions migrate), then run
    doctor --repair on the copy.

    \b
    Example:
      sessions doctor --db sqlite:///chat.db
      sessions doctor user-42 --repair --db sqlite:///chat.db
      sessions doctor --json --db sqlite:///agents.db
    """
    url = database_url(ctx, db)
    tables = _SdkTables(sessions_table, messages_table, source_schema)
    report = _Report(as_json)
    return run_async(lambda: _doctor(url, session_id, repair, sdk, tables, report), [url])


@dataclass(frozen=True)
class _SdkTables:
    sessions: str | None
    messages: str | None
    schema: str | None

    def given(self) -> str | None:
        for option, value in (
            ("--sessions-table", self.sessions),
            ("--messages-table", self.messages),
            ("--source-schema", self.schema),
        ):
            if value is not None:
                return option
        return None


async def _doctor(
    url: str, session_id: str | None, repair: bool, sdk: bool, tables: _SdkTables, report: "_Report"
) -> int:
    if sdk or await _is_sdk_database(url):
        if repair:
            shown = redact(url)
            fail(
                f"--repair writes only txsessions stores, and {shown} holds the SDK's "
                f"sessions (read-only here): copy them with 'sessions migrate --from {shown} "
                "--to STORE', then run 'sessions doctor --repair --db STORE'",
                2,
            )
        return await _doctor_sdk(url, session_id, tables, report)
    option = tables.given()
    if option is not None:
        raise UsageError(
            f"{option} applies to SDK session databases only (see --sdk)", "sessions doctor"
        )
    return await _doctor_store(url, session_id, repair, report)


async def _is_sdk_database(url: str) -> bool:
    """A URL only SQLAlchemy reads, or a SQLite file with the SDK's tables and not ours."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme and scheme not in _OUR_SCHEMES:
        return True
    if scheme != "sqlite":
        return False
    from .._tools.url import parse_url

    path = parse_url(url).target
    if path == ":memory:" or not await asyncio.to_thread(os.path.isfile, path):
        return False
    tables = await asyncio.to_thread(_sqlite_tables, path)
    return "agent_messages" in tables and "txs_items" not in tables


def _sqlite_tables(path: str) -> set[str]:
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
    except sqlite3.Error:
        return set()
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error:
        return set()
    finally:
        conn.close()


async def _doctor_store(url: str, session_id: str | None, repair: bool, report: "_Report") -> int:
    from .._model.validate import validate_session_id
    from .._tools.doctor import check_store
    from .._tools.url import parse_url
    from ..errors import InvalidSessionIdError

    async with opened(url) as store:
        if session_id is not None:
            try:
                validate_session_id(session_id)
            except InvalidSessionIdError as exc:
                fail(f"bad session id {session_id!r}: {exc}", 2)
            if await store.session_info(session_id) is None:
                fail(f"unknown session {session_id!r}")
        report.start("txsessions", parse_url(url).display)
        return await report.consume(check_store(store, session_id=session_id, repair=repair))


async def _doctor_sdk(
    url: str, session_id: str | None, tables: _SdkTables, report: "_Report"
) -> int:
    from .._tools.doctor import check_source
    from .._tools.sources import open_source

    source = await open_source(
        url,
        sessions_table=tables.sessions or "agent_sessions",
        messages_table=tables.messages or "agent_messages",
        schema=tables.schema,
    )
    try:
        report.start("sdk", source.description)
        return await report.consume(check_source(source, session_id=session_id))
    finally:
        await source.close()


# --------------------------------------------------------------------------- the report

_QUARANTINE_SHOWN = 120


class _Report:
    """Prints each session's findings as they come (text or one JSON object)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.database = ""
        self.sessions = self.rows = self.found = self.remaining = 0
        self.repaired = self.repaired_sessions = self.failed = self.quarantined = 0
        self.index_found = self.index_repaired = self.index_remaining = 0
        self.kind = ""
        self._json: JsonObjectStream | None = None

    def start(self, kind: str, database: str) -> None:
        self.kind, self.database = kind, database

    def _stream(self) -> JsonObjectStream:
        """The JSON report, begun with the first thing to print (an error before
        that leaves standard output empty)."""
        if self._json is None:
            head = {"database": self.database, "kind": self.kind}
            self._json = JsonObjectStream(head, "sessions")
        return self._json

    async def consume(self, checks: AsyncIterator["SessionCheck"]) -> int:
        with progress("checking sessions", None) as bar:
            async for check in checks:
                self._count(check)
                if (
                    check.problems
                    or check.quarantine
                    or check.error
                    or check.index
                    or check.index_error
                ):
                    self._session(check)
                bar.advance(1)
        self._summary()
        return 1 if self.remaining or self.index_remaining else 0

    def _count(self, check: "SessionCheck") -> None:
        self.sessions += 1
        self.rows += check.rows
        self.found += len(check.problems)
        self.remaining += len(check.remaining)
        self.repaired += len(check.repaired)
        self.repaired_sessions += bool(check.repaired)
        self.failed += (check.error is not None) + (check.index_error is not None)
        self.quarantined += len(check.quarantine)
        self.index_found += bool(check.index)
        self.index_repaired += check.index_repaired
        self.index_remaining += bool(check.index_remaining)

    def _session(self, check: "SessionCheck") -> None:
        if self.as_json:
            self._stream().add(json_text(_session_json(check)))
            return
        for line in _session_lines(check):
            say(line)

    def _summary(self) -> None:
        summary = {
            "checked_sessions": self.sessions,
            "checked_rows": self.rows,
            "problems_found": self.found,
            "problems_remaining": self.remaining,
            "repaired_rows": self.repaired,
            "repaired_sessions": self.repaired_sessions,
            "failed_repairs": self.failed,
            "quarantined_rows": self.quarantined,
            "turn_index_sessions": self.index_found,
            "turn_index_repaired": self.index_repaired,
            "turn_index_remaining": self.index_remaining,
            "clean": not self.remaining and not self.index_remaining,
        }
        if self.as_json:
            self._stream().close(summary)
            return
        say(
            f"checked {plural(self.sessions, 'session')} ({plural(self.rows, 'row')}) "
            f"of {self.database}: {plural(self.found, 'problem')} found"
        )
        if self.repaired:
            say(
                f"repaired {plural(self.repaired_sessions, 'session')}: "
                f"{plural(self.repaired, 'row')} moved into their quarantine"
            )
        if self.index_found:
            say(f"turn index of {plural(self.index_found, 'session')} disagrees with the rows")
        if self.index_repaired:
            say(f"recomputed the turn index of {plural(self.index_repaired, 'session')}")
        if self.failed:
            say(f"{plural(self.failed, 'repair')} failed (see above)")
        if self.remaining:
            hint = "" if self.repaired or self.failed else "; --repair quarantines them"
            verb = "remains" if self.remaining == 1 else "remain"
            say(f"{plural(self.remaining, 'problem')} {verb}{hint}")
        if self.index_remaining:
            hint = "" if self.index_repaired or self.failed else "; --repair recomputes them"
            verb = "remains" if self.index_remaining == 1 else "remain"
            say(f"{plural(self.index_remaining, 'session')} with a wrong turn index {verb}{hint}")
        if not self.remaining and not self.index_remaining:
            say("clean: no stored history the API would reject")


def _problem_json(problem: "Problem") -> dict[str, Any]:
    return {
        "key": problem.key,
        "kind": problem.kind,
        "call_id": problem.call_id,
        "message": problem.message,
    }


def _mismatch_json(mismatch: "IndexMismatch") -> dict[str, Any]:
    return {
        "what": mismatch.what,
        "first_key": mismatch.first_key,
        "last_key": mismatch.last_key,
        "hidden": mismatch.hidden,
        "stored": mismatch.stored,
        "expected": mismatch.expected,
    }


def _session_json(check: "SessionCheck") -> dict[str, Any]:
    return {
        "session_id": check.session_id,
        "rows": check.rows,
        "problems": [_problem_json(p) for p in check.problems],
        "repaired": [_problem_json(p) for p in check.repaired],
        "error": check.error,
        "quarantine": [{"reason": reason, "data": data} for reason, data in check.quarantine],
        "turn_index": [_mismatch_json(m) for m in check.index],
        "turn_index_repaired": check.index_repaired,
        "turn_index_error": check.index_error,
    }


def _problem_line(problem: "Problem") -> str:
    call = f" [{literal(problem.call_id)}]" if problem.call_id else ""
    return f"  row {problem.key}: {problem.kind}{call}: {literal(problem.message)}"


def _session_lines(check: "SessionCheck") -> list[str]:
    lines: list[str] = []
    if check.problems:
        lines.append(
            f"session {literal(check.session_id)}: {plural(len(check.problems), 'problem')} in "
            f"{plural(check.rows, 'row')}"
        )
        lines.extend(_problem_line(p) for p in check.problems)
    if check.repaired:
        lines.append(f"  repaired: {plural(len(check.repaired), 'row')} moved into the quarantine")
    if check.error:
        lines.append(f"  repair failed: {literal(check.error)}")
    if check.index:
        lines.append(
            f"session {literal(check.session_id)}: turn index disagrees with the rows "
            f"({plural(len(check.index), 'count')})"
        )
        lines.extend(f"  {literal(m.message)}" for m in check.index)
    if check.index_repaired:
        lines.append("  repaired: turn index recomputed from the rows")
    if check.index_error:
        lines.append(f"  turn index repair failed: {literal(check.index_error)}")
    if check.quarantine:
        if not check.problems and not check.index:
            lines.append(f"session {literal(check.session_id)}: clean")
        lines.append(f"  quarantine: {plural(len(check.quarantine), 'row')}")
        lines.extend(
            f"    {literal(reason)}: {literal(_short(data))}" for reason, data in check.quarantine
        )
    return lines


def _short(text: str) -> str:
    if len(text) <= _QUARANTINE_SHOWN:
        return text
    return f"{text[:_QUARANTINE_SHOWN]}… (+{len(text) - _QUARANTINE_SHOWN} chars)"
