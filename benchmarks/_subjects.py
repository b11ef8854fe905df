"""What is measured: this package, the SDK's own sessions, and raw-driver floors.

Every subject offers the same four operations so the workloads can treat them alike:

* ``turn(sid, items)``: store one turn durably (our sessions: ``add_items`` then
  ``commit()``; the SDK's: ``add_items``, which is its own transaction; floors: one
  transaction).
* ``run(sid, turns)``: store a multi-turn agent run. Our buffered sessions stage every
  turn and commit once (their natural use); the SDK's sessions write each turn as
  they must; floors write the run in one transaction.
* ``read(sid, limit)``: ``get_items(limit)``.
* ``release(sid)``: drop (and close) a per-session object.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from typing import Any

from ._data import Item

SQLITE = "sqlite"
POSTGRES = "postgres"


class Subject:
    """One implementation under test, bound to one database."""

    key: str = ""
    label: str = ""
    backend: str = SQLITE
    kind: str = "anchor"  # "ours" | "anchor" | "floor"

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def turn(self, sid: str, items: list[Item]) -> None:
        raise NotImplementedError

    async def run(self, sid: str, turns: list[list[Item]]) -> None:
        for items in turns:
            await self.turn(sid, items)

    async def bulk(self, sid: str, items: list[Item]) -> None:
        """Append many items at once (setting up history, not measured)."""
        await self.turn(sid, items)

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        raise NotImplementedError

    async def release(self, sid: str) -> None:
        pass

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        """Give every session in ``sids`` the same ``items`` (setting up a big database,
        not measured). The default writes through the subject's own API, 20 at a time."""

        async def one(sid: str) -> None:
            await self.turn(sid, items)
            await self.release(sid)

        for i in range(0, len(sids), 20):
            await asyncio.gather(*(one(sid) for sid in sids[i : i + 20]))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"


# ----------------------------------------------------------------------------- ours


class _Ours(Subject):
    kind = "ours"

    def __init__(self) -> None:
        self.store: Any = None
        self._sessions: dict[str, Any] = {}

    def _session(self, sid: str) -> Any:
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = self.store.session(sid)
        return session

    async def turn(self, sid: str, items: list[Item]) -> None:
        session = self._session(sid)
        await session.add_items(items)
        await session.commit()

    async def run(self, sid: str, turns: list[list[Item]]) -> None:
        session = self._session(sid)
        for items in turns:
            await session.add_items(items)
        await session.commit()

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        result: list[Any] = await self._session(sid).get_items(limit)
        return result

    async def release(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        for sid in list(self._sessions):
            await self.release(sid)
        if self.store is not None:
            await self.store.close()
            self.store = None


class OursSQLite(_Ours):
    key = "ours_sqlite"
    label = "txsessions SQLiteStore"
    backend = SQLITE

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    async def open(self) -> None:
        from sessions import SQLiteStore

        self.store = await SQLiteStore.open(self.path)


class OursPostgres(_Ours):
    key = "ours_pg"
    label = "txsessions PostgresStore"
    backend = POSTGRES

    def __init__(self, dsn: str, schema: str, pool: int) -> None:
        super().__init__()
        self.dsn, self.schema, self.pool = dsn, schema, pool

    async def open(self) -> None:
        from sessions.postgres import PostgresStore

        self.store = await PostgresStore.open(
            self.dsn, schema=self.schema, min_size=self.pool, max_size=self.pool
        )


# ----------------------------------------------------------------------------- SDK anchors


def _sdk_sqlite_populate(path: str, sids: list[str], items: list[Item], **dumps: Any) -> None:
    """Write rows exactly as the SDK's SQLite sessions do (``agent_sessions`` and
    ``agent_messages``), in one transaction: database set-up only."""
    texts = [json.dumps(item, **dumps) for item in items]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)", [(s,) for s in sids]
        )
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [(sid, text) for sid in sids for text in texts],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


