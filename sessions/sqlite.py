"""SQLite backend (aiosqlite): one file, one connection per store, WAL.

Every commit is one ``BEGIN IMMEDIATE ... COMMIT`` executed start to finish by a
single call on the connection's worker thread, so no cancellation of the caller can
leave a transaction open or half-applied. Commits of different sessions that arrive
while the worker is busy share the next transaction (group commit, see ``_Group``),
each in a savepoint of its own: one fsync and one thread hop for all of them.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from typing import Any, Literal, TypeVar

import aiosqlite

from ._backend import Batch, Row, SessionInfo
from ._core import BufferedSession, RetryPolicy
from ._store import Store
from .errors import ConflictError, StorageError, StoreClosedError, TransientStorageError

__all__ = ["SQLiteBackend", "SQLiteSession", "SQLiteStore"]

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL", "EXTRA"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS txs_schema (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS txs_sessions (
    session_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    item_count INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
-- No index on updated_at: it would be rewritten by every commit, and only purge
-- (an occasional full scan of this small table) looks sessions up by it. Files
-- created before this change had one: it is dropped on open.
DROP INDEX IF EXISTS txs_sessions_updated;
CREATE TABLE IF NOT EXISTS txs_items (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS txs_items_order ON txs_items (session_id, seq);
CREATE TABLE IF NOT EXISTS txs_batches (
    session_id TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    committed_at REAL NOT NULL,
    PRIMARY KEY (session_id, batch_id)
) WITHOUT ROWID;
"""

_SQL_RECORD_BATCH = (
    "INSERT OR IGNORE INTO txs_batches (session_id, batch_id, committed_at) VALUES (?, ?, ?)"
)
_SQL_CLEAR = "DELETE FROM txs_items WHERE session_id = ?"
_SQL_POP = "DELETE FROM txs_items WHERE session_id = ? AND seq = ?"
_SQL_BUMP = (
    "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq) "
    "VALUES (?1, ?2, ?2, ?3, ?3 + 1) "
    "ON CONFLICT (session_id) DO UPDATE SET updated_at = ?2, "
    "item_count = CASE WHEN ?4 THEN ?3 ELSE item_count - ?5 + ?3 END, "
    "next_seq = next_seq + ?3 "
    "RETURNING next_seq - ?3"
)
_SQL_INSERT = "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES (?, ?, ?, ?)"
_SQL_LOAD_ALL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq"
_SQL_LOAD_TAIL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq DESC LIMIT ?"

_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (named in sqlite3 only from Python 3.11)


def _classify(exc: sqlite3.Error, operation: str) -> StorageError:
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    if code is not None and (code & 0xFF) in _BUSY:
        return TransientStorageError(
            f"SQLite {operation}: database busy ({name}): {exc}", outcome_known=True
        )
    return StorageError(f"SQLite {operation} failed ({name}): {exc}")


def _apply_batches(
    conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch], now: float
) -> None:
    """Apply ``batches`` inside the caller's transaction (or savepoint)."""
    for batch in batches:
        if conn.execute(_SQL_RECORD_BATCH, (session_id, batch.batch_id, now)).rowcount == 0:
            continue  # already applied by an earlier attempt
        removed = 0
        if batch.clear:
            conn.execute(_SQL_CLEAR, (session_id,))
        elif batch.pops:
            removed = conn.executemany(_SQL_POP, [(session_id, key) for key in batch.pops]).rowcount
            if removed != len(batch.pops):
                raise ConflictError(
                    f"session {session_id!r}: {len(batch.pops) - removed} of "
                    f"{len(batch.pops)} popped item(s) were already removed by "
                    "another writer"
                )
        n = len(batch.items)
        (base,) = conn.execute(_SQL_BUMP, (session_id, now, n, batch.clear, removed)).fetchone()
        if n:
            conn.executemany(
                _SQL_INSERT,
                [
                    (session_id, base + i, batch.batch_id, text)
                    for i, text in enumerate(batch.items)
                ],
            )


