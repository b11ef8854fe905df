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

and ``durability()``, the settings that decide what a commit costs, read back from the
subject's own connection (never assumed).

Two kinds of floor: *bare* floors insert the item rows only (one table, one index);
*same-work* floors write by hand exactly the rows our commit writes (the batch-id
record, the session row that hands out the order, the items) into tables created by
our own store, in one transaction: the limit for any implementation that keeps our
guarantees.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import uuid
from typing import Any

import orjson

from ._data import Item

SQLITE = "sqlite"
POSTGRES = "postgres"


class Subject:
    """One implementation under test, bound to one database."""

    key: str = ""
    label: str = ""
    backend: str = SQLITE
    kind: str = "anchor"  # "ours" | "anchor" | "floor"
    #: what the floor writes: "bare" (item rows only) or "same" (our rows); "" otherwise
    work: str = ""
    #: the workloads this subject takes part in
    workloads: frozenset[str] = frozenset("abcd")

    async def open(self) -> None:
        pass

    async def durability(self) -> dict[str, str]:
        """Durability settings read back from this subject's own connection(s)."""
        return {}

    async def transactions(self, sids: list[str]) -> tuple[int, int] | None:
        """``(batches, transactions)`` that stored the commits of ``sids``, when the
        subject's rows tell (our ``txs_batches.committed_at`` is one value per
        transaction); ``None`` when it writes one transaction per commit by design."""
        return None

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


# ----------------------------------------------------------------------------- settings

_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
PG_SETTINGS = (
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "full_page_writes",
    "synchronous_standby_names",
)
_PG_SETTINGS_SQL = "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])"


def sqlite_pragmas(conn: sqlite3.Connection) -> dict[str, str]:
    """``journal_mode`` and ``synchronous`` of one sqlite3 connection."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal).upper(), "synchronous": _SYNCHRONOUS.get(sync, str(sync))}


def merge_readings(readings: list[dict[str, str]]) -> dict[str, str]:
    """One dict for several connections: distinct values joined by ``/``."""
    merged: dict[str, list[str]] = {}
    for reading in readings:
        for name, value in reading.items():
            values = merged.setdefault(name, [])
            if value not in values:
                values.append(value)
    out = {name: "/".join(values) for name, values in merged.items()}
    out["connections_read"] = str(len(readings))
    return out


async def pg_settings(conn: Any) -> dict[str, str]:
    """PostgreSQL's durability settings as seen by one asyncpg connection."""
    rows = await conn.fetch(_PG_SETTINGS_SQL, list(PG_SETTINGS))
    found = {row[0]: row[1] for row in rows}
    return {name: found.get(name, "?") or "''" for name in PG_SETTINGS}


async def aiosqlite_pragmas(conn: Any) -> dict[str, str]:
    """``journal_mode`` and ``synchronous`` of one aiosqlite connection."""
    journal = (await conn.execute_fetchall("PRAGMA journal_mode"))[0][0]
    sync = (await conn.execute_fetchall("PRAGMA synchronous"))[0][0]
    return {"journal_mode": str(journal).upper(), "synchronous": _SYNCHRONOUS.get(sync, str(sync))}


async def engine_settings(engine: Any, backend: str) -> dict[str, str]:
    """Durability settings read back from a connection of a SQLAlchemy async engine's pool
    (configured like every other one)."""
    async with engine.connect() as conn:
        if backend == SQLITE:
            journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
            return {
                "journal_mode": str(journal).upper(),
                "synchronous": _SYNCHRONOUS.get(sync, str(sync)),
            }
        names = ", ".join(f"'{name}'" for name in PG_SETTINGS)
        rows = (
            await conn.exec_driver_sql(
                f"SELECT name, setting FROM pg_settings WHERE name IN ({names})"
            )
        ).all()
    found = {row[0]: row[1] for row in rows}
    return {name: found.get(name, "?") or "''" for name in PG_SETTINGS}


