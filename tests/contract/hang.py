"""Real database hangs in the middle of a commit, for the bounded-shield tests.

``where="first"``: the database stops at the commit's first write (the batch record).
``where="middle"``: it stops between two statements of the commit's transaction, after
the batch record and the session row were written and before the items are.

SQLite: a temporary trigger on the store's own connection calls a Python function that
blocks the connection's thread until released. PostgreSQL: a trigger takes an advisory
lock that a second connection of the test holds until released. Either way the hang is
in the real database engine, inside the real transaction; nothing of ours is stubbed.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sessions import SQLiteStore, Store
from tests.conftest import PG_DSN, Target

#: A hang that nobody releases ends by itself after this long (tests never hang forever).
SAFETY = 30.0


class Hang:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    async def reached(self) -> None:
        """Wait until the database is hung inside the commit."""
        if not await asyncio.to_thread(self.entered.wait, SAFETY):
            raise AssertionError("the commit never reached the hang")

    def release(self) -> None:
        self.released.set()


def _sqlite_trigger(where: str, session_id: str) -> str:
    sid = session_id.replace("'", "''")
    if where == "first":
        return (
            "CREATE TEMP TRIGGER txs_test_hang BEFORE INSERT ON main.txs_batches "
            f"WHEN NEW.session_id = '{sid}' BEGIN SELECT txs_test_hang(); END"
        )
    return (
        "CREATE TEMP TRIGGER txs_test_hang AFTER UPDATE ON main.txs_sessions "
        f"WHEN NEW.session_id = '{sid}' BEGIN SELECT txs_test_hang(); END"
    )


@asynccontextmanager
async def _sqlite_hang(store: Store[Any], session_id: str, where: str) -> AsyncIterator[Hang]:
    assert isinstance(store, SQLiteStore)
    hang = Hang()

    def block() -> int:
        hang.entered.set()
        hang.released.wait(SAFETY)
        return 0

    def install(conn: sqlite3.Connection) -> None:
        conn.create_function("txs_test_hang", 0, block)
        conn.execute(_sqlite_trigger(where, session_id))

    def remove(conn: sqlite3.Connection) -> None:
        conn.execute("DROP TRIGGER IF EXISTS temp.txs_test_hang")

    await store.sqlite.run(install)
    try:
        yield hang
    finally:
        hang.release()
        if not store.closed:
            await store.sqlite.run(remove)


@asynccontextmanager
async def _postgres_hang(target: Target, session_id: str, where: str) -> AsyncIterator[Hang]:
    import asyncpg

    hang = Hang()
    key = random.randrange(1, 2**62)
    sid = session_id.replace("'", "''")
    table = "batches" if where == "first" else "items"
    holder = await asyncpg.connect(PG_DSN)
    admin = await asyncpg.connect(PG_DSN)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", key)
        await admin.execute(f'SET search_path TO "{target.pg_schema}"')
        await admin.execute(
            "CREATE OR REPLACE FUNCTION txs_test_hang() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF NEW.session_id = '{sid}' THEN PERFORM pg_advisory_xact_lock({key}); "
            "END IF; RETURN NEW; END $$"
        )
        await admin.execute(
            f"CREATE TRIGGER txs_test_hang BEFORE INSERT ON txs_{table} FOR EACH ROW "
            "EXECUTE FUNCTION txs_test_hang()"
        )
        watcher = asyncio.create_task(_watch_for_waiter(admin, key, hang))
        releaser = asyncio.create_task(_release_when_told(holder, key, hang))
        try:
            yield hang
        finally:
            hang.release()
            watcher.cancel()
            await releaser
            await admin.execute(f"DROP TRIGGER IF EXISTS txs_test_hang ON txs_{table}")
    finally:
        await holder.close()
        await admin.close()


async def _watch_for_waiter(conn: Any, key: int, hang: Hang) -> None:
    """Set ``hang.entered`` once a backend waits for the advisory lock ``key``."""
    lo, hi = key & 0xFFFFFFFF, key >> 32
    while True:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = $1 AND objid = $2",
            hi,
            lo,
        )
        if waiting:
            hang.entered.set()
            return
        await asyncio.sleep(0.01)


async def _release_when_told(conn: Any, key: int, hang: Hang) -> None:
    await asyncio.to_thread(hang.released.wait, SAFETY)
    await conn.execute("SELECT pg_advisory_unlock($1)", key)


@asynccontextmanager
async def hang(
    target: Target, store: Store[Any], session_id: str, where: str
) -> AsyncIterator[Hang]:
    """Make the next commit of ``session_id`` hang in the database at ``where``."""
    if target.kind == "sqlite":
        async with _sqlite_hang(store, session_id, where) as h:
            yield h
    else:
        async with _postgres_hang(target, session_id, where) as h:
            yield h
