"""Copy history out of the Agents SDK's own session stores into a txsessions store.

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

Resumable and idempotent, through the core's commit path (:mod:`sessions._bulk`:
retried, shielded, bounded by the store's ``commit_timeout``). Every session gets a
marker batch (no items) the first time it is migrated, then its items in chunks whose
batch ids depend only on the session, the chunk's position and its content. A rerun
resumes each session after the items it already has, and backends skip batch ids
already applied, so an interrupted or repeated migration never duplicates anything. A target session that exists but has no marker was not written by
a migration: it is left alone and reported. At the end, the number of items of every
session is compared between source and target.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

from ._backend import BranchRecord, TurnRecord, TurnUsage
from ._bulk import CHUNK_ITEMS, ChunkWriter
from ._redact import redact
from ._serde import encode_item
from ._store import Store
from ._validate import validate_identifier, validate_session_id
from .errors import InvalidItemError, InvalidSessionIdError, SessionError

__all__ = [
    "MigrationError",
    "MigrationReport",
    "Mismatch",
    "Source",
    "migrate",
    "open_source",
]


Progress = Callable[[int], None]


class MigrationError(SessionError):
    """The source cannot be read (missing file, missing table, bad URL...)."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    session_id: str
    source_items: int
    target_items: int | None  # None: the session is missing in the target
    reason: str = ""

    def describe(self) -> str:
        if self.reason:
            return f"session {self.session_id!r}: {self.reason}"
        target = "missing" if self.target_items is None else f"{self.target_items} items"
        return (
            f"session {self.session_id!r}: source has {self.source_items} items, "
            f"target has {target}"
        )


