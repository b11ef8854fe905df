"""The backend's reads, each one job on the worker thread: rows, turns, run states,
applied batch ids, catalogue listings (their SQL built here) and session infos."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from .._model.backend import Row, SessionFilter, SessionInfo, TurnRow, TurnUsage, TurnWindow
from .._model.catalogue import decode_metadata, decode_tags, stored_ttl
from .connection import reading
from .sql import (
    SQL_LOAD_ALL,
    SQL_LOAD_KEYS,
    SQL_LOAD_TAIL,
    SQL_LOAD_TURNS,
    SQL_RUN_STATE_LOAD,
    SQL_TURN_INDEX,
    SQL_TURNS_NEWEST,
    SQL_TURNS_OLDEST,
)

__all__ = [
    "info_from",
    "listing_sql",
    "query",
    "read_applied",
    "read_rows",
    "read_run_state",
    "read_turn_window",
    "read_turns",
    "read_versioned",
]


def read_rows(conn: sqlite3.Connection, session_id: str, limit: int | None) -> list[Row]:
    if limit is None:
        return conn.execute(SQL_LOAD_ALL, (session_id,)).fetchall()
    rows = conn.execute(SQL_LOAD_TAIL, (session_id, limit)).fetchall()
    rows.reverse()
    return rows


def read_turns(conn: sqlite3.Connection, session_id: str) -> tuple[list[TurnRow], list[int]]:
    with reading(conn):  # one snapshot for both reads
        records = [
            TurnRow(
                row[0],
                row[1],
                datetime.fromtimestamp(row[2], timezone.utc),
                row[3],
                None if row[4] is None else TurnUsage(*row[4:]),
            )
            for row in conn.execute(SQL_LOAD_TURNS, (session_id,))
        ]
        keys = [key for (key,) in conn.execute(SQL_LOAD_KEYS, (session_id,))]
    return records, keys


def read_turn_window(
    conn: sqlite3.Connection, session_id: str, oldest: int | None, newest: int | None
) -> TurnWindow | None:
    with reading(conn):  # one snapshot for both reads
        facts = conn.execute(SQL_TURN_INDEX, (session_id,)).fetchone()
        if facts is None:
            return TurnWindow(0, ())
        item_count, turn_count, turn_items = facts
        if turn_items != item_count:
            return None  # items no visible record covers: the full path
        sql, limit = (
            (SQL_TURNS_NEWEST, newest) if newest is not None else (SQL_TURNS_OLDEST, oldest)
        )
        rows = conn.execute(sql, (session_id, -1 if limit is None else limit)).fetchall()
    if newest is not None:
        rows.reverse()
    return TurnWindow(
        turn_count,
        tuple(
            TurnRow(
                row[10],
                row[11],
                datetime.fromtimestamp(row[2], timezone.utc),
                row[3],
                None if row[4] is None else TurnUsage(*row[4:9]),
                row[9],
            )
            for row in rows
        ),
    )


def read_run_state(conn: sqlite3.Connection, session_id: str) -> tuple[str | None, int, str | None]:
    row = conn.execute(SQL_RUN_STATE_LOAD, (session_id,)).fetchone()
    return (None, 0, None) if row is None else (row[0], row[1], row[2])


def read_applied(conn: sqlite3.Connection, session_id: str, batch_ids: Sequence[str]) -> set[str]:
    marks = ",".join("?" * len(batch_ids))
    rows = conn.execute(
        f"SELECT batch_id FROM txs_batches WHERE session_id = ? AND batch_id IN ({marks})",
        (session_id, *batch_ids),
    ).fetchall()
    return {row[0] for row in rows}


def query(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]
) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def read_versioned(
    conn: sqlite3.Connection, session_id: str, limit: int | None
) -> tuple[list[Row], int, str | None]:
    with reading(conn):  # one snapshot for both reads
        row = conn.execute(
            "SELECT version, incarnation FROM txs_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        rows = read_rows(conn, session_id, limit)
    return (rows, 0, None) if row is None else (rows, int(row[0]), row[1])


def listing_sql(where: SessionFilter, after: str | None) -> tuple[str, dict[str, Any], str]:
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


def info_from(row: Sequence[Any]) -> SessionInfo:
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
