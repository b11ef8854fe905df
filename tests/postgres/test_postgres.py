"""PostgreSQL-only behaviour: pool ownership, identifiers, migrations under races,
backends killed mid-commit, many processes on one session, PgBouncer.

Runs against the real server (``conftest.PG_DSN``); each test that needs a fresh
schema makes (and drops) one of its own, the others share the run's ``pg_schema``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions import Batch, RetryPolicy
from sessions.errors import (
    CommitError,
    ConflictError,
    InvalidItemError,
    StorageError,
    StoreClosedError,
    TransientStorageError,
)
from tests.conftest import PG_DSN, require_postgres
from tests.helpers import hold_session_row, msg, pg_connection, retrying
from tests.provision.postgres import drop_schema

asyncpg = pytest.importorskip("asyncpg")

from sessions.postgres import (  # noqa: E402 - needs asyncpg
    MIGRATIONS,
    SCHEMA_VERSION,
    PostgresSession,
    PostgresStore,
)
from sessions.postgres.faults import _classify, _Phase  # noqa: E402 - needs asyncpg

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg() -> None:
    """Skip (or, in CI, fail) when no PostgreSQL answers. Sync, so it probes outside a loop."""
    require_postgres()


@pytest.fixture
async def fresh_schema(pg: None) -> AsyncIterator[str]:
    """A schema name nobody has used yet (it does not exist); dropped afterwards."""
    name = f"txs_t_{uuid.uuid4().hex[:12]}"
    yield name
    await drop_schema(name)


@pytest.fixture
def sid() -> str:
    return f"s-{uuid.uuid4().hex}"


async def _activity(app: str) -> list[Any]:
    conn = await asyncpg.connect(PG_DSN)
    try:
        rows: list[Any] = await conn.fetch(
            "SELECT pid, state FROM pg_stat_activity WHERE application_name = $1", app
        )
        return rows
    finally:
        await conn.close()


def _app() -> dict[str, Any]:
    return {"server_settings": {"application_name": f"txs_test_{uuid.uuid4().hex[:10]}"}}


async def open_terminable(schema: str, max_size: int, **options: Any) -> PostgresStore:
    """A store that retries quickly and often, as one whose backends get terminated must."""
    return await PostgresStore.open(
        PG_DSN,
        schema=schema,
        min_size=1,
        max_size=max_size,
        retry=RetryPolicy(attempts=8, initial_delay=0.001, max_delay=0.02),
        **options,
    )


async def _child(script: str, *args: str) -> asyncio.subprocess.Process:
    """A Python child running ``script`` with ``args``, from the repository root, its
    stderr piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, cwd=REPO, stderr=asyncio.subprocess.PIPE
    )


# ------------------------------------------------------------------ identifiers


BAD_IDENTIFIERS = [
    'a"b',
    "x; DROP TABLE t",
    "1abc",
    "a-b",
    "a b",
    "a" * 42,
    "é",
    "x'",
    "",
    "abc\n",
]


@pytest.mark.parametrize("bad", BAD_IDENTIFIERS)
async def test_bad_schema_or_prefix_is_refused_before_connecting(bad: str) -> None:
    # Port 1: nothing listens there, so a ValueError proves validation came first.
    dead = "postgresql://postgres@127.0.0.1:1/postgres"
    with pytest.raises(ValueError, match="schema") as info:
        await PostgresStore.open(dead, schema=bad)
    assert repr(bad) in str(info.value)
    if bad:  # an empty prefix is allowed (tables named sessions, items, ...)
        with pytest.raises(ValueError, match="table_prefix") as info:
            await PostgresStore.open(dead, table_prefix=bad)
        assert repr(bad) in str(info.value)
    with pytest.raises(ValueError, match="schema"):
        PostgresSession("s", dead, schema=bad)
    with pytest.raises(TypeError):
        await PostgresStore.open(dead, schema=None)  # type: ignore[arg-type]


