"""PostgreSQL backend (asyncpg): one pool per store, one round trip per common commit.

The backend only loads rows and applies batches; staging, retries and outcome
resolution live in the core (:mod:`sessions._commit`, :mod:`sessions._session`).

* A batch of items only (the common turn) is ONE statement: data-modifying CTEs record
  the batch id (``ON CONFLICT DO NOTHING``), bump the session row (which locks it and
  hands out a contiguous ``seq`` range) only if the id was new, and insert the items
  from ``unnest($n::text[]) WITH ORDINALITY``.
* Appends of many sessions that arrive while others are in flight are sent together
  (group commit, see ``_Grouper``): the append statement once per batch, pipelined in
  one round trip, one implicit transaction, one WAL flush. If the server rejects the
  group, it is applied again entry by entry, each in a savepoint of one transaction,
  so a failing commit fails alone.
* Pops and clears run in an explicit transaction that first locks the session row in
  a statement of its own, so that every later statement of that transaction (under
  READ COMMITTED each takes a fresh snapshot) sees every item committed before the
  lock was granted.
* A pooled connection goes back to the pool clean or not at all: anything other than a
  server-reported error (cancellation, timeout, lost connection) terminates it.

Tables live in ``schema`` (created if missing) and are named ``<table_prefix>sessions``,
``<table_prefix>items``, ``<table_prefix>batches`` and ``<table_prefix>schema_version``.
Migrations run once per store open under ``pg_advisory_xact_lock``, so many processes
may start at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

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
    deleted_message,
    expired,
    stored_ttl,
)
from ._decide import Plan, Snapshot, decide, key_limit, needs_snapshot, undoes
from ._group import Bounds, Entry, GroupCommitStats, Outcome, Scheduler, outcomes_of_async
from ._observe import HOOK
from ._options import (
    STORE_KEYWORDS,
    SessionKeywords,
    StoreKeywords,
    StoreOptions,
    check_keywords,
    merge_options,
    session_keywords,
    store_options,
)
from ._policy import Integrity, RetryPolicy
from ._redact import redact
from ._session import BufferedSession
from ._shield import Firm
from ._store import Store
from ._validate import validate_identifier, validate_positive_int
from .errors import (
    DeletedConflictError,
    StorageError,
    StoreClosedError,
    TransientStorageError,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresBackend",
    "PostgresSession",
    "PostgresStore",
]

T = TypeVar("T")

logger = logging.getLogger("sessions")

#: Each migration: ``(version, statements)``. Statements are templates whose
#: ``{sessions}``, ``{items}``, ``{batches}`` placeholders become schema-qualified,
#: A new session life's token (see :attr:`sessions.Batch.incarnation`).
_NEW_LIFE = "md5(random()::text || clock_timestamp()::text)"

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
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

#: SQLSTATE of the append statement's refusal of a batch for a life that is over.
_DELETED_STATE = "TXS01"

_SQL_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS {version} ("
    " version integer PRIMARY KEY,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)

# The common commit: one batch of items only, one statement, one round trip.
# $1 session_id, $2 batch_id, $3 items text[], $4 item count, then the turn record
# (Batch.turn): $5 whether there is one, $6 its run id, $7 its time (NULL: now()), $8-$12
# its usage (NULL: none), $13 the life it was prepared against (Batch.incarnation; NULL:
# no check: a row just created has a new life, so it fails the check, raised while
# inserting the items, and the whole statement is rolled back; a batch without items
# and with a life to check takes the general commit). now() is when the
# transaction started; a commit that started earlier but got the row later must not move
# updated_at back, hence GREATEST (here and in _SQL_BATCH).
_SQL_APPEND = """
WITH b AS (
    INSERT INTO {batches} (session_id, batch_id, committed_at)
    VALUES ($1, $2, now())
    ON CONFLICT DO NOTHING
    RETURNING batch_id
), s AS (
    INSERT INTO {sessions} AS t (session_id, created_at, updated_at, item_count, next_seq,
                                 version)
    SELECT $1, now(), now(), $4::bigint, $4::bigint + 1, 1 FROM b
    ON CONFLICT (session_id) DO UPDATE SET
        updated_at = GREATEST(t.updated_at, excluded.updated_at),
        item_count = t.item_count + excluded.item_count,
        next_seq = t.next_seq + excluded.item_count,
        version = t.version + 1
    RETURNING t.next_seq - $4::bigint AS base, t.incarnation AS life
), r AS (
    INSERT INTO {turns} (session_id, first_seq, last_seq, created_at, run_id,
                         requests, input_tokens, output_tokens, cached_tokens, reasoning_tokens)
    SELECT $1, s.base, s.base + $4::bigint - 1, coalesce($7::timestamptz, now()), $6::text,
           $8::bigint, $9::bigint, $10::bigint, $11::bigint, $12::bigint
    FROM s WHERE $5::boolean AND $4::bigint > 0
)
INSERT INTO {items} (session_id, seq, batch_id, data)
SELECT $1, s.base + u.ord - 1, $2, u.data
FROM s CROSS JOIN unnest($3::text[]) WITH ORDINALITY AS u(data, ord)
WHERE CASE WHEN s.life IS NOT DISTINCT FROM coalesce($13::text, s.life) THEN true
           ELSE {deleted}($1) IS NULL END
