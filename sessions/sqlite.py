"""SQLite backend: one file, one connection per store (on a worker thread), WAL.

Every commit is one ``BEGIN IMMEDIATE ... COMMIT`` executed start to finish by a
single job on the connection's worker thread (:mod:`sessions._worker`, which says why
it is ours and not aiosqlite's), so no cancellation of the caller can leave a
transaction open or half-applied. Commits of different sessions that arrive while the
worker is busy share the next transaction (group commit, see ``_Group``), each in a
savepoint of its own: one fsync and one thread hop for all of them.

The schema is versioned: ``MIGRATIONS`` lists each version's statements (append only);
opening a file applies the missing ones in one transaction, so many processes may open
a fresh file at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._backend import (
    Batch,
    BranchRow,
    InfoChange,
    QuarantineEntry,
    Row,
    SessionFilter,
    SessionInfo,
    TurnRow,
    TurnUsage,
)
from ._catalogue import (
    MAX_TTL,
    check_life,
    decode_metadata,
    decode_tags,
    stored_ttl,
    ttl_in_force,
)
from ._decide import Plan, Snapshot, decide, key_limit, needs_snapshot, undoes
from ._group import Entry, Outcome, Scheduler, outcomes_of
from ._observe import HOOK
from ._options import (
    STORE_KEYWORDS,
    SessionKeywords,
    StoreKeywords,
    check_keywords,
    session_keywords,
    store_options,
)
from ._session import BufferedSession
from ._shield import Firm
from ._store import Store
from ._validate import validate_seconds
from ._worker import Worker, WorkerStoppedError, call_in_loop
from .errors import StorageError, StoreClosedError, TransientStorageError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteBackend", "SQLiteSession", "SQLiteStore"]

T = TypeVar("T")

Synchronous = Literal["FULL", "NORMAL", "EXTRA"]

#: Each migration: ``(version, statements)``, applied in order, once. Append only.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "CREATE TABLE IF NOT EXISTS txs_sessions ("
            " session_id TEXT PRIMARY KEY,"
            " created_at REAL NOT NULL,"
            " updated_at REAL NOT NULL,"
            " item_count INTEGER NOT NULL DEFAULT 0,"
            " next_seq INTEGER NOT NULL DEFAULT 1"
            ") WITHOUT ROWID",
            # No index on updated_at: it would be rewritten by every commit, and only purge
            # (an occasional scan of this small table) looks sessions up by it. Files made
            # by early versions had one.
            "DROP INDEX IF EXISTS txs_sessions_updated",
            "CREATE TABLE IF NOT EXISTS txs_items ("
            " session_id TEXT NOT NULL,"
            " seq INTEGER NOT NULL,"
            " batch_id TEXT NOT NULL,"
            " data TEXT NOT NULL"
            ")",
            "CREATE UNIQUE INDEX IF NOT EXISTS txs_items_order ON txs_items (session_id, seq)",
            "CREATE TABLE IF NOT EXISTS txs_batches ("
            " session_id TEXT NOT NULL,"
            " batch_id TEXT NOT NULL,"
            " committed_at REAL NOT NULL,"
            " PRIMARY KEY (session_id, batch_id)"
            ") WITHOUT ROWID",
        ),
    ),
    (
        2,
        (
            # One saved run state per session (tool approvals waiting for a human). The
            # row outlives a removal (data NULL) so that versions are never reused.
            "CREATE TABLE IF NOT EXISTS txs_run_states ("
            " session_id TEXT PRIMARY KEY,"
            " version INTEGER NOT NULL,"
            " data TEXT,"
            " label TEXT,"
            " updated_at REAL NOT NULL"
            ") WITHOUT ROWID",
        ),
    ),
    (
        3,
        (
            # Items kept out of the history because they break a history rule
            # (integrity="quarantine"), written with the batch they came in.
            "CREATE TABLE IF NOT EXISTS txs_quarantine ("
            " session_id TEXT NOT NULL,"
            " seq INTEGER NOT NULL,"
            " batch_id TEXT NOT NULL,"
            " reason TEXT NOT NULL,"
            " data TEXT NOT NULL,"
            " created_at REAL NOT NULL,"
            " PRIMARY KEY (session_id, seq)"
            ") WITHOUT ROWID",
        ),
    ),
    (
        4,
        (
            # One row per commit that added items: the seq range of its items (docs/turns.md).
            # Items stored before this table existed belong to no row: they read as one turn.
            "CREATE TABLE IF NOT EXISTS txs_turns ("
            " session_id TEXT NOT NULL,"
            " first_seq INTEGER NOT NULL,"
            " last_seq INTEGER NOT NULL,"
            " created_at REAL NOT NULL,"
            " run_id TEXT,"
            " hidden_by INTEGER,"  # the rewind that hid it (session.rewind), else NULL
            # Model usage of the turn's run (session.record_usage); NULL: none recorded.
            " requests INTEGER,"
            " input_tokens INTEGER,"
            " output_tokens INTEGER,"
            " cached_tokens INTEGER,"
            " reasoning_tokens INTEGER,"
            " PRIMARY KEY (session_id, first_seq)"
            ") WITHOUT ROWID",
            # Items hidden by a rewind (kept for undo_rewind), with the rewind's number.
            "CREATE TABLE IF NOT EXISTS txs_hidden_items ("
            " session_id TEXT NOT NULL,"
            " seq INTEGER NOT NULL,"
            " batch_id TEXT NOT NULL,"
            " data TEXT NOT NULL,"
            " rewind_no INTEGER NOT NULL,"
            " PRIMARY KEY (session_id, seq)"
            ") WITHOUT ROWID",
            # Forks: session_id was forked from source_id at turn at_turn (session.fork).
            "CREATE TABLE IF NOT EXISTS txs_branches ("
            " source_id TEXT NOT NULL,"
            " session_id TEXT NOT NULL,"
            " at_turn INTEGER NOT NULL,"
            " created_at REAL NOT NULL,"
            " PRIMARY KEY (source_id, session_id)"
            ") WITHOUT ROWID",
        ),
    ),
    (
        5,
        (
            # The catalogue (docs/catalogue.md): owner, title, tags (a JSON array here,
            # one row each in txs_session_tags for lookups), metadata (JSON object text),
            # the session's own idle TTL (seconds) and its version (one per batch).
            "ALTER TABLE txs_sessions ADD COLUMN user_id TEXT",
            "ALTER TABLE txs_sessions ADD COLUMN title TEXT",
            "ALTER TABLE txs_sessions ADD COLUMN tags TEXT",
            "ALTER TABLE txs_sessions ADD COLUMN metadata TEXT",
            "ALTER TABLE txs_sessions ADD COLUMN ttl REAL",
            "ALTER TABLE txs_sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX IF NOT EXISTS txs_sessions_user ON txs_sessions (user_id, session_id)"
            " WHERE user_id IS NOT NULL",
            # user_id repeats the session's, so that one user's sessions with a tag are
            # one index range (txs_session_tags_user), whatever the size of the store.
            "CREATE TABLE IF NOT EXISTS txs_session_tags ("
            " tag TEXT NOT NULL,"
            " session_id TEXT NOT NULL,"
            " user_id TEXT,"
            " PRIMARY KEY (tag, session_id)"
            ") WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS txs_session_tags_session ON txs_session_tags (session_id)",
            "CREATE INDEX IF NOT EXISTS txs_session_tags_user"
            " ON txs_session_tags (user_id, tag, session_id) WHERE user_id IS NOT NULL",
        ),
    ),
    (
        6,
        (
            # The session's life (Batch.incarnation): a new token each time its row is
            # created, so a session deleted and created anew under the same id is told
            # apart from the one a session object read.
            "ALTER TABLE txs_sessions ADD COLUMN incarnation TEXT",
            "UPDATE txs_sessions SET incarnation = lower(hex(randomblob(8))) "
            "WHERE incarnation IS NULL",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

_SQL_RECORD_BATCH = (
    "INSERT OR IGNORE INTO txs_batches (session_id, batch_id, committed_at) VALUES (?, ?, ?)"
)
_SQL_CLEAR = "DELETE FROM txs_items WHERE session_id = ?"
_SQL_CLEAR_TURNS = "DELETE FROM txs_turns WHERE session_id = ?"
_SQL_CLEAR_HIDDEN = "DELETE FROM txs_hidden_items WHERE session_id = ?"
_USAGE_COLUMNS = "requests, input_tokens, output_tokens, cached_tokens, reasoning_tokens"
_SQL_TURN = (
    f"INSERT INTO txs_turns (session_id, first_seq, last_seq, created_at, run_id, "
    f"{_USAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_LOAD_TURNS = (
    f"SELECT first_seq, last_seq, created_at, run_id, {_USAGE_COLUMNS} FROM txs_turns "
    "WHERE session_id = ? AND hidden_by IS NULL ORDER BY first_seq"
)
_SQL_LOAD_KEYS = "SELECT seq FROM txs_items WHERE session_id = ? ORDER BY seq"
_SQL_POP = "DELETE FROM txs_items WHERE session_id = ? AND seq = ?"
_SQL_BUMP = (
    "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq, "
    "version, incarnation) VALUES (:sid, :now, :now, :n, :n + 1, 1, lower(hex(randomblob(8)))) "
    "ON CONFLICT (session_id) DO UPDATE SET updated_at = max(updated_at, :now), "
    "item_count = CASE WHEN :clear THEN :n ELSE item_count - :removed + :n END, "
    "next_seq = next_seq + :n, version = version + 1 "
    "RETURNING next_seq - :n, version, incarnation"
)
_SQL_RESTORE_TIMES = "UPDATE txs_sessions SET created_at = ?, updated_at = ? WHERE session_id = ?"
_SQL_INSERT = "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES (?, ?, ?, ?)"
_SQL_LOAD_ALL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq"
_SQL_LOAD_TAIL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq DESC LIMIT ?"

_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (named in sqlite3 only from Python 3.11)
#: SQLite's own texts for those codes: all Python 3.10's sqlite3 tells (no error codes).
_BUSY_TEXTS = ("database is locked", "database table is locked", "database schema is locked")


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLITE_BUSY or SQLITE_LOCKED (another connection holds a lock)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(_BUSY_TEXTS)


def _classify(exc: sqlite3.Error, operation: str) -> StorageError:
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    if _busy(exc):
        return TransientStorageError(
            f"SQLite {operation}: database busy ({name}): {exc}", outcome_known=True
        )
    return StorageError(f"SQLite {operation} failed ({name}): {exc}")


def _apply_batches(
    conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch], now: float
) -> None:
    """Apply ``batches`` inside the caller's transaction (or savepoint): a batch with
    conditions as the core decides from what this transaction reads before writing it
    (:mod:`sessions._decide`); a plain one on the fast path, its life judged from what
    its own upsert returns (a row it created has a new one)."""
    for batch in batches:
        plan = None
        if needs_snapshot(batch):
            plan = decide(session_id, batch, _snapshot(conn, session_id, batch))
            if plan is None:
                continue  # already applied, or an undo with nothing to undo
        if conn.execute(_SQL_RECORD_BATCH, (session_id, batch.batch_id, now)).rowcount == 0:
            continue  # already applied by an earlier attempt
        removed = 0
        if batch.clear:
            conn.execute(_SQL_CLEAR, (session_id,))
            conn.execute(_SQL_CLEAR_TURNS, (session_id,))
            conn.execute(_SQL_CLEAR_HIDDEN, (session_id,))
        elif batch.pops:
            pops = [(session_id, key) for key in batch.pops]
            removed = conn.executemany(_SQL_POP, pops).rowcount
        n = len(batch.items)
        bump = {"sid": session_id, "now": now, "n": n, "clear": batch.clear, "removed": removed}
        base, _version, life = conn.execute(_SQL_BUMP, bump).fetchone()
        if plan is None:
            check_life(session_id, batch, life)
        if batch.restore_times is not None:
            created, updated = batch.restore_times
            conn.execute(_SQL_RESTORE_TIMES, (created.timestamp(), updated.timestamp(), session_id))
        if n:
            conn.executemany(
                _SQL_INSERT,
                [
                    (session_id, base + i, batch.batch_id, text)
                    for i, text in enumerate(batch.items)
                ],
            )
            if batch.turn is not None:
                at = now if batch.turn.created_at is None else batch.turn.created_at.timestamp()
                counts = (None,) * 5 if batch.turn.usage is None else batch.turn.usage.values()
                conn.execute(
                    _SQL_TURN, (session_id, base, base + n - 1, at, batch.turn.run_id, *counts)
                )
        if plan is not None:
            _write_plan(conn, session_id, batch, plan, now)


_SQL_SESSION_FACTS = "SELECT incarnation, version FROM txs_sessions WHERE session_id = ?"
_SQL_APPLIED_ONE = "SELECT 1 FROM txs_batches WHERE session_id = ? AND batch_id = ?"
_SQL_KEYS_AFTER = "SELECT seq FROM txs_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
_SQL_FIRST_HIDDEN = "SELECT min(seq) FROM txs_hidden_items WHERE session_id = ? AND rewind_no = ?"
_POPS_CHUNK = 500  # keys per statement, well under SQLite's limit of parameters


def _snapshot(conn: sqlite3.Connection, session_id: str, batch: Batch) -> Snapshot:
    """What :func:`~sessions._decide.decide` needs for ``batch``, read in this transaction."""
    row = conn.execute(_SQL_SESSION_FACTS, (session_id,)).fetchone()
    limit = key_limit(batch)

    def keys_after(after: int) -> tuple[int, ...]:
        return tuple(k for (k,) in conn.execute(_SQL_KEYS_AFTER, (session_id, after, limit)))

    (newest,) = conn.execute(_SQL_REWIND_NO, {"s": session_id}).fetchone()
    after_hidden: tuple[int, ...] = ()
    if newest is not None and undoes(batch):
        (first,) = conn.execute(_SQL_FIRST_HIDDEN, (session_id, newest)).fetchone()
        after_hidden = keys_after(first)
    run_state = None
    if batch.run_state is not None:
        run_state = conn.execute(_SQL_RUN_STATE_VERSION, (session_id,)).fetchone()
    fork = None if batch.branch is None else conn.execute(_SQL_FORK_OF, (session_id,)).fetchone()
    return Snapshot(
        applied=conn.execute(_SQL_APPLIED_ONE, (session_id, batch.batch_id)).fetchone() is not None,
        life=None if row is None else row[0],
        version=0 if row is None else row[1],
        pops_stored=_pops_stored(conn, session_id, batch.pops),
        after_tail=() if batch.tail is None else keys_after(batch.tail),
        newest_rewind=newest,
        after_hidden=after_hidden,
        run_state_version=0 if run_state is None else run_state[0],
        stored=() if batch.branch is None else keys_after(0),
        fork_of=None if fork is None else (fork[0], fork[1]),
    )


def _pops_stored(conn: sqlite3.Connection, session_id: str, pops: Sequence[int]) -> int:
    """How many distinct keys of ``pops`` are stored."""
    keys = sorted(set(pops))
    stored = 0
    for start in range(0, len(keys), _POPS_CHUNK):
        chunk = keys[start : start + _POPS_CHUNK]
        marks = ", ".join("?" * len(chunk))  # placeholders only
        sql = f"SELECT count(*) FROM txs_items WHERE session_id = ? AND seq IN ({marks})"
        stored += conn.execute(sql, (session_id, *chunk)).fetchone()[0]
    return stored


_SQL_RUN_STATE_VERSION = "SELECT version FROM txs_run_states WHERE session_id = ?"
_SQL_RUN_STATE_WRITE = (
    "INSERT INTO txs_run_states (session_id, version, data, label, updated_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
    "version = excluded.version, data = excluded.data, label = excluded.label, "
    "updated_at = excluded.updated_at"
)
_SQL_RUN_STATE_LOAD = "SELECT data, version, label FROM txs_run_states WHERE session_id = ?"
_SQL_BRANCH = (
    "INSERT OR IGNORE INTO txs_branches (source_id, session_id, at_turn, created_at) "
    "VALUES (?, ?, ?, ?)"
)
_SQL_LOAD_BRANCHES = (
    "SELECT session_id, at_turn, created_at FROM txs_branches WHERE source_id = ? "
    "ORDER BY created_at, session_id"
)
_SQL_QUARANTINE = (
    "INSERT INTO txs_quarantine (session_id, seq, batch_id, reason, data, created_at) "
    "VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM txs_quarantine WHERE session_id = ?), "
    "?, ?, ?, ?)"
)
_SQL_QUARANTINE_LOAD = (
    "SELECT seq, batch_id, reason, data, created_at FROM txs_quarantine "
    "WHERE session_id = ? ORDER BY seq"
)


def _write_plan(
    conn: sqlite3.Connection, session_id: str, batch: Batch, plan: Plan, now: float
) -> None:
    """A batch's catalogue, run-state, quarantine, fork and rewind writes, as planned."""
    if batch.info is not None:
        _write_info(conn, session_id, batch.info)
    change = batch.run_state
    if change is not None:
        version = plan.run_state_version
        conn.execute(_SQL_RUN_STATE_WRITE, (session_id, version, change.text, change.label, now))
    for reason, text in batch.quarantine:
        conn.execute(_SQL_QUARANTINE, (session_id, session_id, batch.batch_id, reason, text, now))
    if batch.branch is not None:
        conn.execute(_SQL_BRANCH, (batch.branch.source_id, session_id, batch.branch.at_turn, now))
    if plan.hide_as is not None:
        assert batch.rewind is not None
        _move(
            conn, _SQL_HIDE, -1, {"s": session_id, "r": plan.hide_as, "k": batch.rewind.hide_after}
        )
    elif plan.bring_back is not None:
        _move(conn, _SQL_UNHIDE, 1, {"s": session_id, "r": plan.bring_back})