async def test_bad_identifier_refused_by_from_pool_and_good_ones_accepted(
    fresh_schema: str, sid: str
) -> None:
    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=2)
    try:
        with pytest.raises(ValueError, match="table_prefix"):
            await PostgresStore.from_pool(pool, schema=fresh_schema, table_prefix='x";--')
        store = await PostgresStore.from_pool(pool, schema=fresh_schema, table_prefix="A_1")
        s = store.session(sid)
        await s.add_items([msg("hi")])
        await s.commit()
        await store.close()
        tables = await pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", fresh_schema
        )
        assert [r[0] for r in tables] == [
            "A_1batches",
            "A_1branches",
            "A_1hidden_items",
            "A_1items",
            "A_1quarantine",
            "A_1run_states",
            "A_1schema_version",
            "A_1session_tags",
            "A_1sessions",
            "A_1turns",
        ]
    finally:
        await pool.close()


async def test_unreachable_server_is_a_transient_error_with_known_outcome() -> None:
    with pytest.raises(TransientStorageError) as info:
        await PostgresStore.open("postgresql://postgres:secret@127.0.0.1:1/postgres")
    assert info.value.outcome_known is True
    assert "secret" not in str(info.value)  # the password is redacted


# ------------------------------------------------------------------ pool ownership


async def test_from_pool_store_leaves_the_callers_pool_open(pg_schema: str, sid: str) -> None:
    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=2)
    try:
        store = await PostgresStore.from_pool(pool, schema=pg_schema)
        assert store.pool is pool and not store.postgres.owns_pool
        s = store.session(sid)
        await s.add_items([msg("a")])
        await s.commit()
        await store.close()
        assert store.closed and not pool.is_closing()
        assert await pool.fetchval("SELECT 1") == 1
        with pytest.raises(StoreClosedError):
            await store.postgres.load(sid, None)
        again = await PostgresStore.from_pool(pool, schema=pg_schema)
        assert await again.session(sid).get_items() == [msg("a")]
        await again.close()
        assert not pool.is_closing()
    finally:
        await pool.close()


async def test_from_pool_close_waits_for_a_commit_in_flight(pg_schema: str, sid: str) -> None:
    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=3)
    blocker = await asyncpg.connect(PG_DSN)
    try:
        store = await PostgresStore.from_pool(pool, schema=pg_schema)
        s = store.session(sid)
        await s.add_items([msg("first")])
        await s.commit()
        # Hold the session row so the next commit waits inside the database.
        await hold_session_row(blocker, store, sid)
        await s.add_items([msg("second")])
        commit = asyncio.ensure_future(s.commit())
        await _wait_for_lock_waiter()
        close = asyncio.ensure_future(store.close())
        await asyncio.sleep(0.05)
        assert not close.done()  # close is waiting for the commit
        await blocker.execute("COMMIT")
        await commit
        await close
        check = await PostgresStore.from_pool(pool, schema=pg_schema)
        assert await check.session(sid).get_items() == [msg("first"), msg("second")]
        await check.close()
    finally:
        await blocker.close()
        await pool.close()


async def _wait_for_lock_waiter() -> None:
    """Until some backend waits on a lock (bounded). Uses a connection of its own:
    the pool under test may have none free, and a transaction would freeze the stats."""
    conn = await asyncpg.connect(PG_DSN)
    try:
        for _ in range(500):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)
    finally:
        await conn.close()
    raise AssertionError("no backend ever waited on the lock")


async def test_open_store_owns_and_closes_its_pool(pg_schema: str, sid: str) -> None:
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    pool = store.pool
    assert store.postgres.owns_pool
    s = store.session(sid)
    await s.add_items([msg("a")])
    await s.commit()
    await store.close()
    assert pool.is_closing()
    await store.close()  # idempotent


