"""Raw SQL against a test target, bypassing the package (fault injection, corruption)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.conftest import PG_DSN, Target


async def execute(target: Target, sql: str, *args: Any) -> None:
    """Run one statement; ``param(target, n)`` writes the n-th placeholder."""
    if target.kind == "sqlite":
        assert target.sqlite_path is not None
        conn = sqlite3.connect(target.sqlite_path, isolation_level=None, timeout=10)
        try:
            conn.execute(sql, {f"p{n}": arg for n, arg in enumerate(args, start=1)})
        finally:
            conn.close()
        return
    import asyncpg

    pg = await asyncpg.connect(PG_DSN)
    try:
        await pg.execute(f'SET search_path TO "{target.pg_schema}"')
        await pg.execute(sql, *args)
    finally:
        await pg.close()


async def fetch_value(target: Target, sql: str, *args: Any) -> Any:
    """The first column of the first row of a query; never takes a write lock."""
    if target.kind == "sqlite":
        assert target.sqlite_path is not None
        conn = sqlite3.connect(target.sqlite_path, isolation_level=None, timeout=10)
        try:
            row = conn.execute(
                sql, {f"p{n}": arg for n, arg in enumerate(args, start=1)}
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else row[0]
    import asyncpg

    pg = await asyncpg.connect(PG_DSN)
    try:
        await pg.execute(f'SET search_path TO "{target.pg_schema}"')
        return await pg.fetchval(sql, *args)
    finally:
        await pg.close()


async def stored_rows(target: Target, session_id: str) -> int:
    """How many items of the session a reader sees right now (even while a writer
    holds the database)."""
    count = await fetch_value(
        target, f"SELECT count(*) FROM txs_items WHERE session_id = {param(target, 1)}", session_id
    )
    return int(count)


def param(target: Target, n: int) -> str:
    # Named on SQLite: numbered ones (?1) with a sequence warn from Python 3.12 on and
    # are an error from 3.14.
    return f":p{n}" if target.kind == "sqlite" else f"${n}"


async def corrupt_newest(target: Target, session_id: str, text: str = "{not json") -> None:
    """Overwrite the newest stored item of a session with ``text``."""
    p1, p2 = param(target, 1), param(target, 2)
    await execute(
        target,
        f"UPDATE txs_items SET data = {p1} WHERE session_id = {p2} AND seq = "
        f"(SELECT max(seq) FROM txs_items WHERE session_id = {p2})",
        text,
        session_id,
    )


async def add_poison_trigger(target: Target, session_id: str) -> None:
    """Make the database reject, mid-batch, any item of ``session_id`` containing "poison"."""
    if target.kind == "sqlite":
        sid = session_id.replace("'", "''")
        await execute(
            target,
            f"CREATE TRIGGER poison BEFORE INSERT ON txs_items "
            f"WHEN NEW.session_id = '{sid}' AND NEW.data LIKE '%poison%' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned item'); END",
        )
        return
    sid = session_id.replace("'", "''")
    await execute(
        target,
        "CREATE OR REPLACE FUNCTION txs_test_poison() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN IF NEW.session_id = '{sid}' AND NEW.data LIKE '%poison%' THEN "
        "RAISE EXCEPTION 'poisoned item'; END IF; RETURN NEW; END $$",
    )
    await execute(
        target,
        "CREATE TRIGGER poison BEFORE INSERT ON txs_items FOR EACH ROW "
        "EXECUTE FUNCTION txs_test_poison()",
    )


async def drop_poison_trigger(target: Target) -> None:
    if target.kind == "sqlite":
        await execute(target, "DROP TRIGGER IF EXISTS poison")
    else:
        await execute(target, "DROP TRIGGER IF EXISTS poison ON txs_items")


async def add_failing_trigger(
    target: Target, table: str, session_id: str, event: str = "INSERT"
) -> None:
    """Make the database reject, inside the writer's transaction, every row of
    ``session_id`` that it inserts into ``table`` (``event="DELETE"``: deletes from it),
    with a real trigger raising an error."""
    sid = session_id.replace("'", "''")
    row = "OLD" if event == "DELETE" else "NEW"
    if target.kind == "sqlite":
        await execute(
            target,
            f'CREATE TRIGGER "fail_{table}" BEFORE {event} ON "{table}" '
            f"WHEN {row}.session_id = '{sid}' "
            f"BEGIN SELECT RAISE(ABORT, 'injected failure on {table}'); END",
        )
        return
    await execute(
        target,
        "CREATE OR REPLACE FUNCTION txs_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN RAISE EXCEPTION 'injected failure on %', TG_TABLE_NAME; END $$",
    )
    await execute(
        target,
        f'CREATE TRIGGER fail BEFORE {event} ON "{table}" FOR EACH ROW '
        f"WHEN ({row}.session_id = '{sid}') EXECUTE FUNCTION txs_test_fail()",
    )


async def drop_failing_trigger(target: Target, table: str) -> None:
    if target.kind == "sqlite":
        await execute(target, f'DROP TRIGGER IF EXISTS "fail_{table}"')
    else:
        await execute(target, f'DROP TRIGGER IF EXISTS fail ON "{table}"')
