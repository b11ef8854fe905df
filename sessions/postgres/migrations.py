"""The PostgreSQL backend's schema as its migrations: each version's statements, applied
once, in order (:mod:`.schema` runs them). Append only.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

#: A new session life's token (see :attr:`sessions.Batch.incarnation`).
_NEW_LIFE = "md5(random()::text || clock_timestamp()::text)"

#: Each migration: ``(version, statements)``. Statements are templates whose
#: ``{sessions}``, ``{items}``, ``{batches}`` placeholders become schema-qualified,
#: quoted table names and ``{prefix}`` the (validated) table prefix. Append only.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            "CREATE TABLE IF NOT EXISTS {sessions} ("
            ' session_id text COLLATE "C" PRIMARY KEY,'
            " created_at timestamptz NOT NULL,"
            " updated_at timestamptz NOT NULL,"
            " item_count bigint NOT NULL DEFAULT 0,"
            " next_seq bigint NOT NULL DEFAULT 1)",
            'CREATE INDEX IF NOT EXISTS "{prefix}sessions_updated" ON {sessions} (updated_at)',
            # data is TEXT, not jsonb: the core stores exact JSON text, and jsonb
            # rejects \u0000 and reorders keys.
            "CREATE TABLE IF NOT EXISTS {items} ("
            ' session_id text COLLATE "C" NOT NULL,'
            " seq bigint NOT NULL,"
            " batch_id text NOT NULL,"
            " data text NOT NULL,"
            " PRIMARY KEY (session_id, seq))",
            "CREATE TABLE IF NOT EXISTS {batches} ("
            ' session_id text COLLATE "C" NOT NULL,'
            ' batch_id text COLLATE "C" NOT NULL,'
            " committed_at timestamptz NOT NULL,"
            " PRIMARY KEY (session_id, batch_id))",
        ),
    ),
    (
        2,
        (
            # One saved run state per session (tool approvals waiting for a human). The
            # row outlives a removal (data NULL) so that versions are never reused.
            "CREATE TABLE IF NOT EXISTS {run_states} ("
            ' session_id text COLLATE "C" PRIMARY KEY,'
            " version bigint NOT NULL,"
            " data text,"
            " label text,"
            " updated_at timestamptz NOT NULL)",
        ),
    ),
    (
        3,
        (
            # Items kept out of the history because they break a history rule
            # (integrity="quarantine"), written with the batch they came in.
            "CREATE TABLE IF NOT EXISTS {quarantine} ("
            ' session_id text COLLATE "C" NOT NULL,'
            " seq bigint NOT NULL,"
            " batch_id text NOT NULL,"
            " reason text NOT NULL,"
            " data text NOT NULL,"
            " created_at timestamptz NOT NULL,"
            " PRIMARY KEY (session_id, seq))",
        ),
    ),
    (
        4,
        (
            # One row per commit that added items: the seq range of its items (docs/turns.md).
            # Items stored before this table existed belong to no row: they read as one turn.
            "CREATE TABLE IF NOT EXISTS {turns} ("
            ' session_id text COLLATE "C" NOT NULL,'
            " first_seq bigint NOT NULL,"
            " last_seq bigint NOT NULL,"
            " created_at timestamptz NOT NULL,"
            " run_id text,"
            " hidden_by bigint,"  # the rewind that hid it (session.rewind), else NULL
            # Model usage of the turn's run (session.record_usage); NULL: none recorded.
            " requests bigint,"
            " input_tokens bigint,"
            " output_tokens bigint,"
            " cached_tokens bigint,"
            " reasoning_tokens bigint,"
            " PRIMARY KEY (session_id, first_seq))",
            # Items hidden by a rewind (kept for undo_rewind), with the rewind's number.
            "CREATE TABLE IF NOT EXISTS {hidden} ("
            ' session_id text COLLATE "C" NOT NULL,'
            " seq bigint NOT NULL,"
            " batch_id text NOT NULL,"
            " data text NOT NULL,"
            " rewind_no bigint NOT NULL,"
            " PRIMARY KEY (session_id, seq))",
            # Forks: session_id was forked from source_id at turn at_turn (session.fork).
            "CREATE TABLE IF NOT EXISTS {branches} ("
            ' source_id text COLLATE "C" NOT NULL,'
            ' session_id text COLLATE "C" NOT NULL,'
            " at_turn bigint NOT NULL,"
            " created_at timestamptz NOT NULL,"
            " PRIMARY KEY (source_id, session_id))",
        ),
    ),
    (
        5,
        (
            # The catalogue (docs/catalogue.md): owner, title, tags (also one row each in
            # session_tags, for lookups), metadata (JSON object text), the session's own
            # idle TTL (seconds) and its version (one per applied batch).
            'ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS user_id text COLLATE "C"',
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS title text",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS tags text[]",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS metadata text",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS ttl double precision",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0",
            'CREATE INDEX IF NOT EXISTS "{prefix}sessions_user" ON {sessions} (user_id, session_id)',
            # user_id repeats the session's, so that one user's sessions with a tag are
            # one index range, whatever the size of the store.
            "CREATE TABLE IF NOT EXISTS {session_tags} ("
            ' tag text COLLATE "C" NOT NULL,'
            ' session_id text COLLATE "C" NOT NULL,'
            ' user_id text COLLATE "C",'
            " PRIMARY KEY (tag, session_id))",
            'CREATE INDEX IF NOT EXISTS "{prefix}session_tags_session" ON {session_tags} (session_id)',
            'CREATE INDEX IF NOT EXISTS "{prefix}session_tags_user"'
            " ON {session_tags} (user_id, tag, session_id)",
        ),
    ),
    (
        6,
        (
            # The session's life (Batch.incarnation): a new token each time its row is
            # created, so a session deleted and created anew under the same id is told
            # apart from the one a session object read.
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS incarnation text",
            f"UPDATE {{sessions}} SET incarnation = {_NEW_LIFE} WHERE incarnation IS NULL",
            f"ALTER TABLE {{sessions}} ALTER COLUMN incarnation SET DEFAULT {_NEW_LIFE}",
            # Raised by the append statement when its batch was prepared against a life
            # that is over (SQLSTATE TXS01, message: the session id).
            "CREATE OR REPLACE FUNCTION {deleted}(sid text) RETURNS text LANGUAGE plpgsql "
            "AS $f$ BEGIN RAISE EXCEPTION USING ERRCODE = 'TXS01', MESSAGE = sid; END $f$",
        ),
    ),
    (
        7,
        (
            # The turn index (docs/turns.md): how many items each turn record holds now
            # (hidden records: their hidden items), and per session how many visible
            # records hold items and how many items those hold; kept by every write.
            "ALTER TABLE {turns} ADD COLUMN IF NOT EXISTS items bigint NOT NULL DEFAULT 0",
            # An undo finds the records its rewind hid without reading the visible ones
            # (commits never write this index: their records are not hidden).
            'CREATE INDEX IF NOT EXISTS "{prefix}turns_hidden" ON {turns} (session_id, hidden_by)'
            " WHERE hidden_by IS NOT NULL",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS turn_count bigint NOT NULL DEFAULT 0",
            "ALTER TABLE {sessions} ADD COLUMN IF NOT EXISTS turn_items bigint NOT NULL DEFAULT 0",
            "UPDATE {turns} AS t SET items = CASE WHEN t.hidden_by IS NULL THEN ("
            " SELECT count(*) FROM {items} AS i WHERE i.session_id = t.session_id"
            " AND i.seq BETWEEN t.first_seq AND t.last_seq"
            ") ELSE ("
            " SELECT count(*) FROM {hidden} AS h WHERE h.session_id = t.session_id"
            " AND h.seq BETWEEN t.first_seq AND t.last_seq"
            ") END",
            "UPDATE {sessions} AS s SET turn_count = c.n, turn_items = c.held FROM ("
            " SELECT session_id, count(*) FILTER (WHERE items > 0) AS n,"
            " coalesce(sum(items), 0) AS held FROM {turns} WHERE hidden_by IS NULL"
            " GROUP BY session_id) AS c WHERE s.session_id = c.session_id",
            # Statistics of the new column now: planned from none (every items 0), the
            # newest turns of a long session would be read by sorting all of them.
            "ANALYZE {turns}",
        ),
    ),
    (
        8,
        (
            # A fork's commit reads the record of the session it makes, and a deletion
            # removes it, by the fork's own id (the key starts with its source's id).
            'CREATE INDEX IF NOT EXISTS "{prefix}branches_session" ON {branches} (session_id)',
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