async def test_postgres_session_owns_its_store_or_borrows_one(pg_schema: str, sid: str) -> None:
    own = PostgresSession(sid, PG_DSN, schema=pg_schema)
    assert own.store is None  # opened lazily
    await own.add_items([msg("a")])
    await own.commit()
    store = own.store
    assert isinstance(store, PostgresStore)
    await own.close()
    assert store.closed and store.pool.is_closing()

    shared = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    try:
        borrowed = PostgresSession(sid, store=shared)
        assert await borrowed.get_items() == [msg("a")]
        await borrowed.close()
        assert not shared.closed and not shared.pool.is_closing()
        assert await shared.session(sid).get_items() == [msg("a")]
    finally:
        await shared.close()
    with pytest.raises(TypeError, match="dsn cannot be combined with store="):
        PostgresSession(sid, PG_DSN, store=shared)
    with pytest.raises(TypeError, match="schema and table_prefix cannot be combined with store="):
        PostgresSession(sid, store=shared, schema="x", table_prefix="y_")
    with pytest.raises(TypeError, match="dsn"):
        PostgresSession(sid)


# ------------------------------------------------------------------ round trip


async def test_items_round_trip_exactly(pg_schema: str, sid: str) -> None:
    items = [
        msg("nul \u0000 inside", extra="\u0000"),
        msg("emoji 😀👩‍👩‍👧‍👦 and 𝄞, combining e\u0301, RTL \u202e"),
        msg("huge " + "x" * 3_000_000 + "é" * 500_000),
        {"z": 1, "a": 2, "m": [1.5, -0.0, 2**62, None, True, {"k": "\\"}], "": "empty key"},
        msg("quotes ' \" and SQL ; -- /* */ $1 $$"),
    ]
    writer = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    reader = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    try:
        s = writer.session(sid)
        await s.add_items(items)
        await s.commit()
        got = await reader.session(sid).get_items()  # from the database, not the stage
        assert got == items
        assert [list(item) for item in got] == [list(item) for item in items]  # key order
        assert json.dumps(got, ensure_ascii=True) == json.dumps(items, ensure_ascii=True)
        # Lone surrogates are not Unicode text: refused up front, never stored altered.
        with pytest.raises(InvalidItemError, match="lone surrogate"):
            await s.add_items([msg("lone surrogates \ud800 \udfff \udc80\ud800")])
    finally:
        await writer.close()
        await reader.close()


# ------------------------------------------------------------------ migrations


async def test_twenty_concurrent_opens_on_a_fresh_schema(fresh_schema: str, sid: str) -> None:
    stores = await asyncio.gather(
        *(
            PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1)
            for _ in range(20)
        )
    )
    try:
        for i, store in enumerate(stores):
            s = store.session(sid)
            await s.add_items([msg(str(i))])
            await s.commit()
        assert await stores[0].session(sid).get_items() == [msg(str(i)) for i in range(20)]
        rows = await stores[0].pool.fetch(
            f"SELECT version FROM {stores[0].postgres.table('schema_version')}"
        )
        assert [r[0] for r in rows] == [number for number, _ in MIGRATIONS]
    finally:
        await asyncio.gather(*(store.close() for store in stores))


_MIGRATE_CHILD = """
import asyncio, sys, time
from sessions.postgres import PostgresStore

async def main(dsn, schema, sid, start_at, n):
    time.sleep(max(0.0, start_at - time.time()))
    store = await PostgresStore.open(dsn, schema=schema, min_size=1, max_size=1)
    s = store.session(sid)
    await s.add_items([{"child": n}])
    await s.commit()
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])))
"""


async def test_eight_processes_migrate_one_fresh_schema_at_once(
    fresh_schema: str, sid: str
) -> None:
    start_at = time.time() + 3.0  # all children start the schema setup together
    procs = [
        await _child(_MIGRATE_CHILD, PG_DSN, fresh_schema, sid, str(start_at), str(n))
        for n in range(8)
    ]
    for proc in procs:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
    store = await PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1)
    try:
        got = await store.session(sid).get_items()
        assert sorted(item["child"] for item in got) == list(range(8))
        versions = await store.pool.fetch(
            f"SELECT version FROM {store.postgres.table('schema_version')}"
        )
        assert [r[0] for r in versions] == [number for number, _ in MIGRATIONS]
    finally:
        await store.close()


