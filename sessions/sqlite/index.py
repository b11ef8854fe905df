"""The turn index as ``sessions doctor`` checks and repairs it (``TurnIndexBackend``):
the facts read in one statement, the counts the core derives from them
(:func:`sessions._model.turnindex.index_repair`) written in one write transaction."""

from __future__ import annotations

import sqlite3

from .._model.turnindex import TurnIndexFacts, facts_of_rows, index_repair
from .connection import writing
from .sql import SQL_INDEX_FACTS, SQL_INDEX_SET_RECORD, SQL_INDEX_SET_SESSION

__all__ = ["read_turn_index", "write_turn_index"]


def read_turn_index(conn: sqlite3.Connection, session_id: str) -> TurnIndexFacts | None:
    return facts_of_rows(conn.execute(SQL_INDEX_FACTS, (session_id,)).fetchall())


def write_turn_index(conn: sqlite3.Connection, session_id: str) -> TurnIndexFacts | None:
    """Recompute the session's turn index in one write transaction (which holds the
    database: no commit interleaves); the facts read before writing."""
    with writing(conn):
        facts = read_turn_index(conn, session_id)
        if facts is None:
            return None
        repair = index_repair(facts)
        conn.executemany(
            SQL_INDEX_SET_RECORD,
            [(items, session_id, first_key) for first_key, items in repair.records],
        )
        if repair.session is not None:
            conn.execute(SQL_INDEX_SET_SESSION, (*repair.session, session_id))
    return facts