"""

# The general commit, statement 1 of 2+: make sure the session row exists and lock it;
# returns the session's life before the statement (NULL: the row was just created).
_SQL_LOCK = """
INSERT INTO {sessions} AS t (session_id, created_at, updated_at, item_count, next_seq)
VALUES ($1, now(), now(), 0, 1)
ON CONFLICT (session_id) DO UPDATE SET next_seq = t.next_seq
RETURNING CASE WHEN xmax = 0 THEN NULL ELSE incarnation END
"""

# The general commit, one statement per batch, after the lock (fresh snapshot).
# $1 session_id, $2 batch_id, $3 clear, $4 pops bigint[], $5 items text[], $6 item count,
# $7-$14 the turn record as $5-$12 of _SQL_APPEND. A clear removes the turn records too (the
# statement's snapshot does not see the new record, so it stays).
_SQL_BATCH = """
WITH b AS (
    INSERT INTO {batches} (session_id, batch_id, committed_at)
    VALUES ($1, $2, now())
    ON CONFLICT DO NOTHING
    RETURNING batch_id
), d AS (
    DELETE FROM {items}
    WHERE session_id = $1
      AND ($3::boolean OR seq = ANY($4::bigint[]))
      AND EXISTS (SELECT 1 FROM b)
    RETURNING seq
), s AS (
    UPDATE {sessions} SET
        updated_at = GREATEST(updated_at, now()),
        item_count = CASE WHEN $3::boolean THEN $6::bigint
                          ELSE item_count - (SELECT count(*) FROM d) + $6::bigint END,
        next_seq = next_seq + $6::bigint,
        version = version + 1
    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM b)
    RETURNING next_seq - $6::bigint AS base
), i AS (
    INSERT INTO {items} (session_id, seq, batch_id, data)
    SELECT $1, s.base + u.ord - 1, $2, u.data
    FROM s CROSS JOIN unnest($5::text[]) WITH ORDINALITY AS u(data, ord)
), dt AS (
    DELETE FROM {turns} WHERE session_id = $1 AND $3::boolean AND EXISTS (SELECT 1 FROM b)
), dh AS (
    DELETE FROM {hidden} WHERE session_id = $1 AND $3::boolean AND EXISTS (SELECT 1 FROM b)
), r AS (
    INSERT INTO {turns} (session_id, first_seq, last_seq, created_at, run_id,
                         requests, input_tokens, output_tokens, cached_tokens, reasoning_tokens)
    SELECT $1, s.base, s.base + $6::bigint - 1, coalesce($9::timestamptz, now()), $8::text,
           $10::bigint, $11::bigint, $12::bigint, $13::bigint, $14::bigint
    FROM s WHERE $7::boolean AND $6::bigint > 0
)
SELECT (SELECT count(*) FROM b) AS recorded, (SELECT count(*) FROM d) AS removed
"""

_SQL_LOAD_ALL = "SELECT seq, data FROM {items} WHERE session_id = $1 ORDER BY seq"
_SQL_LOAD_TAIL = (
    "SELECT seq, data FROM (SELECT seq, data FROM {items} WHERE session_id = $1 "
    "ORDER BY seq DESC LIMIT $2) AS tail ORDER BY seq"
)
# Always run inside a transaction that is rolled back: see PostgresBackend.applied.
_SQL_PROBE = (
    "INSERT INTO {batches} (session_id, batch_id, committed_at) "
    "SELECT $1, id, now() FROM unnest($2::text[]) AS u(id) "
    "ON CONFLICT DO NOTHING RETURNING batch_id"
)
_INFO_COLUMNS = (
    "session_id, item_count, created_at, updated_at, user_id, title, tags, metadata, ttl, version"
)
# Session ids are never empty, so ``> ''`` lists from the start; COLLATE "C" on the
# column makes the order bytewise (code point order), the same as SQLite's.
_SQL_LIST = (
    f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id > $1 ORDER BY session_id LIMIT $2"
)
_SQL_INFO = f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id = $1"
_SQL_STALE = (
    f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE updated_at < $1 AND session_id > $2 "
    "ORDER BY session_id LIMIT $3"
)
_SQL_RANGE = (
    "SELECT seq, data FROM {items} WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
)
_SQL_PRUNE = (
    "DELETE FROM {batches} WHERE committed_at < $1 AND NOT EXISTS (SELECT 1 FROM "
    "unnest($2::text[]) AS k(prefix) WHERE left(batch_id, length(k.prefix)) = k.prefix)"
)
# A restore (import) gives the session the times of its export: $2 created, $3 updated.
_SQL_RESTORE_TIMES = "UPDATE {sessions} SET created_at = $2, updated_at = $3 WHERE session_id = $1"

# Server-reported SQLSTATEs after which the connection is gone or the database is
# going away: retry, and the outcome is known only if the commit was not yet sent.
_LOST_STATES = frozenset({"57P01", "57P02", "57P03"})
# Server-reported SQLSTATEs that abort the statement (outcome known) but are worth a
# retry: serialization failure, deadlock, too many connections, statement cancelled.
_RETRY_STATES = frozenset({"40001", "40P01", "53300", "57014"})
# How long a connection may take to roll back after a failure before it is terminated.
_SETTLE_TIMEOUT = 5.0


def _validate_names(schema: object, table_prefix: object) -> tuple[str, str]:
    # A prefix may be empty; it is checked as the start of an identifier.
    return (
        validate_identifier(schema, "schema"),
        validate_identifier(table_prefix, "table_prefix", allow_empty=True),
    )


@dataclass(frozen=True)
class _Names:
    """Quoted, schema-qualified table names and the SQL built from them."""

    schema: str
    prefix: str

    def table(self, name: str) -> str:
        return f'"{self.schema}"."{self.prefix}{name}"'

    def sql(self, template: str) -> str:
        return template.format(
            sessions=self.table("sessions"),
            items=self.table("items"),
            batches=self.table("batches"),
            run_states=self.table("run_states"),
            turns=self.table("turns"),
            branches=self.table("branches"),
            hidden=self.table("hidden_items"),
            quarantine=self.table("quarantine"),
            session_tags=self.table("session_tags"),
            version=self.table("schema_version"),
            deleted=f'"{self.schema}"."{self.prefix}deleted"',
            prefix=self.prefix,
        )

    @property
    def lock_key(self) -> int:
        """A 64-bit advisory lock key for migrations of this schema and prefix."""
        digest = hashlib.blake2b(
            f"txsessions:{self.schema}.{self.prefix}".encode(), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class _Sql:
    append: str
    lock: str
    batch: str
    load_all: str
    load_tail: str
    probe: str
    list: str
    info: str
    stale: str
    range: str
    prune: str
    restore_times: str

    @classmethod
    def build(cls, names: _Names) -> _Sql:
        s = names.sql
        return cls(
            append=s(_SQL_APPEND),
            lock=s(_SQL_LOCK),
            batch=s(_SQL_BATCH),
            load_all=s(_SQL_LOAD_ALL),
            load_tail=s(_SQL_LOAD_TAIL),
            probe=s(_SQL_PROBE),
            list=s(_SQL_LIST),
            info=s(_SQL_INFO),
            stale=s(_SQL_STALE),
            range=s(_SQL_RANGE),
            prune=s(_SQL_PRUNE),
            restore_times=s(_SQL_RESTORE_TIMES),
        )


# What the core decides a conditional batch by (sessions._decide.Snapshot), read in the
# general commit's transaction before the batch statement. $1 session_id, $2 batch_id,
# $3 pops bigint[], $4 tail (NULL: none), $5 how many keys to read, $6 an undo, $7 a run
# state, $8 a fork. Items hidden by a rewind: the newest rewind number first.
_SQL_SNAPSHOT = """
SELECT
    EXISTS (SELECT 1 FROM {batches} WHERE session_id = $1 AND batch_id = $2),
    coalesce((SELECT version FROM {sessions} WHERE session_id = $1), 0),
    (SELECT count(*) FROM {items} WHERE session_id = $1 AND seq = ANY($3::bigint[])),
    CASE WHEN $4::bigint IS NULL THEN ARRAY[]::bigint[] ELSE array(
        SELECT seq FROM {items} WHERE session_id = $1 AND seq > $4::bigint ORDER BY seq LIMIT $5
    ) END,
    h.newest,
    CASE WHEN $6::boolean AND h.newest IS NOT NULL THEN array(
        SELECT seq FROM {items} WHERE session_id = $1 AND seq > (
            SELECT min(seq) FROM {hidden} WHERE session_id = $1 AND rewind_no = h.newest
        ) ORDER BY seq LIMIT $5
    ) ELSE ARRAY[]::bigint[] END,
    CASE WHEN $7::boolean THEN
        coalesce((SELECT version FROM {run_states} WHERE session_id = $1), 0)
    ELSE 0 END,
    CASE WHEN $8::boolean THEN array(
        SELECT seq FROM {items} WHERE session_id = $1 ORDER BY seq LIMIT $5
    ) ELSE ARRAY[]::bigint[] END,
    f.source_id,
    f.at_turn
