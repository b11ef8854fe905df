"""The PostgreSQL statements that read a window of the turn index
(:meth:`~sessions.postgres.PostgresBackend.load_turn_window`), as templates for
:class:`~sessions.postgres.sql.Statements`: the oldest or newest turn records of a
session, walked or scanned."""

from __future__ import annotations

__all__ = ["TURN_WALK_MAX", "turn_window"]


#: The most records :meth:`~sessions.postgres.PostgresBackend.load_turn_window` reads
#: with the walk (``turns_newest_walk``): one index probe each. More (or all) take one
#: scan of the session's records (``turns_newest``), which pays for itself then.
TURN_WALK_MAX = 64


def turn_window(order: str, *, walk: bool) -> str:
    """The statement of :meth:`~sessions.postgres.PostgresBackend.load_turn_window`,
    reading the records from the oldest (``order`` ``""``) or the newest (``"DESC"``),
    each with its first and last stored key.

    ``walk``: one record at a time along the primary key, from that end, skipping hidden
    and emptied records, until ``$2`` are found: a probe per record read, whatever the
    table's statistics say. (Asked for the first rows of one scan with those records
    filtered out, the planner trusts its estimates: with statistics of a table analyzed
    while empty, or taken before one session grew far past the others, it expects a
    handful of rows and scans and sorts every record of the session; 20,000 turns in
    ``tests/postgres/test_turn_plan.py``.) Otherwise one scan of the session's records.
    """
    # A record's own first or last key while it holds every item of its range, else
    # one index probe.
    probe = (
        "CASE WHEN w.items = w.last_seq - w.first_seq + 1 THEN w.{end}_seq ELSE ("
        "SELECT i.seq FROM {{items}} AS i WHERE i.session_id = $1"
        " AND i.seq BETWEEN w.first_seq AND w.last_seq ORDER BY i.seq {order} LIMIT 1) END"
    )
    if walk:
        step = "<" if order else ">"
        records = f"""
            WITH RECURSIVE walk AS (
                (SELECT * FROM {{turns}} WHERE session_id = $1 ORDER BY first_seq {order} LIMIT 1)
                UNION ALL
                SELECT n.* FROM walk CROSS JOIN LATERAL (
                    SELECT * FROM {{turns}} AS t
                    WHERE t.session_id = $1 AND t.first_seq {step} walk.first_seq
                    ORDER BY t.first_seq {order} LIMIT 1
                ) AS n
            )
            SELECT * FROM walk WHERE hidden_by IS NULL AND items > 0 LIMIT $2"""
    else:
        records = f"""
            SELECT * FROM {{turns}} WHERE session_id = $1 AND hidden_by IS NULL AND items > 0
            ORDER BY first_seq {order} LIMIT $2"""
    return f"""
    SELECT v.item_count, v.turn_count, v.turn_items, array(
        SELECT row(w.first_seq, w.last_seq, w.created_at, w.run_id, w.requests, w.input_tokens,
                   w.output_tokens, w.cached_tokens, w.reasoning_tokens, w.items,
                   {probe.format(end="first", order="ASC")},
                   {probe.format(end="last", order="DESC")})
        FROM ({records}
        ) AS w
        ORDER BY w.first_seq {order}
    )
    FROM (SELECT 1) AS one LEFT JOIN {{sessions}} AS v ON v.session_id = $1
    """