_SQL_FORK_OF = "SELECT source_id, at_turn FROM txs_branches WHERE session_id = ?"


_SQL_REWIND_NO = "SELECT max(rewind_no) FROM txs_hidden_items WHERE session_id = :s"
_SQL_HIDE = (
    "INSERT INTO txs_hidden_items (session_id, seq, batch_id, data, rewind_no) "
    "SELECT session_id, seq, batch_id, data, :r FROM txs_items WHERE session_id = :s AND seq > :k",
    "DELETE FROM txs_items WHERE session_id = :s AND seq > :k",
    "UPDATE txs_turns SET hidden_by = :r "
    "WHERE session_id = :s AND first_seq > :k AND hidden_by IS NULL",
)
_SQL_UNHIDE = (
    "INSERT INTO txs_items (session_id, seq, batch_id, data) SELECT session_id, seq, "
    "batch_id, data FROM txs_hidden_items WHERE session_id = :s AND rewind_no = :r",
    "DELETE FROM txs_hidden_items WHERE session_id = :s AND rewind_no = :r",
    "UPDATE txs_turns SET hidden_by = NULL WHERE session_id = :s AND hidden_by = :r",
)
_SQL_COUNT = "UPDATE txs_sessions SET item_count = item_count + :n WHERE session_id = :s"