async def test_newer_schema_version_is_refused(fresh_schema: str) -> None:
    store = await PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1)
    table = store.postgres.table("schema_version")
    await store.pool.execute(f"INSERT INTO {table} (version) VALUES ($1)", SCHEMA_VERSION + 1)
    await store.close()
    with pytest.raises(StorageError, match="newer"):
        await PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1)


# ------------------------------------------------------------------ faults


def test_error_classification() -> None:
    before, after = _Phase(), _Phase()
    after.commit_sent = True
    exc = asyncpg.exceptions
    cases: list[tuple[BaseException, type[StorageError], bool | None, bool | None]] = [
        # (error, class, outcome_known before the commit was sent, ... after)
        (exc.ConnectionDoesNotExistError("gone"), TransientStorageError, True, False),
        (exc.AdminShutdownError("terminating"), TransientStorageError, True, False),
        (exc.CannotConnectNowError("starting up"), TransientStorageError, True, False),
        (exc.InterfaceError("cannot perform operation: connection is closed"),
         TransientStorageError, True, False),
        (ConnectionResetError("reset"), TransientStorageError, True, False),
        (asyncio.TimeoutError(), TransientStorageError, True, False),
        (exc.SerializationError("serialize"), TransientStorageError, True, True),
        (exc.DeadlockDetectedError("deadlock"), TransientStorageError, True, True),
        (exc.UniqueViolationError("dup"), StorageError, None, None),
        (exc.RaiseError("poisoned item"), StorageError, None, None),
        (exc.InterfaceError("another operation is in progress"), StorageError, None, None),
    ]  # fmt: skip
    for error, cls, known_before, known_after in cases:
        for phase, known in ((before, known_before), (after, known_after)):
            got = _classify(error, "commit", phase)
            assert type(got) is cls, (error, got)
            if isinstance(got, TransientStorageError):
                assert got.outcome_known is known, (error, phase.commit_sent)
    assert _classify(ValueError("not ours"), "commit", before) is None


async def test_cancelled_apply_leaves_nothing_running_or_open_on_the_server(
    pg_schema: str, sid: str
) -> None:
    """Cancel an apply that waits inside its transaction: the server statement is
    cancelled and rolled back (or the connection terminated) before the connection
    returns to the pool, so nothing commits later when the lock is released."""
    kw = _app()
    app = kw["server_settings"]["application_name"]
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1, **kw)
    async with store, pg_connection(PG_DSN) as blocker:
        s = store.session(sid)
        await s.add_items([msg("a"), msg("b")])
        await s.commit()
        rows = await store.postgres.load(sid, None)
        for two_batches in (True, False):  # explicit-transaction path, one-statement path
            await hold_session_row(blocker, store, sid)
            item = json.dumps(msg("never"))
            if two_batches:
                batches = [
                    Batch("b1", False, (rows[-1][0],), (item,)),
                    Batch("b2", False, (), (item,)),
                ]
            else:
                batches = [Batch("b3", False, (), (item,))]
            task = asyncio.ensure_future(store.postgres.apply(sid, batches))
            await _wait_for_lock_waiter()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # While the blocker still holds the lock: nothing of ours is waiting,
            # running or sitting in a transaction on the server.
            assert all(r["state"] == "idle" for r in await _activity(app))
            await blocker.execute("ROLLBACK")
            assert await store.postgres.applied(sid, ["b1", "b2", "b3"]) == set()
            assert await store.session(sid).get_items() == [msg("a"), msg("b")]
        await s.add_items([msg("c")])
        await s.commit()  # the pool is usable
        assert await store.session(sid).get_items() == [msg("a"), msg("b"), msg("c")]


