"""The PostgreSQL backend's store operations (:class:`~sessions.AdminBackend` and the
catalogue's listings): list, look up, find and count sessions, read ranges and the
quarantine, prune batch records, and delete sessions (by id, stale, expired, a user's).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .._model.backend import QuarantineEntry, Row, SessionFilter, SessionInfo
from .._model.catalogue import decode_metadata, expired, stored_ttl
from .connect import Connections
from .faults import _Phase
from .sql import _INFO_COLUMNS, SESSION_TABLES


class AdminPart(Connections):
    """Store operations: listings, range and quarantine reads, pruning, deletes."""

    async def list_sessions(self, *, limit: int, after: str | None) -> list[SessionInfo]:
        rows = await self._fetch(
            "list_sessions", self._sql.list, "" if after is None else after, limit
        )
        return [_info(row) for row in rows]

    async def session_info(self, session_id: str) -> SessionInfo | None:
        rows = await self._fetch("session_info", self._sql.info, session_id)
        return _info(rows[0]) if rows else None

    async def stale_sessions(
        self, cutoff: datetime, *, limit: int, after: str | None = None
    ) -> list[SessionInfo]:
        if cutoff.tzinfo is None:
            cutoff = cutoff.replace(tzinfo=timezone.utc)
        rows = await self._fetch(
            "stale_sessions", self._sql.stale, cutoff, after or "", min(limit, 2**62)
        )
        return [_info(row) for row in rows]

    async def read_range(self, session_id: str, *, after: int | None, limit: int) -> list[Row]:
        start = -(2**62) if after is None else after
        rows = await self._fetch("read_range", self._sql.range, session_id, start, limit)
        return [(row[0], row[1]) for row in rows]

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        rows = await self._fetch("read", self._sql.quarantine_load, session_id)
        return [QuarantineEntry(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows]

    async def prune_batches(self, cutoff: datetime, *, keep_prefixes: Sequence[str]) -> int:
        if cutoff.tzinfo is None:
            cutoff = cutoff.replace(tzinfo=timezone.utc)
        keep = list(keep_prefixes)

        async def run(conn: Any, phase: _Phase) -> int:
            status: str = await conn.execute(self._sql.prune, cutoff, keep)
            return int(status.rsplit(" ", 1)[-1])

        return await self._run("prune_batches", run)

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        return bool(await self._delete([session_id], None, None, keep_forks=keep_forks))

    async def delete_stale(self, session_ids: Sequence[str], stale_before: datetime) -> list[str]:
        if stale_before.tzinfo is None:
            stale_before = stale_before.replace(tzinfo=timezone.utc)
        return await self._delete(session_ids, stale_before, None)

    async def delete_expired(
        self, session_ids: Sequence[str], now: datetime, default_ttl: float | None
    ) -> list[str]:
        return await self._delete(session_ids, None, (now, default_ttl))

    async def delete_user(self, user_id: str) -> list[str]:
        return await self._delete(None, None, None, user_id=user_id)

    async def _delete(
        self,
        session_ids: Sequence[str] | None,
        stale_before: datetime | None,
        expiry: tuple[datetime, float | None] | None,
        *,
        user_id: str | None = None,
        keep_forks: bool = False,
    ) -> list[str]:
        """Delete, in one transaction, each session (of ``session_ids``, or of
        ``user_id``) that still qualifies once its row is locked; the ids deleted.
        ``keep_forks``: keep the records of the sessions forked from them."""
        sessions = self._names.table("sessions")
        key: str | list[str]
        if user_id is None:
            lock, key = self._sql.delete_lock_many, list(session_ids or ())
        else:
            lock, key = self._sql.delete_lock_user, user_id

        async def run(conn: Any, phase: _Phase) -> list[str]:
            await conn.execute("BEGIN")
            # Lock first (in id order: concurrent deletes cannot deadlock), delete in
            # later statements: they see everything committed by writers that held a
            # session row before us.
            rows = await conn.fetch(lock, key)
            ids = [row[0] for row in rows if not _keep(row[1], row[2], stale_before, expiry)]
            if not ids:
                await conn.execute("ROLLBACK")
                return []
            for table in SESSION_TABLES:
                await conn.execute(
                    f"DELETE FROM {self._names.table(table)} WHERE session_id = ANY($1::text[])",
                    ids,
                )
            if not keep_forks:
                await conn.execute(self._sql.branches_delete, ids)
            await conn.execute(f"DELETE FROM {sessions} WHERE session_id = ANY($1::text[])", ids)
            phase.commit_sent = True
            await conn.execute("COMMIT")
            return ids

        return await self._run("delete_user" if user_id is not None else "delete_session", run)

    def _where(self, where: SessionFilter, after: str | None) -> tuple[str, list[Any], str]:
        """``FROM ... WHERE ...`` of a catalogue listing, its parameters, and the column to
        order by (the walked index's): with a tag, the tag's pairs (with a user too, that
        user's pairs with the tag: one index range); with a user alone, the user's index
        on the sessions table."""
        params: list[Any] = ["" if after is None else after]
        if where.tag is not None:
            params.append(where.tag)
            sql = (
                f"FROM {self._names.table('session_tags')} AS t "
                f"JOIN {self._names.table('sessions')} AS s ON s.session_id = t.session_id "
                "WHERE t.tag = $2 AND t.session_id > $1"
            )
            key = "t.session_id"
        else:
            sql = f"FROM {self._names.table('sessions')} AS s WHERE s.session_id > $1"
            key = "s.session_id"
        if where.user_id is not None:
            params.append(where.user_id)
            sql += f" AND {key[0]}.user_id = ${len(params)}"
        if where.updated_after is not None:
            params.append(where.updated_after)
            sql += f" AND s.updated_at > ${len(params)}"
        return sql, params, key

    async def find_sessions(
        self, where: SessionFilter, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        sql, params, key = self._where(where, after)
        columns = ", ".join(f"s.{name.strip()}" for name in _INFO_COLUMNS.split(","))
        query = f"SELECT {columns} {sql} ORDER BY {key} LIMIT ${len(params) + 1}"
        rows = await self._fetch("list_sessions", query, *params, min(limit, 2**62))
        return [_info(row) for row in rows]

    async def count_sessions(self, where: SessionFilter) -> int:
        sql, params, _ = self._where(where, None)
        rows = await self._fetch("count_sessions", f"SELECT count(*) {sql}", *params)
        return int(rows[0][0])

    async def expired_sessions(
        self, now: datetime, default_ttl: float | None, *, limit: int, after: str | None
    ) -> list[SessionInfo]:
        rows = await self._fetch(
            "expired_sessions",
            self._sql.expired,
            "" if after is None else after,
            default_ttl,
            now,
            min(limit, 2**62),
        )
        return [_info(row) for row in rows]

    # ------------------------------------------------------------------ schema


def _info(row: Any) -> SessionInfo:
    return SessionInfo(
        session_id=row[0],
        item_count=row[1],
        created_at=row[2],
        updated_at=row[3],
        user_id=row[4],
        title=row[5],
        tags=tuple(row[6] or ()),
        metadata=decode_metadata(row[7]),
        ttl=stored_ttl(row[8]),
        version=row[9],
    )


def _keep(
    updated: datetime,
    ttl: float | None,
    stale_before: datetime | None,
    expiry: tuple[datetime, float | None] | None,
) -> bool:
    """Inside a delete's transaction: whether the session no longer qualifies."""
    if stale_before is not None and updated >= stale_before:
        return True
    if expiry is not None:
        now, default = expiry
        return not expired(updated, ttl, default, now)
    return False