def _move(
    conn: sqlite3.Connection, sql: tuple[str, str, str], sign: int, params: dict[str, Any]
) -> None:
    """Hide items and turn records under a rewind number (``_SQL_HIDE``, ``sign`` -1), or
    bring them back (``_SQL_UNHIDE``, ``sign`` 1)."""
    insert, delete, turns = sql
    moved = conn.execute(insert, params).rowcount
    conn.execute(delete, params)
    conn.execute(turns, params)
    conn.execute(_SQL_COUNT, {"n": sign * moved, "s": params["s"]})


def _write_info(conn: sqlite3.Connection, session_id: str, change: InfoChange) -> None:
    values: dict[str, Any] = {}
    for name in change.fields:
        value = getattr(change, name)
        if name == "tags":
            value = json.dumps(list(value)) if value else None
        values[name] = value
    columns = ", ".join(f"{name} = :{name}" for name in sorted(values))  # fixed names
    conn.execute(
        f"UPDATE txs_sessions SET {columns} WHERE session_id = :sid", {**values, "sid": session_id}
    )
    if "tags" in change.fields:
        conn.execute("DELETE FROM txs_session_tags WHERE session_id = ?", (session_id,))
        conn.executemany(
            "INSERT INTO txs_session_tags (tag, session_id, user_id) "
            "SELECT ?, session_id, user_id FROM txs_sessions WHERE session_id = ?",
            [(tag, session_id) for tag in change.tags],
        )
    elif "user_id" in change.fields:
        conn.execute(
            "UPDATE txs_session_tags SET user_id = ? WHERE session_id = ?",
            (change.user_id, session_id),
        )


