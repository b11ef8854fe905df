"""SQLite-only behaviour: file setup, WAL, durability setting, ownership, schema races."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sessions import SQLiteSession, SQLiteStore
from sessions.errors import CommitError, StorageError
from sessions.sqlite import MIGRATIONS
from tests.helpers import msg
from tests.provision.sqlite import old_database


async def test_file_database_uses_wal_and_full_sync_by_default(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db")
    try:

        def pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            busy = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            return mode, sync, busy

        mode, sync, busy = await store.sqlite.run(pragmas)
        assert mode == "wal"
        assert sync == 2  # FULL
        assert busy == 5000
    finally:
        await store.close()


async def test_normal_durability_is_opt_in(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db", synchronous="NORMAL", busy_timeout=1.5)
    try:
        sync = await store.sqlite.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        busy = await store.sqlite.run(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0])
        assert (sync, busy) == (1, 1500)
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"synchronous": "OFF"}, ValueError, "synchronous"),
        ({"busy_timeout": -1}, ValueError, "busy_timeout"),
        ({"busy_timeout": "5"}, TypeError, "busy_timeout"),
    ],
)
async def test_bad_options_are_refused(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        await SQLiteStore.open(tmp_path / "a.db", **kwargs)


async def test_unopenable_path_gives_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "a.db"
    with pytest.raises(StorageError, match="cannot open SQLite database"):
        await SQLiteStore.open(missing)
    with pytest.raises(ValueError, match="db_path"):
        await SQLiteStore.open("")
    with pytest.raises(TypeError, match="db_path"):
        await SQLiteStore.open(42)  # type: ignore[arg-type]


async def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = await SQLiteStore.open(path)
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE txs_schema SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StorageError, match="schema version 99 is newer"):
        await SQLiteStore.open(path)


async def test_sqlite_session_owns_and_closes_its_store(tmp_path: Path) -> None:
    session = SQLiteSession("s", tmp_path / "a.db")
    await session.add_items([msg("1")])
    await session.commit()
    store = session.store
    assert store is not None and not store.closed
    await session.close()
    assert store.closed
    async with SQLiteSession("s", tmp_path / "a.db") as again:
        assert await again.get_items() == [msg("1")]


async def test_sqlite_session_in_memory_by_default() -> None:
    async with SQLiteSession("s") as session:
        await session.add_items([msg("1")])
        await session.commit()
        assert await session.get_items() == [msg("1")]


async def test_many_sessions_share_one_connection(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db")
    try:
        sessions = [store.session(f"s{i}") for i in range(1000)]
        for i, session in enumerate(sessions):
            await session.add_items([msg(str(i))])
        await asyncio.gather(*(s.commit() for s in sessions))
        assert await sessions[123].get_items() == [msg("123")]
        threads = [t for t in __import__("threading").enumerate() if "Thread" in type(t).__name__]
        assert len(threads) < 10  # one worker thread for the store, not one per session
    finally:
        await store.close()


async def test_metadata_is_kept_per_session(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db")
    try:
        session = store.session("meta")
        await session.add_items([msg("1"), msg("2"), msg("3")])
        await session.commit()
        await session.pop_item()
        await session.commit()
        info = await store.session_info("meta")
        assert info is not None and info.item_count == 2
        assert info.created_at <= info.updated_at
        await session.clear_session()
        await session.commit()
        info = await store.session_info("meta")
        assert info is not None and info.item_count == 0
    finally:
        await store.close()


def test_schema_creation_is_safe_when_many_processes_start_at_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    child = textwrap.dedent(
        f"""
        import asyncio, sys
        from sessions import SQLiteStore
        async def main():
            store = await SQLiteStore.open({str(path)!r})
            s = store.session("race")
            await s.add_items([{{"role": "user", "content": sys.argv[1]}}])
            await s.commit()
            await store.close()
        asyncio.run(main())
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", child, str(i)], stderr=subprocess.PIPE)
        for i in range(8)
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    conn = sqlite3.connect(path)
    contents = sorted(r[0] for r in conn.execute("SELECT data FROM txs_items"))
    assert len(contents) == 8
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # Each migration applied exactly once.
    versions = [row[0] for row in conn.execute("SELECT version FROM txs_schema ORDER BY version")]
    assert versions == [number for number, _ in MIGRATIONS]
    conn.close()