def _count_transactions(conn: sqlite3.Connection, sids: list[str]) -> tuple[int, int]:
    marks = ",".join("?" * len(sids))
    row = conn.execute(
        f"SELECT count(*), count(DISTINCT committed_at) FROM txs_batches "
        f"WHERE session_id IN ({marks})",
        sids,
    ).fetchone()
    return int(row[0]), int(row[1])


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

    async def durability(self) -> dict[str, str]:
        # The store's own connection, on its own worker thread.
        reading: dict[str, str] = await self.store.backend.run(sqlite_pragmas)
        return merge_readings([reading])

    async def transactions(self, sids: list[str]) -> tuple[int, int] | None:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            return _count_transactions(conn, sids)
        finally:
            conn.close()


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

    async def durability(self) -> dict[str, str]:
        async with self.store.pool.acquire() as conn:
            return merge_readings([await pg_settings(conn)])

    async def transactions(self, sids: list[str]) -> tuple[int, int] | None:
        # committed_at is now(): the start of the transaction that recorded the batch.
        async with self.store.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT count(*), count(DISTINCT committed_at) FROM "
                f'"{self.schema}".txs_batches WHERE session_id = ANY($1::text[])',
                sids,
            )
        return int(row[0]), int(row[1])


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

    async def durability(self) -> dict[str, str]:
        # Every connection the live session objects opened (one per worker thread;
        # ``_connections`` is the SDK's own registry of them).
        sessions = list(self._sessions.values())
        if not sessions:
            await self.read("__bench_durability__", 1)
            sessions = list(self._sessions.values())
        conns = [conn for session in sessions for conn in list(session._connections)]
        readings = [sqlite_pragmas(conn) for conn in conns]
        await self.release("__bench_durability__")
        return merge_readings(readings)

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

    async def durability(self) -> dict[str, str]:
        # One aiosqlite connection per session object (the SDK's ``_connection``).
        if not self._sessions:
            await self.read("__bench_durability__", 1)
        conns = [s._connection for s in self._sessions.values() if s._connection is not None]
        readings = [await aiosqlite_pragmas(conn) for conn in conns]
        await self.release("__bench_durability__")
        return merge_readings(readings)

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

    async def durability(self) -> dict[str, str]:
        return merge_readings([await engine_settings(self.engine, self.backend)])

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
    """The floors' encoding: orjson, as our sessions encode staged items (a floor does
    the least work that writes the rows; json would be slower)."""
    return [orjson.dumps(item).decode() for item in items]


class RawSQLite(Subject):
    """Plain ``sqlite3`` called right in the event loop: WAL, synchronous=FULL, one
    ``BEGIN IMMEDIATE ... COMMIT`` per turn. No thread hop, no bookkeeping: the floor."""

    key = "raw_sqlite3"
    label = "raw sqlite3 (floor)"
    backend = SQLITE
    kind = "floor"
    work = "bare"
    _tail = _FLOOR_TAIL
    _all = _FLOOR_ALL
    _schema: tuple[str, ...] = _FLOOR_SQLITE_SCHEMA

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        await self._tables_first()
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 5000")
        for statement in self._schema:
            conn.execute(statement)
        self.conn = conn

    async def _tables_first(self) -> None:
        """Same-work floors: let our own store create the tables first."""

    async def durability(self) -> dict[str, str]:
        assert self.conn is not None
        return merge_readings([sqlite_pragmas(self.conn)])

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
            rows = conn.execute(self._all, (sid,)).fetchall()
        else:
            rows = conn.execute(self._tail, (sid, limit)).fetchall()
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
    work = "bare"
    _tail = _FLOOR_TAIL
    _all = _FLOOR_ALL
    _schema: tuple[str, ...] = _FLOOR_SQLITE_SCHEMA

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: Any = None
        self._lock = asyncio.Lock()  # one shared connection: transactions must not interleave

    async def open(self) -> None:
        import aiosqlite

        await self._tables_first()
        self.conn = await aiosqlite.connect(self.path, isolation_level=None)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = FULL")
        await self.conn.execute("PRAGMA busy_timeout = 5000")
        for statement in self._schema:
            await self.conn.execute(statement)

    async def _tables_first(self) -> None:
        """Same-work floors: let our own store create the tables first."""

    async def durability(self) -> dict[str, str]:
        return merge_readings([await aiosqlite_pragmas(self.conn)])

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
            rows = await self.conn.execute_fetchall(self._all, (sid,))
        else:
            rows = list(await self.conn.execute_fetchall(self._tail, (sid, limit)))
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
    work = "bare"

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
        await self._tables()

    async def _tables(self) -> None:
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

    async def durability(self) -> dict[str, str]:
        async with self.pool.acquire() as conn:
            return merge_readings([await pg_settings(conn)])

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


