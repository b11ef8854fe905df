"""The turn index's reads on PostgreSQL plan the same whatever the statistics say.

``load_turn_window`` reads the oldest or newest turn records of a session. Through the
primary key, a turn table analyzed while empty (or one session grown far past the others
since the last analyze) made the planner scan every record of the session and sort them
(about 12 ms at 5,000 turns, against 0.2 ms). Migration 8's index holds exactly the
records that read as turns, in order, so the window is its first rows. These tests put
the statistics in that state on purpose and read the plan the server chooses.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import PG_DSN, require_postgres
from tests.provision.postgres import drop_schema

asyncpg = pytest.importorskip("asyncpg")

from sessions.postgres import PostgresStore  # noqa: E402 - needs asyncpg

pytestmark = pytest.mark.postgres

TURNS = 20_000


@pytest.fixture
async def grown() -> AsyncIterator[tuple[PostgresStore, str]]:
    """A fresh store whose turn table was analyzed while empty, then one session grown
    to :data:`TURNS` turns of one item each (and a second, short one), with no analyze
    since. The long session is grown in SQL, the rows our commits write, in one
    statement per table: committing 20,000 turns one by one would take half a minute."""
    require_postgres()
    schema = f"txs_t_{uuid.uuid4().hex[:12]}"
    store = await PostgresStore.open(PG_DSN, schema=schema, min_size=1, max_size=2)
    t = f'"{schema}".txs_'
    try:
        async with store.pool.acquire() as conn:
            # Statistics of an empty table, and no autovacuum to refresh them mid-test.
            await conn.execute(f"ALTER TABLE {t}turns SET (autovacuum_enabled = off)")
            await conn.execute(f"ANALYZE {t}turns")
        long = store.session("long")
        await long.add_items([{"role": "user", "content": "t0"}])
        await long.commit()
        async with store.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {t}items (session_id, seq, batch_id, data) "
                "SELECT 'long', g, 'bulk', json_build_object('role', 'user', "
                "'content', 't' || (g - 1))::text FROM generate_series(2, $1::bigint) AS g",
                TURNS,
            )
            await conn.execute(
                f"INSERT INTO {t}turns (session_id, first_seq, last_seq, created_at, items) "
                "SELECT 'long', g, g, now(), 1 FROM generate_series(2, $1::bigint) AS g",
                TURNS,
            )
            await conn.execute(
                f"UPDATE {t}sessions SET item_count = $1::bigint, next_seq = $1::bigint + 1, "
                "turn_count = $1::bigint, turn_items = $1::bigint WHERE session_id = 'long'",
                TURNS,
            )
        short = store.session("short")
        await short.add_items([{"role": "user", "content": "only"}])
        await short.commit()
        yield store, schema
    finally:
        await store.close()
        await drop_schema(schema)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found.extend(_nodes(child))
    return found


async def _plan(conn: Any, statement: str, *args: Any) -> list[dict[str, Any]]:
    raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + statement, *args)
    return _nodes(json.loads(raw)[0]["Plan"])


@pytest.mark.parametrize("cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("end", ["newest", "oldest"])
async def test_turn_window_reads_the_visible_index_without_a_sort_when_statistics_are_stale(
    grown: tuple[PostgresStore, str], end: str, cache_mode: str
) -> None:
    store, _ = grown
    statement = getattr(store.postgres._sql, f"turns_{end}")
    async with store.pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {cache_mode}")
        try:
            nodes = await _plan(conn, statement, "long", 5)
        finally:
            await conn.execute("RESET plan_cache_mode")
    kinds = [node["Node Type"] for node in nodes]
    indexes = [node.get("Index Name", "") for node in nodes]
    assert "Sort" not in kinds, kinds
    assert not any(
        node["Node Type"] == "Bitmap Heap Scan" and node.get("Relation Name") == "txs_turns"
        for node in nodes
    ), kinds
    assert "txs_turns_visible" in indexes, indexes
    # And the read returns the right turns: the five newest (or oldest) of the session.
    session = store.session("long")
    turns = await session.turns()
    assert len(turns) == TURNS
    window = await session.get_items(turns=5)
    expected = [f"t{n}" for n in range(TURNS - 5, TURNS)]
    assert [item["content"] for item in window] == expected