async def test_group_commit_keeps_every_session_contiguous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessions.sqlite.group as backend_module

    sizes: list[int] = []
    original = backend_module.apply_group

    def spy(conn: sqlite3.Connection, entries: Any) -> Any:
        sizes.append(len(entries))
        return original(conn, entries)

    monkeypatch.setattr(backend_module, "apply_group", spy)
    path = tmp_path / "group.db"
    store = await SQLiteStore.open(path)
    try:

        async def writer(session_id: str, n: int) -> None:
            session = store.session(session_id)
            for i in range(n):
                await session.add_items([{"k": f"{session_id}-{i}-{j}"} for j in range(3)])
                await session.commit()

        # 60 writers on 40 sessions: some sessions have two writers at once.
        await asyncio.gather(*(writer(f"s{i % 40}", 15) for i in range(60)))
    finally:
        await store.close()
    assert max(sizes) > 1, "no commits were grouped: the test did not exercise group commit"
    conn = sqlite3.connect(path)
    for sid, count, next_seq in conn.execute(
        "SELECT session_id, item_count, next_seq FROM txs_sessions"
    ):
        seqs = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM txs_items WHERE session_id = ? ORDER BY seq", (sid,)
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1)), sid
        assert count == len(seqs) and next_seq == len(seqs) + 1, sid
        contents = [
            r[0]
            for r in conn.execute(
                "SELECT data FROM txs_items WHERE session_id = ? ORDER BY seq", (sid,)
            )
        ]
        for start in range(0, len(contents), 3):  # every batch whole and in order
            parts = [c.split("-") for c in contents[start : start + 3]]
            assert [p[2][:1] for p in parts] == ["0", "1", "2"], (sid, contents[start : start + 3])
            assert len({p[1] for p in parts}) == 1
    total = conn.execute("SELECT count(*) FROM txs_items").fetchone()[0]
    assert total == 60 * 15 * 3
    conn.close()


async def test_a_failing_commit_in_a_group_rolls_back_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import sessions.sqlite.group as backend_module
    from sessions import Batch
    from sessions.errors import ConflictError

    groups: list[list[str]] = []
    original = backend_module.apply_group

    def spy(conn: sqlite3.Connection, entries: Any) -> Any:
        groups.append([session_id for session_id, _ in entries])
        return original(conn, entries)

    monkeypatch.setattr(backend_module, "apply_group", spy)
    path = tmp_path / "group.db"
    store = await SQLiteStore.open(path)
    backend = store.sqlite
    busy, free = threading.Event(), threading.Event()

    def hold_the_worker(conn: sqlite3.Connection) -> None:
        busy.set()
        free.wait(30)

    try:
        holder = asyncio.ensure_future(backend.run(hold_the_worker))
        assert await asyncio.to_thread(busy.wait, 30)
        # The worker is busy: the six commits below queue up and form one group.
        bad = Batch("bad-1", False, (999_999,), ('{"x":1}',))  # pops a row that does not exist
        good = [Batch(f"good-{i}", False, (), ('{"y":1}',)) for i in range(5)]
        commits = [
            asyncio.ensure_future(backend.apply("g-bad", [bad])),
            *(asyncio.ensure_future(backend.apply(f"g{i}", [b])) for i, b in enumerate(good)),
        ]
        await asyncio.sleep(0)  # each commit joins the waiting group
        free.set()
        await holder
        results = await asyncio.gather(*commits, return_exceptions=True)
        assert groups[0] == ["g-bad", "g0", "g1", "g2", "g3", "g4"], groups
        assert isinstance(results[0], ConflictError), results[0]
        assert all(r is None for r in results[1:]), results
        # The same batch id twice (in one group or across groups) is applied once.
        await asyncio.gather(backend.apply("g0", [good[0]]), backend.apply("g0", [good[0]]))
    finally:
        free.set()
        await store.close()
    conn = sqlite3.connect(path)
    count = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    assert count("SELECT count(*) FROM txs_items WHERE session_id = 'g-bad'") == 0
    assert count("SELECT count(*) FROM txs_batches WHERE batch_id = 'bad-1'") == 0
    assert count("SELECT count(*) FROM txs_items WHERE session_id LIKE 'g_'") == 5
    assert count("SELECT count(*) FROM txs_items WHERE session_id = 'g0'") == 1
    conn.close()


# ------------------------------------------------------------------ the worker thread


class _KillWorker:
    """A job that kills the worker thread itself (as a bug in a job runner would)."""

    def run(self, conn: sqlite3.Connection) -> None:
        raise SystemExit("worker killed by the test")

    def fail(self, error: BaseException) -> None:
        pass