# ----------------------------------------------------------------------------- same-work floors

# What they write is recorded in each run's results: _data.SAME_WORK_ROWS.
#
# Hand-written SQL that writes exactly the rows our commit writes, into tables that our
# own store created (so the same columns, keys and indexes): the batch-id record, the
# session row (which hands out the contiguous order and counts the session's version),
# the turn record (the items' range, docs/turns.md), the items. One transaction per
# commit, nothing else: no staging, no retry, no shielding, no validation.

_SAME_RECORD = (
    "INSERT OR IGNORE INTO txs_batches (session_id, batch_id, committed_at) VALUES (?, ?, ?)"
)
# The session row and the turn record carry the turn index (schema version 7): the
# session's visible records and their items, the record's item count.
_SAME_BUMP = (
    "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq, "
    "version, turn_count, turn_items) VALUES (:sid, :now, :now, :n, :n + 1, 1, 1, :n) "
    "ON CONFLICT (session_id) DO UPDATE SET updated_at = max(updated_at, :now), "
    "item_count = item_count + :n, next_seq = next_seq + :n, version = version + 1, "
    "turn_count = turn_count + 1, turn_items = turn_items + :n RETURNING next_seq - :n"
)
_SAME_TURN = (
    "INSERT INTO txs_turns (session_id, first_seq, last_seq, created_at, items) "
    "VALUES (?, ?, ?, ?, ?)"
)
_SAME_INSERT = "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES (?, ?, ?, ?)"
_SAME_TAIL = "SELECT data FROM txs_items WHERE session_id = ? ORDER BY seq DESC LIMIT ?"
_SAME_ALL = "SELECT data FROM txs_items WHERE session_id = ? ORDER BY seq"


def _same_work_sqlite(conn: sqlite3.Connection, sid: str, texts: list[str]) -> None:
    batch_id = uuid.uuid4().hex
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_SAME_RECORD, (sid, batch_id, now))
        (base,) = conn.execute(_SAME_BUMP, {"sid": sid, "now": now, "n": len(texts)}).fetchone()
        conn.executemany(
            _SAME_INSERT, [(sid, base + i, batch_id, text) for i, text in enumerate(texts)]
        )
        conn.execute(_SAME_TURN, (sid, base, base + len(texts) - 1, now, len(texts)))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


async def _our_sqlite_tables(path: str) -> None:
    """Create our tables in ``path`` with our own store (public API), then close it."""
    from sessions import SQLiteStore

    store = await SQLiteStore.open(path)
    await store.close()


class _SameWork:
    """Mixin of the SQLite same-work floors: our tables, created by our own store."""

    path: str
    work = "same"
    workloads = frozenset("abc")
    _tail = _SAME_TAIL
    _all = _SAME_ALL
    _schema: tuple[str, ...] = ()

    async def _tables_first(self) -> None:
        await _our_sqlite_tables(self.path)


class RawSQLiteSame(_SameWork, RawSQLite):
    """Plain ``sqlite3`` in the event loop writing our rows: the loop-blocking floor of
    the same work."""

    key = "raw_sqlite3_same"
    label = "raw sqlite3, our rows (floor)"

    def _write(self, sid: str, texts: list[str]) -> None:
        assert self.conn is not None
        _same_work_sqlite(self.conn, sid, texts)


class RawAiosqliteOneHopSame(_SameWork, RawAiosqlite):
    """Plain ``aiosqlite`` writing our rows in one call on its worker thread: the floor
    of the same work for a design that keeps the event loop free (one hop per commit)."""

    key = "raw_aiosqlite_1hop_same"
    label = "raw aiosqlite, 1 hop, our rows (floor)"

    async def _write(self, sid: str, texts: list[str]) -> None:
        await self.conn._execute(_same_work_sqlite, self.conn._conn, sid, texts)


