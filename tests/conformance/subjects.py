"""The subjects our suite runs ``sessions.testing`` against; each importable by a child.

Every function takes strings only (a path, a DSN) and returns a ``Subject``, so that the
cross-process check can rebuild the same subject in a writer process from its ``Spawn``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
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


def sdk_sqlite(path: str) -> Subject:
    from agents import SQLiteSession

    async def inner(session_id: str) -> AsyncIterator[Any]:
        session = SQLiteSession(session_id, path)
        try:
            yield session
        finally:
            session.close()

    return wrapper_subject(
        "sdk-sqlite",
        inner,
        spawn=Spawn(f"{__name__}:sdk_sqlite", (path,)),
        description="`TransactionalSession` over the SDK's `agents.SQLiteSession` (a file)",
    )


def sdk_async_sqlite(path: str) -> Subject:
    from agents.extensions.memory import AsyncSQLiteSession

    async def inner(session_id: str) -> AsyncIterator[Any]:
        session = AsyncSQLiteSession(session_id, path)
        try:
            yield session
        finally:
            await session.close()

    return wrapper_subject(
        "sdk-async-sqlite",
        inner,
        spawn=Spawn(f"{__name__}:sdk_async_sqlite", (path,)),
        description="`TransactionalSession` over the SDK's `AsyncSQLiteSession` (a file)",
    )


def sdk_sqlalchemy(path: str) -> Subject:
    from agents.extensions.memory import SQLAlchemySession

    async def inner(session_id: str) -> AsyncIterator[Any]:
        url = f"sqlite+aiosqlite:///{path}"
        session = SQLAlchemySession.from_url(session_id, url=url, create_tables=True)
        try:
            yield session
        finally:
            await session.engine.dispose()

    return wrapper_subject(
        "sdk-sqlalchemy",
        inner,
        spawn=Spawn(f"{__name__}:sdk_sqlalchemy", (path,)),
        description="`TransactionalSession` over the SDK's `SQLAlchemySession` "
        "(`sqlite+aiosqlite`, a file)",
    )


def sdk_redis(url: str, key_prefix: str) -> Subject:
    from agents.extensions.memory import RedisSession
    from redis.asyncio import Redis

    async def inner(session_id: str) -> AsyncIterator[Any]:
        client = Redis.from_url(url)
        try:
            yield RedisSession(session_id, redis_client=client, key_prefix=key_prefix)
        finally:
            await client.aclose()

    return wrapper_subject(
        "sdk-redis",
        inner,
        spawn=Spawn(f"{__name__}:sdk_redis", (url, key_prefix)),
        description="`TransactionalSession` over the SDK's `RedisSession` (local Redis)",
    )
