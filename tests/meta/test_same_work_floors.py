"""The benchmarks' same-work floors write the rows our commit writes.

The per-commit guards of ``python -m benchmarks`` compare ours with hand-written SQL
"writing our rows" (``benchmarks/_subjects.py``: ``RawSQLiteSame``,
``RawAiosqliteOneHopSame``, ``RawAsyncpgSame``). If our commit writes more than the
floor (a column added by a migration), the guard flatters the floor; if less, it
flatters us. Here both write the same turns and every stored value that is not an id,
a time or a random life is compared, row by row.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks._data import TurnSource
from benchmarks._subjects import (
    OursPostgres,
    OursSQLite,
    RawAiosqliteOneHopSame,
    RawAsyncpgSame,
    RawSQLiteSame,
    Subject,
)
from tests.conftest import PG_DSN, require_postgres
from tests.provision.postgres import drop_schema

TURNS = 3

# What is compared of each table: every column but ids, times and lives.
SESSION_COLUMNS = "item_count, next_seq, version, turn_count, turn_items"
TURN_COLUMNS = (
    "first_seq, last_seq, run_id, hidden_by, requests, input_tokens, output_tokens, "
    "cached_tokens, reasoning_tokens, items"
)


async def _write(subject: Subject, sid: str, turns: list[list[Any]]) -> None:
    await subject.open()
    try:
        for items in turns:
            await subject.turn(sid, items)
    finally:
        await subject.close()


def _sqlite_rows(path: str, sid: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            "sessions": conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM txs_sessions WHERE session_id = ?", (sid,)
            ).fetchall(),
            "turns": conn.execute(
                f"SELECT {TURN_COLUMNS} FROM txs_turns WHERE session_id = ? ORDER BY first_seq",
                (sid,),
            ).fetchall(),
            "items": conn.execute(
                "SELECT seq, data FROM txs_items WHERE session_id = ? ORDER BY seq", (sid,)
            ).fetchall(),
            "batches": conn.execute(
                "SELECT count(*) FROM txs_batches WHERE session_id = ?", (sid,)
            ).fetchall(),
        }
    finally:
        conn.close()


@pytest.mark.parametrize("floor", [RawSQLiteSame, RawAiosqliteOneHopSame])
async def test_sqlite_same_work_floor_leaves_the_rows_our_commit_leaves(
    tmp_path: Path, floor: type[Subject]
) -> None:
    turns = [TurnSource(seed=4).next() for _ in range(TURNS)]
    ours_path, floor_path = str(tmp_path / "ours.db"), str(tmp_path / "floor.db")
    await _write(OursSQLite(ours_path), "s", turns)
    await _write(floor(floor_path), "s", turns)  # type: ignore[call-arg]
    ours, theirs = _sqlite_rows(ours_path, "s"), _sqlite_rows(floor_path, "s")
    assert len(ours["items"]) == 4 * TURNS and len(ours["turns"]) == TURNS
    assert theirs == ours


async def test_postgres_same_work_floor_leaves_the_rows_our_commit_leaves() -> None:
    pytest.importorskip("asyncpg")
    require_postgres()
    import asyncpg  # type: ignore[import-untyped]

    schema = f"txs_t_{uuid.uuid4().hex[:12]}"
    turns = [TurnSource(seed=4).next() for _ in range(TURNS)]
    try:
        await _write(OursPostgres(PG_DSN, schema, 1), "s", turns)
        await _write(RawAsyncpgSame(PG_DSN, schema, 1), "s", turns)
        conn = await asyncpg.connect(PG_DSN)
        try:
            found = {}
            for prefix in ("txs_", "same_"):
                t = f'"{schema}".{prefix}'
                found[prefix] = [
                    [
                        tuple(row)
                        for row in await conn.fetch(
                            f"SELECT {SESSION_COLUMNS} FROM {t}sessions WHERE session_id = 's'"
                        )
                    ],
                    [
                        tuple(row)
                        for row in await conn.fetch(
                            f"SELECT {TURN_COLUMNS} FROM {t}turns WHERE session_id = 's' "
                            "ORDER BY first_seq"
                        )
                    ],
                    [
                        tuple(row)
                        for row in await conn.fetch(
                            f"SELECT seq, data FROM {t}items WHERE session_id = 's' ORDER BY seq"
                        )
                    ],
                    await conn.fetchval(f"SELECT count(*) FROM {t}batches WHERE session_id = 's'"),
                ]
        finally:
            await conn.close()
    finally:
        await drop_schema(schema)
    assert len(found["txs_"][2]) == 4 * TURNS and len(found["txs_"][1]) == TURNS
    assert found["same_"] == found["txs_"]
