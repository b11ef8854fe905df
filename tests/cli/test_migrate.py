"""``sessions migrate``: history written by the SDK's own sessions, copied exactly.

The sources are real databases written by ``agents.SQLiteSession``,
``agents.extensions.memory.AsyncSQLiteSession`` and ``SQLAlchemySession`` (SQLite and
PostgreSQL); the command runs as a child process against both of our backends.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession

from sessions import open_store
from sessions._tools.migrate import migrate, open_source
from tests.conftest import PG_DSN, Target
from tests.sdk import sdk_import

from .test_cli import cli, fresh_url, history, one_error_line, seed


@pytest.fixture
def db(target: Target, tmp_path: Path) -> str:
    return fresh_url(target, tmp_path)


def item(n: int, text: str = "message") -> dict[str, Any]:
    return {"role": "user" if n % 2 else "assistant", "content": f"{text} {n} ✓"}


async def sdk_items(path: Path, session_id: str, **tables: str) -> list[Any]:
    session = SQLiteSession(session_id, path, **tables)
    try:
        return await session.get_items()
    finally:
        session.close()


@pytest.fixture
async def sdk_file(tmp_path: Path) -> Path:
    """A database file written by the SDK's ``SQLiteSession``."""
    path = tmp_path / "agents.db"
    chat = SQLiteSession("chat", path)
    await chat.add_items([item(i) for i in range(4)])
    await chat.pop_item()  # leaves a gap in the row ids
    await chat.add_items([item(10), {"type": "function_call", "name": "f", "arguments": "{}"}])
    chat.close()
    big = SQLiteSession("big", path)
    await big.add_items([item(i, "bulk") for i in range(1203)])  # 3 chunks of 500
    big.close()
    emptied = SQLiteSession("emptied", path)
    await emptied.add_items([item(0)])
    await emptied.pop_item()  # the session row stays, without messages
    emptied.close()
    # A row that is not JSON: the SDK skips it when reading, and so does the migration.
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('chat', '{oops')"
        )
    conn.close()
    return path


async def expected_from(path: Path) -> dict[str, list[Any]]:
    return {sid: await sdk_items(path, sid) for sid in ("big", "chat", "emptied")}


async def test_migrate_sqlite_session_file(sdk_file: Path, db: str) -> None:
    expected = await expected_from(sdk_file)
    assert len(expected["chat"]) == 5 and len(expected["big"]) == 1203
    assert expected["emptied"] == []

    first = await cli("migrate", "--from", f"sqlite:///{sdk_file}", "--to", db)
    assert first.code == 0, first.err
    assert "migrated 3 sessions" in first.out and "1208 items copied" in first.out
    assert "skipped 1 source rows" in first.out
    assert "verified: item counts match (3 sessions checked)" in first.out
    assert await history(db) == expected  # every item, in the SDK's order

    again = await cli("migrate", "--from", f"sqlite:///{sdk_file}", "--to", db)
    assert again.code == 0, again.err
    assert "0 items copied, 1208 already present" in again.out
    assert await history(db) == expected

    # The source grew since: a rerun copies only what is new.
    chat = SQLiteSession("chat", sdk_file)
    await chat.add_items([item(20), item(21)])
    chat.close()
    grown = await cli("migrate", "--from", f"sqlite:///{sdk_file}", "--to", db)
    assert grown.code == 0, grown.err
    assert "2 items copied" in grown.out
    assert await history(db) == await expected_from(sdk_file)


async def test_migrate_async_sqlite_session_with_custom_tables(
    tmp_path: Path, target: Target
) -> None:
    AsyncSQLiteSession = sdk_import(
        "AsyncSQLiteSession", "agents.extensions.memory", "AsyncSQLiteSession"
    )
    path = tmp_path / "async.db"
    tables = {"sessions_table": "my_sessions", "messages_table": "my_messages"}
    expected: dict[str, list[Any]] = {}
    for sid, count in (("u1", 3), ("u2", 7)):
        session = AsyncSQLiteSession(sid, path, **tables)
        await session.add_items([item(i) for i in range(count)])
        expected[sid] = await session.get_items()
        await session.close()
    db = fresh_url(target, tmp_path)
    args = ["--sessions-table", "my_sessions", "--messages-table", "my_messages"]
    result = await cli("migrate", "--from", f"sqlite:///{path}", "--to", db, *args)
    assert result.code == 0, result.err
    assert await history(db) == expected

    default_names = await cli("migrate", "--from", f"sqlite:///{path}", "--to", db)
    one_error_line(default_names, "no table 'agent_messages'", "--messages-table")