def _apply(conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch]) -> None:
    """One transaction for all batches; runs on the connection's worker thread."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        _apply_batches(conn, session_id, batches, time.time())
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_Outcome = list[BaseException | None]


class _Group:
    """Commits of several sessions that share one transaction (group commit).

    The first commit to arrive while none is waiting for the worker thread opens a
    group and queues it; commits arriving before the worker starts on it join it.
    The worker closes the group (nobody can join any more) and applies every entry in
    one ``BEGIN IMMEDIATE ... COMMIT``, each in a savepoint of its own, so a failing
    entry is rolled back alone while the others are applied. One fsync and one
    thread hop then serve every session that committed meanwhile.
    """

    __slots__ = ("closed", "done", "entries", "lock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, entry: tuple[str, Sequence[Batch]]) -> None:
        self.entries = [entry]
        self.closed = False
        self.lock = threading.Lock()
        self.loop = loop
        self.done: asyncio.Future[_Outcome | BaseException] = loop.create_future()

    def join(self, entry: tuple[str, Sequence[Batch]]) -> int | None:
        """Add ``entry``; its index, or ``None`` if the worker already took the group."""
        with self.lock:
            if self.closed:
                return None
            self.entries.append(entry)
            return len(self.entries) - 1

    def take(self) -> list[tuple[str, Sequence[Batch]]]:
        with self.lock:
            self.closed = True
            entries, self.entries = self.entries, []
            return entries

    def run(self, conn: sqlite3.Connection) -> None:
        """On the worker thread: apply the group, then hand the outcome to the loop."""
        outcome: _Outcome | BaseException
        try:
            outcome = _apply_group(conn, self.take())
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter
            outcome = exc
        try:
            self.loop.call_soon_threadsafe(_resolve, self.done, outcome)
        except RuntimeError:
            pass  # the event loop is closed: nobody is waiting any more


def _resolve(future: asyncio.Future[_Outcome | BaseException], outcome: Any) -> None:
    if not future.done():
        future.set_result(outcome)


def _apply_group(conn: sqlite3.Connection, entries: list[tuple[str, Sequence[Batch]]]) -> _Outcome:
    """Per entry ``None`` (applied) or the exception that rolled it back.

    An exception raised out of here means nothing of the group was applied.
    """
    if len(entries) == 1:
        try:
            _apply(conn, *entries[0])
        except Exception as exc:  # noqa: BLE001 - returned to its waiter
            return [exc]
        return [None]
    now = time.time()
    outcome: _Outcome = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for session_id, batches in entries:
            conn.execute("SAVEPOINT txs_entry")
            try:
                _apply_batches(conn, session_id, batches, now)
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite rolled the whole transaction back (I/O error, full, ...)
                conn.execute("ROLLBACK TO txs_entry")
                conn.execute("RELEASE txs_entry")
                outcome.append(exc)
            else:
                conn.execute("RELEASE txs_entry")
                outcome.append(None)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcome


def _load(conn: sqlite3.Connection, session_id: str, limit: int | None) -> list[Row]:
    if limit is None:
        return conn.execute(_SQL_LOAD_ALL, (session_id,)).fetchall()
    rows = conn.execute(_SQL_LOAD_TAIL, (session_id, limit)).fetchall()
    rows.reverse()
    return rows


def _setup(conn: sqlite3.Connection, synchronous: str, busy_timeout: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    deadline = time.monotonic() + busy_timeout
    while True:  # switching to WAL needs a moment alone with the file
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in _BUSY:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        row = conn.execute("SELECT max(version) FROM txs_schema").fetchone()
        version = row[0] if row else None
        if version is None:
            conn.execute("INSERT INTO txs_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        elif version > SCHEMA_VERSION:
            raise StorageError(
                f"database schema version {version} is newer than this version of "
                f"txsessions supports ({SCHEMA_VERSION}); upgrade txsessions"
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SQLiteBackend:
    """Stores batches in one SQLite file through one aiosqlite connection."""

    atomic = True
    idempotent = True

    def __init__(self, conn: aiosqlite.Connection, raw: sqlite3.Connection, path: str) -> None:
        self._conn: aiosqlite.Connection | None = conn
        self._group: _Group | None = None
        self._raw = raw
        self.path = path

    @classmethod
    async def open(
        cls, path: str, *, synchronous: Synchronous = "FULL", busy_timeout: float = 5.0
    ) -> SQLiteBackend:
        conn = aiosqlite.connect(
            path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
        # A store that is never closed must not keep the interpreter from exiting.
        # Safe: each commit is one call on this thread, and SQLite rolls back any
        # transaction that a killed process left unfinished.
        conn._thread.daemon = True
        try:
            await conn
        except sqlite3.Error as exc:
            # aiosqlite has queued its worker's stop; let it finish while this loop runs.
            await _join(conn)
            raise StorageError(f"cannot open SQLite database {path!r}: {exc}") from exc
        try:
            raw: sqlite3.Connection = await _call(conn, lambda: conn._conn)
            await _call(conn, _setup, raw, synchronous, busy_timeout)
        except BaseException as exc:
            await conn.close()
            await _join(conn)
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"cannot set up SQLite database {path!r}: {exc}") from exc
            raise
        return cls(conn, raw, path)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        conn = self._conn
        if conn is None:
            raise StoreClosedError(f"SQLite store {self.path!r} is closed")
        return await _call(conn, fn, self._raw, *args)

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        try:
            return await self._run(_load, session_id, limit)
        except sqlite3.Error as exc:
            raise _classify(exc, "read") from exc

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        conn = self._conn
        if conn is None or not conn._running:  # never queue work for a stopped worker
            raise StoreClosedError(f"SQLite store {self.path!r} is closed")
        entry = (session_id, batches)
        group = self._group
        index = None if group is None else group.join(entry)
        if group is None or index is None:
            group = self._group = _Group(asyncio.get_running_loop(), entry)
            index = 0
            # Queued without a future of aiosqlite's own: the group resolves ``done``.
            conn._tx.put_nowait((None, partial(group.run, self._raw)))
        outcome = await asyncio.shield(group.done)
        if isinstance(outcome, BaseException):
            error: BaseException | None = outcome
        else:
            error = outcome[index]
        if error is None:
            return
        if isinstance(error, sqlite3.Error):
            raise _classify(error, "commit") from error
        raise error

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        def query(conn: sqlite3.Connection) -> set[str]:
            marks = ",".join("?" * len(batch_ids))
            rows = conn.execute(
                f"SELECT batch_id FROM txs_batches WHERE session_id = ? AND batch_id IN ({marks})",
                (session_id, *batch_ids),
            ).fetchall()
            return {row[0] for row in rows}

        if not batch_ids:
            return set()
        try:
            return await self._run(query)
        except sqlite3.Error as exc:
            raise _classify(exc, "read") from exc

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    # ---------------------------------------------------------------- store operations

    async def _query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        def run(conn: sqlite3.Connection) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        try:
            return await self._run(run)
        except sqlite3.Error as exc:
            raise _classify(exc, "read") from exc

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        rows = await self._query(
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE session_id > ? "
            "ORDER BY session_id LIMIT ?",
            ("" if after is None else after, limit),
        )
        return [_info(row) for row in rows]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        rows = await self._query(
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE session_id = ?", (session_id,)
        )
        return _info(rows[0]) if rows else None

    async def stale_sessions(self, cutoff: datetime, *, limit: int) -> list[SessionInfo]:
        rows = await self._query(
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE updated_at < ? "
            "ORDER BY updated_at LIMIT ?",
            (cutoff.timestamp(), min(limit, 2**62)),
        )
        return [_info(row) for row in rows]

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        return await self._query(
            "SELECT seq, data FROM txs_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, -(2**62) if after is None else after, limit),
        )

    async def prune_batches(self, cutoff: datetime) -> int:
        def run(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM txs_batches WHERE committed_at < ?", (cutoff.timestamp(),)
            )
            return cursor.rowcount

        try:
            return await self._run(run)
        except sqlite3.Error as exc:
            raise _classify(exc, "prune") from exc

    async def delete_session(self, session_id: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM txs_items WHERE session_id = ?", (session_id,))
                conn.execute("DELETE FROM txs_batches WHERE session_id = ?", (session_id,))
                existed = (
                    conn.execute(
                        "DELETE FROM txs_sessions WHERE session_id = ?", (session_id,)
                    ).rowcount
                    > 0
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return existed

        try:
            return await self._run(run)
        except sqlite3.Error as exc:
            raise _classify(exc, "delete") from exc


_INFO_COLUMNS = "session_id, item_count, created_at, updated_at"


def _info(row: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        session_id=row[0],
        item_count=row[1],
        created_at=datetime.fromtimestamp(row[2], timezone.utc),
        updated_at=datetime.fromtimestamp(row[3], timezone.utc),
    )


async def _join(conn: aiosqlite.Connection, timeout: float = 5.0) -> None:
    """Wait (without blocking the loop) until the connection's worker thread has ended."""
    await asyncio.to_thread(conn._thread.join, timeout)