def _load_run_state(
    conn: sqlite3.Connection, session_id: str
) -> tuple[str | None, int, str | None]:
    row = conn.execute(_SQL_RUN_STATE_LOAD, (session_id,)).fetchone()
    return (None, 0, None) if row is None else (row[0], row[1], row[2])


def _apply(conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch]) -> None:
    """One transaction for all batches; runs on the connection's worker thread."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        _apply_batches(conn, session_id, batches, time.time())
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class _Group:
    """SQLite's part of group commit (:mod:`sessions._group` says why it is not shared):
    the job that takes the commits waiting to the worker thread.

    The first commit to arrive while no such job is queued queues one; commits
    arriving before the worker gets to it wait with it. The worker takes every commit
    waiting then (nobody can join any more) and applies them in one
    ``BEGIN IMMEDIATE ... COMMIT``, each in a savepoint of its own, so a failing entry
    is rolled back alone while the others are applied. One fsync and one thread hop
    then serve every session that committed meanwhile.
    """

    __slots__ = ("lock", "scheduler", "system")

    def __init__(self, system: str) -> None:
        # One job at a time is queued; its "send" ends when the worker takes the group.
        self.scheduler = Scheduler(1)
        self.lock = threading.Lock()  # the worker thread takes while event loops queue
        self.system = system

    def queue(
        self, entry: Entry, done: asyncio.Future[Outcome], submit: Callable[[], None]
    ) -> None:
        """Queue ``entry`` (``done`` gets its outcome), queuing this job if none is."""
        with self.lock:
            scheduler = self.scheduler
            scheduler.wait(entry, done)
            if not scheduler.free():
                return  # the job queued will take it
            scheduler.start(0)
            try:
                submit()
            except BaseException:
                scheduler.withdraw(entry)
                scheduler.finish(0)
                raise

    def take(self) -> list[Entry]:
        with self.lock:
            group = self.scheduler.take()
            self.scheduler.finish(0)
            return group

    def run(self, conn: sqlite3.Connection) -> None:
        """On the worker thread: apply the group, then hand the outcomes to the loops."""
        group = self.take()
        if not group:
            return
        carried = 0  # commits of a transaction that ran (the observer counts those)

        def apply(entries: Sequence[Entry]) -> list[Outcome]:
            nonlocal carried
            outcomes = _apply_group(conn, [(e.session_id, e.batches) for e in entries])
            carried = len(entries)
            return outcomes

        self.scheduler.count(group)
        self._deliver(group, outcomes_of(group, apply), carried)

    def fail(self, error: BaseException) -> None:
        """The worker stopped before running the job: nothing of it was applied."""
        group = self.take()
        self._deliver(group, [error] * len(group), 0)

    def _deliver(self, group: list[Entry], outcomes: list[Outcome], carried: int) -> None:
        """One hop to each event loop the group's callers wait in (usually one)."""
        loops: dict[asyncio.AbstractEventLoop, tuple[list[Entry], list[Outcome]]] = {}
        for entry, outcome in zip(group, outcomes, strict=True):
            assert entry.done is not None
            mine = loops.setdefault(entry.done.get_loop(), ([], []))
            mine[0].append(entry)
            mine[1].append(outcome)
        for loop, (entries, results) in loops.items():
            call_in_loop(loop, self._complete, entries, results, carried)
            carried = 0  # counted once

    def _complete(self, entries: list[Entry], outcomes: list[Outcome], carried: int) -> None:
        if carried:
            observer = HOOK.observer
            if observer is not None:
                observer.group(self.system, carried)
        self.scheduler.settle(entries, outcomes)


