"""Readers of the Agents SDK's own session stores: the sources of a migration.

Sources (``--from``):

* ``sqlite:///path.db``: a file written by ``agents.SQLiteSession`` or
  ``agents.extensions.memory.AsyncSQLiteSession`` (tables ``agent_sessions`` and
  ``agent_messages`` by default; items in ``id`` order). Opened read-only.
* the same with ``agents.extensions.memory.AdvancedSQLiteSession``'s tables
  (``message_structure``, ``turn_usage``) present: every session's branch ``main``
  becomes the session, one turn per SDK user turn with that turn's usage, and every
  other branch ``B`` the session ``<session_id>@B``, recorded as a branch of it (see
  :class:`AdvancedPlan`).
* any SQLAlchemy async URL (``sqlite+aiosqlite:///...``, ``postgresql+asyncpg://...``;
  ``postgresql://`` means asyncpg): tables written by
  ``agents.extensions.memory.SQLAlchemySession`` (items in ``created_at, id`` order, as
  that class reads them). Needs SQLAlchemy installed.

Every reader opens its database read-only (a SQLite file) or only reads (SQLAlchemy)
and reports what it cannot read as :class:`MigrationError`. :mod:`sessions._tools.migrate`
copies what they read into a txsessions store; ``sessions doctor`` checks it in place.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

from .._model.backend import BranchRecord, TurnUsage
from .._model.redact import redact
from .._model.validate import validate_identifier
from ..errors import SessionError

__all__ = [
    "ADVANCED_TABLES",
    "MAIN_BRANCH",
    "AdvancedPlan",
    "MigrationError",
    "SQLAlchemySource",
    "SQLiteFileSource",
    "SdkTurn",
    "Source",
    "open_source",
]


class MigrationError(SessionError):
    """The source cannot be read (missing file, missing table, bad URL...)."""


class Source(Protocol):
    description: str

    async def sessions(self) -> list[tuple[str, int]]:
        """Every session id with its number of stored rows, ordered by id."""
        ...

    def rows(self, session_id: str, chunk: int) -> AsyncIterator[list[str]]:
        """The session's stored ``message_data`` texts, oldest first, in chunks."""
        ...

    async def close(self) -> None: ...


def _check_table(kind: str, name: str) -> str:
    return validate_identifier(name, kind)


# --------------------------------------------------------------------------- SQLite file

#: The tables that make a SQLiteSession file an AdvancedSQLiteSession one.
ADVANCED_TABLES = frozenset({"message_structure", "turn_usage"})
#: The branch every AdvancedSQLiteSession starts on (and returns to after a clear).
MAIN_BRANCH = "main"


@dataclass
class SdkTurn:
    """One user turn of an AdvancedSQLiteSession branch: its rows, in order."""

    number: int
    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AdvancedPlan:
    """How one AdvancedSQLiteSession branch migrates.

    ``turns`` in order (each becomes one of our turn records, with ``usage[number]``,
    the SDK's ``turn_usage`` row of that branch and turn, if any); ``branch``: for a
    branch other than ``main``, the record listing it in ``branches()`` of the main
    session, at the number of leading turns it shares with ``main`` (same rows).
    """

    turns: list[SdkTurn]
    usage: dict[int, TurnUsage]
    branch: BranchRecord | None


def _usage(row: list[Any]) -> TurnUsage:
    requests, input_tokens, output_tokens, input_details, output_details = row
    return TurnUsage(
        int(requests or 0),
        int(input_tokens or 0),
        int(output_tokens or 0),
        _detail(input_details, "cached_tokens"),
        _detail(output_details, "reasoning_tokens"),
    )


