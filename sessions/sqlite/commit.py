"""A commit's transaction: batches applied as the core decides.

A batch with conditions is judged by :func:`sessions._model.decide.decide` from a snapshot
read in the transaction, and its plan written here; a plain batch takes the fast path
(one upsert, its life judged from what the upsert returns).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from .._model.backend import Batch, InfoChange
from .._model.catalogue import check_life
from .._model.decide import Plan, Snapshot, decide, key_limit, needs_snapshot, undoes
from .connection import writing
from .sql import (
    INSERT_ROWS_MAX,
    SQL_APPLIED_ONE,
    SQL_BRANCH,
    SQL_BUMP,
    SQL_CLEAR,
    SQL_CLEAR_HIDDEN,
    SQL_CLEAR_TURNS,
    SQL_COUNT,
    SQL_FIRST_HIDDEN,
    SQL_FORK_OF,
    SQL_HIDE,
    SQL_INSERT,
    SQL_INSERT_ROWS,
    SQL_KEYS_AFTER,
    SQL_POP,
    SQL_QUARANTINE,
    SQL_RECORD_BATCH,
    SQL_RESTORE_TIMES,
    SQL_REWIND_NO,
    SQL_RUN_STATE_VERSION,
    SQL_RUN_STATE_WRITE,
    SQL_SESSION_FACTS,
    SQL_TURN,
    SQL_TURN_BARE,
    SQL_TURN_POP,
    SQL_UNHIDE,
)

__all__ = ["apply_batches", "apply_transaction"]

_POPS_CHUNK = 500  # keys per statement, well under SQLite's limit of parameters


def apply_batches(
    conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch], now: float
) -> None:
    """Apply ``batches`` inside the caller's transaction (or savepoint): a batch with
    conditions as the core decides from what this transaction reads before writing it
    (:mod:`sessions._model.decide`); a plain one on the fast path, its life judged from what
    its own upsert returns (a row it created has a new one)."""
    for batch in batches:
        plan = None
        if needs_snapshot(batch):
            plan = decide(session_id, batch, _snapshot(conn, session_id, batch))
            if plan is None:
                continue  # already applied, or an undo with nothing to undo
        if conn.execute(SQL_RECORD_BATCH, (session_id, batch.batch_id, now)).rowcount == 0:
            continue  # already applied by an earlier attempt
        removed = emptied = covered = 0
        if batch.clear:
            conn.execute(SQL_CLEAR, (session_id,))
            conn.execute(SQL_CLEAR_TURNS, (session_id,))
            conn.execute(SQL_CLEAR_HIDDEN, (session_id,))
        elif batch.pops:
            pops = [(session_id, key) for key in batch.pops]
            removed = conn.executemany(SQL_POP, pops).rowcount
            emptied, covered = _leave_turns(conn, session_id, batch.pops)
        n = len(batch.items)
        turn = 1 if batch.turn is not None and n else 0
        bump = {
            "sid": session_id,
            "now": now,
            "n": n,
            "clear": batch.clear,
            "removed": removed,
            "tc": turn,
            "ti": turn * n,
            "emptied": emptied,
            "covered": covered,
        }
        base, _version, life = conn.execute(SQL_BUMP, bump).fetchone()
        if plan is None:
            check_life(session_id, batch, life)
        if batch.restore_times is not None:
            created, updated = batch.restore_times
            conn.execute(SQL_RESTORE_TIMES, (created.timestamp(), updated.timestamp(), session_id))
        if n:
            _insert_items(conn, session_id, batch, base)
            record = batch.turn
            if record is not None:
                at = now if record.created_at is None else record.created_at.timestamp()
                row = (session_id, base, base + n - 1, at, record.run_id)
                if record.usage is None:
                    conn.execute(SQL_TURN_BARE, (*row, n))
                else:
                    conn.execute(SQL_TURN, (*row, *record.usage.values(), n))
        if plan is not None:
            _write_plan(conn, session_id, batch, plan, now)


def _insert_items(conn: sqlite3.Connection, session_id: str, batch: Batch, base: int) -> None:
    """The batch's items, keys from ``base`` on: one statement for up to
    ``INSERT_ROWS_MAX`` of them (the usual commit), else row by row."""
    batch_id, items = batch.batch_id, batch.items
    if len(items) > INSERT_ROWS_MAX:
        rows = [(session_id, base + i, batch_id, text) for i, text in enumerate(items)]
        conn.executemany(SQL_INSERT, rows)
        return
    params: list[Any] = []
    for i, text in enumerate(items):
        params += (session_id, base + i, batch_id, text)
    conn.execute(SQL_INSERT_ROWS[len(items)], params)


def _leave_turns(conn: sqlite3.Connection, session_id: str, pops: Sequence[int]) -> tuple[int, int]:
    """The popped items (all stored: :func:`~sessions._model.decide.decide` checked) leave
    the visible turn records covering them; returns how many records they emptied and
    how many of them a record covered."""
    emptied = covered = 0
    for key in set(pops):
        for (left,) in conn.execute(SQL_TURN_POP, {"s": session_id, "k": key}).fetchall():
            covered += 1
            emptied += left == 0
    return emptied, covered


def _snapshot(conn: sqlite3.Connection, session_id: str, batch: Batch) -> Snapshot:
    """What :func:`~sessions._model.decide.decide` needs for ``batch``, read in this transaction."""
    row = conn.execute(SQL_SESSION_FACTS, (session_id,)).fetchone()
    limit = key_limit(batch)

    def keys_after(after: int) -> tuple[int, ...]:
        return tuple(k for (k,) in conn.execute(SQL_KEYS_AFTER, (session_id, after, limit)))

    (newest,) = conn.execute(SQL_REWIND_NO, {"s": session_id}).fetchone()
    after_hidden: tuple[int, ...] = ()
    if newest is not None and undoes(batch):
        (first,) = conn.execute(SQL_FIRST_HIDDEN, (session_id, newest)).fetchone()
        after_hidden = keys_after(first)
    run_state = None
    if batch.run_state is not None:
        run_state = conn.execute(SQL_RUN_STATE_VERSION, (session_id,)).fetchone()
    fork = None if batch.branch is None else conn.execute(SQL_FORK_OF, (session_id,)).fetchone()
    return Snapshot(
        applied=conn.execute(SQL_APPLIED_ONE, (session_id, batch.batch_id)).fetchone() is not None,
        life=None if row is None else row[0],
        version=0 if row is None else row[1],
        pops_stored=_pops_stored(conn, session_id, batch.pops),
        after_tail=() if batch.tail is None else keys_after(batch.tail),
        newest_rewind=newest,
        after_hidden=after_hidden,
        run_state_version=0 if run_state is None else run_state[0],
        stored=() if batch.branch is None else keys_after(0),
        fork_of=None if fork is None else (fork[0], fork[1]),
    )


def _pops_stored(conn: sqlite3.Connection, session_id: str, pops: Sequence[int]) -> int:
    """How many distinct keys of ``pops`` are stored."""
    keys = sorted(set(pops))
    stored = 0
    for start in range(0, len(keys), _POPS_CHUNK):
        chunk = keys[start : start + _POPS_CHUNK]
        marks = ", ".join("?" * len(chunk))  # placeholders only
        sql = f"SELECT count(*) FROM txs_items WHERE session_id = ? AND seq IN ({marks})"
        stored += conn.execute(sql, (session_id, *chunk)).fetchone()[0]
    return stored


def _write_plan(
    conn: sqlite3.Connection, session_id: str, batch: Batch, plan: Plan, now: float
) -> None:
    """A batch's catalogue, run-state, quarantine, fork and rewind writes, as planned."""
    if batch.info is not None:
        _write_info(conn, session_id, batch.info)
    change = batch.run_state
    if change is not None:
        version = plan.run_state_version
        conn.execute(SQL_RUN_STATE_WRITE, (session_id, version, change.text, change.label, now))
    for reason, text in batch.quarantine:
        conn.execute(SQL_QUARANTINE, (session_id, session_id, batch.batch_id, reason, text, now))
    if batch.branch is not None:
        conn.execute(SQL_BRANCH, (batch.branch.source_id, session_id, batch.branch.at_turn, now))
    if plan.hide_as is not None:
        assert batch.rewind is not None
        _move(
            conn, SQL_HIDE, -1, {"s": session_id, "r": plan.hide_as, "k": batch.rewind.hide_after}
        )
    elif plan.bring_back is not None:
        _move(conn, SQL_UNHIDE, 1, {"s": session_id, "r": plan.bring_back})