def _apply_group(
    conn: sqlite3.Connection, entries: list[tuple[str, Sequence[Batch]]]
) -> list[Outcome]:
    """Per entry ``None`` (applied) or the exception that rolled it back.

    An exception raised out of here means nothing of the group was applied.
    """
    if len(entries) == 1:
        try:
            _apply(conn, *entries[0])
        except Exception as exc:  # noqa: BLE001 - returned to its waiter
            return [exc]
        return [None]
    outcome: list[Outcome] = []
    conn.execute("BEGIN IMMEDIATE")
    # The time is read once the write lock is held: a commit another process made while
    # this one waited for it never carries a later time than ours (updated_at only grows).
    now = time.time()
    try:
        for session_id, batches in entries:
            conn.execute("SAVEPOINT txs_entry")
            try:
                _apply_batches(conn, session_id, batches, now)
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite rolled the whole transaction back (I/O error, full, ...)
                conn.execute("ROLLBACK TO txs_entry")
                conn.execute("RELEASE txs_entry")
                outcome.append(exc)
            else:
                conn.execute("RELEASE txs_entry")
                outcome.append(None)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcome


def _load(conn: sqlite3.Connection, session_id: str, limit: int | None) -> list[Row]:
    if limit is None:
        return conn.execute(_SQL_LOAD_ALL, (session_id,)).fetchall()
    rows = conn.execute(_SQL_LOAD_TAIL, (session_id, limit)).fetchall()
    rows.reverse()
    return rows


def _load_turns(conn: sqlite3.Connection, session_id: str) -> tuple[list[TurnRow], list[int]]:
    conn.execute("BEGIN")  # one snapshot for both reads
    try:
        records = [
            TurnRow(
                row[0],
                row[1],
                datetime.fromtimestamp(row[2], timezone.utc),
                row[3],
                None if row[4] is None else TurnUsage(*row[4:]),
            )
            for row in conn.execute(_SQL_LOAD_TURNS, (session_id,))
        ]
        keys = [key for (key,) in conn.execute(_SQL_LOAD_KEYS, (session_id,))]
    finally:
        conn.execute("COMMIT")
    return records, keys


def _setup(conn: sqlite3.Connection, synchronous: str, busy_timeout: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    deadline = time.monotonic() + busy_timeout
    while True:  # switching to WAL needs a moment alone with the file
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    conn.execute(f"PRAGMA synchronous = {_validate_synchronous(synchronous)}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        _migrate(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply the missing ``MIGRATIONS`` (inside the caller's write transaction)."""
    conn.execute("CREATE TABLE IF NOT EXISTS txs_schema (version INTEGER NOT NULL)")
    recorded = {row[0] for row in conn.execute("SELECT version FROM txs_schema")}
    version = max(recorded, default=0)
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"database schema version {version} is newer than this version of "
            f"txsessions supports ({SCHEMA_VERSION}); upgrade txsessions"
        )
    for number, statements in MIGRATIONS:
        # Every migration not recorded, a gap below the newest one included: branches
        # numbered their migrations apart (3: quarantine, 5: catalogue) and a file may
        # have met them in either order.
        if number in recorded:
            continue
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO txs_schema (version) VALUES (?)", (number,))


def _applied(conn: sqlite3.Connection, session_id: str, batch_ids: Sequence[str]) -> set[str]:
    marks = ",".join("?" * len(batch_ids))
    rows = conn.execute(
        f"SELECT batch_id FROM txs_batches WHERE session_id = ? AND batch_id IN ({marks})",
        (session_id, *batch_ids),
    ).fetchall()
    return {row[0] for row in rows}


def _query(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]
) -> list[Any]:
    return conn.execute(sql, params).fetchall()


#: ``(now, default_ttl)``: delete only if the session's TTL has elapsed at ``now``.
_Expiry = tuple[float, float | None]