async def test_a_dead_worker_thread_is_an_error_for_every_later_call_never_a_wait(
    tmp_path: Path,
) -> None:
    from sessions.sqlite.worker import WorkerStoppedError

    store = await SQLiteStore.open(tmp_path / "a.db", commit_timeout=60)
    try:
        session = store.session("s")
        await session.add_items([msg("1")])
        await session.commit()
        store.sqlite._worker.submit(_KillWorker())
        await session.add_items([msg("2")])
        # Not bounded by commit_timeout (60 s): the dead thread is detected at once.
        with pytest.raises(CommitError) as info:
            await asyncio.wait_for(session.commit(), 5)
        assert info.value.outcome_known is True
        assert isinstance(info.value.__cause__, WorkerStoppedError)
        assert "worker killed by the test" in str(info.value)
        assert session.pending.items == 1  # nothing lost
        with pytest.raises(WorkerStoppedError):
            await asyncio.wait_for(store.sqlite.run(lambda c: 1), 5)
        await session.rollback()
    finally:
        await store.close()


async def test_many_commits_in_a_row_on_one_worker(tmp_path: Path) -> None:
    """The worker survives every kind of job: the aiosqlite 0.22.0 failure mode (the
    thread died after the first commit, the second waited forever) cannot recur."""
    store = await SQLiteStore.open(tmp_path / "a.db")
    try:
        session = store.session("s")
        for n in range(50):
            await session.add_items([msg(str(n))])
            await asyncio.wait_for(session.commit(), 10)
            if n % 10 == 0:
                await asyncio.wait_for(session.pop_item(), 10)
                await asyncio.wait_for(session.commit(), 10)
        assert len(await session.get_items()) == 45
        with pytest.raises(StorageError, match="no such table"):  # a failing job: worker lives
            await store.sqlite.run(lambda c: c.execute("SELECT * FROM no_such_table"))
        assert await store.sqlite.run(lambda c: c.execute("SELECT 1").fetchone()[0]) == 1
    finally:
        await store.close()