@dataclass
class MigrationReport:
    sessions: int = 0
    source_rows: int = 0
    copied: int = 0
    already_present: int = 0
    corrupt_skipped: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


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
            raise MigrationError(f"cannot read SQLite database {self.path!r}: {exc}") from None
        try:
            tables = {
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as exc:
            conn.close()
            raise MigrationError(f"cannot read SQLite database {self.path!r}: {exc}") from None
        return conn, tables

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MigrationError("source is not open")
        return self._conn

    async def sessions(self) -> list[tuple[str, int]]:
        try:
            return await asyncio.to_thread(self._sessions)
        except sqlite3.Error as exc:
            raise MigrationError(f"cannot read SQLite database {self.path!r}: {exc}") from None

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
            raise MigrationError(f"cannot read SQLite database {self.path!r}: {exc}") from None

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
            raise MigrationError(f"cannot read SQLite database {self.path!r}: {exc}") from None
        try:
            while True:
                try:
                    page = await asyncio.to_thread(cursor.fetchmany, chunk)
                except sqlite3.Error as exc:
                    raise MigrationError(
                        f"cannot read SQLite database {self.path!r}: {exc}"
                    ) from None
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
            raise MigrationError(f"cannot read {self.description}: {_first_line(exc)}") from None
        where = f" in schema {self.schema!r}" if self.schema else ""
        if not has[self.messages_table]:
            raise MigrationError(
                f"{self.description} has no table {self.messages_table!r}{where}: give the "
                "tables with --sessions-table/--messages-table (and --source-schema)"
            )
        self._has_sessions_table = has[self.sessions_table]

    async def sessions(self) -> list[tuple[str, int]]:
        try:
            return await self._read_sessions()
        except SessionError:
            raise
        except Exception as exc:  # noqa: BLE001 - driver errors, reworded
            raise MigrationError(f"cannot read {self.description}: {_first_line(exc)}") from None

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
            raise MigrationError(f"cannot read {self.description}: {_first_line(exc)}") from None
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


# --------------------------------------------------------------------------- migrate


def _legacy_marker_id(session_id: str) -> str:
    """The marker id written by txsessions 0.1 (before one batch-id scheme for all)."""
    digest = hashlib.sha256(f"mig\0{session_id}\0-1\00".encode()).hexdigest()
    return f"mig-{digest[:40]}"


async def _migrated_before(store: Store[Any], writer: ChunkWriter) -> bool:
    if await writer.has_marker():
        return True
    legacy = _legacy_marker_id(writer.session_id)
    return legacy in await store.backend.applied(writer.session_id, [legacy])


async def migrate(
    source: Source,
    store: Store[Any],
    *,
    progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
    chunk_items: int = CHUNK_ITEMS,
) -> MigrationReport:
    """Copy every session of ``source`` into ``store``; see the module docstring."""
    report = MigrationReport()
    sessions = await source.sessions()
    report.sessions = len(sessions)
    report.source_rows = sum(count for _, count in sessions)
    if on_total is not None:
        on_total(report.source_rows)
    expected: dict[str, int] = {}
    for session_id, rows in sessions:
        copied = await _migrate_session(
            source, store, session_id, rows, report, progress, chunk_items
        )
        if copied is not None:
            expected[session_id] = copied
    for session_id, want in expected.items():
        info = await store.session_info(session_id)
        got = info.item_count if info is not None else None
        if got != want:
            report.mismatches.append(Mismatch(session_id, want, got))
    return report


async def _migrate_session(
    source: Source,
    store: Store[Any],
    session_id: str,
    rows: int,
    report: MigrationReport,
    progress: Progress | None,
    chunk_items: int,
) -> int | None:
    """Copy one session; how many items it should have in the target (``None``: skipped)."""
    try:
        validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        report.mismatches.append(Mismatch(session_id, rows, None, f"not copied: {exc}"))
        if progress is not None:
            progress(rows)
        return None
    writer = ChunkWriter(store, session_id, "mig", chunk_items=chunk_items)
    info = await store.session_info(session_id)
    have = info.item_count if info is not None else 0
    if info is not None and not await _migrated_before(store, writer):
        reason = (
            "already exists in the target and was not written by a migration: "
            "left untouched (delete it there to migrate it)"
        )
        report.mismatches.append(Mismatch(session_id, rows, have, reason))
        if progress is not None:
            progress(rows)
        return None
    if info is not None and have == rows:
        # Fast path for reruns: everything is there (no corrupt rows to account for).
        report.already_present += rows
        if progress is not None:
            progress(rows)
        return rows
    plan = await source.plan(session_id) if isinstance(source, SQLiteFileSource) else None
    if plan is not None:
        if info is None:
            await writer.mark(branch=plan.branch)
        return await _copy_turns(plan, writer, have, report, progress)
    if info is None:
        await writer.mark()
    return await _copy_session(source, writer, have, report, progress)


async def _copy_turns(
    plan: AdvancedPlan,
    writer: ChunkWriter,
    have: int,
    report: MigrationReport,
    progress: Progress | None,
) -> int:
    """Append an AdvancedSQLiteSession branch after its first ``have`` items, one batch
    (one turn record, with the turn's usage) per SDK turn; return how many it has."""
    valid = 0
    writer.position = have
    writer.chunk_items = writer.chunk_bytes = 1 << 62  # a turn is one batch, whole
    for turn in plan.turns:
        texts = [text for text in map(_decode, turn.texts) if text is not None]
        report.corrupt_skipped += len(turn.texts) - len(texts)
        skip = min(len(texts), max(0, have - valid))
        valid += len(texts)
        report.already_present += skip
        for text in texts[skip:]:
            await writer.add(text)
        await writer.flush(TurnRecord(usage=plan.usage.get(turn.number)))
        if progress is not None:
            progress(len(turn.texts))
    report.copied += writer.added
    report.already_present += writer.already_present
    return valid


async def _copy_session(
    source: Source,
    writer: ChunkWriter,
    have: int,
    report: MigrationReport,
    progress: Progress | None,
) -> int:
    """Append the source items after the first ``have``; return how many the source has.

    Chunks start at ``have`` and every ``chunk_items`` after it, and their ids depend
    only on (session, start, content): a rerun, or a concurrent run, that resumes at a
    chunk boundary produces the same ids, which the backend skips.
    """
    valid = 0  # valid source items seen so far
    writer.position = have
    async for page in source.rows(writer.session_id, writer.chunk_items):
        for text in page:
            encoded = _decode(text)
            if encoded is None:
                report.corrupt_skipped += 1
                continue
            valid += 1
            if valid <= have:
                report.already_present += 1
                continue
            await writer.add(encoded)
        if progress is not None:
            progress(len(page))
    await writer.flush()
    report.copied += writer.added
    report.already_present += writer.already_present
    return valid


def _decode(text: str) -> str | None:
    """The stored item in our canonical form, or ``None`` if it is not a JSON object
    (the SDK's sessions skip such rows when reading, so they are not history)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return encode_item(value)
    except InvalidItemError:
        return None