FROM (SELECT max(rewind_no) AS newest FROM {hidden} WHERE session_id = $1) AS h
LEFT JOIN LATERAL (
    SELECT source_id, at_turn FROM {branches} WHERE $8::boolean AND session_id = $1 LIMIT 1
) AS f ON true
"""
_SQL_RUN_STATE_WRITE = (
    "INSERT INTO {run_states} (session_id, version, data, label, updated_at) "
    "VALUES ($1, $2, $3, $4, now()) ON CONFLICT (session_id) DO UPDATE SET "
    "version = excluded.version, data = excluded.data, label = excluded.label, "
    "updated_at = excluded.updated_at"
)
_SQL_RUN_STATE_LOAD = "SELECT data, version, label FROM {run_states} WHERE session_id = $1"
_SQL_RUN_STATE_DELETE = "DELETE FROM {run_states} WHERE session_id = $1"
_SQL_BRANCHES_DELETE = "DELETE FROM {branches} WHERE source_id = ANY($1::text[])"
_SQL_USAGE = (
    "SELECT coalesce(sum(requests), 0), coalesce(sum(input_tokens), 0), "
    "coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0), "
    "coalesce(sum(reasoning_tokens), 0), count(requests) FROM {turns} "
    "WHERE requests IS NOT NULL AND ($1::text IS NULL OR session_id = $1) "
    "AND ($2::timestamptz IS NULL OR created_at >= $2)"
)
# Rewinds (Batch.rewind), in the general commit's transaction. $1 session_id, $2 the
# rewind number, $3 the key to hide after.
_SQL_HIDE = """
WITH moved AS (
    DELETE FROM {items} WHERE session_id = $1 AND seq > $3 RETURNING session_id, seq, batch_id, data
), kept AS (
    INSERT INTO {hidden} (session_id, seq, batch_id, data, rewind_no)
    SELECT session_id, seq, batch_id, data, $2 FROM moved
), t AS (
    UPDATE {turns} SET hidden_by = $2
    WHERE session_id = $1 AND first_seq > $3 AND hidden_by IS NULL
)
UPDATE {sessions} SET item_count = item_count - (SELECT count(*) FROM moved)
WHERE session_id = $1
"""
_SQL_UNHIDE = """
WITH moved AS (
    DELETE FROM {hidden} WHERE session_id = $1 AND rewind_no = $2
    RETURNING session_id, seq, batch_id, data
), back AS (
    INSERT INTO {items} (session_id, seq, batch_id, data)
    SELECT session_id, seq, batch_id, data FROM moved
), t AS (
    UPDATE {turns} SET hidden_by = NULL WHERE session_id = $1 AND hidden_by = $2
)
UPDATE {sessions} SET item_count = item_count + (SELECT count(*) FROM moved)
WHERE session_id = $1
"""
_SQL_BRANCH = (
    "INSERT INTO {branches} (source_id, session_id, at_turn, created_at) "
    "VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING"
)
_SQL_BRANCHES_LOAD = (
    "SELECT session_id, at_turn, created_at FROM {branches} WHERE source_id = $1 "
    "ORDER BY created_at, session_id"
)
# Turn records and item keys of one session, from one snapshot (one statement).
_SQL_TURNS_LOAD = (
    "SELECT array(SELECT seq FROM {items} WHERE session_id = $1 ORDER BY seq), "
    "array(SELECT row(first_seq, last_seq, created_at, run_id, requests, input_tokens, "
    "output_tokens, cached_tokens, reasoning_tokens) FROM {turns} "
    "WHERE session_id = $1 AND hidden_by IS NULL ORDER BY first_seq)"
)
# $1 session_id, $2 batch_id, $3 reasons text[], $4 data text[]; the session row is
# locked by the committing transaction, so max(seq) is stable.
_SQL_QUARANTINE = (
    "INSERT INTO {quarantine} (session_id, seq, batch_id, reason, data, created_at) "
    "SELECT $1, (SELECT coalesce(max(seq), 0) FROM {quarantine} WHERE session_id = $1) + u.ord,"
    " $2, u.reason, u.data, now() "
    "FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(reason, data, ord)"
)
_SQL_QUARANTINE_LOAD = (
    "SELECT seq, batch_id, reason, data, created_at FROM {quarantine} "
    "WHERE session_id = $1 ORDER BY seq"
)
_SQL_TAGS_DELETE = "DELETE FROM {session_tags} WHERE session_id = $1"
_SQL_TAGS_INSERT = (
    "INSERT INTO {session_tags} (tag, session_id, user_id) SELECT u.t, s.session_id, s.user_id "
    "FROM {sessions} AS s CROSS JOIN unnest($2::text[]) AS u(t) WHERE s.session_id = $1"
)
_SQL_TAGS_USER = "UPDATE {session_tags} SET user_id = $2 WHERE session_id = $1"
# The stored rows (all, or the latest $2), the session's version and life, in one snapshot.
_SQL_LOAD_VERSIONED = """
SELECT coalesce(v.version, 0), v.incarnation, r.seq, r.data
FROM (SELECT 1) AS one
LEFT JOIN {sessions} v ON v.session_id = $1
LEFT JOIN LATERAL (
    SELECT seq, data FROM {items} WHERE session_id = $1 ORDER BY seq DESC LIMIT $2
) r ON true
ORDER BY r.seq
"""
# The TTL clamped as _catalogue.ttl_in_force() does (least/greatest skip NULLs, hence
# the IS NOT NULL): a value stored by an older version or by hand never keeps a session
# forever nor takes the query out of the timestamp range.
_SQL_EXPIRED = (
    f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id > $1 "
    "AND coalesce(ttl, $2) IS NOT NULL AND updated_at + make_interval(secs => "
    f"least(greatest(coalesce(ttl, $2), 0), {MAX_TTL.total_seconds():.0f})) < $3 "
    "ORDER BY session_id LIMIT $4"
)
_SQL_DELETE_LOCK_MANY = (
    "SELECT session_id, updated_at, ttl FROM {sessions} WHERE session_id = ANY($1::text[]) "
    "ORDER BY session_id FOR UPDATE"
)
_SQL_DELETE_LOCK_USER = (
    "SELECT session_id, updated_at, ttl FROM {sessions} WHERE user_id = $1 "
    "ORDER BY session_id FOR UPDATE"
)
#: Every table with per-session rows, but the sessions table: what deleting a session
#: (or a user) deletes. A migration that adds one adds it here (a test compares this
#: with the schema).
SESSION_TABLES = (
    "items",
    "batches",
    "run_states",
    "session_tags",
    "quarantine",
    "turns",
    "hidden_items",
    "branches",  # the session's own fork record; its forks' records: source_id
)


@dataclass(frozen=True)
class _ExtraSql:
    snapshot: str
    run_state_write: str
    run_state_load: str
    run_state_delete: str
    turns_load: str
    branches_delete: str
    branch: str
    branches_load: str
    usage: str
    hide: str
    unhide: str
    quarantine: str
    quarantine_load: str
    tags_delete: str
    tags_insert: str
    tags_user: str
    load_versioned: str
    expired: str
    delete_lock_many: str
    delete_lock_user: str

    @classmethod
    def build(cls, names: _Names) -> _ExtraSql:
        s = names.sql
        return cls(
            snapshot=s(_SQL_SNAPSHOT),
            tags_delete=s(_SQL_TAGS_DELETE),
            tags_insert=s(_SQL_TAGS_INSERT),
            tags_user=s(_SQL_TAGS_USER),
            load_versioned=s(_SQL_LOAD_VERSIONED),
            expired=s(_SQL_EXPIRED),
            delete_lock_many=s(_SQL_DELETE_LOCK_MANY),
            delete_lock_user=s(_SQL_DELETE_LOCK_USER),
            run_state_write=s(_SQL_RUN_STATE_WRITE),
            run_state_load=s(_SQL_RUN_STATE_LOAD),
            run_state_delete=s(_SQL_RUN_STATE_DELETE),
            turns_load=s(_SQL_TURNS_LOAD),
            branches_delete=s(_SQL_BRANCHES_DELETE),
            branch=s(_SQL_BRANCH),
            branches_load=s(_SQL_BRANCHES_LOAD),
            usage=s(_SQL_USAGE),
            hide=s(_SQL_HIDE),
            unhide=s(_SQL_UNHIDE),
            quarantine=s(_SQL_QUARANTINE),
            quarantine_load=s(_SQL_QUARANTINE_LOAD),
        )


class _Phase:
    """Where an operation got to; decides whether a lost connection leaves the outcome known."""

    __slots__ = ("commit_sent",)

    def __init__(self) -> None:
        self.commit_sent = False


def _is_connection_loss(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.PostgresConnectionError):  # 08xxx, incl. ConnectionDoesNotExist
        return True
    if isinstance(exc, asyncpg.PostgresError):
        return getattr(exc, "sqlstate", None) in _LOST_STATES
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc).lower()
    if isinstance(exc, asyncpg.InternalClientError):
        # The protocol is out of step with the server, typically because the backend
        # died while the connection sat idle in the pool: the connection is unusable.
        return True
    return isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError))


def _classify(exc: BaseException, operation: str, phase: _Phase) -> StorageError | None:
    """The :mod:`sessions.errors` exception for an asyncpg/OS failure, or ``None``."""
    detail = f"{type(exc).__name__}: {exc}"
    if _is_connection_loss(exc):
        known = not phase.commit_sent
        return TransientStorageError(
            f"PostgreSQL {operation}: connection lost or database unavailable "
            f"({'nothing was committed' if known else 'the commit may have been applied'}): "
            f"{detail}",
            outcome_known=known,
        )
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None)
        if state == _DELETED_STATE:
            return DeletedConflictError(deleted_message(getattr(exc, "message", "")))
        if state in _RETRY_STATES:
            return TransientStorageError(
                f"PostgreSQL {operation} failed and was rolled back (SQLSTATE {state}): {detail}",
                outcome_known=True,
            )
        return StorageError(f"PostgreSQL {operation} failed (SQLSTATE {state}): {detail}")
    if isinstance(exc, asyncpg.InterfaceError):
        return StorageError(f"PostgreSQL {operation} failed: {detail}")
    return None


# How many append sends may be in flight at once (at most the pool's size); commits
# arriving meanwhile wait and leave together in the next one. Fewer sends mean larger
# groups (fewer statements and WAL flushes), more mean less waiting. Two keep the server
# busy with one group while the client wakes the callers of the other and gathers the
# next.
_GROUP_SENDS = 2
# Bounds on one group statement.
_GROUP_MAX_COMMITS = 256
# A group takes at most its share (one per send) of the commits waiting and in flight,
# if that is more than this. Without it, the commits of many sessions fall into one
# convoy: one group's callers all wake in one turn of the event loop and all commit
# again before the loop reads any other answer, so they wait together again and the
# server idles while the client runs, then the client while the server does. Split, the
# server applies one group while the client runs the callers of the other (workload (c)
# of ``python -m benchmarks`` at 100 and 500 sessions). Below this size both take well
# under a millisecond either way, and a group that stays whole keeps one transaction.
_GROUP_SPLIT_MIN = 16
_GROUP_MAX_ITEMS = 8192

_BOUNDS = Bounds(commits=_GROUP_MAX_COMMITS, items=_GROUP_MAX_ITEMS, split_min=_GROUP_SPLIT_MIN)

_Entry = Entry


class _Grouper(Scheduler):
    """Append-only commits waiting to share one statement (group commit,
    :mod:`sessions._group`).

    At most ``limit`` sends are in flight at once. A commit that finds a send free and
    nobody waiting goes at once, alone, in its caller's task: a lone commit costs what
    it always did. Otherwise it waits here, and whenever a send ends the waiting
    commits leave in the next one, in arrival order: all of them, up to the bounds
    and, once there are many, to one send's share of the commits waiting and in
    flight (``_GROUP_SPLIT_MIN``).
    """

    __slots__ = ("tasks",)

    def __init__(self, limit: int) -> None:
        super().__init__(limit, _BOUNDS)
        self.tasks: set[asyncio.Future[None]] = set()  # the sends under way


def _turn_args(batch: Batch) -> tuple[Any, ...]:
    """The turn-record parameters of the append and batch statements."""
    turn = batch.turn
    if turn is None:
        return (False, None, None, None, None, None, None, None)
    counts = (None,) * 5 if turn.usage is None else turn.usage.values()
    return (True, turn.run_id, turn.created_at, *counts)


def _group_args(group: Sequence[_Entry]) -> list[tuple[Any, ...]]:
    """The append statement's arguments, one tuple per batch.

    Entries go in session-id order (stable, so one session's batches keep their
    order): every group locks session rows in the same order and cannot deadlock
    with another.
    """
    ordered = group if len(group) == 1 else sorted(group, key=lambda e: e.session_id)
    return [
        (
            entry.session_id,
            batch.batch_id,
            list(batch.items),
            len(batch.items),
            *_turn_args(batch),
            batch.incarnation,
        )
        for entry in ordered
        for batch in entry.batches
    ]


async def _hold(task: asyncio.Future[None]) -> None:
    """Wait until ``task`` has finished, whatever cancellations arrive meanwhile."""
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            continue


class PostgresBackend:
    """Stores batches in PostgreSQL through an asyncpg pool.

    ``owns_pool`` decides whether :meth:`close` closes the pool; a borrowed pool stays
    open (close only waits for this backend's operations in flight).
    """

    atomic = True
    idempotent = True
    system = "postgresql"

    def __init__(
        self,
        pool: Any,
        *,
        schema: str = "public",
        table_prefix: str = "txs_",
        owns_pool: bool,
        close_timeout: float = 60.0,
    ) -> None:
        self._names = _Names(*_validate_names(schema, table_prefix))
        self._sql = _Sql.build(self._names)
        self._extra_sql = _ExtraSql.build(self._names)
        self._pool: Any = pool
        self._owns_pool = owns_pool
        self._close_timeout = close_timeout
        self._closed = False
        self._reset_skipper: _ResetSkipper | None = None
        self._inflight = 0
        self._drained: asyncio.Event | None = None
        self._grouper = _Grouper(max(1, min(_GROUP_SENDS, pool.get_max_size())))

    @property
    def group_stats(self) -> GroupCommitStats:
        """Counters of the group commit (transactions, commits carried, largest group)."""
        return self._grouper.stats()

    @property
    def pool(self) -> Any:
        """The ``asyncpg.Pool`` in use."""
        return self._pool

    @property
    def owns_pool(self) -> bool:
        return self._owns_pool

    @property
    def schema(self) -> str:
        return self._names.schema

    @property
    def table_prefix(self) -> str:
        return self._names.prefix

    def table(self, name: str) -> str:
        """The quoted, schema-qualified name of table ``name`` (``"items"``, ...)."""
        return self._names.table(name)

    # ------------------------------------------------------------------ connections

    async def _run(
        self,
        operation: str,
        fn: Callable[[Any, _Phase], Awaitable[T]],
    ) -> T:
        """Run ``fn(conn, phase)`` on a pooled connection, counted as in flight."""
        if self._closed:
            raise StoreClosedError(f"PostgreSQL {operation}: the store is closed")
        self._inflight += 1
        try:
            return await self._on_connection(operation, fn)
        finally:
            self._settled(1)

    def _settled(self, count: int) -> None:
        """``count`` operations in flight have ended (:meth:`close` waits for them)."""
        self._inflight -= count
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()

    async def _on_connection(
        self,
        operation: str,
        fn: Callable[[Any, _Phase], Awaitable[T]],
    ) -> T:
        """Run ``fn(conn, phase)`` on a pooled connection; classify failures.

        The connection goes back to the pool only idle, outside any transaction. After
        any failure (a server error, a ``ConflictError``, a timeout, a cancellation)
        ``ROLLBACK`` is sent; asyncpg first waits for the server to acknowledge the
        cancellation of an interrupted statement, so nothing of ours keeps running on
        the server. If that does not succeed within ``_SETTLE_TIMEOUT`` seconds, or the
        connection is gone, or the rollback is itself cancelled, the connection is
        terminated (the server then aborts whatever transaction it had open).
        """
        phase = _Phase()
        observer = HOOK.observer
        waited = time.perf_counter() if observer is not None else 0.0
        try:
            conn = await self._pool.acquire()
        except Exception as exc:
            error = _classify(exc, operation, phase)  # nothing was sent: known
            if error is None:
                raise
            raise error from exc
        if observer is not None:
            observer.pool_wait(self.system, time.perf_counter() - waited)
        clean = False
        try:
            result = await fn(conn, phase)
            clean = True
            return result
        except Exception as exc:
            if isinstance(exc, StorageError):
                raise
            error = _classify(exc, operation, phase)
            if error is None:
                raise
            raise error from exc
        finally:
            try:
                if not clean:
                    clean = await _settle_connection(conn)
            finally:
                if not clean:
                    _terminate(conn)
                await self._release(conn, clean)

    async def _release(self, conn: Any, clean: bool) -> None:
        skipper = self._reset_skipper
        if clean and skipper is not None:
            # Idle and untouched by anyone else: skip the reset query.
            pid = skipper.mark(conn)
            try:
                await _release(self._pool, conn)
            finally:
                skipper.unmark(pid)
        else:
            await _release(self._pool, conn)

    async def _fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        async def run(conn: Any, phase: _Phase) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *args)
            return rows

        return await self._run(operation, run)

    # ------------------------------------------------------------------ Backend

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        if limit is None:
            rows = await self._fetch("read", self._sql.load_all, session_id)
        else:
            rows = await self._fetch("read", self._sql.load_tail, session_id, limit)
        return rows  # asyncpg Records index and unpack like (seq, data) tuples

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        """Apply ``batches`` in one transaction (see :class:`~sessions.Backend`).

        Append-only commits of many sessions that arrive together share one statement
        (group commit); each still succeeds or fails alone. Cancelling a call whose
        commit is in flight together with others' leaves it to finish: its outcome is
        then unknown to the caller (the core treats a cancelled ``apply`` so anyway).
        """
        if not batches:
            return
        if self._closed:
            raise StoreClosedError("PostgreSQL commit: the store is closed")
        if any(
            b.clear
            or b.pops
            or b.restore_times is not None
            or not b.plain
            or (b.incarnation is not None and not b.items)
            for b in batches
        ):
            await self._run(
                "commit", lambda conn, phase: self._transact(conn, phase, session_id, batches)
            )
            return
        await self._append(_Entry(session_id, batches))

    async def _append(self, entry: _Entry) -> None:
        grouper = self._grouper
        if grouper.goes_alone(entry):
            # Nothing to share a statement with: send it now, in this task.
            try:
                outcomes = await self._run(
                    "commit", lambda conn, phase: self._send(conn, phase, [entry])
                )
            finally:
                grouper.finish_alone(entry)
                self._kick()
            outcome = outcomes[0]
        else:
            self._inflight += 1  # settled by the send that takes it (or when withdrawn)
            grouper.wait(entry, Firm(loop=asyncio.get_running_loop()))
            self._kick()
            outcome = await self._wait(entry)
        if outcome is not None:
            raise outcome

    async def _wait(self, entry: _Entry) -> Outcome:
        assert entry.done is not None
        try:
            # Not shielded: a cancellation cancels ``done``, which the send then skips.
            return await entry.done
        except asyncio.CancelledError:
            if self._grouper.withdraw(entry):  # still waiting: nothing was sent
                self._settled(1)
            elif entry.alone and entry.task is not None:  # its own send: cancel it,
                entry.task.cancel()  # as if run in this task
                await _hold(entry.task)
            raise

    def _kick(self) -> None:
        """Start a send for the commits waiting, while sends are free."""
        grouper = self._grouper
        while grouper.pending and grouper.free():
            group = grouper.take()
            grouper.start(len(group))
            task = asyncio.ensure_future(self._flush(group))
            grouper.tasks.add(task)
            task.add_done_callback(grouper.tasks.discard)
            for entry in group:
                entry.task = task

    async def _flush(self, group: list[_Entry]) -> None:
        """A background send of a group; each entry's outcome goes to its caller."""
        try:
            outcomes = await outcomes_of_async(
                group,
                lambda group: self._on_connection(
                    "commit", lambda conn, phase: self._send(conn, phase, group)
                ),
            )
            self._grouper.settle(group, outcomes)
        finally:
            self._grouper.finish(len(group))
            self._settled(len(group))
            self._kick()

    async def _send(self, conn: Any, phase: _Phase, group: Sequence[_Entry]) -> list[Outcome]:
        """Every batch of the group in one round trip and one transaction.

        One batch: one autocommit statement. More: asyncpg's ``executemany`` pipelines
        the statement once per batch and runs them all in one implicit transaction
        (one WAL flush). If the server rejects it (a trigger, a constraint: nothing
        was applied), the entries are applied again one by one, each in a savepoint of
        one transaction.
        """
        self._grouper.count(group)
        observer = HOOK.observer
        if observer is not None:
            observer.group(self.system, len(group))
        args = _group_args(group)
        phase.commit_sent = True  # autocommit: the statement(s) are the commit
        if len(args) == 1:
            await conn.execute(self._sql.append, *args[0])
            return [None]
        try:
            await conn.executemany(self._sql.append, args)
        except asyncpg.PostgresError as exc:
            if len(group) == 1 or _is_connection_loss(exc) or exc.sqlstate in _RETRY_STATES:
                raise
            phase.commit_sent = False  # rolled back whole: nothing of the group applied
            return await self._isolate(conn, phase, group)
        return [None] * len(group)

    async def _isolate(self, conn: Any, phase: _Phase, group: Sequence[_Entry]) -> list[Outcome]:
        self._grouper.isolated += 1
        outcomes: list[Outcome] = []
        await conn.execute("BEGIN")
        for entry in group:
            await conn.execute("SAVEPOINT txs_entry")
            try:
                await conn.executemany(self._sql.append, _group_args([entry]))
            except asyncpg.PostgresError as exc:
                if _is_connection_loss(exc):
                    raise
                await conn.execute("ROLLBACK TO SAVEPOINT txs_entry")
                outcomes.append(_classify(exc, "commit", phase))
            else:
                outcomes.append(None)
            await conn.execute("RELEASE SAVEPOINT txs_entry")
        phase.commit_sent = True
        await conn.execute("COMMIT")
        return outcomes

    async def _transact(
        self, conn: Any, phase: _Phase, session_id: str, batches: Sequence[Batch]
    ) -> None:
        await conn.execute("BEGIN")
        life = await conn.fetchval(self._sql.lock, session_id)
        written = False
        for batch in batches:
            plan = None
            if needs_snapshot(batch):
                snapshot = await self._snapshot(conn, session_id, batch, life)
                plan = decide(session_id, batch, snapshot)
                if plan is None:
                    continue  # already applied, or an undo with nothing to undo
            else:
                check_life(session_id, batch, life)
            written = True
            recorded, _removed = await conn.fetchrow(
                self._sql.batch,
                session_id,
                batch.batch_id,
                batch.clear,
                list(batch.pops),
                list(batch.items),
                len(batch.items),
                *_turn_args(batch),
            )
            if recorded and batch.restore_times is not None:
                await conn.execute(self._sql.restore_times, session_id, *batch.restore_times)
            if recorded and plan is not None:
                await self._write_plan(conn, session_id, batch, plan)
        if not written:  # the lock may have made the session row: keep nothing
            await conn.execute("ROLLBACK")
            return
        phase.commit_sent = True
        await conn.execute("COMMIT")

    async def _snapshot(
        self, conn: Any, session_id: str, batch: Batch, life: str | None
    ) -> Snapshot:
        """What :func:`~sessions._decide.decide` needs for ``batch``, read in this
        transaction (which holds the session row lock; ``life``: the session's life the
        lock found, ``None`` if it made the row)."""
        row = await conn.fetchrow(
            self._extra_sql.snapshot,
            session_id,
            batch.batch_id,
            list(batch.pops),
            batch.tail,
            key_limit(batch),
            undoes(batch),
            batch.run_state is not None,
            batch.branch is not None,
        )
        return Snapshot(
            applied=row[0],
            life=life,
            version=int(row[1]),
            pops_stored=int(row[2]),
            after_tail=tuple(row[3]),
            newest_rewind=row[4],
            after_hidden=tuple(row[5]),
            run_state_version=int(row[6]),
            stored=tuple(row[7]),
            fork_of=None if row[8] is None else (row[8], int(row[9])),
        )

    async def _write_plan(self, conn: Any, session_id: str, batch: Batch, plan: Plan) -> None:
        """A batch's catalogue, run-state, quarantine, fork and rewind writes, as planned
        (after the batch statement, in its transaction, which holds the session row lock:
        no other commit of this session can interleave)."""
        sql = self._extra_sql
        if batch.info is not None:
            await self._write_info(conn, session_id, batch.info)
        change = batch.run_state
        if change is not None:
            await conn.execute(
                sql.run_state_write, session_id, plan.run_state_version, change.text, change.label
            )
        if batch.quarantine:
            reasons = [reason for reason, _ in batch.quarantine]
            texts = [text for _, text in batch.quarantine]
            await conn.execute(sql.quarantine, session_id, batch.batch_id, reasons, texts)
        if batch.branch is not None:
            await conn.execute(sql.branch, batch.branch.source_id, session_id, batch.branch.at_turn)
        if plan.hide_as is not None:
            assert batch.rewind is not None
            await conn.execute(sql.hide, session_id, plan.hide_as, batch.rewind.hide_after)
        elif plan.bring_back is not None:
            await conn.execute(sql.unhide, session_id, plan.bring_back)

    async def _write_info(self, conn: Any, session_id: str, change: InfoChange) -> None:
        names = sorted(change.fields)
        values = [getattr(change, name) for name in names]
        values = [list(v) if name == "tags" else v for name, v in zip(names, values, strict=True)]
        columns = ", ".join(f"{name} = ${i}" for i, name in enumerate(names, start=2))
        await conn.execute(
            self._names.sql(f"UPDATE {{sessions}} SET {columns} WHERE session_id = $1"),
            session_id,
            *values,
        )
        if "tags" in change.fields:
            await conn.execute(self._extra_sql.tags_delete, session_id)
            await conn.execute(self._extra_sql.tags_insert, session_id, list(change.tags))
        elif "user_id" in change.fields:
            await conn.execute(self._extra_sql.tags_user, session_id, change.user_id)

    async def load_run_state(self, session_id: str) -> tuple[str | None, int, str | None]:
        rows = await self._fetch("read", self._extra_sql.run_state_load, session_id)
        return (None, 0, None) if not rows else (rows[0][0], int(rows[0][1]), rows[0][2])

    async def load_turns(self, session_id: str) -> tuple[list[TurnRow], list[int]]:
        rows = await self._fetch("read", self._extra_sql.turns_load, session_id)
        keys, records = rows[0]
        turns = [
            TurnRow(r[0], r[1], r[2], r[3], None if r[4] is None else TurnUsage(*r[4:]))
            for r in records
        ]
        return turns, list(keys)

    async def usage_totals(
        self, session_id: str | None, since: datetime | None
    ) -> tuple[TurnUsage, int]:
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=timezone.utc)
        rows = await self._fetch("read", self._extra_sql.usage, session_id, since)
        row = rows[0]
        return TurnUsage(*(int(value) for value in row[:5])), int(row[5])

    async def load_branches(self, source_id: str) -> list[BranchRow]:
        rows = await self._fetch("read", self._extra_sql.branches_load, source_id)
        return [BranchRow(row[0], int(row[1]), row[2]) for row in rows]

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """Which of ``batch_ids`` are committed, waiting for any commit still in flight.

        A plain ``SELECT`` cannot see a transaction that is still running on the
        server (say, a statement whose connection we lost while it waited for a lock):
        it would answer "not applied" and that transaction could commit a moment
        later. So this inserts the ids in a transaction that is always rolled back:
        inserting a key that an unfinished transaction inserted waits for it to end.
        Ids that conflict are applied; the others are not (and nothing is written).
        """
        if not batch_ids:
            return set()
        ids = list(dict.fromkeys(batch_ids))

        async def run(conn: Any, phase: _Phase) -> set[str]:
            await conn.execute("BEGIN")
            fresh = await conn.fetch(self._sql.probe, session_id, ids)
            await conn.execute("ROLLBACK")
            return set(ids) - {row[0] for row in fresh}

        return await self._run("read", run)

    async def close(self) -> None:
        """Stop new operations, wait for those in flight, close the pool if owned.

        Waits at most ``close_timeout`` seconds; an owned pool that has not closed by
        then is terminated (its connections dropped, their transactions aborted).
        """
        if self._closed:
            return
        self._closed = True
        if self._inflight:
            self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), self._close_timeout)
            except asyncio.TimeoutError:
                logger.warning(
                    "PostgreSQL store close: %d operation(s) still running after %.0fs",
                    self._inflight,
                    self._close_timeout,
                )
        if not self._owns_pool:
            return
        try:
            await asyncio.wait_for(self._pool.close(), self._close_timeout)
        except asyncio.TimeoutError:
            logger.warning(
                "PostgreSQL pool did not close within %.0fs; terminating it", self._close_timeout
            )
            self._pool.terminate()
        except BaseException:
            self._pool.terminate()
            raise

    # ------------------------------------------------------------------ AdminBackend

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
        rows = await self._fetch("read", self._extra_sql.quarantine_load, session_id)
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
            lock, key = self._extra_sql.delete_lock_many, list(session_ids or ())
        else:
            lock, key = self._extra_sql.delete_lock_user, user_id

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
                await conn.execute(self._extra_sql.branches_delete, ids)
            await conn.execute(f"DELETE FROM {sessions} WHERE session_id = ANY($1::text[])", ids)
            phase.commit_sent = True
            await conn.execute("COMMIT")
            return ids

        return await self._run("delete_user" if user_id is not None else "delete_session", run)

    async def load_versioned(
        self, session_id: str, limit: int | None
    ) -> tuple[list[Row], int, str | None]:
        rows = await self._fetch("read", self._extra_sql.load_versioned, session_id, limit)
        stored = [(row[2], row[3]) for row in rows if row[2] is not None]
        return stored, int(rows[0][0]), rows[0][1]

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
            self._extra_sql.expired,
            "" if after is None else after,
            default_ttl,
            now,
            min(limit, 2**62),
        )
        return [_info(row) for row in rows]

    # ------------------------------------------------------------------ schema

    async def migrate(self, *, create: bool = True) -> int:
        """Create the schema and tables if needed; return the schema version.

        Cheap when up to date (one catalog lookup). Otherwise runs every pending
        migration in one transaction under ``pg_advisory_xact_lock``, so processes
        starting at the same time apply each migration exactly once. With
        ``create=False`` nothing is created: a missing or outdated schema is an error.
        """

        async def run(conn: Any, phase: _Phase) -> int:
            version = await self._current_version(conn)
            if version == SCHEMA_VERSION:
                return version
            if not create:
                where = f"schema {self._names.schema!r} (table prefix {self._names.prefix!r})"
                raise StorageError(
                    f"no txsessions tables in {where}"
                    if version is None
                    else f"{where} is at version {version} and needs migrating to "
                    f"{SCHEMA_VERSION}; open it with create=True"
                )
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock($1)", self._names.lock_key)
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_namespace WHERE nspname = $1", self._names.schema
            )
            if not exists:
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._names.schema}"')
            await conn.execute(self._names.sql(_SQL_VERSION_TABLE))
            rows = await conn.fetch(self._names.sql("SELECT version FROM {version}"))
            recorded = {int(row[0]) for row in rows}
            self._check_version(max(recorded, default=0))
            for number, statements in MIGRATIONS:
                # Every migration not recorded, a gap below the newest one included:
                # branches numbered their migrations apart (3: quarantine, 5: catalogue)
                # and a schema may have met them in either order.
                if number in recorded:
                    continue
                for statement in statements:
                    await conn.execute(self._names.sql(statement))
                await conn.execute(
                    self._names.sql("INSERT INTO {version} (version) VALUES ($1)"), number
                )
            phase.commit_sent = True
            await conn.execute("COMMIT")
            return SCHEMA_VERSION

        return await self._run("schema setup", run)

    async def _current_version(self, conn: Any) -> int | None:
        table = await conn.fetchval(
            "SELECT to_regclass($1)::text", self._names.table("schema_version")
        )
        if table is None:
            return None
        rows = await conn.fetch(self._names.sql("SELECT version FROM {version}"))
        if not rows:
            return None
        recorded = {int(row[0]) for row in rows}
        self._check_version(max(recorded))
        # The newest migration up to which none is missing (a gap is still to apply).
        complete = 0
        for number, _ in MIGRATIONS:
            if number not in recorded:
                break
            complete = number
        return complete

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"PostgreSQL schema {self._names.schema!r} (prefix {self._names.prefix!r}) "
                f"is at version {version}, newer than this version of txsessions supports "
                f"({SCHEMA_VERSION}); upgrade txsessions"
            )