def _detail(text: object, key: str) -> int:
    """``key`` of a ``*_tokens_details`` JSON column (0 when absent or unreadable)."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return 0
    number = value.get(key) if isinstance(value, dict) else None
    return number if isinstance(number, int) and not isinstance(number, bool) else 0


class SQLiteFileSource:
    """A database file of the SDK's ``SQLiteSession`` / ``AsyncSQLiteSession``."""

    def __init__(self, path: str, sessions_table: str, messages_table: str) -> None:
        self.path = path
        self.description = path
        self.sessions_table = _check_table("sessions table", sessions_table)
        self.messages_table = _check_table("messages table", messages_table)
        self._conn: sqlite3.Connection | None = None
        #: An AdvancedSQLiteSession file (its tables are present).
        self.advanced = False
        #: Advanced files: every target session id -> (SDK session id, branch id).
        self._branches: dict[str, tuple[str, str]] = {}

    async def open(self) -> None:
        self._conn, tables = await asyncio.to_thread(self._connect)
        if self.messages_table not in tables:
            raise MigrationError(
                f"{self.path!r} has no table {self.messages_table!r}: not a SQLiteSession "
                "database, or give its tables with --sessions-table/--messages-table"
            )
        self.advanced = ADVANCED_TABLES <= tables

    def _connect(self) -> tuple[sqlite3.Connection, set[str]]:
        if not os.path.isfile(self.path):
            raise MigrationError(f"no SQLite database at {self.path!r} (the file does not exist)")
        uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        try:
            tables = {
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as exc:
            conn.close()
            raise self._unreadable(exc) from None
        return conn, tables

    def _unreadable(self, exc: sqlite3.Error) -> MigrationError:
        return MigrationError(f"cannot read SQLite database {self.path!r}: {exc}")

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MigrationError("source is not open")
        return self._conn

    async def sessions(self) -> list[tuple[str, int]]:
        try:
            return await asyncio.to_thread(self._sessions)
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def _sessions(self) -> list[tuple[str, int]]:
        conn = self._db()
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        counts: dict[str, int] = {}
        if self.sessions_table in tables:
            for (session_id,) in conn.execute(f'SELECT session_id FROM "{self.sessions_table}"'):
                counts[str(session_id)] = 0
        for session_id, count in conn.execute(
            f'SELECT session_id, COUNT(*) FROM "{self.messages_table}" GROUP BY session_id'
        ):
            counts[str(session_id)] = int(count)
        if self.advanced:
            self._add_branches(conn, counts)
        return sorted(counts.items())

    def _add_branches(self, conn: sqlite3.Connection, counts: dict[str, int]) -> None:
        """Replace the counts of sessions with branch rows by one count per branch."""
        self._branches = {}
        rows = conn.execute(
            f"SELECT s.session_id, s.branch_id, COUNT(*) FROM message_structure s "
            f'JOIN "{self.messages_table}" m ON m.id = s.message_id '
            "GROUP BY s.session_id, s.branch_id"
        ).fetchall()
        for session_id, _, _ in rows:
            counts[str(session_id)] = 0  # its rows of no branch are not history
        for session_id, branch_id, count in rows:
            sid, branch = str(session_id), str(branch_id)
            target = sid if branch == MAIN_BRANCH else f"{sid}@{branch}"
            if target in self._branches or (target != sid and target in counts):
                raise MigrationError(
                    f"{self.path!r}: branch {branch!r} of session {sid!r} would become "
                    f"session {target!r}, which the source already has"
                )
            self._branches[target] = (sid, branch)
            counts[target] = int(count)

    async def plan(self, target_id: str) -> AdvancedPlan | None:
        """The turns of an AdvancedSQLiteSession branch (``None``: not one)."""
        if target_id not in self._branches:
            return None
        try:
            return await asyncio.to_thread(self._plan, *self._branches[target_id])
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def _plan(self, session_id: str, branch_id: str) -> AdvancedPlan:
        conn = self._db()
        turns = self._turns(conn, session_id, branch_id)
        usage = {
            int(turn): _usage(row)
            for turn, *row in conn.execute(
                "SELECT user_turn_number, requests, input_tokens, output_tokens, "
                "input_tokens_details, output_tokens_details FROM turn_usage "
                "WHERE session_id = ? AND branch_id = ?",
                (session_id, branch_id),
            )
        }
        if branch_id == MAIN_BRANCH:
            return AdvancedPlan(turns, usage, None)
        main = self._turns(conn, session_id, MAIN_BRANCH)
        shared = 0
        while shared < min(len(turns), len(main)) and turns[shared].ids == main[shared].ids:
            shared += 1
        return AdvancedPlan(turns, usage, BranchRecord(session_id, shared))

    def _turns(self, conn: sqlite3.Connection, session_id: str, branch_id: str) -> list[SdkTurn]:
        turns: list[SdkTurn] = []
        for message_id, number, text in conn.execute(
            f"SELECT s.message_id, s.user_turn_number, m.message_data FROM message_structure s "
            f'JOIN "{self.messages_table}" m ON m.id = s.message_id '
            "WHERE s.session_id = ? AND s.branch_id = ? ORDER BY s.sequence_number",
            (session_id, branch_id),
        ):
            number = int(number or 0)
            if not turns or turns[-1].number != number:
                turns.append(SdkTurn(number))
            turns[-1].ids.append(int(message_id))
            turns[-1].texts.append(str(text))
        return turns

    async def rows(self, session_id: str, chunk: int) -> AsyncIterator[list[str]]:
        try:
            cursor = self._db().execute(
                f'SELECT message_data FROM "{self.messages_table}" '
                "WHERE session_id = ? ORDER BY id",
                (session_id,),
            )
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        try:
            while True:
                try:
                    page = await asyncio.to_thread(cursor.fetchmany, chunk)
                except sqlite3.Error as exc:
                    raise self._unreadable(exc) from None
                if not page:
                    return
                yield [str(row[0]) for row in page]
        finally:
            cursor.close()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# --------------------------------------------------------------------------- SQLAlchemy


class SQLAlchemySource:
    """Tables of the SDK's ``SQLAlchemySession``, read through SQLAlchemy."""

    def __init__(
        self, url: str, sessions_table: str, messages_table: str, schema: str | None
    ) -> None:
        self.url = url
        self.description = redact(url)
        self.sessions_table = _check_table("sessions table", sessions_table)
        self.messages_table = _check_table("messages table", messages_table)
        if schema is not None:
            _check_table("schema", schema)
        self.schema = schema
        self._engine: Any = None
        self._conn: Any = None
        self._has_sessions_table = False
        self._sessions: Any = None
        self._messages: Any = None

    async def open(self) -> None:
        try:
            import sqlalchemy as sa
            from sqlalchemy.ext.asyncio import create_async_engine
        except ImportError:
            raise MigrationError(
                "reading SQLAlchemySession tables needs SQLAlchemy: "
                "pip install 'sqlalchemy[asyncio]'"
            ) from None
        try:
            self._engine = create_async_engine(self.url)
        except Exception as exc:  # noqa: BLE001 - bad URL or missing driver, reworded
            raise MigrationError(f"cannot use {self.description}: {_first_line(exc)}") from None
        metadata = sa.MetaData(schema=self.schema)
        self._sessions = sa.Table(self.sessions_table, metadata, sa.Column("session_id"))
        self._messages = sa.Table(
            self.messages_table,
            metadata,
            sa.Column("id"),
            sa.Column("session_id"),
            sa.Column("message_data"),
            sa.Column("created_at"),
        )
        try:
            self._conn = await self._engine.connect()
            has = await self._conn.run_sync(
                lambda c: {
                    name: sa.inspect(c).has_table(name, schema=self.schema)
                    for name in (self.sessions_table, self.messages_table)
                }
            )
        except Exception as exc:  # noqa: BLE001 - driver errors, reworded
            raise self._unreadable(exc) from None
        where = f" in schema {self.schema!r}" if self.schema else ""
        if not has[self.messages_table]:
            raise MigrationError(
                f"{self.description} has no table {self.messages_table!r}{where}: give the "
                "tables with --sessions-table/--messages-table (and --source-schema)"
            )
        self._has_sessions_table = has[self.sessions_table]

    def _unreadable(self, exc: BaseException) -> MigrationError:
        return MigrationError(f"cannot read {self.description}: {_first_line(exc)}")

    async def sessions(self) -> list[tuple[str, int]]:
        try:
            return await self._read_sessions()
        except SessionError:
            raise
        except Exception as exc:  # noqa: BLE001 - driver errors, reworded
            raise self._unreadable(exc) from None

    async def _read_sessions(self) -> list[tuple[str, int]]:
        import sqlalchemy as sa

        counts: dict[str, int] = {}
        if self._has_sessions_table:
            result = await self._conn.execute(sa.select(self._sessions.c.session_id))
            for (session_id,) in result:
                counts[str(session_id)] = 0
        m = self._messages
        result = await self._conn.execute(
            sa.select(m.c.session_id, sa.func.count()).group_by(m.c.session_id)
        )
        for session_id, count in result:
            counts[str(session_id)] = int(count)
        await self._conn.commit()
        return sorted(counts.items())

    async def rows(self, session_id: str, chunk: int) -> AsyncIterator[list[str]]:
        import sqlalchemy as sa

        m = self._messages
        query = (
            sa.select(m.c.message_data)
            .where(m.c.session_id == session_id)
            .order_by(m.c.created_at.asc(), m.c.id.asc())
        )
        try:
            result = await self._conn.stream(query)
        except Exception as exc:  # noqa: BLE001 - driver errors, reworded
            raise self._unreadable(exc) from None
        try:
            async for part in result.partitions(chunk):
                yield [str(row[0]) for row in part]
        finally:
            await result.close()
            await self._conn.commit()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        engine, self._engine = self._engine, None
        if conn is not None:
            await conn.close()
        if engine is not None:
            await engine.dispose()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


async def open_source(
    url: str,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    schema: str | None = None,
) -> SQLiteFileSource | SQLAlchemySource:
    """Open a migration source from its URL (see the module docstring)."""
    shown = redact(url)
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    if match is None:
        raise ValueError(
            f"source URL {shown!r} has no scheme: sqlite:///path.db for a SQLiteSession "
            "file, or a SQLAlchemy URL such as postgresql+asyncpg://user@host/db"
        )
    scheme = match.group(1).lower()
    source: SQLiteFileSource | SQLAlchemySource
    if scheme == "sqlite":
        parts = urlsplit(url)
        if parts.netloc or not parts.path.startswith("/") or parts.path in ("/", "/:memory:"):
            raise ValueError(
                f"source URL {shown!r}: write sqlite:///relative.db or sqlite:////abs/path.db"
            )
        if schema is not None:
            raise ValueError("--source-schema applies to PostgreSQL sources only")
        source = SQLiteFileSource(unquote(parts.path[1:]), sessions_table, messages_table)
    else:
        if scheme in ("postgresql", "postgres"):
            url = "postgresql+asyncpg://" + url[match.end() :]
        source = SQLAlchemySource(url, sessions_table, messages_table, schema)
    try:
        await source.open()
    except BaseException:
        await source.close()
        raise
    return source