class SDKSQLite(Subject):
    """``agents.SQLiteSession`` (sync sqlite3 on worker threads), one object per session."""

    key = "sdk_sqlite"
    label = "SDK SQLiteSession"
    backend = SQLITE

    def __init__(self, path: str) -> None:
        self.path = path
        self._sessions: dict[str, Any] = {}

    async def open(self) -> None:
        await self.read("__bench_setup__", 1)  # creates the tables
        await self.release("__bench_setup__")

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        _sdk_sqlite_populate(self.path, sids, items)

    def _session(self, sid: str) -> Any:
        session = self._sessions.get(sid)
        if session is None:
            from agents import SQLiteSession

            session = self._sessions[sid] = SQLiteSession(sid, self.path)
        return session

    async def turn(self, sid: str, items: list[Item]) -> None:
        await self._session(sid).add_items(items)

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        result: list[Any] = await self._session(sid).get_items(limit)
        return result

    async def release(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            session.close()

    async def close(self) -> None:
        for sid in list(self._sessions):
            await self.release(sid)


class SDKAsyncSQLite(Subject):
    """``agents.extensions.memory.AsyncSQLiteSession`` (one aiosqlite connection per session)."""

    key = "sdk_async_sqlite"
    label = "SDK AsyncSQLiteSession"
    backend = SQLITE

    def __init__(self, path: str) -> None:
        self.path = path
        self._sessions: dict[str, Any] = {}

    def _session(self, sid: str) -> Any:
        session = self._sessions.get(sid)
        if session is None:
            from agents.extensions.memory import AsyncSQLiteSession

            session = self._sessions[sid] = AsyncSQLiteSession(sid, self.path)
        return session

    async def open(self) -> None:
        await self.read("__bench_setup__", 1)  # creates the tables
        await self.release("__bench_setup__")

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        _sdk_sqlite_populate(self.path, sids, items)

    async def turn(self, sid: str, items: list[Item]) -> None:
        await self._session(sid).add_items(items)

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        result: list[Any] = await self._session(sid).get_items(limit)
        return result

    async def release(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        for sid in list(self._sessions):
            await self.release(sid)


class SDKSQLAlchemy(Subject):
    """``agents.extensions.memory.SQLAlchemySession`` on one shared async engine."""

    def __init__(self, url: str, backend: str, **engine_kwargs: Any) -> None:
        self.url = url
        self.backend = backend
        self.key = f"sdk_sqlalchemy_{'sqlite' if backend == SQLITE else 'pg'}"
        driver = "aiosqlite" if backend == SQLITE else "asyncpg"
        self.label = f"SDK SQLAlchemySession ({driver})"
        self.engine_kwargs = engine_kwargs
        self.engine: Any = None
        self._sessions: dict[str, Any] = {}
        self._tables_ready = False

    async def open(self) -> None:
        from agents.extensions.memory import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(self.url, **self.engine_kwargs)
        # Create the tables once, as a deployment would (migrations), not per session.
        probe = SQLAlchemySession("__bench_setup__", engine=self.engine, create_tables=True)
        await probe.get_items(1)
        self._tables_ready = True

    def _session(self, sid: str) -> Any:
        session = self._sessions.get(sid)
        if session is None:
            from agents.extensions.memory import SQLAlchemySession

            session = self._sessions[sid] = SQLAlchemySession(sid, engine=self.engine)
        return session

    async def turn(self, sid: str, items: list[Item]) -> None:
        await self._session(sid).add_items(items)

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        result: list[Any] = await self._session(sid).get_items(limit)
        return result

    async def release(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        from sqlalchemy import text

        texts = [json.dumps(item, separators=(",", ":")) for item in items]
        async with self.engine.begin() as conn:
            await conn.execute(
                text("INSERT INTO agent_sessions (session_id) VALUES (:s) ON CONFLICT DO NOTHING"),
                [{"s": sid} for sid in sids],
            )
            await conn.execute(
                text("INSERT INTO agent_messages (session_id, message_data) VALUES (:s, :d)"),
                [{"s": sid, "d": t} for sid in sids for t in texts],
            )

    async def close(self) -> None:
        self._sessions.clear()
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None


# ----------------------------------------------------------------------------- floors

_FLOOR_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS floor_items ("
    " id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS floor_items_session ON floor_items (session_id, id)",
)
_FLOOR_INSERT = "INSERT INTO floor_items (session_id, data) VALUES (?, ?)"
_FLOOR_TAIL = "SELECT data FROM floor_items WHERE session_id = ? ORDER BY id DESC LIMIT ?"
_FLOOR_ALL = "SELECT data FROM floor_items WHERE session_id = ? ORDER BY id"


def _dumps(items: list[Item]) -> list[str]:
    return [json.dumps(item, separators=(",", ":")) for item in items]


class RawSQLite(Subject):
    """Plain ``sqlite3`` called right in the event loop: WAL, synchronous=FULL, one
    ``BEGIN IMMEDIATE ... COMMIT`` per turn. No thread hop, no bookkeeping: the floor."""

    key = "raw_sqlite3"
    label = "raw sqlite3 (floor)"
    backend = SQLITE
    kind = "floor"

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 5000")
        for statement in _FLOOR_SQLITE_SCHEMA:
            conn.execute(statement)
        self.conn = conn

    def _write(self, sid: str, texts: list[str]) -> None:
        conn = self.conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_FLOOR_INSERT, [(sid, text) for text in texts])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def turn(self, sid: str, items: list[Item]) -> None:
        self._write(sid, _dumps(items))

    async def run(self, sid: str, turns: list[list[Item]]) -> None:
        self._write(sid, _dumps([item for items in turns for item in items]))

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        conn = self.conn
        assert conn is not None
        texts = _dumps(items)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_FLOOR_INSERT, [(sid, t) for sid in sids for t in texts])
        conn.execute("COMMIT")

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        conn = self.conn
        assert conn is not None
        if limit is None:
            rows = conn.execute(_FLOOR_ALL, (sid,)).fetchall()
        else:
            rows = conn.execute(_FLOOR_TAIL, (sid, limit)).fetchall()
            rows.reverse()
        return [json.loads(row[0]) for row in rows]

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class RawAiosqlite(Subject):
    """Plain ``aiosqlite``, one shared connection, one transaction per turn
    (``BEGIN IMMEDIATE``, ``executemany``, ``COMMIT``: three awaits)."""

    key = "raw_aiosqlite"
    label = "raw aiosqlite (floor)"
    backend = SQLITE
    kind = "floor"

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: Any = None
        self._lock = asyncio.Lock()  # one shared connection: transactions must not interleave

    async def open(self) -> None:
        import aiosqlite

        self.conn = await aiosqlite.connect(self.path, isolation_level=None)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = FULL")
        await self.conn.execute("PRAGMA busy_timeout = 5000")
        for statement in _FLOOR_SQLITE_SCHEMA:
            await self.conn.execute(statement)

    async def _write(self, sid: str, texts: list[str]) -> None:
        async with self._lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                await self.conn.executemany(_FLOOR_INSERT, [(sid, text) for text in texts])
                await self.conn.execute("COMMIT")
            except BaseException:
                await self.conn.execute("ROLLBACK")
                raise

    async def turn(self, sid: str, items: list[Item]) -> None:
        await self._write(sid, _dumps(items))

    async def run(self, sid: str, turns: list[list[Item]]) -> None:
        await self._write(sid, _dumps([item for items in turns for item in items]))

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        texts = _dumps(items)
        async with self._lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            await self.conn.executemany(_FLOOR_INSERT, [(sid, t) for sid in sids for t in texts])
            await self.conn.execute("COMMIT")

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        if limit is None:
            rows = await self.conn.execute_fetchall(_FLOOR_ALL, (sid,))
        else:
            rows = list(await self.conn.execute_fetchall(_FLOOR_TAIL, (sid, limit)))
            rows.reverse()
        return [json.loads(row[0]) for row in rows]

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


class RawAiosqliteOneHop(RawAiosqlite):
    """Plain ``aiosqlite`` with the whole transaction run as ONE call on its worker
    thread (what our SQLite backend does): the floor for a backend that keeps the
    event loop free, paying exactly one thread hop per commit."""

    key = "raw_aiosqlite_1hop"
    label = "raw aiosqlite, 1 hop (floor)"

    async def _write(self, sid: str, texts: list[str]) -> None:
        rows = [(sid, text) for text in texts]

        def transaction() -> None:
            raw = self.conn._conn
            raw.execute("BEGIN IMMEDIATE")
            try:
                raw.executemany(_FLOOR_INSERT, rows)
                raw.execute("COMMIT")
            except BaseException:
                raw.execute("ROLLBACK")
                raise

        await self.conn._execute(transaction)


class RawAsyncpg(Subject):
    """Plain ``asyncpg`` pool: one ``INSERT ... SELECT FROM unnest($2)`` per turn
    (a single statement is its own transaction)."""

    key = "raw_asyncpg"
    label = "raw asyncpg (floor)"
    backend = POSTGRES
    kind = "floor"

    def __init__(self, dsn: str, schema: str, pool: int, data_type: str = "text") -> None:
        self.dsn, self.schema, self.pool_size = dsn, schema, pool
        self.data_type = data_type
        self.pool: Any = None

    async def open(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        async def no_reset(conn: Any) -> None:
            # A true floor: no reset query on release (txsessions skips it for its own
            # idle connections too), so the floor pays one round trip per turn.
            return None

        self.pool = await asyncpg.create_pool(
            self.dsn,
            min_size=self.pool_size,
            max_size=self.pool_size,
            server_settings={"search_path": self.schema},
            reset=no_reset,
        )
        async with self.pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS floor_items ("
                " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                f" session_id TEXT NOT NULL, data {self.data_type} NOT NULL)"
            )
            await conn.execute(
                "CREATE INDEX IF NOT EXISTS floor_items_session ON floor_items (session_id, id)"
            )
        cast = "::text" if self.data_type == "text" else f"::{self.data_type}"
        self._insert = f"INSERT INTO floor_items (session_id, data) SELECT $1, d{cast} FROM unnest($2::text[]) AS d"

    async def _write(self, sid: str, texts: list[str]) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(self._insert, sid, texts)

    async def turn(self, sid: str, items: list[Item]) -> None:
        await self._write(sid, _dumps(items))

    async def run(self, sid: str, turns: list[list[Item]]) -> None:
        await self._write(sid, _dumps([item for items in turns for item in items]))

    async def populate(self, sids: list[str], items: list[Item]) -> None:
        texts = _dumps(items)
        async with self.pool.acquire() as conn:
            await conn.executemany(self._insert, [(sid, texts) for sid in sids])

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        async with self.pool.acquire() as conn:
            if limit is None:
                rows = await conn.fetch(
                    "SELECT data::text FROM floor_items WHERE session_id = $1 ORDER BY id", sid
                )
            else:
                rows = await conn.fetch(
                    "SELECT data::text FROM floor_items WHERE session_id = $1 "
                    "ORDER BY id DESC LIMIT $2",
                    sid,
                    limit,
                )
                rows.reverse()
        return [json.loads(row[0]) for row in rows]

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None


# ----------------------------------------------------------------------------- factories


def sqlite_subjects(directory: str, tag: str, *, only: set[str] | None = None) -> list[Subject]:
    """One fresh database file per subject (same data, no cross-talk)."""

    def path(name: str) -> str:
        return os.path.join(directory, f"{tag}-{name}.db")

    made: list[Subject] = [
        OursSQLite(path("ours")),
        RawSQLite(path("raw")),
        RawAiosqlite(path("rawaio")),
        RawAiosqliteOneHop(path("rawaio1")),
        SDKSQLite(path("sdk")),
        SDKAsyncSQLite(path("sdkasync")),
        SDKSQLAlchemy(f"sqlite+aiosqlite:///{path('sqla')}", SQLITE),
    ]
    return [s for s in made if only is None or s.key in only]


def postgres_subjects(
    dsn: str, schema: str, pool: int, *, data_type: str = "text", only: set[str] | None = None
) -> list[Subject]:
    made: list[Subject] = [
        OursPostgres(dsn, schema, pool),
        RawAsyncpg(dsn, schema, pool, data_type=data_type),
        SDKSQLAlchemy(
            sqlalchemy_pg_url(dsn),
            POSTGRES,
            pool_size=pool,
            max_overflow=0,
            connect_args={"server_settings": {"search_path": schema}},
        ),
    ]
    return [s for s in made if only is None or s.key in only]


def sqlalchemy_pg_url(dsn: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+asyncpg://" + dsn[len(prefix) :]
    raise ValueError(f"not a postgresql:// DSN: {dsn!r}")