async def _settle_connection(conn: Any) -> bool:
    """After a failure: bring ``conn`` back to idle; ``True`` if it is safe to pool.

    ``ROLLBACK`` is sent even outside a transaction (the server answers with a
    warning only): asyncpg makes it wait until an interrupted statement's
    cancellation has been acknowledged, so a ``True`` here also means no statement
    of ours is still running on the server. A cancellation here propagates; the
    caller then terminates the connection.
    """
    try:
        if conn.is_closed():
            return False
        await asyncio.wait_for(conn.execute("ROLLBACK"), _SETTLE_TIMEOUT)
        return not conn.is_closed() and not conn.is_in_transaction()
    except Exception:  # noqa: BLE001 - any failure here means: terminate the connection
        return False


def _terminate(conn: Any) -> None:
    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass  # the pool already detached it: the connection is gone


class _ResetSkipper:
    """The pool ``reset`` hook of pools that a store creates (and owns).

    By default asyncpg sends a reset query (``RESET ALL``, ``UNLISTEN *``, ...) every
    time a connection goes back to the pool: one extra round trip per operation. Our
    own operations never change session state (no ``SET``, ``LISTEN``, cursors or
    session-level advisory locks) and hand a connection back only idle, outside any
    transaction (see :meth:`PostgresBackend._run`), so for them the reset is skipped.
    A connection released by anyone else (say, code using ``store.pool`` directly)
    still gets the full reset. asyncpg itself still rolls back an open transaction
    before calling this hook.
    """

    __slots__ = ("_ours",)

    def __init__(self) -> None:
        self._ours: set[int] = set()

    def mark(self, conn: Any) -> int:
        pid: int = conn.get_server_pid()
        self._ours.add(pid)
        return pid

    def unmark(self, pid: int) -> None:
        self._ours.discard(pid)

    async def __call__(self, conn: Any) -> None:
        if conn.get_server_pid() in self._ours:
            return
        query = conn.get_reset_query()
        if query:
            await conn.execute(query)