async def test_command_timeout_while_locked_then_commit_again_applies_once(
    pg_schema: str, sid: str
) -> None:
    store = await PostgresStore.open(
        PG_DSN,
        schema=pg_schema,
        min_size=1,
        max_size=2,
        command_timeout=0.2,
        retry=RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.01),
    )
    async with store, pg_connection(PG_DSN) as blocker:
        s = store.session(sid)
        await s.add_items([msg("a")])
        await s.commit()
        await hold_session_row(blocker, store, sid)
        await s.add_items([msg("b")])
        with pytest.raises(CommitError) as info:
            await s.commit()
        assert isinstance(info.value.__cause__, TransientStorageError)
        await blocker.execute("ROLLBACK")
        await s.commit()
        assert await store.session(sid).get_items() == [msg("a"), msg("b")]
        info_row = await store.session_info(sid)
        assert info_row is not None and info_row.item_count == 2


async def test_pop_of_an_item_already_removed_is_a_conflict(pg_schema: str, sid: str) -> None:
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    try:
        s = store.session(sid)
        await s.add_items([msg("a"), msg("b")])
        await s.commit()
        rows = await store.postgres.load(sid, None)
        await store.postgres.apply(sid, [Batch("p1", False, (rows[1][0],), ())])
        with pytest.raises(ConflictError):
            await store.postgres.apply(
                sid, [Batch("p2", False, (rows[0][0], rows[1][0]), ('{"n":1}',))]
            )
        assert await store.postgres.load(sid, None) == [rows[0]]  # rolled back whole
        assert await store.postgres.applied(sid, ["p1", "p2"]) == {"p1"}
    finally:
        await store.close()


async def test_apply_skips_batches_already_applied_on_both_paths(pg_schema: str, sid: str) -> None:
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    try:
        backend = store.postgres
        a = Batch("a", False, (), ('{"n":1}', '{"n":2}'))
        await backend.apply(sid, [a])
        await backend.apply(sid, [a])  # one-statement path: skipped
        rows = await backend.load(sid, None)
        b = Batch("b", False, (rows[-1][0],), ('{"n":3}',))
        await backend.apply(sid, [a, b])  # transaction path: a skipped, b applied
        await backend.apply(sid, [a, b])  # both skipped (b's pop is not re-checked)
        c = Batch("c", True, (), ('{"n":4}',))
        await backend.apply(sid, [c])
        await backend.apply(sid, [b, c])  # a clear applied twice would be visible
        assert [text for _, text in await backend.load(sid, None)] == ['{"n":4}']
        assert await backend.applied(sid, ["a", "b", "c", "d"]) == {"a", "b", "c"}
        info = await store.session_info(sid)
        assert info is not None and info.item_count == 1
    finally:
        await store.close()


async def test_applied_waits_for_a_commit_still_in_flight(pg_schema: str, sid: str) -> None:
    """A transaction that inserted the batch id but has not finished (a statement whose
    connection we lost, still running on the server) must not be reported as "not
    applied": it may commit a moment later."""
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=2)
    batches = store.postgres.table("batches")
    async with store, pg_connection(PG_DSN) as other:
        for outcome, expected in (("COMMIT", {"z"}), ("ROLLBACK", set())):
            batch_id = "z" if outcome == "COMMIT" else "y"
            await other.execute("BEGIN")
            await other.execute(
                f"INSERT INTO {batches} (session_id, batch_id, committed_at) "
                "VALUES ($1, $2, now())",
                sid,
                batch_id,
            )
            probe = asyncio.ensure_future(store.postgres.applied(sid, [batch_id, "never"]))
            await _wait_for_lock_waiter()
            assert not probe.done()
            await other.execute(outcome)
            assert await probe == ({batch_id} if expected else set())
        # the probe wrote nothing
        assert await store.postgres.applied(sid, ["never", "y"]) == set()
        assert (
            await store.pool.fetchval(f"SELECT count(*) FROM {batches} WHERE session_id = $1", sid)
            == 1
        )


