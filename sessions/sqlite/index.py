"""The turn index as ``sessions doctor`` checks and repairs it (``TurnIndexBackend``):
the facts read in one statement, the counts the core derives from them
(:func:`sessions._model.turnindex.turn_index_of`) written in one write transaction."""

from __future__ import annotations

import sqlite3

from .._model.turnindex import TurnIndexFacts, facts_of_rows, turn_index_of
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
        want = turn_index_of(facts)
        conn.executemany(
            SQL_INDEX_SET_RECORD,
            [
                (items, session_id, record.first_key)
                for record, items in zip(facts.records, want.items, strict=True)
                if record.items != items
            ],
        )
        if (facts.turn_count, facts.turn_items) != (want.turn_count, want.turn_items):
            conn.execute(SQL_INDEX_SET_SESSION, (want.turn_count, want.turn_items, session_id))
    return facts