async def _release(pool: Any, conn: Any) -> None:
    """Give ``conn`` back to ``pool``; never fails the operation that used it.

    asyncpg resets a connection on release and, if that fails (the backend was
    terminated meanwhile), terminates it and re-raises. The work is already done
    (or already failed with its own error) by then, so that error is only logged.
    """
    try:
        await pool.release(conn)
    except Exception as exc:  # noqa: BLE001 - the connection is terminated by asyncpg
        logger.debug("PostgreSQL connection dropped on release: %s: %s", type(exc).__name__, exc)


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


def _redacted(exc: ValueError | TypeError, dsn: str) -> ValueError | TypeError:
    """``exc`` reworded without the DSN's password. A driver's message about a DSN that
    holds a password may quote a piece of it (``invalid literal for int(): 'ss'``), so
    its text is then left out."""
    detail = f"{type(exc).__name__}: {redact(str(exc), [dsn])}"
    if redact(dsn) != dsn:
        detail = f"{type(exc).__name__} (details not shown: they may quote the password)"
    kind = ValueError if isinstance(exc, ValueError) else TypeError
    return kind(
        f"cannot open a pool on {redact(dsn)}: {detail}; "
        "percent-encode @ : / ? # % in a user name or password, e.g. %40 for @"
    )


class PostgresStore(Store["PostgresSession"]):
    """PostgreSQL shared by many sessions through one asyncpg pool.

    ``store = await PostgresStore.open(dsn)`` creates and owns a pool (closed by
    :meth:`close`); ``await PostgresStore.from_pool(pool)`` borrows the caller's pool,
    which :meth:`close` leaves open. Then ``store.session(session_id)``.
    """

    backend_class = PostgresBackend

    def __init__(self, backend: PostgresBackend, **keywords: Unpack[StoreKeywords]) -> None:
        super().__init__(backend, **keywords)
        self.session_class = PostgresSession
        self.postgres = backend

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: str = "public",
        table_prefix: str = "txs_",
        statement_cache_size: int | None = None,
        command_timeout: float | None = 60.0,
        retry: RetryPolicy | None = None,
        create: bool = True,
        commit_timeout: float | None = None,
        ttl: timedelta | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
        **connect_kwargs: Any,
    ) -> PostgresStore:
        """Create a pool on ``dsn``, set up the schema, and return a store owning the pool.

        ``create=False`` creates nothing: a schema without our tables raises
        :class:`~sessions.errors.StorageError` (for tools that only read).

        ``statement_cache_size=0`` disables named prepared statements (needed behind
        PgBouncer in transaction pooling mode before 1.21). ``command_timeout`` bounds
        each statement (seconds); ``commit_timeout`` bounds how long a commit may hold its
        caller. ``ttl``: the store's default idle time-to-live (see
        :meth:`~sessions.Store.purge`). ``integrity``: what commits do with history the
        Responses API would refuse (``docs/history.md``). ``None``: a setting's default;
        the four may come as ``options=StoreOptions(...)``. Other keyword arguments go
        to ``asyncpg.create_pool``.
        """
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(f"dsn must be a non-empty str, got a {type(dsn).__name__}")
        _validate_names(schema, table_prefix)
        _validate_pool_size(min_size, max_size)
        settings = merge_options(
            options,
            "PostgresStore.open",
            retry=retry,
            commit_timeout=commit_timeout,
            ttl=ttl,
            integrity=integrity,
        )
        kwargs, skipper = _pool_options(connect_kwargs, statement_cache_size)
        pool = await _create_pool(
            dsn, min_size=min_size, max_size=max_size, command_timeout=command_timeout, **kwargs
        )
        try:
            backend = PostgresBackend(
                pool, schema=schema, table_prefix=table_prefix, owns_pool=True
            )
            backend._reset_skipper = skipper
            await backend.migrate(create=create)
            store = cls(backend, options=settings)
            store.check_usable("open")
        except BaseException:
            pool.terminate()
            raise
        return store

    @classmethod
    async def from_pool(
        cls,
        pool: Any,
        *,
        schema: str = "public",
        table_prefix: str = "txs_",
        create: bool = True,
        **keywords: Unpack[StoreKeywords],
    ) -> PostgresStore:
        """A store on an existing ``asyncpg.Pool`` that the caller keeps owning.

        :meth:`close` waits for this store's operations, then leaves the pool open. The
        settings (:class:`~sessions._options.StoreKeywords`) are those of :meth:`open`.
        """
        check_keywords(keywords, STORE_KEYWORDS, "PostgresStore.from_pool")
        if not isinstance(pool, asyncpg.Pool):
            raise TypeError(f"pool must be an asyncpg.Pool, got {type(pool).__name__}")
        settings = store_options(keywords, "PostgresStore.from_pool")
        backend = PostgresBackend(pool, schema=schema, table_prefix=table_prefix, owns_pool=False)
        await backend.migrate(create=create)
        store = cls(backend, options=settings)
        store.check_usable("from_pool")
        return store

    @property
    def pool(self) -> Any:
        """The ``asyncpg.Pool`` (owned only if the store was made by :meth:`open`)."""
        return self.postgres.pool

    @property
    def schema(self) -> str:
        return self.postgres.schema

    @property
    def table_prefix(self) -> str:
        return self.postgres.table_prefix

    def _describe(self) -> str:
        return f"PostgresStore (schema {self.schema!r}, table prefix {self.table_prefix!r})"