def _move(
    conn: sqlite3.Connection, sql: tuple[str, str, str], sign: int, params: dict[str, Any]
) -> None:
    """Hide items and turn records under a rewind number (``SQL_HIDE``, ``sign`` -1), or
    bring them back (``SQL_UNHIDE``, ``sign`` 1)."""
    insert, delete, turns = sql
    moved = conn.execute(insert, params).rowcount
    conn.execute(delete, params)
    held = [items for (items,) in conn.execute(turns, params).fetchall()]
    records = sum(1 for items in held if items > 0)
    counts = {"n": sign * moved, "tc": sign * records, "ti": sign * sum(held), "s": params["s"]}
    conn.execute(SQL_COUNT, counts)


def _write_info(conn: sqlite3.Connection, session_id: str, change: InfoChange) -> None:
    values: dict[str, Any] = {}
    for name in change.fields:
        value = getattr(change, name)
        if name == "tags":
            value = json.dumps(list(value)) if value else None
        values[name] = value
    columns = ", ".join(f"{name} = :{name}" for name in sorted(values))  # fixed names
    conn.execute(
        f"UPDATE txs_sessions SET {columns} WHERE session_id = :sid", {**values, "sid": session_id}
    )
    if "tags" in change.fields:
        conn.execute("DELETE FROM txs_session_tags WHERE session_id = ?", (session_id,))
        conn.executemany(
            "INSERT INTO txs_session_tags (tag, session_id, user_id) "
            "SELECT ?, session_id, user_id FROM txs_sessions WHERE session_id = ?",
            [(tag, session_id) for tag in change.tags],
        )
    elif "user_id" in change.fields:
        conn.execute(
            "UPDATE txs_session_tags SET user_id = ? WHERE session_id = ?",
            (change.user_id, session_id),
        )


def apply_transaction(conn: sqlite3.Connection, session_id: str, batches: Sequence[Batch]) -> None:
    """One transaction for all batches; runs on the connection's worker thread."""
    with writing(conn):
        apply_batches(conn, session_id, batches, time.time())
