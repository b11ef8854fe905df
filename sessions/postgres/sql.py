"""The PostgreSQL backend's SQL, each statement written once: the migrations (kept in
:mod:`.migrations`, re-exported here), the table names (:class:`_Names`), every statement the backend runs (:class:`Statements`, filled in
with a store's names once, when its backend is made) and the tables a delete empties.

Tables live in ``schema`` (created if missing) and are named ``<table_prefix>sessions``,
``<table_prefix>items``, ``<table_prefix>batches``, ... and ``<table_prefix>schema_version``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import Any

from .._model.backend import Batch
from .._model.catalogue import MAX_TTL
from .._model.validate import validate_identifier
from .migrations import MIGRATIONS, SCHEMA_VERSION
from .windows import turn_window

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SESSION_TABLES",
    "STATEMENTS",
    "Statements",
]


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

#: The columns of a :class:`~sessions.SessionInfo`, in the order ``_info`` reads them.
_INFO_COLUMNS = (
    "session_id, item_count, created_at, updated_at, user_id, title, tags, metadata, ttl, version"
)


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


#: The first step of both commit statements (``append``, ``batch``): the CTE ``b`` records
#: batch $2 of session $1 as applied, and holds a row only if the id was new.
_RECORD_BATCH = """b AS (
        INSERT INTO {batches} (session_id, batch_id, committed_at)
        VALUES ($1, $2, now())
        ON CONFLICT DO NOTHING
        RETURNING batch_id
    )"""


def _turn_insert(source: str, session: str, count: str, turn: str, fields: list[str]) -> str:
    """The CTE ``r`` of the commit statements: the turn record (``Batch.turn``) of each row
    of ``source`` whose ``turn`` is true and ``count`` is not 0, over the ``count`` items
    numbered from ``base``, of session ``session``. ``fields``: the record's run id, time
    (NULL: ``now()``) and five usage counts (NULL: none), in :func:`_turn_args`' order."""
    run_id, at, *usage = fields
    return f"""r AS (
        INSERT INTO {{turns}} (session_id, first_seq, last_seq, created_at, run_id,
                             requests, input_tokens, output_tokens, cached_tokens, reasoning_tokens,
                             items)
        SELECT {session}, {source}.base, {source}.base + {count} - 1, coalesce({at}, now()),
               {run_id}, {", ".join(usage)}, {count}
        FROM {source} WHERE {turn} AND {count} > 0
    )"""


def _record_turn(*, count: int, first: int) -> str:
    """:func:`_turn_insert` for one batch: the record over the ``$count`` items just
    numbered from ``s.base``. ``$first`` says whether there is one, the next parameters
    are its fields."""
    usage = [f"${n}::bigint" for n in range(first + 3, first + 8)]
    return _turn_insert(
        "s",
        "$1",
        f"${count}::bigint",
        f"${first}::boolean",
        [f"${first + 1}::text", f"${first + 2}::timestamptz", *usage],
    )


def _turns_added(count: str, turn: str) -> tuple[str, str]:
    """What the turn record of :func:`_turn_insert` adds to the session's turn index:
    ``(records, items)`` as SQL expressions."""
    return (
        f"(CASE WHEN {turn} AND {count} > 0 THEN 1 ELSE 0 END)",
        f"(CASE WHEN {turn} THEN {count} ELSE 0 END)",
    )


def _turn_adds(*, count: int, first: int) -> tuple[str, str]:
    """:func:`_turns_added` for one batch (parameters as :func:`_record_turn`'s)."""
    return _turns_added(f"${count}::bigint", f"${first}::boolean")


#: How the append statements add what they insert (``excluded``: the new row they would
#: have made: its counts, and ``version`` the batches applied) to a session row that
#: exists. ``updated_at`` never moves back: ``now()`` is when the transaction started,
#: and a commit that started earlier may get the row later.
_ADD_TO_SESSION = """ON CONFLICT (session_id) DO UPDATE SET
            updated_at = GREATEST(t.updated_at, excluded.updated_at),
            item_count = t.item_count + excluded.item_count,
            turn_count = t.turn_count + excluded.turn_count,
            turn_items = t.turn_items + excluded.turn_items,
            next_seq = t.next_seq + excluded.item_count,
            version = t.version + excluded.version"""

_APPEND_TC, _APPEND_TI = _turn_adds(count=4, first=5)
_BATCH_TC, _BATCH_TI = _turn_adds(count=6, first=7)
_GROUP_TC, _GROUP_TI = _turns_added("n", "turn")
_GROUP_TURN_FIELDS = [
    "p.run_id",
    "p.at",
    "p.requests",
    "p.input_tokens",
    "p.output_tokens",
    "p.cached_tokens",
    "p.reasoning_tokens",
]


