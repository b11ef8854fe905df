"""Minimal repros of bugs the reliability suite found.

"OPEN" ones fail until the bug is fixed; "FIXED" ones stay as regression tests.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sessions import RetryPolicy
from tests.conftest import Target

from .harness import pg_execute
from .invariant import make_batch
from .lost_connection import RowLock, app_name, terminate, wait_lock_wait


async def test_pg_backend_terminated_mid_statement_is_retried(pg: Target) -> None:
    """FIXED (sessions/postgres/connect.py, Connections._run): the server terminates our
    backend while a commit statement runs. asyncpg has already released the dead
    connection from the pool, so ``conn.terminate()`` in ``_run``'s ``finally`` raises
    ``InterfaceError: cannot call Connection.terminate(): connection has been released
    back to the pool``. That replaces the TransientStorageError, so the core does not
    retry: the commit fails with "unexpected InterfaceError; outcome unknown"."""
    name = app_name()
    store = await pg.open(server_settings={"application_name": name}, retry=RetryPolicy(attempts=3))
    sid = f"finding-{uuid.uuid4().hex[:8]}"
    s = store.session(sid)
    await s.add_items(make_batch(0, 0))
    await s.commit()
    await s.add_items(make_batch(0, 1))
    assert pg.pg_schema is not None
    async with RowLock(pg.pg_schema, sid) as lock:
        task = asyncio.ensure_future(s.commit())  # blocks on the row lock, in the server
        assert await wait_lock_wait(name)
        assert await terminate(name) >= 1
        await lock.release()
        try:
            await asyncio.wait_for(task, 30)  # must succeed on a retry
        finally:
            if s.has_pending:
                await s.rollback()
    assert len(await s.get_items()) == len(make_batch(0, 0)) + len(make_batch(0, 1))


async def test_pg_backend_connection_terminated_while_idle_is_retried(pg: Target) -> None:
    """FIXED (sessions/postgres/faults.py): a pooled connection terminated by the server
    while idle is sometimes reused; asyncpg then raises ``InternalClientError: cannot
    switch to state 12; another operation (2) is in progress``, which ``_classify``
    does not treat as a lost connection, so the commit is not retried and fails with
    "unexpected InternalClientError; outcome unknown" (about 1 commit in 10 here)."""
    name = app_name()
    store = await pg.open(
        server_settings={"application_name": name}, retry=RetryPolicy(attempts=3, initial_delay=0.0)
    )
    s = store.session(f"finding-{uuid.uuid4().hex[:8]}")
    failures = []
    for i in range(40):
        await s.add_items([{"i": i}])
        await terminate(name)
        try:
            await s.commit()
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{type(exc).__name__}: {exc}")
            await s.commit()
    assert not failures, failures[:3]
    assert [x["i"] for x in await s.get_items()] == list(range(40))
    await pg_execute("SELECT 1")


async def test_adjacent_lone_surrogates_round_trip_or_are_refused(target: Target) -> None:
    """FIXED (sessions/_model/serde.py, now refuses lone surrogates): a str holding a high surrogate followed by a low
    one as two separate code points (not valid Unicode, but a Python str) is stored
    through the ASCII-escape fallback as ``"\\ud83d\\ude00"``, which JSON decodes as
    ONE character, so the item silently changes (even the staged view):
    ``{"k": "\\ud83d\\ude00"}`` comes back as ``{"k": "😀"}``. Lone surrogates that are
    not adjacent round-trip fine. Either keep them exact or refuse them with
    InvalidItemError; never change them."""
    from sessions.errors import InvalidItemError

    store = await target.open()
    s = store.session(f"finding-{uuid.uuid4().hex[:8]}")
    item = {"k": "\ud83d\ude00", "\udbff\udc00": 1}
    try:
        await s.add_items([item])
    except InvalidItemError:
        assert not s.has_pending
        return
    await s.commit()
    got = (await s.get_items())[0]
    assert got == item, f"stored {item!r}, got back {got!r}"


async def test_autocommit_session_survives_a_pop_conflict(target: Target) -> None:
    """FIXED (sessions/_core.py, _autocommit_pop): when another writer removes the
    item an autocommit ``pop_item`` is popping on every attempt, CommitConflictError is
    raised (fine), but the stale pop stays staged. Every later autocommit write of that
    session then carries it and fails with CommitConflictError too (the session is
    stuck until rollback(), which also discards the new write). An autocommit write
    that failed should leave nothing staged that can never succeed."""
    from sessions.errors import CommitConflictError

    from .gate import GatedStore

    store = await target.open(retry=RetryPolicy(attempts=1))
    sid = f"finding-{uuid.uuid4().hex[:8]}"
    seed = store.session(sid)
    await seed.add_items([{"n": 0}, {"n": 1}])
    await seed.commit()
    gated = GatedStore(store)
    a = gated.session(sid, autocommit=True)
    thief = store.session(sid, autocommit=True)
    gated.gate.reset()
    gated.gate.pause = (1, "before")  # call 0 reads the newest item, call 1 applies the pop
    task = asyncio.ensure_future(a.pop_item())
    await asyncio.wait_for(gated.gate.reached.wait(), 10)
    assert await thief.pop_item() == {"n": 1}  # another writer takes it first
    gated.gate.release.set()
    with pytest.raises(CommitConflictError):
        await task
    gated.gate.pause = None
    try:
        await a.add_items([{"n": 2}])  # a plain append: must succeed
        assert await store.session(sid).get_items() == [{"n": 0}, {"n": 2}]
    finally:
        if a.has_pending:
            await a.rollback()


def test_failed_sqlite_open_leaves_nothing_running(tmp_path: Any) -> None:
    """FIXED (sessions/sqlite/backend.py, SQLiteBackend.open): when ``await conn`` fails (a
    missing directory, say), aiosqlite queues its own stop with a future of the
    current loop that nobody awaits; ``open`` raises at once, so if the loop closes
    next (end of a test, of ``asyncio.run``) the worker thread dies with
    ``RuntimeError: Event loop is closed``. Under pytest that surfaces as
    PytestUnhandledThreadExceptionWarning (an error here) in whatever test runs next.
    Deterministic: 20 of 20 tries. ``open`` should wait for the thread to stop."""
    import threading

    from sessions import SQLiteStore
    from sessions.errors import StorageError

    errors: list[str] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(repr(args.exc_value))
    try:
        for _ in range(5):
            before = set(threading.enumerate())
            loop = asyncio.new_event_loop()
            with pytest.raises(StorageError):
                loop.run_until_complete(SQLiteStore.open(str(tmp_path / "missing" / "x.db")))
            loop.close()
            for thread in set(threading.enumerate()) - before:
                thread.join(5)
    finally:
        threading.excepthook = hook
    assert not errors, f"{len(errors)} of 5 failed opens crashed their worker thread: {errors[0]}"


async def test_sqlite_group_commit_never_moves_updated_at_back(tmp_path: Any) -> None:
    """FIXED (sessions/sqlite/group.py, apply_group): a group commit read the time before
    ``BEGIN IMMEDIATE``, which waits while another process holds the write lock. A
    commit that process made meanwhile (a later time) was then followed by ours with
    the earlier time: ``updated_at`` went back before the session's newest batch record
    (found by the raw-row invariant in the soak's "many writers", SQLite), so a session
    could look idle for longer than it was (purge decides on ``updated_at``)."""
    import sqlite3
    import threading

    import sessions.sqlite.group as backend_module
    from sessions import SQLiteStore

    path = tmp_path / "clock.db"
    store = await SQLiteStore.open(path)
    seed = store.session("s")
    await seed.add_items([{"n": 0}])
    await seed.commit()
    other = _other_writer(path)
    entered = threading.Event()
    original = backend_module.apply_group

    def spy(conn: sqlite3.Connection, entries: Any) -> Any:
        entered.set()
        return original(conn, entries)

    busy, free = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        busy.set()
        free.wait(30)

    try:
        assert other.stdout is not None and other.stdin is not None
        assert await asyncio.to_thread(other.stdout.readline) == "locked\n"
        backend_module.apply_group = spy
        holder = asyncio.ensure_future(store.sqlite.run(hold))
        assert await asyncio.to_thread(busy.wait, 30)
        a, b = store.session("s"), store.session("t")
        await a.add_items([{"n": 1}])
        await b.add_items([{"n": 1}])
        commits = asyncio.gather(a.commit(), b.commit())  # one group of two
        await asyncio.sleep(0)
        free.set()
        assert await asyncio.to_thread(entered.wait, 30)  # the group is running
        other.stdin.write("go\n")
        other.stdin.flush()
        assert await asyncio.to_thread(other.stdout.readline) == "done\n"
        await holder
        await commits
    finally:
        backend_module.apply_group = original
        free.set()
        other.kill()
        other.wait(30)
        await store.close()
    conn = sqlite3.connect(path)
    (updated,) = conn.execute(
        "SELECT updated_at FROM txs_sessions WHERE session_id = 's'"
    ).fetchone()
    (newest,) = conn.execute(
        "SELECT max(committed_at) FROM txs_batches WHERE session_id = 's'"
    ).fetchone()
    conn.close()
    assert updated >= newest, f"updated_at {updated} is before the newest commit {newest}"


def _other_writer(path: Any) -> Any:
    """Another process: takes the write lock, then (when told) commits to session "s"
    the way a txsessions process does, stamping its own (later) time."""
    import subprocess
    import sys
    import textwrap

    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sqlite3, sys, time
                conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
                conn.execute("BEGIN IMMEDIATE")
                print("locked", flush=True)
                sys.stdin.readline()
                time.sleep(0.05)
                now = time.time()
                conn.execute("INSERT INTO txs_batches VALUES ('s', 'other', ?)", (now,))
                conn.execute("UPDATE txs_sessions SET updated_at = ? WHERE session_id = 's'", (now,))
                conn.execute("COMMIT")
                print("done", flush=True)
                """
            ),
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_pg_commit_never_moves_updated_at_back(pg: Target) -> None:
    """FIXED (sessions/postgres/sql.py, the commit SQL): a commit stamps the session with
    ``now()``, the time its transaction started. A commit that started first but
    reached the session row last (here: held by the real database at its first write
    while another writer committed) moved ``updated_at`` back before the other
    writer's commit. Same finding as the SQLite one above, on PostgreSQL."""
    import asyncpg

    from tests.conftest import PG_DSN

    from .harness import read_history

    store = await pg.open()
    sid = f"finding-{uuid.uuid4().hex[:8]}"
    s = store.session(sid)
    await s.add_items([{"n": 0}])
    await s.commit()
    await s.add_items([{"n": 1}])
    async with pg.hang(store, sid, "first") as h:
        task = asyncio.ensure_future(s.commit())  # its transaction starts now, then waits
        await h.reached()
        await asyncio.sleep(0.01)
        # Another writer, whose transaction starts later, commits to the session first
        # (past the test's trigger, which would hold it too).
        other = await asyncpg.connect(PG_DSN)
        try:
            await other.execute(f'SET search_path TO "{pg.pg_schema}"')
            await other.execute("SET session_replication_role = replica")
            await other.execute(
                "WITH b AS (INSERT INTO txs_batches VALUES ($1, 'other', now())) "
                "UPDATE txs_sessions SET updated_at = now() WHERE session_id = $1",
                sid,
            )
        finally:
            await other.close()
        h.release()
        await task
    history = await read_history(pg, sid)
    assert not [p for p in history.problems if "updated_at" in p], history.problems
