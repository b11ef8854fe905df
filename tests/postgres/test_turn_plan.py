"""The turn index's reads on PostgreSQL plan the same whatever the statistics say.

``load_turn_window`` reads the oldest or newest turn records of a session. Asked for the
first rows of one scan with hidden and emptied records filtered out, the planner trusts
its estimates: with the statistics of a turn table analyzed while empty (or taken before
one session grew far past the others) it expects a handful of rows and scans and sorts
every record of the session. A window of at most ``TURN_WALK_MAX`` records is therefore
walked along the primary key, one probe per record. These tests put the statistics in
that state on purpose, read the plan the server chooses, and check the answers.
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
async def test_a_turn_window_walks_the_primary_key_when_statistics_are_stale(
    grown: tuple[PostgresStore, str], end: str, cache_mode: str
) -> None:
    store, _ = grown
    statement = getattr(store.postgres._sql, f"turns_{end}_walk")
    async with store.pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {cache_mode}")
        try:
            nodes = await _plan(conn, statement, "long", 5)
        finally:
            await conn.execute("RESET plan_cache_mode")
    kinds = [node["Node Type"] for node in nodes]
    turns = [node for node in nodes if node.get("Relation Name") == "txs_turns"]
    assert "Recursive Union" in kinds, kinds
    assert turns and all(
        node["Node Type"] == "Index Scan" and node["Index Name"] == "txs_turns_pkey"
        for node in turns
    ), [(node["Node Type"], node.get("Index Name")) for node in turns]


async def test_windows_walked_and_scanned_read_the_same_turns_of_a_long_session(
    grown: tuple[PostgresStore, str],
) -> None:
    from sessions.postgres.windows import TURN_WALK_MAX

    store, _ = grown
    session = store.session("long")
    assert len(await session.turns()) == TURNS
    assert [item["content"] for item in await session.get_items(turns=5)] == [
        f"t{n}" for n in range(TURNS - 5, TURNS)
    ]
    for last in (1, TURN_WALK_MAX, TURN_WALK_MAX + 1, 500):  # walked, then one scan
        window = await session.turns(last=last)
        assert [t.number for t in window] == list(range(TURNS - last + 1, TURNS + 1))
        assert [t.first_key for t in window] == list(range(TURNS - last + 1, TURNS + 1))
    backend = store.postgres
    for oldest in (3, TURN_WALK_MAX + 1):
        found = await backend.load_turn_window("long", oldest=oldest)
        assert found is not None and found.count == TURNS
        assert [row.first_key for row in found.rows] == list(range(1, oldest + 1))
