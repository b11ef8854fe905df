"""PostgreSQL for tests: a schema (the test run's shared one, or one of its own); raw SQL
over asyncpg; hangs through a trigger waiting for an advisory lock the test holds.

The DSN comes from ``SESSIONS_TEST_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/postgres``. When no server answers, PostgreSQL
tests are skipped with one line saying why, except when ``CI`` is set: then they fail.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from sessions import BufferedSession, Store
from sessions._model.redact import redact
from tests.provision.base import SAFETY, Hang, Provision, RawReader
from tests.reliability.invariant import RawRow, RawSession
from tests.skip_policy import in_ci

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DSN = os.environ.get("SESSIONS_TEST_POSTGRES_DSN", DEFAULT_PG_DSN)


def run_outside_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` in a thread of its own: works whether or not a loop is running here."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _probe_postgres() -> str | None:
    """``None`` when the server answers, else why not."""
    try:
        import asyncpg
    except ImportError:
        return "asyncpg is not installed (pip install 'txsessions[test]')"

    async def probe() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=5)
        await conn.close()

    try:
        run_outside_loop(probe())
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        return redact(f"no PostgreSQL at {PG_DSN}: {type(exc).__name__}: {exc}", [PG_DSN])
    return None


_PG_PROBLEM: str | None | bool = False  # False: not probed yet


def postgres_problem() -> str | None:
    global _PG_PROBLEM
    if _PG_PROBLEM is False:
        _PG_PROBLEM = _probe_postgres()
    assert _PG_PROBLEM is not True
    return _PG_PROBLEM


def require_postgres() -> None:
    problem = postgres_problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI is set, so PostgreSQL tests must run: {problem}", pytrace=False)
    pytest.skip(problem)


def with_query(dsn: str, **params: str) -> str:
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


async def pg_execute(sql: str, *args: Any, dsn: str = PG_DSN) -> Any:
    """Run one statement on a connection of its own; its rows."""
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def drop_schema(name: str) -> None:
    await pg_execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class PostgresProvision(Provision):
    kind = "postgres"
    pooled = True
    schema_table = "txs_schema_version"

    def __init__(self, schema: str, *, prefix: str = "txs_", own: bool = False) -> None:
        super().__init__()
        self.pg_schema = schema
        self.prefix = prefix
        self.own = own  # a schema of its own, dropped by drop()
        self.shared = not own
        url = with_query(PG_DSN, schema=schema)
        self.url = url if prefix == "txs_" else f"{url}&table_prefix={prefix}"

    @classmethod
    def problem(cls) -> str | None:
        return postgres_problem()

    @classmethod
    def require(cls) -> None:
        require_postgres()

    @classmethod
    def test_schema(cls, request: pytest.FixtureRequest) -> str | None:
        require_postgres()
        schema: str = request.getfixturevalue("pg_schema")
        return schema

    @classmethod
    def for_test(cls, tmp_path: Path, request: pytest.FixtureRequest) -> PostgresProvision:
        schema = cls.test_schema(request)
        assert schema is not None
        return cls(schema)

    @classmethod
    def new(
        cls, directory: str | None = None, *, name: str = "txs_rel", schema: str | None = None
    ) -> PostgresProvision:
        if schema is not None:
            return cls(schema)
        return cls(f"{name}_{os.getpid()}_{uuid.uuid4().hex[:8]}", own=True)

    @property
    def schema(self) -> str:
        assert self.pg_schema is not None
        return self.pg_schema

    async def open_store(self, **options: Any) -> Store[Any]:
        from sessions.postgres import PostgresStore

        options.setdefault("min_size", 1)
        options.setdefault("max_size", 4)
        if self.prefix != "txs_":
            options.setdefault("table_prefix", self.prefix)
        return await PostgresStore.open(PG_DSN, schema=self.schema, **options)

    def session(self, session_id: str, **options: Any) -> BufferedSession:
        from sessions.postgres import PostgresSession

        return PostgresSession(session_id, PG_DSN, schema=self.schema, **options)

    def fresh(self, directory: Path) -> PostgresProvision:
        fresh = PostgresProvision(self.schema, prefix=f"p{uuid.uuid4().hex[:10]}_")
        fresh.opened = self.opened  # closed with this one's stores
        return fresh

    async def remove(self) -> None:
        if self.own:
            await drop_schema(self.schema)

    # ---------------------------------------------------------------- raw SQL

    def param(self, n: int) -> str:
        return f"${n}"

    def epoch(self, mark: str) -> str:
        return f"to_timestamp({mark})"

    def ago(self, column: str, seconds: int) -> str:
        return f"{column} - interval '{seconds} seconds'"

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Any]:
        import asyncpg

        pg = await asyncpg.connect(PG_DSN)
        try:
            await pg.execute(f'SET search_path TO "{self.schema}"')
            yield pg
        finally:
            await pg.close()

    async def execute(self, sql: str, *args: Any) -> None:
        async with self._connect() as pg:
            await pg.execute(sql, *args)

    async def fetch_value(self, sql: str, *args: Any) -> Any:
        async with self._connect() as pg:
            return await pg.fetchval(sql, *args)

    def stamp(self, when: datetime) -> Any:
        return when

    async def bulk_insert(
        self, table: str, columns: list[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.copy_records_to_table(
                self.table(table), schema_name=self.schema, columns=columns, records=rows
            )
        finally:
            await conn.close()

    def raw_reader(self) -> RawReader:
        return _Reader(self.schema, self.prefix)

    async def tables_with_column(self, column: str) -> list[str]:
        names = await self.fetch_value(
            "SELECT string_agg(table_name, ',') FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND column_name = $1 "
            "AND table_name LIKE $2",
            column,
            self.prefix.replace("_", "\\_") + "%",
        )
        return str(names).split(",")

    def session_tables(self) -> list[str]:
        from sessions import postgres

        return [self.table("sessions"), *(self.table(name) for name in postgres.SESSION_TABLES)]

    # ---------------------------------------------------------------- fault injection

    async def add_poison_trigger(self, session_id: str) -> None:
        sid = session_id.replace("'", "''")
        await self.execute(
            "CREATE OR REPLACE FUNCTION txs_test_poison() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF NEW.session_id = '{sid}' AND NEW.data LIKE '%poison%' THEN "
            "RAISE EXCEPTION 'poisoned item'; END IF; RETURN NEW; END $$",
        )
        await self.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON txs_items FOR EACH ROW "
            "EXECUTE FUNCTION txs_test_poison()",
        )

    async def drop_poison_trigger(self) -> None:
        await self.execute("DROP TRIGGER IF EXISTS poison ON txs_items")

    async def add_failing_trigger(self, table: str, session_id: str, event: str = "INSERT") -> None:
        sid = session_id.replace("'", "''")
        row = "OLD" if event == "DELETE" else "NEW"
        await self.execute(
            "CREATE OR REPLACE FUNCTION txs_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'injected failure on %', TG_TABLE_NAME; END $$",
        )
        await self.execute(
            f'CREATE TRIGGER fail BEFORE {event} ON "{table}" FOR EACH ROW '
            f"WHEN ({row}.session_id = '{sid}') EXECUTE FUNCTION txs_test_fail()",
        )

    async def drop_failing_trigger(self, table: str) -> None:
        await self.execute(f'DROP TRIGGER IF EXISTS fail ON "{table}"')

    @asynccontextmanager
    async def hang(self, store: Store[Any], session_id: str, where: str) -> AsyncIterator[Hang]:
        import asyncpg

        hang = Hang()
        key = random.randrange(1, 2**62)
        sid = session_id.replace("'", "''")
        table = "batches" if where == "first" else "items"
        holder = await asyncpg.connect(PG_DSN)
        admin = await asyncpg.connect(PG_DSN)
        try:
            await holder.execute("SELECT pg_advisory_lock($1)", key)
            await admin.execute(f'SET search_path TO "{self.schema}"')
            await admin.execute(
                "CREATE OR REPLACE FUNCTION txs_test_hang() RETURNS trigger LANGUAGE plpgsql "
                f"AS $$ BEGIN IF NEW.session_id = '{sid}' THEN "
                f"PERFORM pg_advisory_xact_lock({key}); END IF; RETURN NEW; END $$"
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

    @asynccontextmanager
    async def writes_held(self) -> AsyncIterator[None]:
        import asyncpg

        pg = await asyncpg.connect(PG_DSN)
        try:
            await pg.execute("BEGIN")
            await pg.execute(f'LOCK TABLE "{self.schema}".txs_batches IN SHARE ROW EXCLUSIVE MODE')
            yield
        finally:
            await pg.close()  # ends the transaction, releasing the lock


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


class _Reader(RawReader):
    """Keeps one connection for many reads."""

    def __init__(self, schema: str, prefix: str) -> None:
        self.schema = schema
        self.prefix = prefix
        self._pg: Any = None

    async def read(self, session_id: str) -> RawSession:
        if self._pg is None or self._pg.is_closed():
            import asyncpg

            self._pg = await asyncpg.connect(PG_DSN, timeout=10)
        return await _postgres_raw(self._pg, self.schema, self.prefix, session_id)

    async def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            await pg.close()


async def _postgres_raw(conn: Any, schema: str, prefix: str, session_id: str) -> RawSession:
    def table(name: str) -> str:
        return f'"{schema}"."{prefix}{name}"'

    async with conn.transaction(isolation="repeatable_read", readonly=True):
        rows = await conn.fetch(
            f"SELECT seq, batch_id, data FROM {table('items')} WHERE session_id = $1 ORDER BY seq",
            session_id,
        )
        meta = await conn.fetchrow(
            "SELECT item_count, next_seq, created_at, updated_at, turn_count, turn_items "
            f"FROM {table('sessions')} WHERE session_id = $1",
            session_id,
        )
        records = await conn.fetch(
            f"SELECT batch_id, committed_at FROM {table('batches')} WHERE session_id = $1",
            session_id,
        )
        turns = await conn.fetch(
            f"SELECT first_seq, last_seq, hidden_by IS NOT NULL, items FROM {table('turns')} "
            "WHERE session_id = $1 ORDER BY first_seq",
            session_id,
        )
        hidden = await conn.fetch(
            f"SELECT seq FROM {table('hidden_items')} WHERE session_id = $1 ORDER BY seq",
            session_id,
        )
    return RawSession(
        session_id,
        [RawRow(row[0], row[1], row[2]) for row in rows],
        None if meta is None else (meta[0], meta[1], meta[2], meta[3]),
        [(row[0], row[1]) for row in records],
        None if meta is None else (meta[4], meta[5]),
        [(row[0], row[1], row[2], row[3]) for row in turns],
        [row[0] for row in hidden],
    )