def _pool_options(
    connect_kwargs: dict[str, Any], statement_cache_size: int | None
) -> tuple[dict[str, Any], _ResetSkipper | None]:
    """``asyncpg.create_pool`` keywords, with our reset hook unless the caller has one."""
    kwargs = dict(connect_kwargs)
    if statement_cache_size is not None:
        kwargs["statement_cache_size"] = statement_cache_size
    skipper: _ResetSkipper | None = None
    if kwargs.get("reset") is None:  # a caller's own reset hook is left alone
        skipper = _ResetSkipper()
        kwargs["reset"] = skipper
    return kwargs, skipper


def _validate_pool_size(min_size: object, max_size: object) -> None:
    validate_positive_int(max_size, "max_size")
    if isinstance(min_size, bool) or not isinstance(min_size, int):
        raise TypeError(f"min_size must be an int, got {type(min_size).__name__}")
    assert isinstance(max_size, int)
    if min_size < 0 or min_size > max_size:
        raise ValueError(
            f"need 0 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}"
        )


async def _create_pool(dsn: str, **kwargs: Any) -> Any:
    """``asyncpg.create_pool``, its failures as :mod:`sessions.errors` (DSN redacted)."""
    try:
        return await asyncpg.create_pool(dsn, **kwargs)
    except Exception as exc:
        error = _classify(exc, "connect", _Phase())
        if error is None:
            if isinstance(exc, (ValueError, TypeError)):  # e.g. the DSN does not parse
                raise _redacted(exc, dsn) from None
            raise
        message = f"cannot open a pool on {redact(dsn)}: {redact(str(error), [dsn])}"
        if isinstance(error, TransientStorageError):
            raise TransientStorageError(message, outcome_known=True) from exc
        raise StorageError(message) from exc


