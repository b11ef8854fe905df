"""SQLite for tests: a database file; raw SQL over ``sqlite3``; hangs through a temporary
trigger calling Python on the store's own connection."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from sessions import BufferedSession, SQLiteSession, SQLiteStore, Store
from tests.provision.base import SAFETY, Hang, Provision, RawReader
from tests.reliability.invariant import RawRow, RawSession


class SQLiteProvision(Provision):
    kind = "sqlite"

    def __init__(self, path: str, *, temp_dir: str | None = None) -> None:
        super().__init__()
        self.sqlite_path = path
        self.url = f"sqlite:///{path}"
        self.temp_dir = temp_dir

    @classmethod
    def for_test(cls, tmp_path: Path, request: pytest.FixtureRequest) -> SQLiteProvision:
        return cls(str(tmp_path / "sessions.db"))

    @classmethod
    def new(
        cls, directory: str | None = None, *, name: str = "txs_rel", schema: str | None = None
    ) -> SQLiteProvision:
        root = directory or tempfile.mkdtemp(prefix="txs-rel-")
        path = os.path.join(root, f"{name}-{uuid.uuid4().hex[:8]}.db")
        return cls(path, temp_dir=None if directory else root)

    async def open_store(self, **options: Any) -> Store[Any]:
        return await SQLiteStore.open(self.path, **options)

    @property
    def path(self) -> str:
        assert self.sqlite_path is not None
        return self.sqlite_path

    def session(self, session_id: str, **options: Any) -> BufferedSession:
        return SQLiteSession(session_id, self.path, **options)

    def fresh(self, directory: Path) -> SQLiteProvision:
        fresh = SQLiteProvision(str(directory / f"{uuid.uuid4().hex[:10]}.db"))
        fresh.opened = self.opened  # closed with this one's stores
        return fresh

    async def remove(self) -> None:
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    # ---------------------------------------------------------------- raw SQL

    def param(self, n: int) -> str:
        # Named: numbered ones (?1) with a sequence warn from Python 3.12 on and are an
        # error from 3.14.
        return f":p{n}"

    def epoch(self, mark: str) -> str:
        return mark

    def ago(self, column: str, seconds: int) -> str:
        return f"{column} - {seconds}"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, timeout=10)

    async def execute(self, sql: str, *args: Any) -> None:
        conn = self._connect()
        try:
            conn.execute(sql, _named(args))
        finally:
            conn.close()

    async def fetch_value(self, sql: str, *args: Any) -> Any:
        conn = self._connect()
        try:
            row = conn.execute(sql, _named(args)).fetchone()
        finally:
            conn.close()
        return None if row is None else row[0]

    def stamp(self, when: datetime) -> Any:
        return when.timestamp()

    async def bulk_insert(
        self, table: str, columns: list[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        marks = ", ".join("?" * len(columns))
        sql = f"INSERT INTO {self.table(table)} ({', '.join(columns)}) VALUES ({marks})"

        def write() -> None:
            conn = sqlite3.connect(self.path)
            try:
                with conn:
                    conn.executemany(sql, rows)
            finally:
                conn.close()

        await asyncio.to_thread(write)

    def raw_reader(self) -> RawReader:
        return _Reader(self.path)

    async def integrity_problem(self) -> str | None:
        verdict = await asyncio.to_thread(_integrity_check, self.path)
        return None if verdict == "ok" else f"PRAGMA integrity_check = {verdict}"

    async def tables_with_column(self, column: str) -> list[str]:
        names = await self.fetch_value(
            "SELECT group_concat(m.name) FROM sqlite_master AS m, pragma_table_info(m.name) AS c "
            f"WHERE m.type = 'table' AND c.name = {self.param(1)}",
            column,
        )
        return str(names).split(",")

    def session_tables(self) -> list[str]:
        from sessions import sqlite

        return [self.table("sessions"), *sqlite.SESSION_TABLES]

    # ---------------------------------------------------------------- fault injection

    async def add_poison_trigger(self, session_id: str) -> None:
        sid = session_id.replace("'", "''")
        await self.execute(
            f"CREATE TRIGGER poison BEFORE INSERT ON txs_items "
            f"WHEN NEW.session_id = '{sid}' AND NEW.data LIKE '%poison%' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned item'); END",
        )

    async def drop_poison_trigger(self) -> None:
        await self.execute("DROP TRIGGER IF EXISTS poison")

    async def add_failing_trigger(self, table: str, session_id: str, event: str = "INSERT") -> None:
        sid = session_id.replace("'", "''")
        row = "OLD" if event == "DELETE" else "NEW"
        await self.execute(
            f'CREATE TRIGGER "fail_{table}" BEFORE {event} ON "{table}" '
            f"WHEN {row}.session_id = '{sid}' "
            f"BEGIN SELECT RAISE(ABORT, 'injected failure on {table}'); END",
        )

    async def drop_failing_trigger(self, table: str) -> None:
        await self.execute(f'DROP TRIGGER IF EXISTS "fail_{table}"')

    @asynccontextmanager
    async def hang(self, store: Store[Any], session_id: str, where: str) -> AsyncIterator[Hang]:
        assert isinstance(store, SQLiteStore)
        hang = Hang()

        def block() -> int:
            hang.entered.set()
            hang.released.wait(SAFETY)
            return 0

        def install(conn: sqlite3.Connection) -> None:
            conn.create_function("txs_test_hang", 0, block)
            conn.execute(_hang_trigger(where, session_id))

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
    async def writes_held(self) -> AsyncIterator[None]:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()


def _named(args: tuple[Any, ...]) -> dict[str, Any]:
    return {f"p{n}": arg for n, arg in enumerate(args, start=1)}


def _hang_trigger(where: str, session_id: str) -> str:
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


def _integrity_check(path: str) -> str:
    conn = sqlite3.connect(path, timeout=30)
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()
    return "; ".join(str(r[0]) for r in rows)


class _Reader(RawReader):
    def __init__(self, path: str) -> None:
        self.path = path

    async def read(self, session_id: str) -> RawSession:
        return await asyncio.to_thread(_sqlite_raw, self.path, session_id)


def _sqlite_raw(path: str, session_id: str) -> RawSession:
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
            "SELECT item_count, next_seq, created_at, updated_at, turn_count, turn_items "
            "FROM txs_sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        records = conn.execute(
            "SELECT batch_id, committed_at FROM txs_batches WHERE session_id = ?", (session_id,)
        ).fetchall()
        turns = conn.execute(
            "SELECT first_seq, last_seq, hidden_by IS NOT NULL, items FROM txs_turns "
            "WHERE session_id = ? ORDER BY first_seq",
            (session_id,),
        ).fetchall()
        hidden = conn.execute(
            "SELECT seq FROM txs_hidden_items WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        conn.execute("COMMIT")
    finally:
        conn.close()
    return RawSession(
        session_id,
        [RawRow(*row) for row in rows],
        None if meta is None else (meta[0], meta[1], when(meta[2]), when(meta[3])),
        [(batch_id, when(at)) for batch_id, at in records],
        None if meta is None else (meta[4], meta[5]),
        [(first, last, bool(hid), items) for first, last, hid, items in turns],
        [seq for (seq,) in hidden],
    )


def old_database(path: str | Path, version: int) -> sqlite3.Connection:
    """A database file holding the store's schema as migrations up to ``version`` left it
    (an old store to open); the connection to it, in autocommit mode."""
    from sessions.sqlite import MIGRATIONS

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE txs_schema (version INTEGER NOT NULL)")
    for number, statements in MIGRATIONS:
        if number <= version:
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO txs_schema (version) VALUES (?)", (number,))
    return conn