def _keep(
    conn: sqlite3.Connection, session_id: str, stale_before: float | None, expiry: _Expiry | None
) -> bool:
    """Inside the delete's transaction: whether the session no longer qualifies."""
    if stale_before is None and expiry is None:
        return False
    row = conn.execute(
        "SELECT updated_at, ttl FROM txs_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None or (stale_before is not None and row[0] >= stale_before):
        return True
    if expiry is not None:
        now, default = expiry
        ttl = ttl_in_force(row[1] if row[1] is not None else default)
        return ttl is None or row[0] + ttl >= now
    return False


def _delete(
    conn: sqlite3.Connection,
    session_ids: Sequence[str],
    stale_before: float | None,
    expiry: _Expiry | None = None,
    keep_forks: bool = False,
) -> list[str]:
    """Delete, in one transaction, each session that (checked inside it) still
    qualifies; the ids of those that existed. ``keep_forks``: keep the records of the
    sessions forked from them."""
    deleted: list[str] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for session_id in session_ids:
            if _keep(conn, session_id, stale_before, expiry):
                continue
            for table in SESSION_TABLES:
                conn.execute(f'DELETE FROM "{table}" WHERE session_id = ?', (session_id,))
            if not keep_forks:
                conn.execute("DELETE FROM txs_branches WHERE source_id = ?", (session_id,))
            gone = conn.execute("DELETE FROM txs_sessions WHERE session_id = ?", (session_id,))
            if gone.rowcount > 0:
                deleted.append(session_id)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return deleted


#: Every table with per-session rows, but ``txs_sessions``: what deleting a session
#: (or a user) deletes. A migration that adds one adds it here (a test compares this
#: with the schema).
SESSION_TABLES = (
    "txs_items",
    "txs_batches",
    "txs_run_states",
    "txs_session_tags",
    "txs_turns",
    "txs_hidden_items",
    "txs_branches",  # the session's own fork record; its forks' records: source_id, below
    "txs_quarantine",
)


def _delete_user(conn: sqlite3.Connection, user_id: str) -> list[str]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT session_id FROM txs_sessions WHERE user_id = ? ORDER BY session_id",
                (user_id,),
            )
        ]
        owned = "SELECT session_id FROM txs_sessions WHERE user_id = ?"
        for table in SESSION_TABLES:
            conn.execute(f'DELETE FROM "{table}" WHERE session_id IN ({owned})', (user_id,))
        conn.execute(f"DELETE FROM txs_branches WHERE source_id IN ({owned})", (user_id,))
        conn.execute("DELETE FROM txs_sessions WHERE user_id = ?", (user_id,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return ids


def _load_versioned(
    conn: sqlite3.Connection, session_id: str, limit: int | None
) -> tuple[list[Row], int, str | None]:
    conn.execute("BEGIN")  # one snapshot for both reads
    try:
        row = conn.execute(
            "SELECT version, incarnation FROM txs_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        rows = _load(conn, session_id, limit)
    finally:
        conn.execute("COMMIT")
    return (rows, 0, None) if row is None else (rows, int(row[0]), row[1])


def _where(where: SessionFilter, after: str | None) -> tuple[str, dict[str, Any], str]:
    """``FROM ... WHERE ...`` of a catalogue listing, its parameters, and the column to
    order by (the walked index's).

    With a tag, the tag's pairs are walked (with a user too, that user's pairs with the
    tag: one index range); with a user alone, the user's index on the sessions table.
    """
    params: dict[str, Any] = {"after": "" if after is None else after}
    if where.tag is not None:
        sql = (
            "FROM txs_session_tags AS t JOIN txs_sessions AS s ON s.session_id = t.session_id"
            " WHERE t.tag = :tag AND t.session_id > :after"
        )
        params["tag"] = where.tag
        if where.user_id is not None:
            sql += " AND t.user_id = :user"
    else:
        sql = "FROM txs_sessions AS s WHERE s.session_id > :after"
        if where.user_id is not None:
            sql += " AND s.user_id = :user"
    params["user"] = where.user_id
    if where.updated_after is not None:
        sql += " AND s.updated_at > :updated"
        params["updated"] = where.updated_after.timestamp()
    return sql, params, "t.session_id" if where.tag is not None else "s.session_id"


def _prune(conn: sqlite3.Connection, cutoff: float, keep_prefixes: Sequence[str]) -> int:
    keep = "".join(" AND substr(batch_id, 1, ?) <> ?" for _ in keep_prefixes)
    params = [cutoff, *(x for prefix in keep_prefixes for x in (len(prefix), prefix))]
    return conn.execute(f"DELETE FROM txs_batches WHERE committed_at < ?{keep}", params).rowcount


class SQLiteBackend:
    """Stores batches in one SQLite file through one connection on a worker thread."""

    atomic = True
    idempotent = True
    system = "sqlite"

    def __init__(self, worker: Worker, path: str) -> None:
        self._worker = worker
        self._group = _Group(self.system)
        self._closed = False
        self.path = path

    @classmethod
    async def open(
        cls, path: str, *, synchronous: Synchronous = "FULL", busy_timeout: float = 5.0
    ) -> SQLiteBackend:
        """Open (creating if needed) the database file and bring its schema up to date."""
        path = _validate_path(path)
        sync = _validate_synchronous(synchronous)
        busy = validate_seconds(busy_timeout, "busy_timeout", allow_zero=True)

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(path, isolation_level=None, timeout=busy)

        worker = Worker(f"txsessions SQLite {path!r}", connect)
        try:
            await worker.run(_setup, sync, busy)
        except BaseException as exc:
            await worker.close()
            cause = exc.__cause__ if isinstance(exc, WorkerStoppedError) else exc
            if isinstance(cause, sqlite3.Error):
                raise StorageError(f"cannot open SQLite database {path!r}: {cause}") from cause
            raise
        return cls(worker, path)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the store's connection, in its worker thread.

        For queries of your own (reports, maintenance). ``fn`` runs between commits, never
        inside one; a write of yours must open and close its own transaction.
        ``sqlite3`` errors become :class:`~sessions.errors.StorageError`.
        """
        return await self._run("run", fn, *args)

    async def _run(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreClosedError(f"SQLite store {self.path!r} is closed")
        try:
            return await self._worker.run(fn, *args)
        except sqlite3.Error as exc:
            raise _classify(exc, operation) from exc

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        return await self._run("read", _load, session_id, limit)

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        if self._closed:  # never queue work for a stopped worker
            raise StoreClosedError(f"SQLite store {self.path!r} is closed")
        # A future of the caller's own: cancelling one caller cancels nothing of the
        # others' (no asyncio.shield, one turn of the loop fewer).
        done: asyncio.Future[Outcome] = Firm(loop=asyncio.get_running_loop())
        self._group.queue(Entry(session_id, batches), done, self._submit)
        error = await done
        if error is None:
            return
        if isinstance(error, sqlite3.Error):
            raise _classify(error, "commit") from error
        raise error

    def _submit(self) -> None:
        self._worker.submit(self._group)

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        if not batch_ids:
            return set()
        return await self._run("read", _applied, session_id, list(batch_ids))

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        return await self._run("read", _load_run_state, session_id)

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        return await self._run("read", _load_turns, session_id)

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        # SQLite's sum() of integers raises past 2**63 - 1, where PostgreSQL's sum of
        # bigint is numeric: summing the high and the low 32 bits of each count apart
        # (neither sum can overflow before 2**31 turns) gives the exact total here too.
        columns = _USAGE_COLUMNS.split(", ")
        sums = ", ".join(
            f"coalesce(sum({c} >> 32), 0), coalesce(sum({c} & 4294967295), 0)" for c in columns
        )
        sql = f"SELECT {sums}, count(requests) FROM txs_turns WHERE requests IS NOT NULL"
        params: dict[str, Any] = {}
        if session_id is not None:
            sql, params["s"] = sql + " AND session_id = :s", session_id
        if since is not None:
            sql, params["t"] = sql + " AND created_at >= :t", since.timestamp()
        (row,) = await self._run("read", _query, sql, params)
        totals = [(row[2 * n] << 32) + row[2 * n + 1] for n in range(len(columns))]
        return TurnUsage(*totals), row[-1]

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        rows = await self._run("read", _query, _SQL_LOAD_BRANCHES, (source_id,))
        return [BranchRow(sid, at, datetime.fromtimestamp(t, timezone.utc)) for sid, at, t in rows]

    async def close(self) -> None:
        """Run what is queued, then close the connection and end the worker thread."""
        self._closed = True
        await self._worker.close()

    # ---------------------------------------------------------------- store operations

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        rows = await self._run(
            "list_sessions",
            _query,
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE session_id > ? "
            "ORDER BY session_id LIMIT ?",
            ("" if after is None else after, limit),
        )
        return [_info(row) for row in rows]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        rows = await self._run(
            "session_info",
            _query,
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE session_id = ?",
            (session_id,),
        )
        return _info(rows[0]) if rows else None

    async def stale_sessions(
        self, cutoff: datetime, *, limit: int, after: str | None = None
    ) -> list[SessionInfo]:
        rows = await self._run(
            "stale_sessions",
            _query,
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE updated_at < ? "
            "AND session_id > ? ORDER BY session_id LIMIT ?",
            (cutoff.timestamp(), "" if after is None else after, min(limit, 2**62)),
        )
        return [_info(row) for row in rows]

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        return await self._run("read", _load_versioned, session_id, limit)

    async def find_sessions(
        self, where: SessionFilter, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        sql, params, key = _where(where, after)
        rows = await self._run(
            "list_sessions",
            _query,
            f"SELECT {_INFO_COLUMNS_S} {sql} ORDER BY {key} LIMIT :limit",
            {**params, "limit": min(limit, 2**62)},
        )
        return [_info(row) for row in rows]

    async def count_sessions(self, where: SessionFilter) -> int:
        sql, params, _ = _where(where, None)
        rows = await self._run("count_sessions", _query, f"SELECT count(*) {sql}", params)
        return int(rows[0][0])

    async def expired_sessions(
        self, now: datetime, default_ttl: float | None, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        rows = await self._run(
            "expired_sessions",
            _query,
            f"SELECT {_INFO_COLUMNS} FROM txs_sessions WHERE session_id > :after "
            # The TTL clamped as ttl_in_force() does: a value stored by an older version
            # or by hand never keeps a session forever nor breaks the query.
            "AND updated_at + min(max(coalesce(ttl, :default), 0.0), :max_ttl) < :now "
            "ORDER BY session_id LIMIT :limit",
            {
                "after": "" if after is None else after,
                "default": default_ttl,
                "max_ttl": MAX_TTL.total_seconds(),
                "now": now.timestamp(),
                "limit": min(limit, 2**62),
            },
        )
        return [_info(row) for row in rows]

    async def delete_expired(
        self, session_ids: Sequence[str], now: datetime, default_ttl: float | None
    ) -> list[str]:
        expiry = (now.timestamp(), default_ttl)
        return await self._run("delete", _delete, list(session_ids), None, expiry)

    async def delete_user(self, user_id: str) -> list[str]:
        return await self._run("delete_user", _delete_user, user_id)

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        return await self._run(
            "read",
            _query,
            "SELECT seq, data FROM txs_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, -(2**62) if after is None else after, limit),
        )

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        rows = await self._run("read", _query, _SQL_QUARANTINE_LOAD, (session_id,))
        return [
            QuarantineEntry(
                row[0], row[1], row[2], row[3], datetime.fromtimestamp(row[4], timezone.utc)
            )
            for row in rows
        ]

    async def prune_batches(self, cutoff: datetime, *, keep_prefixes: Sequence[str]) -> int:
        return await self._run("prune", _prune, cutoff.timestamp(), list(keep_prefixes))

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        return bool(await self._run("delete", _delete, [session_id], None, None, keep_forks))

    async def delete_stale(self, session_ids: Sequence[str], stale_before: datetime) -> list[str]:
        before = stale_before.timestamp()
        return await self._run("delete", _delete, list(session_ids), before)


_INFO_NAMES = (
    "session_id",
    "item_count",
    "created_at",
    "updated_at",
    "user_id",
    "title",
    "tags",
    "metadata",
    "ttl",
    "version",
)
_INFO_COLUMNS = ", ".join(_INFO_NAMES)
_INFO_COLUMNS_S = ", ".join(f"s.{name}" for name in _INFO_NAMES)


def _info(row: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        session_id=row[0],
        item_count=row[1],
        created_at=datetime.fromtimestamp(row[2], timezone.utc),
        updated_at=datetime.fromtimestamp(row[3], timezone.utc),
        user_id=row[4],
        title=row[5],
        tags=decode_tags(row[6]),
        metadata=decode_metadata(row[7]),
        ttl=stored_ttl(row[8]),
        version=row[9],
    )


class SQLiteStore(Store["SQLiteSession"]):
    """One SQLite database shared by many sessions (one connection in all).

    ``store = await SQLiteStore.open("chat.db")``, then ``store.session(session_id)``.
    """

    backend_class = SQLiteBackend

    def __init__(self, backend: SQLiteBackend, **keywords: Unpack[StoreKeywords]) -> None:
        super().__init__(backend, **keywords)
        self.session_class = SQLiteSession
        self.sqlite = backend

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        **keywords: Unpack[StoreKeywords],
    ) -> SQLiteStore:
        """Open (creating if needed) the database at ``path``.

        ``synchronous="FULL"`` (default) makes every commit durable across power loss;
        ``"NORMAL"`` trades the last commits on power loss (never on a process crash)
        for speed. ``busy_timeout`` is how long a commit waits for other writers.
        ``commit_timeout`` bounds how long a commit may hold its caller (seconds).
        ``ttl``: the store's default idle time-to-live, see :meth:`~sessions.Store.purge`.
        ``integrity``: what commits do with history the Responses API would refuse
        (``"quarantine"``, ``"reject"`` or ``"off"``; ``docs/history.md``). ``retry``: a
        :class:`~sessions.RetryPolicy`. ``None`` takes a setting's default; the four may
        also come as ``options=StoreOptions(...)`` (:class:`~sessions._options.StoreKeywords`).
        """
        check_keywords(keywords, STORE_KEYWORDS, "SQLiteStore.open")
        db_path = _validate_path(path)
        _validate_synchronous(synchronous)
        validate_seconds(busy_timeout, "busy_timeout", allow_zero=True)
        settings = store_options(keywords, "SQLiteStore.open")
        backend = await SQLiteBackend.open(
            db_path, synchronous=synchronous, busy_timeout=busy_timeout
        )
        store = cls(backend, options=settings)
        store.check_usable("open")
        return store

    @property
    def path(self) -> str:
        return self.sqlite.path

    def _describe(self) -> str:
        return f"SQLiteStore {self.path!r}"


def _validate_synchronous(value: object) -> Synchronous:
    if value == "FULL" or value == "NORMAL" or value == "EXTRA":
        return value
    raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'EXTRA', got {value!r}")


def _validate_path(path: object) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"db_path must be a str or os.PathLike, got {type(path).__name__}")
    if not path:
        raise ValueError("db_path must not be empty (use ':memory:' for an in-memory database)")
    return path


class SQLiteSession(BufferedSession):
    """A buffered session stored in SQLite.

    ``SQLiteSession(session_id, "chat.db")`` opens its own connection on first use and
    closes it in :meth:`close`; fine for scripts. Threads that each run an event loop of
    their own may share it: each loop gets a connection of its own (``docs/threads.md``). ``db_path`` defaults to a private
    in-memory database. Servers should share one :class:`SQLiteStore` and call
    ``store.session(session_id)`` (or pass ``store=``, which is borrowed: then
    ``db_path`` and ``synchronous`` belong to the store and may not be given).
    """

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] | None = None,
        *,
        synchronous: Synchronous | None = None,
        store: SQLiteStore | None = None,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, common = session_keywords(keywords, "SQLiteSession")
        if store is not None:
            if not isinstance(store, SQLiteStore):
                raise TypeError(f"store must be a SQLiteStore, got {type(store).__name__}")
            pairs = (("db_path", db_path), ("synchronous", synchronous))
            given = [name for name, value in pairs if value is not None]
            if given:
                raise TypeError(
                    f"SQLiteSession: {' and '.join(given)} cannot be combined with store= "
                    "(the store already has its database and settings)"
                )
            super().__init__(session_id, store=store, **common)
            return
        path = _validate_path(":memory:" if db_path is None else db_path)
        sync = _validate_synchronous("FULL" if synchronous is None else synchronous)
        store_timeout = settings.commit_timeout  # None: the store's default

        async def factory() -> Store[Any]:
            return await SQLiteStore.open(path, synchronous=sync, commit_timeout=store_timeout)

        # Each event loop using the session gets a store (connection) of its own on the
        # same file; a private in-memory database cannot be shared that way.
        single = "its private in-memory database" if path == ":memory:" else None
        super().__init__(session_id, store_factory=factory, single_loop=single, **common)