class PostgresSession(BufferedSession):
    """A buffered session stored in PostgreSQL.

    ``PostgresSession(session_id, dsn)`` opens a small pool of its own on first use and
    closes it in :meth:`close`: fine for scripts, not for servers (one pool per
    session). Threads that each run an event loop of their own may share it: each loop
    gets a pool of its own (``docs/threads.md``). Servers share one :class:`PostgresStore` and call
    ``store.session(session_id)`` (or pass ``store=``, which is borrowed, not closed;
    then ``dsn``, ``schema`` and ``table_prefix`` belong to the store and may not be given).
    """

    def __init__(
        self,
        session_id: str,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        table_prefix: str | None = None,
        store: PostgresStore | None = None,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, common = session_keywords(keywords, "PostgresSession")
        if store is not None:
            if not isinstance(store, PostgresStore):
                raise TypeError(f"store must be a PostgresStore, got {type(store).__name__}")
            pairs = (("dsn", dsn), ("schema", schema), ("table_prefix", table_prefix))
            given = [name for name, value in pairs if value is not None]
            if given:
                raise TypeError(
                    f"PostgresSession: {', '.join(given)} cannot be combined with store= "
                    "(the store already has its database and tables)"
                )
            super().__init__(session_id, store=store, **common)
            return
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(
                "PostgresSession needs a dsn (a non-empty str) or store=, "
                f"got a {type(dsn).__name__}"
            )
        names = _validate_names(
            "public" if schema is None else schema, "txs_" if table_prefix is None else table_prefix
        )
        store_timeout = settings.commit_timeout  # None: the store's default
        url = dsn

        async def factory() -> Store[Any]:
            return await PostgresStore.open(
                url,
                min_size=1,
                max_size=2,
                schema=names[0],
                table_prefix=names[1],
                commit_timeout=store_timeout,
            )

        super().__init__(session_id, store_factory=factory, **common)