async def test_backends_terminated_mid_commit_lose_and_duplicate_nothing(
    pg_schema: str, sid: str
) -> None:
    """200 commits (every 7th with a pop, so both commit paths) while a killer task
    terminates our pool's backends at random moments during commits."""
    kw = _app()
    app = kw["server_settings"]["application_name"]
    store = await open_terminable(pg_schema, 2, **kw)
    backend = store.postgres
    in_apply = asyncio.Event()
    calls = 0
    real_apply = backend.apply

    async def apply(session_id: str, batches: Any) -> None:
        nonlocal calls
        calls += 1
        in_apply.set()
        try:
            await real_apply(session_id, batches)
        finally:
            in_apply.clear()

    backend.apply = apply  # type: ignore[method-assign]
    killer_conn = await asyncpg.connect(PG_DSN)
    done = False
    kills = 0
    rng = random.Random(1234)

    async def killer() -> None:
        """At most one strike per apply attempt, on half of them, at a random moment."""
        nonlocal kills
        seen = 0
        while not done:
            try:
                await asyncio.wait_for(in_apply.wait(), 0.5)
            except asyncio.TimeoutError:
                continue
            if calls == seen:
                await asyncio.sleep(0.001)
                continue
            seen = calls
            if rng.random() < 0.5:
                continue
            await asyncio.sleep(rng.random() * 0.004)
            killed = await killer_conn.fetchval(
                # CASE: the filter must run before the function, never after.
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE CASE WHEN application_name = $1 THEN pg_terminate_backend(pid) END",
                app,
            )
            kills += killed

    expected: list[dict[str, Any]] = []
    killer_task = asyncio.ensure_future(killer())
    try:
        s = store.session(sid)
        for i in range(200):
            if i % 7 == 6:
                popped = await retrying(s.pop_item, tries=50, pause=0.005)
                assert popped == expected.pop()
            new = [msg(f"{i}.0", i=i), msg(f"{i}.1", i=i)]
            await s.add_items(new)
            expected.extend(new)
            await retrying(s.commit, tries=50, pause=0.005)
    finally:
        done = True
        await killer_task
        await killer_conn.close()
    # The faults were real: backends died, and apply ran more often than there were
    # commits (the core retried).
    assert kills > 0 and calls > 200, (kills, calls)
    check = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1)
    try:
        rows = await check.postgres.load(sid, None)
        keys = [key for key, _ in rows]
        assert keys == sorted(set(keys))
        assert [json.loads(text) for _, text in rows] == expected
        info = await check.session_info(sid)
        assert info is not None and info.item_count == len(expected)
        assert all(r["state"] != "idle in transaction" for r in await _activity(app))
    finally:
        await check.close()
        await store.close()


# ------------------------------------------------------------------ concurrency