_SAME_PG_APPEND = """
WITH b AS (
    INSERT INTO same_batches (session_id, batch_id, committed_at)
    VALUES ($1, $2, now())
    ON CONFLICT DO NOTHING
    RETURNING batch_id
), s AS (
    INSERT INTO same_sessions AS t (session_id, created_at, updated_at, item_count, next_seq,
                                    version, turn_count, turn_items)
    SELECT $1, now(), now(), $4::bigint, $4::bigint + 1, 1, 1, $4::bigint FROM b
    ON CONFLICT (session_id) DO UPDATE SET
        updated_at = GREATEST(t.updated_at, excluded.updated_at),
        item_count = t.item_count + excluded.item_count,
        turn_count = t.turn_count + 1,
        turn_items = t.turn_items + excluded.turn_items,
        next_seq = t.next_seq + excluded.item_count,
        version = t.version + 1
    RETURNING t.next_seq - $4::bigint AS base
), r AS (
    INSERT INTO same_turns (session_id, first_seq, last_seq, created_at, items)
    SELECT $1, s.base, s.base + $4::bigint - 1, now(), $4::bigint FROM s
)
INSERT INTO same_items (session_id, seq, batch_id, data)
SELECT $1, s.base + u.ord - 1, $2, u.data
FROM s CROSS JOIN unnest($3::text[]) WITH ORDINALITY AS u(data, ord)
"""


class RawAsyncpgSame(RawAsyncpg):
    """Plain ``asyncpg`` writing our rows in one statement per commit (data-modifying
    CTEs: batch record, session row, turn record, items), into tables our store created with the
    prefix ``same_``: the one-statement floor of the same work."""

    key = "raw_asyncpg_same"
    label = "raw asyncpg, our rows (floor)"
    work = "same"
    workloads = frozenset("abc")

    async def _tables(self) -> None:
        from sessions.postgres import PostgresStore

        store = await PostgresStore.open(
            self.dsn, schema=self.schema, table_prefix="same_", min_size=1, max_size=1
        )
        await store.close()

    async def _write(self, sid: str, texts: list[str]) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(_SAME_PG_APPEND, sid, uuid.uuid4().hex, texts, len(texts))

    async def read(self, sid: str, limit: int | None) -> list[Any]:
        async with self.pool.acquire() as conn:
            if limit is None:
                rows = await conn.fetch(
                    "SELECT data FROM same_items WHERE session_id = $1 ORDER BY seq", sid
                )
            else:
                rows = await conn.fetch(
                    "SELECT data FROM same_items WHERE session_id = $1 ORDER BY seq DESC LIMIT $2",
                    sid,
                    limit,
                )
                rows.reverse()
        return [json.loads(row[0]) for row in rows]


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
        RawSQLiteSame(path("rawsame")),
        RawAiosqliteOneHopSame(path("rawaio1same")),
        SDKSQLite(path("sdk")),
        SDKAsyncSQLite(path("sdkasync")),
        SDKSQLAlchemy(f"sqlite+aiosqlite:///{path('sqla')}", SQLITE),
    ]
    return [s for s in made if _wanted(s, tag, only)]


def _wanted(subject: Subject, tag: str, only: set[str] | None) -> bool:
    if only is not None:
        return subject.key in only
    return tag in subject.workloads


def postgres_subjects(
    dsn: str,
    schema: str,
    pool: int,
    tag: str,
    *,
    data_type: str = "text",
    only: set[str] | None = None,
) -> list[Subject]:
    made: list[Subject] = [
        OursPostgres(dsn, schema, pool),
        RawAsyncpg(dsn, schema, pool, data_type=data_type),
        RawAsyncpgSame(dsn, schema, pool),
        SDKSQLAlchemy(
            sqlalchemy_pg_url(dsn),
            POSTGRES,
            pool_size=pool,
            max_overflow=0,
            connect_args={"server_settings": {"search_path": schema}},
        ),
    ]
    return [s for s in made if _wanted(s, tag, only)]


async def pg_schema(dsn: str, schema: str, *, drop: bool) -> None:
    """Create (or drop, with everything in it) a schema of the benchmarks' own."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        if drop:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        else:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    finally:
        await conn.close()


def sqlalchemy_pg_url(dsn: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+asyncpg://" + dsn[len(prefix) :]
    raise ValueError(f"not a postgresql:// DSN: {dsn!r}")
