"""The subjects our suite runs ``sessions.testing`` against; each importable by a child.

Every function takes strings only (a path, a DSN) and returns a ``Subject``, so that the
cross-process check can rebuild the same subject in a writer process from its ``Spawn``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from sessions import MemoryBackend, MemoryStore, SQLiteStore
from sessions.testing import Spawn, Subject, store_subject, wrapper_subject


def sqlite(path: str) -> Subject:
    return store_subject(
        "sqlite",
        lambda: SQLiteStore.open(path),
        spawn=Spawn(f"{__name__}:sqlite", (path,)),
        description="`sessions.SQLiteStore` / `SQLiteSession`: one SQLite file",
    )


def postgres(dsn: str, schema: str) -> Subject:
    from sessions import PostgresStore

    return store_subject(
        "postgres",
        lambda: PostgresStore.open(dsn, schema=schema, min_size=1, max_size=2),
        spawn=Spawn(f"{__name__}:postgres", (dsn, schema)),
        description="`sessions.PostgresStore` / `PostgresSession`: PostgreSQL (asyncpg)",
    )


def memory() -> Subject:
    backend = MemoryBackend()
    return store_subject(
        "memory",
        lambda: MemoryStore.open(backend),
        description="`sessions.MemoryStore` / `MemorySession`: the in-memory reference backend",
    )


_WRAPPED = {
    "sdk-sqlite": "`TransactionalSession` over the SDK's `agents.SQLiteSession` (a file)",
    "sdk-async-sqlite": "`TransactionalSession` over the SDK's `AsyncSQLiteSession` (a file)",
    "sdk-sqlalchemy": "`TransactionalSession` over the SDK's `SQLAlchemySession` "
    "(`sqlite+aiosqlite`, a file)",
    "sdk-redis": "`TransactionalSession` over the SDK's `RedisSession` (local Redis)",
}


def _sdk_subject(name: str, inner: Callable[[str], AsyncIterator[Any]], *args: str) -> Subject:
    """The wrapper subject ``name`` (described in ``_WRAPPED``), which a child rebuilds by
    calling the function named like it with ``args``."""
    spawn = Spawn(f"{__name__}:{name.replace('-', '_')}", args)
    return wrapper_subject(name, inner, spawn=spawn, description=_WRAPPED[name])


async def _closing(session: Any, close: Callable[[], object]) -> AsyncIterator[Any]:
    """Yield ``session``; afterwards call ``close`` (and await what it returns, if anything)."""
    try:
        yield session
    finally:
        closed = close()
        if inspect.isawaitable(closed):
            await closed


def _file_subject(name: str, session_class: Callable[[str, str], Any], path: str) -> Subject:
    """A wrapper subject over ``session_class(session_id, path)``, closed by its ``close()``."""

    def inner(session_id: str) -> AsyncIterator[Any]:
        session = session_class(session_id, path)
        return _closing(session, session.close)

    return _sdk_subject(name, inner, path)


def sdk_sqlite(path: str) -> Subject:
    from agents import SQLiteSession

    return _file_subject("sdk-sqlite", SQLiteSession, path)


def sdk_async_sqlite(path: str) -> Subject:
    from agents.extensions.memory import AsyncSQLiteSession

    return _file_subject("sdk-async-sqlite", AsyncSQLiteSession, path)


def sdk_sqlalchemy(path: str) -> Subject:
    from agents.extensions.memory import SQLAlchemySession

    def inner(session_id: str) -> AsyncIterator[Any]:
        url = f"sqlite+aiosqlite:///{path}"
        session = SQLAlchemySession.from_url(session_id, url=url, create_tables=True)
        return _closing(session, session.engine.dispose)

    return _sdk_subject("sdk-sqlalchemy", inner, path)


def sdk_redis(url: str, key_prefix: str) -> Subject:
    from agents.extensions.memory import RedisSession
    from redis.asyncio import Redis

    def inner(session_id: str) -> AsyncIterator[Any]:
        client = Redis.from_url(url)
        session = RedisSession(session_id, redis_client=client, key_prefix=key_prefix)
        return _closing(session, client.aclose)

    return _sdk_subject("sdk-redis", inner, url, key_prefix)
