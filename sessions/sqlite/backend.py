"""SQLiteBackend: batches stored in one file through one connection on a worker thread.

Every job (a commit's transaction, a read, a store operation) runs start to finish on
the connection's worker thread (:mod:`sessions.sqlite.worker`), so no cancellation of
the caller can leave a transaction open or half-applied. Commits of different sessions
that arrive while the worker is busy share the next transaction
(:mod:`sessions.sqlite.group`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from .._engine.group import Entry, Outcome
from .._engine.shield import Firm
from .._model.backend import BranchRow, QuarantineEntry, TurnUsage
from .._model.catalogue import MAX_TTL
from .._model.validate import validate_seconds
from ..errors import StorageError, StoreClosedError
from .connection import Synchronous, setup, validate_path, validate_synchronous
from .deletes import delete_sessions, delete_user_sessions, prune_records
from .faults import classify
from .group import Group
from .index import read_turn_index, write_turn_index
from .reads import (
    info_from,
    listing_sql,
    query,
    read_applied,
    read_rows,
    read_run_state,
    read_turn_window,
    read_turns,
    read_versioned,
)
from .sql import (
    INFO_COLUMNS,
    INFO_COLUMNS_S,
    SQL_LOAD_BRANCHES,
    SQL_QUARANTINE_LOAD,
    USAGE_COLUMNS,
)
from .worker import Worker, WorkerStoppedError

if TYPE_CHECKING:
    from .._model.backend import Batch, Row, SessionFilter, SessionInfo, TurnRow, TurnWindow
    from .._model.turnindex import TurnIndexFacts

__all__ = ["SQLiteBackend"]

T = TypeVar("T")


class SQLiteBackend:
    """Stores batches in one SQLite file through one connection on a worker thread."""

    atomic = True
    idempotent = True
    system = "sqlite"

    def __init__(self, worker: Worker, path: str) -> None:
        self._worker = worker
        self._group = Group(self.system)
        self._closed = False
        self.path = path

    @classmethod
    async def open(
        cls, path: str, *, synchronous: Synchronous = "FULL", busy_timeout: float = 5.0
    ) -> SQLiteBackend:
        """Open (creating if needed) the database file and bring its schema up to date."""
        path = validate_path(path)
        sync = validate_synchronous(synchronous)
        busy = validate_seconds(busy_timeout, "busy_timeout", allow_zero=True)

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(path, isolation_level=None, timeout=busy)

        worker = Worker(f"txsessions SQLite {path!r}", connect)
        try:
            await worker.run(setup, sync, busy)
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
            raise classify(exc, operation) from exc

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        return await self._run("read", read_rows, session_id, limit)

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
            raise classify(error, "commit") from error
        raise error

    def _submit(self) -> None:
        self._worker.submit(self._group)

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        if not batch_ids:
            return set()
        return await self._run("read", read_applied, session_id, list(batch_ids))

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        return await self._run("read", read_run_state, session_id)

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        return await self._run("read", read_turns, session_id)

    async def load_turn_window(
        self, session_id: str, *, oldest: int | None = None, newest: int | None = None
    ) -> TurnWindow | None:
        return await self._run("read", read_turn_window, session_id, oldest, newest)

    async def load_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        return await self._run("read", read_turn_index, session_id)

    async def repair_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        return await self._run("repair_turn_index", write_turn_index, session_id)

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        # SQLite's sum() of integers raises past 2**63 - 1, where PostgreSQL's sum of
        # bigint is numeric: summing the high and the low 32 bits of each count apart
        # (neither sum can overflow before 2**31 turns) gives the exact total here too.
        columns = USAGE_COLUMNS.split(", ")
        sums = ", ".join(
            f"coalesce(sum({c} >> 32), 0), coalesce(sum({c} & 4294967295), 0)" for c in columns
        )
        sql = f"SELECT {sums}, count(requests) FROM txs_turns WHERE requests IS NOT NULL"
        params: dict[str, Any] = {}
        if session_id is not None:
            sql, params["s"] = sql + " AND session_id = :s", session_id
        if since is not None:
            sql, params["t"] = sql + " AND created_at >= :t", since.timestamp()
        (row,) = await self._run("read", query, sql, params)
        totals = [(row[2 * n] << 32) + row[2 * n + 1] for n in range(len(columns))]
        return TurnUsage(*totals), row[-1]

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        rows = await self._run("read", query, SQL_LOAD_BRANCHES, (source_id,))
        return [BranchRow(sid, at, datetime.fromtimestamp(t, timezone.utc)) for sid, at, t in rows]

    async def close(self) -> None:
        """Run what is queued, then close the connection and end the worker thread."""
        self._closed = True
        await self._worker.close()

    # ---------------------------------------------------------------- store operations

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        rows = await self._run(
            "list_sessions",
            query,
            f"SELECT {INFO_COLUMNS} FROM txs_sessions WHERE session_id > ? "
            "ORDER BY session_id LIMIT ?",
            ("" if after is None else after, limit),
        )
        return [info_from(row) for row in rows]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        rows = await self._run(
            "session_info",
            query,
            f"SELECT {INFO_COLUMNS} FROM txs_sessions WHERE session_id = ?",
            (session_id,),
        )
        return info_from(rows[0]) if rows else None

    async def stale_sessions(
        self, cutoff: datetime, *, limit: int, after: str | None = None
    ) -> list[SessionInfo]:
        rows = await self._run(
            "stale_sessions",
            query,
            f"SELECT {INFO_COLUMNS} FROM txs_sessions WHERE updated_at < ? "
            "AND session_id > ? ORDER BY session_id LIMIT ?",
            (cutoff.timestamp(), "" if after is None else after, min(limit, 2**62)),
        )
        return [info_from(row) for row in rows]

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        return await self._run("read", read_versioned, session_id, limit)

    async def find_sessions(
        self, where: SessionFilter, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        sql, params, key = listing_sql(where, after)
        rows = await self._run(
            "list_sessions",
            query,
            f"SELECT {INFO_COLUMNS_S} {sql} ORDER BY {key} LIMIT :limit",
            {**params, "limit": min(limit, 2**62)},
        )
        return [info_from(row) for row in rows]

    async def count_sessions(self, where: SessionFilter) -> int:
        sql, params, _ = listing_sql(where, None)
        rows = await self._run("count_sessions", query, f"SELECT count(*) {sql}", params)
        return int(rows[0][0])

    async def expired_sessions(
        self, now: datetime, default_ttl: float | None, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        rows = await self._run(
            "expired_sessions",
            query,
            f"SELECT {INFO_COLUMNS} FROM txs_sessions WHERE session_id > :after "
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
        return [info_from(row) for row in rows]

    async def delete_expired(
        self, session_ids: Sequence[str], now: datetime, default_ttl: float | None
    ) -> list[str]:
        expiry = (now.timestamp(), default_ttl)
        return await self._run("delete", delete_sessions, list(session_ids), None, expiry)

    async def delete_user(self, user_id: str) -> list[str]:
        return await self._run("delete_user", delete_user_sessions, user_id)

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        return await self._run(
            "read",
            query,
            "SELECT seq, data FROM txs_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, -(2**62) if after is None else after, limit),
        )

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        rows = await self._run("read", query, SQL_QUARANTINE_LOAD, (session_id,))
        return [
            QuarantineEntry(
                row[0], row[1], row[2], row[3], datetime.fromtimestamp(row[4], timezone.utc)
            )
            for row in rows
        ]

    async def prune_batches(self, cutoff: datetime, *, keep_prefixes: Sequence[str]) -> int:
        return await self._run("prune", prune_records, cutoff.timestamp(), list(keep_prefixes))

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        return bool(
            await self._run("delete", delete_sessions, [session_id], None, None, keep_forks)
        )

    async def delete_stale(self, session_ids: Sequence[str], stale_before: datetime) -> list[str]:
        before = stale_before.timestamp()
        return await self._run("delete", delete_sessions, list(session_ids), before)
