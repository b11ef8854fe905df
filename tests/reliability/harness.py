"""Opening databases for the reliability suite, in tests, child processes and the soak.

``Db`` has the same shape as ``tests.conftest.Target`` (``kind``, ``url``,
``sqlite_path``, ``pg_schema``, ``open()``), so scenario code takes either.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sessions import Store, open_store

from .invariant import History, RawRow, RawSession, check_rows

PG_DSN = os.environ.get(
    "SESSIONS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REPO = Path(__file__).resolve().parents[2]


class TargetLike(Protocol):
    kind: str
    url: str
    sqlite_path: str | None
    pg_schema: str | None

    async def open(self, **options: Any) -> Store[Any]: ...


async def open_url(url: str, **options: Any) -> Store[Any]:
    """A store for ``url`` (``sqlite:///path`` or ``postgresql://...?schema=x``).

    The package's own :func:`sessions.open_store`, with a small pool for PostgreSQL.
    """
    if url.startswith(("postgres://", "postgresql://")):
        options.setdefault("min_size", 1)
        options.setdefault("max_size", 4)
    return await open_store(url, **options)


@dataclass
class Db:
    """A database for the soak (and for child processes): SQLite file or PG schema."""

    kind: str
    url: str
    sqlite_path: str | None = None
    pg_schema: str | None = None
    opened: list[Store[Any]] = field(default_factory=list)
    temp_dir: str | None = None  # removed by drop()

    async def open(self, **options: Any) -> Store[Any]:
        store = await open_url(self.url, **options)
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()
        self.opened.clear()

    async def drop(self) -> None:
        await self.close_all()
        if self.kind == "postgres" and self.pg_schema:
            await pg_execute(f'DROP SCHEMA IF EXISTS "{self.pg_schema}" CASCADE')
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def new_db(kind: str, directory: str | None = None, *, prefix: str = "txs_rel") -> Db:
    if kind == "sqlite":
        root = directory or tempfile.mkdtemp(prefix="txs-rel-")
        path = os.path.join(root, f"{prefix}-{uuid.uuid4().hex[:8]}.db")
        return Db(
            "sqlite", f"sqlite:///{path}", sqlite_path=path, temp_dir=None if directory else root
        )
    if kind == "postgres":
        schema = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        return Db("postgres", with_query(PG_DSN, schema=schema), pg_schema=schema)
    raise ValueError(f"unknown backend {kind!r}")


def with_query(dsn: str, **params: str) -> str:
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


async def pg_execute(sql: str, *args: Any, dsn: str = PG_DSN) -> Any:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def read_history(
    target: TargetLike, session_id: str, *, reader: RawReader | None = None
) -> History:
    """The stored history, from the raw rows (one snapshot).

    Every row is checked (:func:`~tests.reliability.invariant.check_rows`): the result
    holds the items of the valid rows and, in ``.problems``, everything wrong. Reads
    through ``reader`` (one connection kept open) when given, else a connection of its own.
    """
    if reader is not None:
        return check_rows(await reader.read(session_id))
    async with RawReader(target) as own:
        return check_rows(await own.read(session_id))


class RawReader:
    """Reads sessions' raw rows over one connection (PostgreSQL) kept for many reads."""

    def __init__(self, target: TargetLike) -> None:
        self.target = target
        self._pg: Any = None

    async def read(self, session_id: str) -> RawSession:
        """Rows, metadata and batch records of one session, as the database holds them."""
        if self.target.kind == "sqlite":
            assert self.target.sqlite_path is not None
            return await asyncio.to_thread(_sqlite_raw, self.target.sqlite_path, session_id)
        assert self.target.pg_schema is not None
        if self._pg is None or self._pg.is_closed():
            import asyncpg

            self._pg = await asyncpg.connect(PG_DSN, timeout=10)
        return await _postgres_raw(self._pg, self.target.pg_schema, session_id)

    async def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            await pg.close()

    async def __aenter__(self) -> RawReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _sqlite_raw(path: str, session_id: str) -> RawSession:
    from datetime import datetime, timezone

    def when(value: float) -> datetime:
        return datetime.fromtimestamp(value, timezone.utc)

    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one snapshot for the three reads
        rows = conn.execute(
            "SELECT seq, batch_id, data FROM txs_items WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
        meta = conn.execute(
            "SELECT item_count, next_seq, created_at, updated_at FROM txs_sessions "
            "WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        records = conn.execute(
            "SELECT batch_id, committed_at FROM txs_batches WHERE session_id = ?", (session_id,)
        ).fetchall()
        conn.execute("COMMIT")
    finally:
        conn.close()
    return RawSession(
        session_id,
        [RawRow(*row) for row in rows],
        None if meta is None else (meta[0], meta[1], when(meta[2]), when(meta[3])),
        [(batch_id, when(at)) for batch_id, at in records],
    )


async def _postgres_raw(conn: Any, schema: str, session_id: str) -> RawSession:
    def table(name: str) -> str:
        return f'"{schema}"."txs_{name}"'

    async with conn.transaction(isolation="repeatable_read", readonly=True):
        rows = await conn.fetch(
            f"SELECT seq, batch_id, data FROM {table('items')} WHERE session_id = $1 ORDER BY seq",
            session_id,
        )
        meta = await conn.fetchrow(
            f"SELECT item_count, next_seq, created_at, updated_at FROM {table('sessions')} "
            "WHERE session_id = $1",
            session_id,
        )
        records = await conn.fetch(
            f"SELECT batch_id, committed_at FROM {table('batches')} WHERE session_id = $1",
            session_id,
        )
    return RawSession(
        session_id,
        [RawRow(row[0], row[1], row[2]) for row in rows],
        None if meta is None else (meta[0], meta[1], meta[2], meta[3]),
        [(row[0], row[1]) for row in records],
    )


def child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability._child", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


async def spawn(*args: str, stdin: bool = False) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *child_command(*args),
        cwd=str(REPO),
        env=child_env(),
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
