"""Store operations that delete, each one write transaction on the worker thread:
sessions (all, stale or expired, checked inside the transaction), a user's sessions,
old batch records."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._model.catalogue import ttl_in_force
from .connection import writing
from .sql import SESSION_TABLES

__all__ = ["Expiry", "delete_sessions", "delete_user_sessions", "prune_records"]

#: ``(now, default_ttl)``: delete only if the session's TTL has elapsed at ``now``.
Expiry = tuple[float, float | None]


def _keep(
    conn: sqlite3.Connection, session_id: str, stale_before: float | None, expiry: Expiry | None
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


def delete_sessions(
    conn: sqlite3.Connection,
    session_ids: Sequence[str],
    stale_before: float | None,
    expiry: Expiry | None = None,
    keep_forks: bool = False,
) -> list[str]:
    """Delete, in one transaction, each session that (checked inside it) still
    qualifies; the ids of those that existed. ``keep_forks``: keep the records of the
    sessions forked from them."""
    deleted: list[str] = []
    with writing(conn):
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
    return deleted


def delete_user_sessions(conn: sqlite3.Connection, user_id: str) -> list[str]:
    with writing(conn):
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
    return ids


def prune_records(conn: sqlite3.Connection, cutoff: float, keep_prefixes: Sequence[str]) -> int:
    keep = "".join(" AND substr(batch_id, 1, ?) <> ?" for _ in keep_prefixes)
    params = [cutoff, *(x for prefix in keep_prefixes for x in (len(prefix), prefix))]
    return conn.execute(f"DELETE FROM txs_batches WHERE committed_at < ?{keep}", params).rowcount