@dataclass(frozen=True)
class Statements:
    """Every statement the backend runs, each written once, as a field's default: a
    template whose ``{sessions}``, ``{items}``, ... placeholders :meth:`for_names` fills in.
    """

    # The common commit: one batch of items only, one statement, one round trip.
    # $1 session_id, $2 batch_id, $3 items text[], $4 item count, then the turn record
    # (Batch.turn): $5 whether there is one, $6 its run id, $7 its time (NULL: now()), $8-$12
    # its usage (NULL: none), $13 the life it was prepared against (Batch.incarnation; NULL:
    # no check: a row just created has a new life, so it fails the check, raised while
    # inserting the items, and the whole statement is rolled back; a batch without items
    # and with a life to check takes the general commit). now() is when the
    # transaction started; a commit that started earlier but got the row later must not move
    # updated_at back, hence GREATEST (here and in ``batch``).
    append: str = f"""
    WITH {_RECORD_BATCH}, s AS (
        INSERT INTO {{sessions}} AS t (session_id, created_at, updated_at, item_count, next_seq,
                                       version, turn_count, turn_items)
        SELECT $1, now(), now(), $4::bigint, $4::bigint + 1, 1, {_APPEND_TC}, {_APPEND_TI} FROM b
        {_ADD_TO_SESSION}
        RETURNING t.next_seq - $4::bigint AS base, t.incarnation AS life
    ), {_record_turn(count=4, first=5)}
    INSERT INTO {{items}} (session_id, seq, batch_id, data)
    SELECT $1, s.base + u.ord - 1, $2, u.data
    FROM s CROSS JOIN unnest($3::text[]) WITH ORDINALITY AS u(data, ord)
    WHERE CASE WHEN s.life IS NOT DISTINCT FROM coalesce($13::text, s.life) THEN true
               ELSE {{deleted}}($1) IS NULL END
    """

    # A group of append-only commits (group commit, :mod:`.group`) in one statement, with
    # what running ``append`` once per batch, in order, would do: one element per batch in
    # each of $1 session ids, $2 batch ids, $3 item counts, $4-$11 the turn records (as
    # ``append``'s $5-$12), $12 the lives (as its $13), in the group's order (session
    # ids in order, one session's batches in theirs); $13 every batch's items, batch after
    # batch, in one text, joined by U+001E (which no JSON text holds unescaped): the
    # batch of the item at position ``pos`` is the last whose first item's position
    # (``start + 1``) is at most ``pos`` (``width_bucket``). A batch id already stored, or
    # repeated in the group (then the first applies), applies nothing. Per session, the
    # counters grow by the sum of its applied batches (ON CONFLICT can update a row once a
    # statement) and its batches get contiguous keys in their order: ``base``, the first
    # key of each, counts back from the new ``next_seq``. Session rows are locked in
    # session-id order (COLLATE "C": the order of every other lock). A life that does not
    # match raises, as in ``append``, for a batch with items only (the condition may be
    # checked on ``p``, before the join): the whole group is rolled back and applied again
    # entry by entry.
    append_group: str = f"""
    WITH g AS (
        SELECT u.session_id COLLATE "C" AS session_id, u.batch_id COLLATE "C" AS batch_id,
               u.n, u.turn, u.run_id, u.at, u.requests, u.input_tokens, u.output_tokens, u.cached_tokens,
               u.reasoning_tokens, u.life, u.k,
               (sum(u.n) OVER (ORDER BY u.k) - u.n)::bigint AS start
        FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::text[],
                    $6::timestamptz[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[],
                    $11::bigint[], $12::text[])
             WITH ORDINALITY AS u(session_id, batch_id, n, turn, run_id, at, requests,
                                  input_tokens, output_tokens, cached_tokens,
                                  reasoning_tokens, life, k)
    ), b AS (
        INSERT INTO {{batches}} (session_id, batch_id, committed_at)
        SELECT session_id, batch_id, now() FROM g ORDER BY k
        ON CONFLICT DO NOTHING
        RETURNING session_id, batch_id
    ), a AS (
        SELECT DISTINCT ON (g.session_id, g.batch_id) g.*
        FROM g WHERE (g.session_id, g.batch_id) IN (SELECT session_id, batch_id FROM b)
        ORDER BY g.session_id, g.batch_id, g.k
    ), s AS (
        INSERT INTO {{sessions}} AS t (session_id, created_at, updated_at, item_count, next_seq,
                                       version, turn_count, turn_items)
        SELECT session_id, now(), now(), sum(n)::bigint, sum(n)::bigint + 1, count(*),
               sum{_GROUP_TC}::bigint, sum{_GROUP_TI}::bigint
        FROM a GROUP BY session_id ORDER BY session_id
        {_ADD_TO_SESSION}
        RETURNING t.session_id, t.next_seq, t.incarnation
    ), p AS (
        SELECT a.*, s.incarnation AS stored,
               (s.next_seq - sum(a.n) OVER (PARTITION BY a.session_id ORDER BY a.k DESC))::bigint
                   AS base
        FROM a JOIN s ON s.session_id = a.session_id
    ), {_turn_insert("p", "p.session_id", "p.n", "p.turn", _GROUP_TURN_FIELDS)}
    INSERT INTO {{items}} (session_id, seq, batch_id, data)
    SELECT p.session_id, p.base + u.pos - p.start - 1, p.batch_id, u.data
    FROM unnest(string_to_array($13::text, E'\\x1e')) WITH ORDINALITY AS u(data, pos)
    JOIN p ON p.k = width_bucket(u.pos, (SELECT array_agg(start + 1 ORDER BY k) FROM g))
    WHERE CASE WHEN p.n = 0 OR p.stored IS NOT DISTINCT FROM coalesce(p.life, p.stored)
               THEN true ELSE {{deleted}}(p.session_id) IS NULL END
    """

    # The general commit, statement 1 of 2+: make sure the session row exists and lock it;
    # returns the session's life before the statement (NULL: the row was just created).
    lock: str = """
    INSERT INTO {sessions} AS t (session_id, created_at, updated_at, item_count, next_seq)
    VALUES ($1, now(), now(), 0, 1)
    ON CONFLICT (session_id) DO UPDATE SET next_seq = t.next_seq
    RETURNING CASE WHEN xmax = 0 THEN NULL ELSE incarnation END
    """

    # The general commit, one statement per batch, after the lock (fresh snapshot).
    # $1 session_id, $2 batch_id, $3 clear, $4 pops bigint[], $5 items text[], $6 item count,
    # $7-$14 the turn record as $5-$12 of ``append``. A clear removes the turn records too (the
    # statement's snapshot does not see the new record, so it stays).
    batch: str = f"""
    WITH {_RECORD_BATCH}, d AS (
        DELETE FROM {{items}}
        WHERE session_id = $1
          AND ($3::boolean OR seq = ANY($4::bigint[]))
          AND EXISTS (SELECT 1 FROM b)
        RETURNING seq
    ), p AS (
        UPDATE {{turns}} AS t SET items = t.items - c.n
        FROM (
            SELECT o.first_seq, count(*) AS n
            FROM d CROSS JOIN LATERAL (
                SELECT first_seq, last_seq, hidden_by FROM {{turns}}
                WHERE NOT $3::boolean AND session_id = $1 AND first_seq <= d.seq
                ORDER BY first_seq DESC LIMIT 1
            ) AS o
            WHERE o.last_seq >= d.seq AND o.hidden_by IS NULL
            GROUP BY o.first_seq
        ) AS c
        WHERE t.session_id = $1 AND t.first_seq = c.first_seq
        RETURNING t.items AS held, c.n AS n
    ), s AS (
        UPDATE {{sessions}} SET
            updated_at = GREATEST(updated_at, now()),
            item_count = CASE WHEN $3::boolean THEN $6::bigint
                              ELSE item_count - (SELECT count(*) FROM d) + $6::bigint END,
            turn_count = CASE WHEN $3::boolean THEN 0
                              ELSE turn_count - (SELECT count(*) FROM p WHERE p.held = 0) END
                         + {_BATCH_TC},
            turn_items = CASE WHEN $3::boolean THEN 0
                              ELSE turn_items - (SELECT coalesce(sum(p.n), 0) FROM p) END
                         + {_BATCH_TI},
            next_seq = next_seq + $6::bigint,
            version = version + 1
        WHERE session_id = $1 AND EXISTS (SELECT 1 FROM b)
        RETURNING next_seq - $6::bigint AS base
    ), i AS (
        INSERT INTO {{items}} (session_id, seq, batch_id, data)
        SELECT $1, s.base + u.ord - 1, $2, u.data
        FROM s CROSS JOIN unnest($5::text[]) WITH ORDINALITY AS u(data, ord)
    ), dt AS (
        DELETE FROM {{turns}} WHERE session_id = $1 AND $3::boolean AND EXISTS (SELECT 1 FROM b)
    ), dh AS (
        DELETE FROM {{hidden}} WHERE session_id = $1 AND $3::boolean AND EXISTS (SELECT 1 FROM b)
    ), {_record_turn(count=6, first=7)}
    SELECT (SELECT count(*) FROM b) AS recorded, (SELECT count(*) FROM d) AS removed
    """

    load_all: str = "SELECT seq, data FROM {items} WHERE session_id = $1 ORDER BY seq"

    load_tail: str = (
        "SELECT seq, data FROM (SELECT seq, data FROM {items} WHERE session_id = $1 "
        "ORDER BY seq DESC LIMIT $2) AS tail ORDER BY seq"
    )

    # Always run inside a transaction that is rolled back: see PostgresBackend.applied.
    probe: str = (
        "INSERT INTO {batches} (session_id, batch_id, committed_at) "
        "SELECT $1, id, now() FROM unnest($2::text[]) AS u(id) "
        "ON CONFLICT DO NOTHING RETURNING batch_id"
    )

    # Session ids are never empty, so ``> ''`` lists from the start; COLLATE "C" on the
    # column makes the order bytewise (code point order), the same as SQLite's.
    list: str = f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id > $1 ORDER BY session_id LIMIT $2"

    info: str = f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id = $1"

    stale: str = (
        f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE updated_at < $1 AND session_id > $2 "
        "ORDER BY session_id LIMIT $3"
    )

    range: str = (
        "SELECT seq, data FROM {items} WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    )

    prune: str = (
        "DELETE FROM {batches} WHERE committed_at < $1 AND NOT EXISTS (SELECT 1 FROM "
        "unnest($2::text[]) AS k(prefix) WHERE left(batch_id, length(k.prefix)) = k.prefix)"
    )

    # A restore (import) gives the session the times of its export: $2 created, $3 updated.
    restore_times: str = (
        "UPDATE {sessions} SET created_at = $2, updated_at = $3 WHERE session_id = $1"
    )

    # What the core decides a conditional batch by (sessions._model.decide.Snapshot), read in the
    # general commit's transaction before the batch statement. $1 session_id, $2 batch_id,
    # $3 pops bigint[], $4 tail (NULL: none), $5 how many keys to read, $6 an undo, $7 a run
    # state, $8 a fork. Items hidden by a rewind: the newest rewind number first.
    snapshot: str = """
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

    run_state_write: str = (
        "INSERT INTO {run_states} (session_id, version, data, label, updated_at) "
        "VALUES ($1, $2, $3, $4, now()) ON CONFLICT (session_id) DO UPDATE SET "
        "version = excluded.version, data = excluded.data, label = excluded.label, "
        "updated_at = excluded.updated_at"
    )

    run_state_load: str = "SELECT data, version, label FROM {run_states} WHERE session_id = $1"

    # Turn records and item keys of one session, from one snapshot (one statement).
    turns_load: str = (
        "SELECT array(SELECT seq FROM {items} WHERE session_id = $1 ORDER BY seq), "
        "array(SELECT row(first_seq, last_seq, created_at, run_id, requests, input_tokens, "
        "output_tokens, cached_tokens, reasoning_tokens) FROM {turns} "
        "WHERE session_id = $1 AND hidden_by IS NULL ORDER BY first_seq)"
    )

    # The turn index of one session (TurnBackend.load_turn_window), one snapshot: its
    # counts (NULLs: no session row), then the oldest or newest $2 visible records
    # holding items (NULL: all), each with its first and last stored key.
    turns_oldest: str = turn_window("", walk=False)
    turns_newest: str = turn_window("DESC", walk=False)
    # The same for at most TURN_WALK_MAX records: walked, one probe each.
    turns_oldest_walk: str = turn_window("", walk=True)
    turns_newest_walk: str = turn_window("DESC", walk=True)

    branches_delete: str = "DELETE FROM {branches} WHERE source_id = ANY($1::text[])"

    branch: str = (
        "INSERT INTO {branches} (source_id, session_id, at_turn, created_at) "
        "VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING"
    )

    branches_load: str = (
        "SELECT session_id, at_turn, created_at FROM {branches} WHERE source_id = $1 "
        "ORDER BY created_at, session_id"
    )

    usage: str = (
        "SELECT coalesce(sum(requests), 0), coalesce(sum(input_tokens), 0), "
        "coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0), "
        "coalesce(sum(reasoning_tokens), 0), count(requests) FROM {turns} "
        "WHERE requests IS NOT NULL AND ($1::text IS NULL OR session_id = $1) "
        "AND ($2::timestamptz IS NULL OR created_at >= $2)"
    )

    # Rewinds (Batch.rewind), in the general commit's transaction. $1 session_id, $2 the
    # rewind number, $3 the key to hide after.
    hide: str = """
    WITH moved AS (
        DELETE FROM {items} WHERE session_id = $1 AND seq > $3 RETURNING session_id, seq, batch_id, data
    ), kept AS (
        INSERT INTO {hidden} (session_id, seq, batch_id, data, rewind_no)
        SELECT session_id, seq, batch_id, data, $2 FROM moved
    ), t AS (
        UPDATE {turns} SET hidden_by = $2
        WHERE session_id = $1 AND first_seq > $3 AND hidden_by IS NULL
        RETURNING items
    )
    UPDATE {sessions} SET item_count = item_count - (SELECT count(*) FROM moved),
        turn_count = turn_count - (SELECT count(*) FROM t WHERE t.items > 0),
        turn_items = turn_items - (SELECT coalesce(sum(t.items), 0) FROM t)
    WHERE session_id = $1
    """

    unhide: str = """
    WITH moved AS (
        DELETE FROM {hidden} WHERE session_id = $1 AND rewind_no = $2
        RETURNING session_id, seq, batch_id, data
    ), back AS (
        INSERT INTO {items} (session_id, seq, batch_id, data)
        SELECT session_id, seq, batch_id, data FROM moved
    ), t AS (
        UPDATE {turns} SET hidden_by = NULL WHERE session_id = $1 AND hidden_by = $2
        RETURNING items
    )
    UPDATE {sessions} SET item_count = item_count + (SELECT count(*) FROM moved),
        turn_count = turn_count + (SELECT count(*) FROM t WHERE t.items > 0),
        turn_items = turn_items + (SELECT coalesce(sum(t.items), 0) FROM t)
    WHERE session_id = $1
    """

    # $1 session_id, $2 batch_id, $3 reasons text[], $4 data text[]; the session row is
    # locked by the committing transaction, so max(seq) is stable.
    quarantine: str = (
        "INSERT INTO {quarantine} (session_id, seq, batch_id, reason, data, created_at) "
        "SELECT $1, (SELECT coalesce(max(seq), 0) FROM {quarantine} WHERE session_id = $1) + u.ord,"
        " $2, u.reason, u.data, now() "
        "FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(reason, data, ord)"
    )

    quarantine_load: str = (
        "SELECT seq, batch_id, reason, data, created_at FROM {quarantine} "
        "WHERE session_id = $1 ORDER BY seq"
    )

    tags_delete: str = "DELETE FROM {session_tags} WHERE session_id = $1"

    tags_insert: str = (
        "INSERT INTO {session_tags} (tag, session_id, user_id) SELECT u.t, s.session_id, s.user_id "
        "FROM {sessions} AS s CROSS JOIN unnest($2::text[]) AS u(t) WHERE s.session_id = $1"
    )

    tags_user: str = "UPDATE {session_tags} SET user_id = $2 WHERE session_id = $1"

    # The stored rows (all, or the latest $2), the session's version and life, in one snapshot.
    load_versioned: str = """
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
    expired: str = (
        f"SELECT {_INFO_COLUMNS} FROM {{sessions}} WHERE session_id > $1 "
        "AND coalesce(ttl, $2) IS NOT NULL AND updated_at + make_interval(secs => "
        f"least(greatest(coalesce(ttl, $2), 0), {MAX_TTL.total_seconds():.0f})) < $3 "
        "ORDER BY session_id LIMIT $4"
    )

    delete_lock_many: str = (
        "SELECT session_id, updated_at, ttl FROM {sessions} WHERE session_id = ANY($1::text[]) "
        "ORDER BY session_id FOR UPDATE"
    )

    delete_lock_user: str = (
        "SELECT session_id, updated_at, ttl FROM {sessions} WHERE user_id = $1 "
        "ORDER BY session_id FOR UPDATE"
    )
    # Migrations (PostgresBackend.migrate): the table of applied versions.
    version_table: str = (
        "CREATE TABLE IF NOT EXISTS {version} ("
        " version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    versions: str = "SELECT version FROM {version}"
    version_insert: str = "INSERT INTO {version} (version) VALUES ($1)"

    def for_names(self, names: _Names) -> Statements:
        """These statements on the tables of ``names``."""
        return replace(self, **{f.name: names.sql(getattr(self, f.name)) for f in fields(self)})


#: The templates, placeholders unfilled.
STATEMENTS = Statements()


def _turn_args(batch: Batch) -> tuple[Any, ...]:
    """The turn-record parameters of the append and batch statements."""
    turn = batch.turn
    if turn is None:
        return (False, None, None, None, None, None, None, None)
    counts = (None,) * 5 if turn.usage is None else turn.usage.values()
    return (True, turn.run_id, turn.created_at, *counts)
