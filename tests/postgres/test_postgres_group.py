"""PostgreSQL group commit: exactly-once under terminated backends, cancellation of a
commit that waits for a send, and the backend's own counters.

The contract suite (``tests/contract/test_group_commit.py``) proves isolation and the
shared transaction on every backend; these tests cover what only PostgreSQL has.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from sessions import Batch
from tests.conftest import PG_DSN, require_postgres
from tests.helpers import msg, pg_connection, retrying

asyncpg = pytest.importorskip("asyncpg")

from sessions.postgres import PostgresStore  # noqa: E402 - needs asyncpg
from tests.postgres.test_postgres import (  # noqa: E402, F401 - fixtures, and a store through them
    bouncer_store,
    fresh_schema,
    open_terminable,
    pgbouncer_dsn,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg() -> None:
    require_postgres()


def _app() -> dict[str, Any]:
    return {"server_settings": {"application_name": f"txs_group_{uuid.uuid4().hex[:10]}"}}


async def _until(condition: Any, what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


async def test_sessions_committing_at_once_lose_and_duplicate_nothing_under_pg_terminate_backend(
    pg: None, pg_schema: str
) -> None:
    """12 sessions commit 40 turns each at once (every 9th commit also pops, so both
    commit paths run) while a killer terminates our pool's busy backends at random
    moments.
    Every commit is retried until it returns; each history must be exactly what its
    writer committed, and groups must really have formed."""
    kw = _app()
    app = kw["server_settings"]["application_name"]
    store = await open_terminable(pg_schema, 4, **kw)
    killer_conn = await asyncpg.connect(PG_DSN)
    done = False
    kills = 0
    rng = random.Random(4321)

    async def killer() -> None:
        """40 strikes at random moments, then it stops: a busy machine reconnects slowly,
        and a killer that never rests could keep every new connection from starting."""
        nonlocal kills
        for _ in range(40):
            if done:
                return
            await asyncio.sleep(0.01 + rng.random() * 0.07)
            kills += await killer_conn.fetchval(
                # CASE: the filter must run before the function, never after.
                "SELECT count(*) FROM pg_stat_activity WHERE CASE WHEN application_name = $1 "
                "AND state <> 'idle' THEN pg_terminate_backend(pid) END",
                app,
            )

    run = uuid.uuid4().hex[:8]
    expected: dict[str, list[dict[str, Any]]] = {}

    async def writer(w: int) -> None:
        sid = f"t-{run}-{w}"
        mine = expected.setdefault(sid, [])
        session = store.session(sid)
        for i in range(40):
            if i % 9 == 8:
                popped = await retrying(session.pop_item, tries=100, pause=0.002)
                assert popped == mine.pop()
            new = [msg(f"{w}.{i}.0", w=w, i=i), msg(f"{w}.{i}.1", w=w, i=i)]
            await session.add_items(new)
            mine.extend(new)
            await retrying(session.commit, tries=100, pause=0.002)

    killer_task = asyncio.ensure_future(killer())
    try:
        await asyncio.gather(*(writer(w) for w in range(12)))
    finally:
        done = True
        await killer_task
        await killer_conn.close()
    stats = store.postgres.group_stats
    await store.close()
    assert kills > 0, "no backend was terminated: the test proved nothing"
    assert stats.largest > 1 and stats.transactions < stats.commits, stats
    check = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1)
    try:
        for sid, mine in expected.items():
            rows = await check.postgres.load(sid, None)
            keys = [key for key, _ in rows]
            assert keys == sorted(set(keys)), sid
            assert [json.loads(text) for _, text in rows] == mine, sid
            info = await check.session_info(sid)
            assert info is not None and info.item_count == len(mine), sid
    finally:
        await check.close()


async def _group_store(schema: str) -> PostgresStore:
    return await PostgresStore.open(PG_DSN, schema=schema, min_size=1, max_size=8)


@asynccontextmanager
async def _batches_held(schema: str) -> AsyncIterator[Any]:
    """Another connection whose open transaction locks the batches table for the block
    (or until it rolls back), so that commits wait for a send."""
    async with pg_connection(PG_DSN) as blocker:
        await blocker.execute("BEGIN")
        await blocker.execute(f'LOCK TABLE "{schema}".txs_batches IN SHARE ROW EXCLUSIVE MODE')
        yield blocker


def _batch(text: str) -> Batch:
    return Batch(uuid.uuid4().hex, False, (), (json.dumps(msg(text)),))


async def test_a_cancelled_commit_that_waits_for_a_send_is_withdrawn(
    pg: None, pg_schema: str
) -> None:
    store = await _group_store(pg_schema)
    backend = store.postgres
    run = uuid.uuid4().hex[:8]
    async with store, _batches_held(pg_schema) as blocker:
        sending = {
            f"c-{run}-{i}": asyncio.ensure_future(backend.apply(f"c-{run}-{i}", [_batch(str(i))]))
            for i in range(8)
        }
        await _until(lambda: len(backend._grouper.pending) > 0, "a commit waits for a send")
        waiting = backend._grouper.pending[-1]
        withdrawn = waiting.batches[0].batch_id
        task = sending.pop(waiting.session_id)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waiting not in backend._grouper.pending
        await blocker.execute("ROLLBACK")
        await asyncio.gather(*sending.values())
        assert await backend.applied(waiting.session_id, [withdrawn]) == set()
        assert await backend.load(waiting.session_id, None) == []
        assert backend._inflight == 0


async def test_the_counters_show_lone_commits_alone_and_a_rejected_group_isolated(
    pg: None, pg_schema: str
) -> None:
    store = await _group_store(pg_schema)
    backend = store.postgres
    run = uuid.uuid4().hex[:8]
    async with store:
        session = store.session(f"n-{run}")
        for i in range(5):
            await session.add_items([msg(str(i))])
            await session.commit()
        stats = backend.group_stats
        assert (stats.transactions, stats.commits, stats.largest) == (5, 5, 1)

        # A duplicate key the server rejects in the middle of a group: an item table
        # row that exists already (seq 1 of a session we pre-fill by hand).
        victim = f"n-{run}-victim"
        await backend.apply(victim, [_batch("first")])
        await store.pool.execute(
            f"UPDATE {backend.table('sessions')} SET next_seq = 1 WHERE session_id = $1", victim
        )
        async with _batches_held(pg_schema):
            tasks = [
                asyncio.ensure_future(backend.apply(f"n-{run}-{i}", [_batch(str(i))]))
                for i in range(10)
            ]
            tasks.append(asyncio.ensure_future(backend.apply(victim, [_batch("clash")])))
            await _until(lambda: len(backend._grouper.pending) >= 5, "commits wait for a send")
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert [type(o).__name__ for o in outcomes[:-1]] == ["NoneType"] * 10
        assert type(outcomes[-1]).__name__ == "StorageError", outcomes[-1]
        assert "duplicate key" in str(outcomes[-1])
        stats = backend.group_stats
        assert stats.isolated == 1 and stats.largest >= 5, stats


async def test_groups_through_pgbouncer_in_transaction_pooling_mode(
    pgbouncer_dsn: str,  # noqa: F811 - the fixture of tests/postgres/test_postgres.py
    fresh_schema: str,  # noqa: F811
) -> None:
    """Groups through PgBouncer (transaction mode, 2 server connections): the group
    statement (one per group) also as an unnamed statement (``statement_cache_size=0``)."""
    store = await bouncer_store(pgbouncer_dsn, fresh_schema)
    try:

        async def writer(k: int) -> None:
            session = store.session(f"bounce-{k}")
            for i in range(10):
                await session.add_items([msg(f"{k}.{i}.a"), msg(f"{k}.{i}.b")])
                await session.commit()

        await asyncio.gather(*(writer(k) for k in range(24)))
        for k in range(24):
            got = await store.session(f"bounce-{k}").get_items()
            assert got == [msg(f"{k}.{i}.{x}") for i in range(10) for x in "ab"], k
        stats = store.postgres.group_stats
        assert stats.largest > 1 and stats.isolated == 0, stats
    finally:
        await store.close()


async def test_commits_with_a_version_condition_or_a_catalogue_entry_take_the_transaction_path(
    pg: None, pg_schema: str
) -> None:
    """Like Batch.tail: a conditional batch is checked under the session's row lock in a
    transaction of its own, never in the shared append statement."""
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=4)
    backend = store.postgres
    try:
        session = store.session(f"v-{uuid.uuid4().hex[:8]}")
        await session.add_items([msg("plain")])
        await session.commit()
        assert backend.group_stats.commits == 1
        await session.get_items()
        await session.add_items([msg("conditional")])
        await session.commit(expected_version=session.version)
        session.set_info(user_id="u")
        await session.add_items([msg("with an entry")])
        await session.commit()
        assert backend.group_stats.commits == 1  # neither went through the group path
        assert len(await session.get_items()) == 3 and session.version == 3
    finally:
        await store.close()


async def test_a_hundred_sessions_committing_in_a_loop_never_leave_in_a_group_of_more_than_half(
    pg: None, pg_schema: str
) -> None:
    """The convoy ``_GROUP_SPLIT_MIN`` breaks: without the share bound, the callers of
    one group all commit again in one turn of the event loop and the groups grow to
    nearly every session (98 of 100 before the bound)."""
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=2, max_size=4)
    run = uuid.uuid4().hex[:8]

    async def writer(i: int) -> None:
        session = store.session(f"c-{run}-{i}")
        for turn in range(20):
            await session.add_items([msg(f"{i}.{turn}")])
            await session.commit()

    try:
        await asyncio.gather(*(writer(i) for i in range(100)))
        stats = store.postgres.group_stats
        assert stats.commits == 2000
        assert stats.transactions < 2000  # groups did form
        assert 16 < stats.largest <= 50, stats
    finally:
        await store.close()


def test_the_group_statement_refuses_an_item_text_holding_its_separator() -> None:
    """The items of a group travel joined by U+001E, which no JSON text holds
    unescaped. A text that holds it (not JSON: only a bug could send one) is refused
    before anything is sent, rather than split into items nobody staged."""
    from sessions.postgres.group import ITEM_SEPARATOR, _group_columns

    good = (None,) * 8
    columns = _group_columns(
        [("s1", "b1", ['{"a": "\\u001e"}', "{}"], 2, *good, None), ("s2", "b2", [], 0, *good, "L")]
    )
    assert columns[:3] == [("s1", "s2"), ("b1", "b2"), (2, 0)]
    assert columns[-1] == '{"a": "\\u001e"}' + ITEM_SEPARATOR + "{}"
    with pytest.raises(RuntimeError, match="U\\+001E"):
        _group_columns([("s1", "b1", ["{}" + ITEM_SEPARATOR + "{}"], 1, *good, None)])