async def test_interrupted_migration_resumes_without_duplicates(sdk_file: Path, db: str) -> None:
    class Crash(Exception):
        pass

    source = await open_source(f"sqlite:///{sdk_file}")
    real_rows = source.rows
    pages = 0

    async def crashing_rows(session_id: str, chunk: int) -> AsyncIterator[list[str]]:
        nonlocal pages
        async for page in real_rows(session_id, chunk):
            pages += 1
            if pages == 4:  # in the middle of "big": 300 of its items were applied
                raise Crash
            yield page

    source.rows = crashing_rows  # type: ignore[method-assign]
    store = await open_store(db)
    try:
        with pytest.raises(Crash):
            await migrate(source, store, chunk_items=100)
        partial = await store.session_info("big")
        assert partial is not None and partial.item_count == 300
        source.rows = real_rows  # type: ignore[method-assign]
        report = await migrate(source, store, chunk_items=100)
    finally:
        await store.close()
        await source.close()
    assert report.ok, report.mismatches
    assert report.already_present == 300 and report.copied == 1208 - 300
    assert await history(db) == await expected_from(sdk_file)


async def test_existing_or_changed_target_sessions_are_reported(sdk_file: Path, db: str) -> None:
    await seed(db, {"chat": [{"role": "user", "content": "written by the app"}]})
    result = await cli("migrate", "--from", f"sqlite:///{sdk_file}", "--to", db)
    one_error_line(result, "1 of 3 sessions do not match")
    assert "session 'chat': already exists in the target" in result.out
    after = await history(db)
    assert after["chat"] == [{"role": "user", "content": "written by the app"}]  # untouched
    assert len(after["big"]) == 1203

    # A migrated session changed in the target afterwards: the count check catches it.
    store = await open_store(db)
    try:
        session = store.session("big")
        await session.add_items([item(9999)])
        await session.commit()
    finally:
        await store.close()
    rerun = await cli("migrate", "--from", f"sqlite:///{sdk_file}", "--to", db)
    one_error_line(rerun, "2 of 3 sessions do not match")
    assert "session 'big': source has 1203 items, target has 1204 items" in rerun.out


async def test_migrate_sqlalchemy_session_sqlite(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    from agents.extensions.memory import SQLAlchemySession

    path = tmp_path / "sa.db"
    url = f"sqlite+aiosqlite:///{path}"
    expected: dict[str, list[Any]] = {}
    for sid, count in (("a", 4), ("b", 620)):
        session = SQLAlchemySession.from_url(sid, url=url, create_tables=True)
        await session.add_items([item(i) for i in range(count)])
        await session.add_items([{"role": "user", "content": "é \u0000 \ud83d\ude00"}])
        expected[sid] = await session.get_items()
        await session._engine.dispose()
    db = f"sqlite:///{tmp_path / 'ours.db'}"
    first = await cli("migrate", "--from", url, "--to", db)
    assert first.code == 0, first.err
    assert "626 items copied" in first.out
    assert await history(db) == expected
    again = await cli("migrate", "--from", url, "--to", db)
    assert again.code == 0 and "0 items copied, 626 already present" in again.out
    assert await history(db) == expected


async def test_migrate_sqlalchemy_session_postgres(sdk_pg_schema: str, pg_schema: str) -> None:
    pytest.importorskip("sqlalchemy")
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    source_url = PG_DSN.replace("postgresql://", "postgresql+asyncpg://", 1)
    engine = create_async_engine(
        source_url, connect_args={"server_settings": {"search_path": sdk_pg_schema}}
    )
    expected: dict[str, list[Any]] = {}
    try:
        for sid, count in (("pg-1", 5), ("pg-2", 2)):
            session = SQLAlchemySession(sid, engine=engine, create_tables=True)
            await session.add_items([item(i) for i in range(count)])
            await session.pop_item()
            expected[sid] = await session.get_items()
    finally:
        await engine.dispose()
    db = f"{PG_DSN}?schema={pg_schema}&table_prefix=m{uuid.uuid4().hex[:10]}_"
    args = ["--from", source_url, "--source-schema", sdk_pg_schema, "--to", db]
    first = await cli("migrate", *args)
    assert first.code == 0, first.err
    assert "5 items copied" in first.out and "verified" in first.out
    assert await history(db) == expected
    again = await cli("migrate", *args)
    assert again.code == 0 and "0 items copied, 5 already present" in again.out
    assert await history(db) == expected

    wrong_schema = await cli(
        "migrate", "--from", source_url, "--source-schema", "no_such_schema", "--to", db
    )
    one_error_line(wrong_schema, "no table 'agent_messages'", "--source-schema")


async def test_migrate_source_errors_are_one_line(tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 't.db'}"
    secret = "Pw-s3cret-9"
    missing, scheme, driver, unreachable = await asyncio.gather(
        cli("migrate", "--from", f"sqlite:///{tmp_path / 'nope.db'}", "--to", target),
        cli("migrate", "--from", "agents.db", "--to", target),
        cli("migrate", "--from", f"mysql://u:{secret}@127.0.0.1/db", "--to", target),
        cli("migrate", "--from", f"postgresql://u:{secret}@127.0.0.1:1/db", "--to", target),
    )
    one_error_line(missing, "does not exist")
    one_error_line(scheme, "no scheme")
    one_error_line(driver, "mysql://u:***@127.0.0.1/db")
    one_error_line(unreachable, "postgresql+asyncpg://u:***@127.0.0.1:1/db")
    for result in (driver, unreachable):
        assert secret not in result.err + result.out