async def _call(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the connection's worker thread in one hop.

    aiosqlite runs every call through ``Connection._execute``; using it directly lets a
    whole transaction run as one call, so it can neither be torn by a cancellation nor
    pay a thread hop per statement.
    """
    result: T = await conn._execute(fn, *args)  # type: ignore[no-untyped-call]
    return result


class SQLiteStore(Store["SQLiteSession"]):
    """One SQLite database shared by many sessions (one connection in all).

    ``store = await SQLiteStore.open("chat.db")``, then ``store.session(session_id)``.
    """

    def __init__(self, backend: SQLiteBackend, *, retry: RetryPolicy | None = None) -> None:
        super().__init__(backend, retry=retry)
        self.session_class = SQLiteSession
        self.sqlite = backend

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
    ) -> SQLiteStore:
        """Open (creating if needed) the database at ``path``.

        ``synchronous="FULL"`` (default) makes every commit durable across power loss;
        ``"NORMAL"`` trades the last commits on power loss (never on a process crash)
        for speed. ``busy_timeout`` is how long a commit waits for other writers.
        """
        db_path = _validate_path(path)
        _validate_synchronous(synchronous)
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
            raise TypeError(f"busy_timeout must be a number, got {type(busy_timeout).__name__}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0, got {busy_timeout}")
        backend = await SQLiteBackend.open(
            db_path, synchronous=synchronous, busy_timeout=float(busy_timeout)
        )
        return cls(backend, retry=retry)

    @property
    def path(self) -> str:
        return self.sqlite.path


def _validate_synchronous(value: object) -> None:
    if value not in ("FULL", "NORMAL", "EXTRA"):
        raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {value!r}")


def _validate_path(path: object) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"db_path must be a str or os.PathLike, got {type(path).__name__}")
    if not path:
        raise ValueError("db_path must not be empty (use ':memory:' for an in-memory database)")
    return path


class SQLiteSession(BufferedSession):
    """A buffered session stored in SQLite.

    ``SQLiteSession(session_id, "chat.db")`` opens its own connection on first use and
    closes it in :meth:`close`; fine for scripts. Servers should share one
    :class:`SQLiteStore` and call ``store.session(session_id)``.
    """

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] = ":memory:",
        *,
        autocommit: bool = False,
        session_settings: Any = None,
        synchronous: Synchronous = "FULL",
        store: SQLiteStore | None = None,
    ) -> None:
        if store is not None:
            super().__init__(
                session_id, store=store, autocommit=autocommit, session_settings=session_settings
            )
            return
        path = _validate_path(db_path)
        _validate_synchronous(synchronous)

        async def factory() -> Store[Any]:
            return await SQLiteStore.open(path, synchronous=synchronous)

        super().__init__(
            session_id,
            store_factory=factory,
            autocommit=autocommit,
            session_settings=session_settings,
        )
