"""SQLite's SQL text: the schema as its migrations, and the statements the backend runs.

The schema is versioned: ``MIGRATIONS`` lists each version's statements (append only);
:func:`migrate` applies the missing ones inside the caller's write transaction, so many
processes may open a fresh file at once.
"""

from __future__ import annotations

import sqlite3

from ..errors import StorageError

__all__ = [
    "INFO_COLUMNS",
    "INFO_COLUMNS_S",
    "INFO_NAMES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SESSION_TABLES",
    "SQL_APPLIED_ONE",
    "SQL_BRANCH",
    "SQL_BUMP",
    "SQL_CLEAR",
    "SQL_CLEAR_HIDDEN",
    "SQL_CLEAR_TURNS",
    "SQL_COUNT",
    "SQL_FIRST_HIDDEN",
    "SQL_FORK_OF",
    "SQL_HIDE",
    "SQL_INSERT",
    "SQL_INSERT_ROWS",
    "INSERT_ROWS_MAX",
    "SQL_KEYS_AFTER",
    "SQL_LOAD_ALL",
    "SQL_LOAD_BRANCHES",
    "SQL_LOAD_KEYS",
    "SQL_LOAD_TAIL",
    "SQL_LOAD_TURNS",
    "SQL_POP",
    "SQL_QUARANTINE",
    "SQL_QUARANTINE_LOAD",
    "SQL_RECORD_BATCH",
    "SQL_RESTORE_TIMES",
    "SQL_REWIND_NO",
    "SQL_RUN_STATE_LOAD",
    "SQL_RUN_STATE_VERSION",
    "SQL_RUN_STATE_WRITE",
    "SQL_SESSION_FACTS",
    "SQL_TURN",
    "SQL_TURN_BARE",
    "SQL_TURNS_NEWEST",
    "SQL_TURNS_OLDEST",
    "SQL_TURN_INDEX",
    "SQL_TURN_POP",
    "SQL_UNHIDE",
    "USAGE_COLUMNS",
    "migrate",
]

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
    (
        7,
        (
            # The turn index (docs/turns.md): how many items each turn record holds now
            # (hidden records: their hidden items), and per session how many visible
            # records hold items and how many items those hold; kept by every write.
            "ALTER TABLE txs_turns ADD COLUMN items INTEGER NOT NULL DEFAULT 0",
            # An undo finds the records its rewind hid without reading the visible ones
            # (commits never write this index: their records are not hidden).
            "CREATE INDEX IF NOT EXISTS txs_turns_hidden ON txs_turns (session_id, hidden_by)"
            " WHERE hidden_by IS NOT NULL",
            "ALTER TABLE txs_sessions ADD COLUMN turn_count INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE txs_sessions ADD COLUMN turn_items INTEGER NOT NULL DEFAULT 0",
            "UPDATE txs_turns SET items = CASE WHEN hidden_by IS NULL THEN ("
            " SELECT count(*) FROM txs_items AS i WHERE i.session_id = txs_turns.session_id"
            " AND i.seq BETWEEN txs_turns.first_seq AND txs_turns.last_seq"
            ") ELSE ("
            " SELECT count(*) FROM txs_hidden_items AS h"
            " WHERE h.session_id = txs_turns.session_id"
            " AND h.seq BETWEEN txs_turns.first_seq AND txs_turns.last_seq"
            ") END",
            "UPDATE txs_sessions SET"
            " turn_count = (SELECT count(*) FROM txs_turns AS t"
            " WHERE t.session_id = txs_sessions.session_id AND t.hidden_by IS NULL"
            " AND t.items > 0),"
            " turn_items = (SELECT coalesce(sum(t.items), 0) FROM txs_turns AS t"
            " WHERE t.session_id = txs_sessions.session_id AND t.hidden_by IS NULL)",
        ),
    ),
    (
        8,
        (
            # A fork's commit reads the record of the session it makes (SQL_FORK_OF),
            # and a deletion removes it, by the fork's own id (the key starts with its
            # source's id): without this index both read the whole table.
            "CREATE INDEX IF NOT EXISTS txs_branches_session ON txs_branches (session_id)",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

SQL_RECORD_BATCH = (
    "INSERT OR IGNORE INTO txs_batches (session_id, batch_id, committed_at) VALUES (?, ?, ?)"
)
SQL_CLEAR = "DELETE FROM txs_items WHERE session_id = ?"
SQL_CLEAR_TURNS = "DELETE FROM txs_turns WHERE session_id = ?"
SQL_CLEAR_HIDDEN = "DELETE FROM txs_hidden_items WHERE session_id = ?"
USAGE_COLUMNS = "requests, input_tokens, output_tokens, cached_tokens, reasoning_tokens"
SQL_TURN = (
    f"INSERT INTO txs_turns (session_id, first_seq, last_seq, created_at, run_id, "
    f"{USAGE_COLUMNS}, items) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: ``SQL_TURN`` for a turn without usage (its usage columns NULL, their default).
SQL_TURN_BARE = (
    "INSERT INTO txs_turns (session_id, first_seq, last_seq, created_at, run_id, items) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# A popped item leaves the visible turn record covering it, if one does; returns what
# that record holds now.
SQL_TURN_POP = (
    "UPDATE txs_turns SET items = items - 1 WHERE session_id = :s AND first_seq = ("
    "SELECT max(first_seq) FROM txs_turns WHERE session_id = :s AND first_seq <= :k"
    ") AND last_seq >= :k AND hidden_by IS NULL RETURNING items"
)
# The first (ASC) or last (DESC) stored key of record t: its own first or last key
# while it holds every item of its range, else one index probe.
_STORED_KEY = (
    "CASE WHEN t.items = t.last_seq - t.first_seq + 1 THEN t.{end}_seq ELSE ("
    "SELECT i.seq FROM txs_items AS i WHERE i.session_id = t.session_id "
    "AND i.seq BETWEEN t.first_seq AND t.last_seq ORDER BY i.seq {order} LIMIT 1) END"
)
_WINDOW_ROW = (
    f"SELECT t.first_seq, t.last_seq, t.created_at, t.run_id, {USAGE_COLUMNS}, t.items, "
    f"{_STORED_KEY.format(end='first', order='ASC')}, "
    f"{_STORED_KEY.format(end='last', order='DESC')} "
    "FROM txs_turns AS t WHERE t.session_id = ? AND t.hidden_by IS NULL AND t.items > 0 "
)
# The turn index of one session (TurnBackend.load_turn_window): its counts, then the
# oldest or newest visible records holding items (LIMIT -1: all), each with its first
# and last stored key.
SQL_TURN_INDEX = "SELECT item_count, turn_count, turn_items FROM txs_sessions WHERE session_id = ?"
SQL_TURNS_OLDEST = _WINDOW_ROW + "ORDER BY t.first_seq LIMIT ?"
SQL_TURNS_NEWEST = _WINDOW_ROW + "ORDER BY t.first_seq DESC LIMIT ?"
# The turn index of one session as sessions doctor checks it (TurnIndexBackend), one
# statement: the session's counts, then each turn record (none: one row of NULLs) with
# its count and the items and hidden items its range holds. No row: no session.
SQL_INDEX_FACTS = (
    "SELECT s.turn_count, s.turn_items, t.first_seq, t.last_seq, t.hidden_by IS NOT NULL, "
    "t.items, (SELECT count(*) FROM txs_items AS i WHERE i.session_id = t.session_id "
    "AND i.seq BETWEEN t.first_seq AND t.last_seq), "
    "(SELECT count(*) FROM txs_hidden_items AS h WHERE h.session_id = t.session_id "
    "AND h.seq BETWEEN t.first_seq AND t.last_seq) "
    "FROM txs_sessions AS s LEFT JOIN txs_turns AS t ON t.session_id = s.session_id "
    "WHERE s.session_id = ? ORDER BY t.first_seq"
)
SQL_INDEX_SET_RECORD = "UPDATE txs_turns SET items = ? WHERE session_id = ? AND first_seq = ?"
SQL_INDEX_SET_SESSION = (
    "UPDATE txs_sessions SET turn_count = ?, turn_items = ? WHERE session_id = ?"
)
SQL_LOAD_TURNS = (
    f"SELECT first_seq, last_seq, created_at, run_id, {USAGE_COLUMNS} FROM txs_turns "
    "WHERE session_id = ? AND hidden_by IS NULL ORDER BY first_seq"
)
SQL_LOAD_KEYS = "SELECT seq FROM txs_items WHERE session_id = ? ORDER BY seq"
SQL_POP = "DELETE FROM txs_items WHERE session_id = ? AND seq = ?"
# :tc / :ti: the turn record the batch adds (1 and its item count, else 0); :emptied /
# :covered: the visible records its pops emptied and the popped items records covered.
SQL_BUMP = (
    "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq, "
    "version, incarnation, turn_count, turn_items) VALUES (:sid, :now, :now, :n, :n + 1, 1, "
    "lower(hex(randomblob(8))), :tc, :ti) "
    "ON CONFLICT (session_id) DO UPDATE SET updated_at = max(updated_at, :now), "
    "item_count = CASE WHEN :clear THEN :n ELSE item_count - :removed + :n END, "
    "turn_count = CASE WHEN :clear THEN :tc ELSE turn_count - :emptied + :tc END, "
    "turn_items = CASE WHEN :clear THEN :ti ELSE turn_items - :covered + :ti END, "
    "next_seq = next_seq + :n, version = version + 1 "
    "RETURNING next_seq - :n, version, incarnation"
)
SQL_RESTORE_TIMES = "UPDATE txs_sessions SET created_at = ?, updated_at = ? WHERE session_id = ?"
SQL_INSERT = "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES (?, ?, ?, ?)"
#: The most items one statement inserts (``sql_insert_rows``: 4 parameters a row, well
#: under SQLite's limit of 999 of old builds); more go row by row (``SQL_INSERT``).
INSERT_ROWS_MAX = 32
#: ``SQL_INSERT`` for ``n`` rows at once (index ``n``; 0 unused): one statement a commit.
SQL_INSERT_ROWS = ("",) + tuple(
    "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES "
    + ", ".join(["(?, ?, ?, ?)"] * n)
    for n in range(1, INSERT_ROWS_MAX + 1)
)
SQL_LOAD_ALL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq"
SQL_LOAD_TAIL = "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq DESC LIMIT ?"

SQL_SESSION_FACTS = "SELECT incarnation, version FROM txs_sessions WHERE session_id = ?"
SQL_APPLIED_ONE = "SELECT 1 FROM txs_batches WHERE session_id = ? AND batch_id = ?"
SQL_KEYS_AFTER = "SELECT seq FROM txs_items WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
SQL_FIRST_HIDDEN = "SELECT min(seq) FROM txs_hidden_items WHERE session_id = ? AND rewind_no = ?"
SQL_RUN_STATE_VERSION = "SELECT version FROM txs_run_states WHERE session_id = ?"
SQL_RUN_STATE_WRITE = (
    "INSERT INTO txs_run_states (session_id, version, data, label, updated_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
    "version = excluded.version, data = excluded.data, label = excluded.label, "
    "updated_at = excluded.updated_at"
)
SQL_RUN_STATE_LOAD = "SELECT data, version, label FROM txs_run_states WHERE session_id = ?"
SQL_BRANCH = (
    "INSERT OR IGNORE INTO txs_branches (source_id, session_id, at_turn, created_at) "
    "VALUES (?, ?, ?, ?)"
)
SQL_LOAD_BRANCHES = (
    "SELECT session_id, at_turn, created_at FROM txs_branches WHERE source_id = ? "
    "ORDER BY created_at, session_id"
)
SQL_QUARANTINE = (
    "INSERT INTO txs_quarantine (session_id, seq, batch_id, reason, data, created_at) "
    "VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM txs_quarantine WHERE session_id = ?), "
    "?, ?, ?, ?)"
)
SQL_QUARANTINE_LOAD = (
    "SELECT seq, batch_id, reason, data, created_at FROM txs_quarantine "
    "WHERE session_id = ? ORDER BY seq"
)


SQL_FORK_OF = "SELECT source_id, at_turn FROM txs_branches WHERE session_id = ?"

SQL_REWIND_NO = "SELECT max(rewind_no) FROM txs_hidden_items WHERE session_id = :s"
SQL_HIDE = (
    "INSERT INTO txs_hidden_items (session_id, seq, batch_id, data, rewind_no) "
    "SELECT session_id, seq, batch_id, data, :r FROM txs_items WHERE session_id = :s AND seq > :k",
    "DELETE FROM txs_items WHERE session_id = :s AND seq > :k",
    "UPDATE txs_turns SET hidden_by = :r "
    "WHERE session_id = :s AND first_seq > :k AND hidden_by IS NULL RETURNING items",
)
SQL_UNHIDE = (
    "INSERT INTO txs_items (session_id, seq, batch_id, data) SELECT session_id, seq, "
    "batch_id, data FROM txs_hidden_items WHERE session_id = :s AND rewind_no = :r",
    "DELETE FROM txs_hidden_items WHERE session_id = :s AND rewind_no = :r",
    "UPDATE txs_turns SET hidden_by = NULL WHERE session_id = :s AND hidden_by = :r "
    "RETURNING items",
)
SQL_COUNT = (
    "UPDATE txs_sessions SET item_count = item_count + :n, turn_count = turn_count + :tc, "
    "turn_items = turn_items + :ti WHERE session_id = :s"
)

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


INFO_NAMES = (
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
INFO_COLUMNS = ", ".join(INFO_NAMES)
INFO_COLUMNS_S = ", ".join(f"s.{name}" for name in INFO_NAMES)


def migrate(conn: sqlite3.Connection) -> None:
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