async def test_the_worker_thread_ends_when_the_store_closes(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db")
    thread = store.sqlite._worker._thread
    assert thread.is_alive() and thread.daemon
    await store.close()
    assert not thread.is_alive()


# ------------------------------------------------------------------ no argument ignored


async def test_sqlite_session_refuses_db_path_or_synchronous_beside_a_store(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "a.db")
    try:
        with pytest.raises(TypeError, match="db_path cannot be combined with store="):
            SQLiteSession("s", tmp_path / "other.db", store=store)
        with pytest.raises(TypeError, match="synchronous cannot be combined with store="):
            SQLiteSession("s", store=store, synchronous="NORMAL")
        with pytest.raises(TypeError, match="store must be a SQLiteStore, got str"):
            SQLiteSession("s", store="a.db")  # type: ignore[arg-type]
        session = SQLiteSession("s", store=store)
        assert session.store is store
    finally:
        await store.close()


async def test_sqlite_backend_validates_synchronous_before_it_reaches_a_pragma(
    tmp_path: Path,
) -> None:
    from sessions.sqlite import SQLiteBackend

    with pytest.raises(ValueError, match="synchronous must be"):
        await SQLiteBackend.open(str(tmp_path / "a.db"), synchronous="OFF; DROP TABLE x")  # type: ignore[arg-type]
    assert not (tmp_path / "a.db").exists()  # refused before anything was opened


# ------------------------------------------------------------------ a real SQLITE_BUSY

# Another process takes the database's write lock and holds it until told to let go.
_LOCKER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    print("released", flush=True)
    """
)


class _Locker:
    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def locked(self) -> None:
        assert self.proc.stdout is not None
        assert await asyncio.to_thread(self.proc.stdout.readline) == "locked\n"

    async def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert await asyncio.to_thread(self.proc.stdout.readline) == "released\n"
        assert await asyncio.to_thread(self.proc.wait, 30) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


async def _stored(path: Path, session_id: str) -> list[Any]:
    store = await SQLiteStore.open(path)
    try:
        return await store.session(session_id).get_items()
    finally:
        await store.close()


async def test_a_database_locked_by_another_process_fails_the_commit_with_a_known_outcome(
    tmp_path: Path,
) -> None:
    from sessions import RetryPolicy

    path = tmp_path / "busy.db"
    policy = RetryPolicy(attempts=2, initial_delay=0.01)
    store = await SQLiteStore.open(path, busy_timeout=0.05, retry=policy)
    locker = _Locker(path)
    try:
        session = store.session("s")
        await session.add_items([msg("1")])
        await locker.locked()
        with pytest.raises(CommitError) as info:
            await session.commit()
        assert info.value.outcome_known is True and info.value.attempts == 2
        assert "database busy" in str(info.value) and "nothing applied" in str(info.value)
        assert session.pending.items == 1
        await locker.release()
        await session.commit()
        assert not session.has_pending
    finally:
        locker.kill()
        await store.close()
    assert await _stored(path, "s") == [msg("1")]


async def test_a_commit_retries_through_another_process_holding_the_lock_and_applies_once(
    tmp_path: Path,
) -> None:
    import logging
    import threading

    from sessions import RetryPolicy

    busy_seen = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "database busy" in record.getMessage():
                busy_seen.set()

    logger = logging.getLogger("sessions")
    handler, level = Watch(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    path = tmp_path / "busy.db"
    policy = RetryPolicy(attempts=1000, initial_delay=0.01, max_delay=0.05)
    store = await SQLiteStore.open(path, busy_timeout=0.05, retry=policy)
    locker = _Locker(path)
    try:
        session = store.session("s")
        await session.add_items([msg("1"), msg("2")])
        await locker.locked()
        commit = asyncio.ensure_future(session.commit())
        assert await asyncio.to_thread(busy_seen.wait, 30), "no attempt met SQLITE_BUSY"
        assert not commit.done()
        await locker.release()
        await commit  # a later attempt got the lock
        assert not session.has_pending
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        locker.kill()
        await store.close()
    assert await _stored(path, "s") == [msg("1"), msg("2")]


async def test_a_file_at_schema_version_2_is_migrated_with_its_sessions_kept(
    tmp_path: Path,
) -> None:
    """Migration 5 (the catalogue) on a file made before it: existing sessions get
    version 0 and an empty catalogue entry, and work on."""
    from sessions.sqlite import SCHEMA_VERSION

    path = tmp_path / "old.db"
    conn = old_database(path, 2)
    conn.execute(
        "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq) "
        "VALUES ('old', 1, 2, 1, 2)"
    )
    conn.execute(
        'INSERT INTO txs_items VALUES (\'old\', 1, \'b\', \'{"role":"user","content":"x"}\')'
    )
    conn.close()
    store = await SQLiteStore.open(path)
    try:
        info = await store.session_info("old")
        assert info is not None and (info.version, info.user_id, info.tags) == (0, None, ())
        session = store.session("old")
        assert await session.get_items() == [{"role": "user", "content": "x"}]
        session.set_info(user_id="u")
        await session.commit(expected_version=0)
        assert session.version == 1
        assert [i.session_id for i in await store.list_sessions(user_id="u")] == ["old"]
        versions = await store.sqlite.run(
            lambda c: [r[0] for r in c.execute("SELECT version FROM txs_schema ORDER BY 1")]
        )
        assert versions[-1] == SCHEMA_VERSION
    finally:
        await store.close()


async def test_a_forks_record_is_read_and_deleted_through_its_own_index(tmp_path: Path) -> None:
    """Schema version 8: a fork's commit reads its record by the fork's id
    (``SQL_FORK_OF``), and deleting the fork removes it by that id: neither scans the
    table of every fork record (whose key starts with the source's id)."""
    from sessions.sqlite.sql import SQL_FORK_OF

    store = await SQLiteStore.open(tmp_path / "forks.db")
    try:
        source = store.session("source")
        await source.add_items([msg("1")])
        await source.commit()
        await source.fork("copy")
        assert await store.session("copy").get_items() == [msg("1")]

        def plans(conn: Any) -> list[str]:
            found = []
            for statement in (SQL_FORK_OF, "DELETE FROM txs_branches WHERE session_id = ?"):
                rows = conn.execute("EXPLAIN QUERY PLAN " + statement, ("copy",)).fetchall()
                found.append(" ".join(str(row[-1]) for row in rows))
            return found

        for plan in await store.sqlite.run(plans):
            assert "txs_branches_session" in plan, plan
        assert await store.delete_session("copy")
        left = await store.sqlite.run(
            lambda c: c.execute("SELECT count(*) FROM txs_branches").fetchone()[0]
        )
        assert left == 0
    finally:
        await store.close()