_WRITER_CHILD = """
import asyncio, json, sys, uuid
from sessions import Batch
from sessions.postgres import PostgresStore

async def main(dsn, schema, sid, p, batches):
    store = await PostgresStore.open(dsn, schema=schema, min_size=1, max_size=4)

    async def session_writer(t):
        s = store.session(sid)
        for b in range(batches):
            await s.add_items([{"p": p, "t": t, "b": b, "n": n} for n in range(3)])
            await s.commit()

    async def raw_writer(t):
        # Two batches per apply: the explicit-transaction path.
        for b in range(0, batches, 2):
            await store.backend.apply(sid, [
                Batch(uuid.uuid4().hex, False, (),
                      tuple(json.dumps({"p": p, "t": t, "b": bb, "n": n}) for n in range(3)))
                for bb in (b, b + 1)
            ])

    await asyncio.gather(*(session_writer(t) if t % 2 == 0 else raw_writer(t) for t in range(4)))
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""


async def test_four_processes_four_tasks_one_session_contiguous_batches(
    pg_schema: str, sid: str
) -> None:
    n_proc, n_batches = 4, 16
    procs = [
        await _child(_WRITER_CHILD, PG_DSN, pg_schema, sid, str(p), str(n_batches))
        for p in range(n_proc)
    ]
    for proc in procs:
        _, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, err.decode()
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1)
    try:
        rows = await store.postgres.load(sid, None)
        info = await store.session_info(sid)
    finally:
        await store.close()
    items = [json.loads(text) for _, text in rows]
    assert len(items) == n_proc * 4 * n_batches * 3
    assert info is not None and info.item_count == len(items)
    keys = [key for key, _ in rows]
    assert keys == list(range(keys[0], keys[0] + len(keys)))  # no gaps, no reuse
    seen: set[tuple[int, int, int]] = set()
    last_b: dict[tuple[int, int], int] = {}
    for start in range(0, len(items), 3):
        chunk = items[start : start + 3]
        head = (chunk[0]["p"], chunk[0]["t"], chunk[0]["b"])
        # every batch is whole and contiguous, in order
        assert [(c["p"], c["t"], c["b"], c["n"]) for c in chunk] == [(*head, n) for n in range(3)]
        assert head not in seen
        seen.add(head)
        # each writer's batches appear in the order it committed them
        assert last_b.get(head[:2], -1) < head[2]
        last_b[head[:2]] = head[2]
    assert len(seen) == n_proc * 4 * n_batches


async def test_clears_racing_appends_never_leave_stale_items(pg_schema: str, sid: str) -> None:
    """A clear locks the session row before deleting, so an append committed while it
    waited is deleted too; item_count always equals the rows stored."""
    stores = [
        await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1) for _ in range(5)
    ]
    try:

        async def appender(k: int) -> None:
            s = stores[k].session(sid)
            for i in range(30):
                await s.add_items([msg(f"{k}.{i}", kind="append")])
                await s.commit()

        async def clearer() -> None:
            s = stores[4].session(sid)
            for c in range(10):
                await s.clear_session()
                await s.add_items([msg(f"clear {c}", kind="clear", c=c)])
                await s.commit()
                await asyncio.sleep(0)

        await asyncio.gather(*(appender(k) for k in range(4)), clearer())
        rows = await stores[0].postgres.load(sid, None)
        items = [json.loads(text) for _, text in rows]
        assert items[0]["kind"] == "clear" and items[0]["c"] == 9
        assert [it["kind"] for it in items[1:]] == ["append"] * (len(items) - 1)
        info = await stores[0].session_info(sid)
        assert info is not None and info.item_count == len(items)
    finally:
        for store in stores:
            await store.close()


# ------------------------------------------------------------------ statement cache / PgBouncer


async def test_statement_cache_size_zero_uses_no_named_prepared_statements(
    pg_schema: str, sid: str
) -> None:
    async def named_statements(**options: Any) -> int:
        store = await PostgresStore.open(
            PG_DSN, schema=pg_schema, min_size=1, max_size=1, **options
        )
        try:
            s = store.session(sid)
            await s.add_items([msg("a"), msg("b")])
            await s.commit()
            await s.pop_item()
            await s.commit()
            await store.list_sessions()
            assert (await store.session(sid).get_items())[-1] == msg("a")
            count: int = await store.pool.fetchval("SELECT count(*) FROM pg_prepared_statements")
            return count
        finally:
            await store.close()

    assert await named_statements() > 0  # the default cache does prepare (control)
    assert await named_statements(statement_cache_size=0) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)


@pytest.fixture
def pgbouncer_dsn(pg: None) -> Iterator[str]:
    """A PgBouncer in transaction pooling mode on 127.0.0.1 in front of PG_DSN."""
    if PGBOUNCER is None:
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    from urllib.parse import urlsplit

    target = urlsplit(PG_DSN)
    if target.password:
        pytest.skip("the PgBouncer test supports password-less (trust) DSNs only")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="txs_pgbouncer_")
    os.chmod(tmp, 0o755)
    ini = Path(tmp, "pgbouncer.ini")
    dbname = (target.path or "/postgres").lstrip("/") or "postgres"
    ini.write_text(
        "[databases]\n"
        f"{dbname} = host={target.hostname or '127.0.0.1'} port={target.port or 5432} "
        f"user={target.username or 'postgres'} dbname={dbname}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir =\nauth_type = any\npool_mode = transaction\n"
        "default_pool_size = 2\nmax_client_conn = 50\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    os.chmod(ini, 0o644)
    cmd = [PGBOUNCER, str(ini)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        cmd[1:1] = ["-u", "postgres"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"pgbouncer exited with {proc.returncode}: {out}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            pytest.fail("pgbouncer did not start listening")
        yield f"postgresql://{target.username or 'postgres'}@127.0.0.1:{port}/{dbname}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


async def bouncer_store(dsn: str, schema: str) -> PostgresStore:
    """A store through PgBouncer: 6 clients, unnamed statements (``statement_cache_size=0``)."""
    return await PostgresStore.open(
        dsn, schema=schema, min_size=1, max_size=6, statement_cache_size=0
    )


async def test_pgbouncer_transaction_pooling(pgbouncer_dsn: str, fresh_schema: str) -> None:
    """Through PgBouncer (transaction mode, 2 server connections for 6 clients) with
    statement_cache_size=0: migrations, both commit paths, admin, concurrency."""
    store = await bouncer_store(pgbouncer_dsn, fresh_schema)
    try:

        async def writer(k: int) -> None:
            s = store.session(f"bouncer-{k}")
            for i in range(20):
                await s.add_items([msg(f"{k}.{i}.a"), msg(f"{k}.{i}.b")])
                if i % 5 == 4:
                    await s.pop_item()
                await s.commit()

        await asyncio.gather(*(writer(k) for k in range(6)))
        for k in range(6):
            got = await store.session(f"bouncer-{k}").get_items()
            want: list[dict[str, Any]] = []
            for i in range(20):
                want += [msg(f"{k}.{i}.a"), msg(f"{k}.{i}.b")]
                if i % 5 == 4:
                    want.pop()
            assert got == want
        listed = [info.session_id for info in await store.list_sessions()]
        assert listed == [f"bouncer-{k}" for k in range(6)]
        assert await store.delete_session("bouncer-0")
        assert await store.session_info("bouncer-0") is None
    finally:
        await store.close()


# ------------------------------------------------------------------ pool reset


async def test_pool_reset_is_skipped_only_for_our_own_idle_connections(
    pg_schema: str, sid: str
) -> None:
    store = await PostgresStore.open(PG_DSN, schema=pg_schema, min_size=1, max_size=1)
    try:
        pool = store.pool
        # Someone else using the store's pool changes session state: it must be reset.
        async with pool.acquire() as conn:
            await conn.execute("SET application_name = 'dirty'")
            pid = conn.get_server_pid()
        async with pool.acquire() as conn:
            assert conn.get_server_pid() == pid  # the same (only) connection
            assert await conn.fetchval("SHOW application_name") != "dirty"
        # Our own operations go back idle, outside any transaction, with clean state.
        session = store.session(sid)
        await session.add_items([msg("x")])
        await session.commit()
        assert await session.get_items() == [msg("x")]
        async with pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW application_name") != "dirty"
        skipper = store.postgres._reset_skipper
        assert skipper is not None and not skipper._ours  # no stale marks left behind
    finally:
        await store.close()


async def test_create_false_creates_nothing(fresh_schema: str, sid: str) -> None:
    with pytest.raises(StorageError, match="no txsessions tables"):
        await PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1, create=False)
    conn = await asyncpg.connect(PG_DSN)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", fresh_schema)
    finally:
        await conn.close()
    assert exists is None, "create=False created the schema"
    store = await PostgresStore.open(PG_DSN, schema=fresh_schema, min_size=1, max_size=1)
    await store.close()
    again = await PostgresStore.open(
        PG_DSN, schema=fresh_schema, min_size=1, max_size=1, create=False
    )
    await again.close()
