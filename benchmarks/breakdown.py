"""Where one commit's time goes, step by step, measured in one process.

``python -m benchmarks.breakdown [--quick] [--backends sqlite postgres]`` times small
steps that add up to one turn (``add_items(4 items)`` + ``commit()``) and prints them as
microseconds per turn; ``python -m benchmarks`` runs it as part of a full run (its
figures land in ``latest.json`` under ``"breakdown"`` and in the generated docs).

Every step runs the same turns in rounds, the steps taking turns within a round (order
rotating) so that a busy moment lands on every step; the figure is the median round.
Differences between steps are what the docs call a step's cost (for example the fsync
is "durable" minus "``synchronous=OFF``"): each is a difference of two medians, so read
it with the spread of the rounds (also recorded) in mind.

:func:`core_cpu` is the core's own CPU per commit (the same turn over a backend that
stores nothing, CPU time in a hot loop), a figure with a goal of its own
(:data:`CORE_CPU_GOAL_US`): every ``python -m benchmarks`` run measures it in three
fresh processes spread through the run (``--core-cpu-only``; a few seconds each), under
``"core_cpu"`` (``_run.merge_core_cpu``); this command prints it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._data import TurnSource
from ._subjects import (
    _FLOOR_INSERT,
    _FLOOR_SQLITE_SCHEMA,
    _SAME_PG_APPEND,
    _dumps,
    _our_sqlite_tables,
    _same_work_sqlite,
    pg_schema,
)

Step = Callable[[list[dict[str, Any]]], Awaitable[None]]
Result = dict[str, Any]

# ----------------------------------------------------------------------------- the core alone


class _NoopBackend:
    """A backend that stores nothing: what is left is the core's own cost."""

    atomic = True
    idempotent = True

    async def load(self, session_id: str, limit: int | None) -> list[Any]:
        return []

    async def apply(self, session_id: str, batches: Sequence[Any]) -> None:
        return None

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        return set()

    async def close(self) -> None:
        return None


def _noop_store() -> Any:
    from sessions import BufferedSession, Store

    class NoopStore(Store[BufferedSession]):
        session_class = BufferedSession

    return NoopStore(_NoopBackend())


#: The core's own CPU per commit (``core_cpu``): its goal, in µs.
CORE_CPU_GOAL_US = 16


async def core_cpu(rounds: int = 9, turns: int = 1000) -> Result:
    """The core's own CPU per commit: CPU time (``time.process_time``) per turn of
    ``add_items(4 items)`` + ``commit()`` of one session over a backend that stores
    nothing (``_noop_store``; integrity at its default), in a hot loop; the median of
    ``rounds`` rounds of ``turns`` turns, after a warm-up round. CPU time, not wall
    time: a busy moment of the machine costs this process less of it (a loaded
    machine still slows it down: caches, a shared core)."""
    store = _noop_store()
    session = store.session("cpu")
    source = TurnSource(seed=9)
    pool = [source.next() for _ in range(64)]
    samples: list[float] = []
    try:
        for r in range(rounds + 1):
            start = time.process_time()
            for i in range(turns):
                await session.add_items(pool[i % 64])
                await session.commit()
            if r:  # the first round warms up
                samples.append((time.process_time() - start) / turns * 1e6)
    finally:
        await store.close()
    return {
        "us": statistics.median(samples),
        "rounds_us": [round(v, 2) for v in samples],
        "turns_per_round": turns,
        "goal_us": CORE_CPU_GOAL_US,
        "clock": "process_time",
    }


async def _turns(step: Step, source: TurnSource, n: int) -> float:
    """Seconds per turn for ``n`` turns of ``step``."""
    start = time.perf_counter()
    for _ in range(n):
        await step(source.next())
    return (time.perf_counter() - start) / n


async def _measure(steps: dict[str, Step], turns: int, rounds: int) -> dict[str, Result]:
    source = TurnSource(seed=9)
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up: connections, caches, prepared statements
        await _turns(steps[name], source, max(3, turns // 10))
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(await _turns(steps[name], source, turns))
    return {
        name: {
            "us": statistics.median(values) * 1e6,
            "rounds_us": [round(v * 1e6, 1) for v in values],
        }
        for name, values in samples.items()
    }


# ----------------------------------------------------------------------------- SQLite


def _sqlite_conn(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def _bare_write(conn: sqlite3.Connection, sid: str, texts: list[str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_FLOOR_INSERT, [(sid, text) for text in texts])
    conn.execute("COMMIT")


async def _sqlite_steps(
    directory: str, stack: list[Callable[[], Awaitable[None]]]
) -> dict[str, Step]:
    import aiosqlite

    from sessions import SQLiteStore
    from sessions.sqlite import SQLiteBackend

    steps: dict[str, Step] = {}
    for sync in ("FULL", "OFF"):
        bare = _sqlite_conn(os.path.join(directory, f"bare-{sync}.db"), sync)
        for statement in _FLOOR_SQLITE_SCHEMA:
            bare.execute(statement)
        same_path = os.path.join(directory, f"same-{sync}.db")
        await _our_sqlite_tables(same_path)
        same = _sqlite_conn(same_path, sync)
        stack += [_closer(bare.close), _closer(same.close)]

        async def bare_step(items: list[dict[str, Any]], conn: sqlite3.Connection = bare) -> None:
            _bare_write(conn, "b", _dumps(items))

        async def same_step(items: list[dict[str, Any]], conn: sqlite3.Connection = same) -> None:
            _same_work_sqlite(conn, "b", _dumps(items))

        steps[f"sqlite3_bare_{sync.lower()}"] = bare_step
        steps[f"sqlite3_same_{sync.lower()}"] = same_step

    hop = await aiosqlite.connect(os.path.join(directory, "hop.db"), isolation_level=None)
    stack.append(hop.close)

    async def hop_step(items: list[dict[str, Any]]) -> None:
        await hop._execute(_nothing)  # type: ignore[no-untyped-call]

    steps["thread_hop"] = hop_step

    hop_same_path = os.path.join(directory, "hop-same.db")
    await _our_sqlite_tables(hop_same_path)
    hop_same = await aiosqlite.connect(hop_same_path, isolation_level=None)
    await hop_same.execute("PRAGMA journal_mode = WAL")
    await hop_same.execute("PRAGMA synchronous = FULL")
    stack.append(hop_same.close)

    async def hop_same_step(items: list[dict[str, Any]]) -> None:
        await hop_same._execute(  # type: ignore[no-untyped-call]
            _same_work_sqlite, hop_same._conn, "b", _dumps(items)
        )

    steps["aiosqlite_1hop_same_full"] = hop_same_step

    ours = await SQLiteStore.open(os.path.join(directory, "ours.db"))
    stack.append(ours.close)

    async def our_hop_step(items: list[dict[str, Any]]) -> None:
        backend = ours.backend
        assert isinstance(backend, SQLiteBackend)
        await backend.run(_nothing_on)

    steps["our_worker_hop"] = our_hop_step
    steps.update(_our_steps(ours, "ours_sqlite"))
    return steps


def _nothing() -> None:
    return None


def _nothing_on(conn: sqlite3.Connection) -> None:
    return None


def _closer(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        fn()

    return close


# ----------------------------------------------------------------------------- core


def _core_steps(stack: list[Callable[[], Awaitable[None]]]) -> dict[str, Step]:
    store = _noop_store()
    stack.append(store.close)
    session = store.session("b")
    encode_only = _noop_store()
    stack.append(encode_only.close)
    staged = encode_only.session("b")

    async def core_step(items: list[dict[str, Any]]) -> None:
        await session.add_items(items)
        await session.commit()

    async def add_only_step(items: list[dict[str, Any]]) -> None:
        await staged.add_items(items)
        await staged.rollback()

    return {"core_noop_backend": core_step, "core_add_items_only": add_only_step}


# ----------------------------------------------------------------------------- PostgreSQL


async def _pg_steps(
    dsn: str, schema: str, stack: list[Callable[[], Awaitable[None]]]
) -> dict[str, Step]:
    import asyncpg  # type: ignore[import-untyped]

    from sessions.postgres import PostgresStore

    async def no_reset(conn: Any) -> None:
        return None

    steps: dict[str, Step] = {}
    await (await PostgresStore.open(dsn, schema=schema, table_prefix="same_", max_size=1)).close()
    for commit in ("on", "off"):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=1,
            reset=no_reset,
            server_settings={"search_path": schema, "synchronous_commit": commit},
        )
        stack.append(pool.close)
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS floor_items (id BIGINT GENERATED ALWAYS AS "
                "IDENTITY PRIMARY KEY, session_id TEXT NOT NULL, data text NOT NULL)"
            )
            await conn.execute(
                "CREATE INDEX IF NOT EXISTS floor_items_session ON floor_items (session_id, id)"
            )

        async def bare_step(items: list[dict[str, Any]], pool: Any = pool) -> None:
            async with pool.acquire() as conn:
                await conn.execute(
                    "INSERT INTO floor_items (session_id, data) "
                    "SELECT $1, d FROM unnest($2::text[]) AS d",
                    "b",
                    _dumps(items),
                )

        async def same_step(items: list[dict[str, Any]], pool: Any = pool) -> None:
            texts = _dumps(items)
            async with pool.acquire() as conn:
                await conn.execute(_SAME_PG_APPEND, "b", os.urandom(16).hex(), texts, len(texts))

        steps[f"asyncpg_bare_{commit}"] = bare_step
        steps[f"asyncpg_same_{commit}"] = same_step
        if commit == "on":

            async def roundtrip(items: list[dict[str, Any]], pool: Any = pool) -> None:
                async with pool.acquire() as conn:
                    await conn.execute("SELECT 1")

            async def acquire(items: list[dict[str, Any]], pool: Any = pool) -> None:
                async with pool.acquire():
                    pass

            steps["asyncpg_select_1"] = roundtrip
            steps["asyncpg_acquire_release"] = acquire

    ours = await PostgresStore.open(dsn, schema=schema, min_size=1, max_size=2)
    stack.append(ours.close)
    steps.update(_our_steps(ours, "ours_pg"))
    return steps


def _our_steps(store: Any, name: str) -> dict[str, Step]:
    """Our store three ways: its backend's ``apply`` of a prepared batch (no core), a
    session with ``integrity="off"``, and a session with the default."""
    from sessions._model.backend import Batch, TurnRecord

    backend = store.backend
    session = store.session("b")
    unchecked = store.session("u", integrity="off")

    async def apply_step(items: list[dict[str, Any]]) -> None:
        batch = Batch(uuid.uuid4().hex, False, (), tuple(_dumps(items)), turn=TurnRecord())
        await backend.apply("a", [batch])

    async def off_step(items: list[dict[str, Any]]) -> None:
        await unchecked.add_items(items)
        await unchecked.commit()

    async def ours_step(items: list[dict[str, Any]]) -> None:
        await session.add_items(items)
        await session.commit()

    return {
        f"{name}_backend_apply": apply_step,
        f"{name}_integrity_off": off_step,
        name: ours_step,
    }


# ----------------------------------------------------------------------------- run

#: (key, description, how it is derived) for the docs table; ``"a - b"`` is a difference.
SQLITE_TABLE = (
    ("sqlite3_bare_full", "raw sqlite3 in the event loop: BEGIN IMMEDIATE, 4 item rows, COMMIT"),
    (
        "sqlite3_bare_full - sqlite3_bare_off",
        "of which the WAL fsync (durable minus synchronous=OFF)",
    ),
    (
        "sqlite3_same_full - sqlite3_bare_full",
        "+ our rows instead of item rows only (what the same-work floors write)",
    ),
    ("thread_hop", "+ one thread hop: a no-op call on aiosqlite's worker thread"),
    ("our_worker_hop", "(a no-op call on our SQLite store's own worker thread)"),
    ("aiosqlite_1hop_same_full", "= floor: our rows in one call on the worker thread"),
    ("core_noop_backend", "+ the core: add_items + commit over a backend that stores nothing"),
    (
        "core_add_items_only",
        "of which add_items (validation, JSON encoding, staging; then rollback)",
    ),
    ("ours_sqlite", "= ours: SQLiteStore session, add_items + commit"),
    ("ours_sqlite_backend_apply", "ours without the core: the backend's apply() of one batch"),
    (
        "ours_sqlite_backend_apply - aiosqlite_1hop_same_full",
        "of which beyond the floor (our worker, group commit, batch-id check)",
    ),
    ("ours_sqlite - ours_sqlite_integrity_off", "of ours, the integrity check (default vs off)"),
)
POSTGRES_TABLE = (
    ("asyncpg_select_1", "one round trip: SELECT 1 on a pooled connection"),
    ("asyncpg_acquire_release", "of which pool acquire + release (no statement)"),
    ("asyncpg_bare_on", "raw asyncpg: one INSERT … unnest of 4 item rows (durable)"),
    (
        "asyncpg_bare_on - asyncpg_bare_off",
        "of which the WAL flush (durable minus synchronous_commit=off)",
    ),
    ("asyncpg_same_on - asyncpg_bare_on", "+ our rows in one statement instead of item rows only"),
    ("asyncpg_same_on", "= floor: our rows, one statement (durable)"),
    ("core_noop_backend", "+ the core: add_items + commit over a backend that stores nothing"),
    ("ours_pg", "= ours: PostgresStore session, add_items + commit"),
    ("ours_pg_backend_apply", "ours without the core: the backend's apply() of one batch"),
    (
        "ours_pg_backend_apply - asyncpg_same_on",
        "of which beyond the floor (pool, group commit, outcome handling)",
    ),
    ("ours_pg - ours_pg_integrity_off", "of ours, the integrity check (default vs off)"),
)


def derive(steps: dict[str, Result], expression: str) -> float | None:
    """The value of ``"a"`` or ``"a - b"`` over measured steps (µs per turn)."""
    parts = [p.strip() for p in expression.split(" - ")]
    values = [steps.get(p, {}).get("us") for p in parts]
    if any(v is None for v in values):
        return None
    first, *rest = values
    assert first is not None
    return float(first - sum(v for v in rest if v is not None))


async def run(
    backends: list[str], dsn: str | None, quick: bool, progress: Callable[[str], None]
) -> Result:
    turns, rounds = (10, 1) if quick else (300, 9)
    out: Result = {"turns_per_round": turns, "rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="txs-breakdown-") as tmp:
        for backend in backends:
            stack: list[Callable[[], Awaitable[None]]] = []
            schema = f"txs_breakdown_{os.getpid()}"
            try:
                if backend == "sqlite":
                    steps = await _sqlite_steps(tmp, stack)
                else:
                    assert dsn is not None
                    await pg_schema(dsn, schema, drop=False)
                    steps = await _pg_steps(dsn, schema, stack)
                steps.update(_core_steps(stack))
                progress(f"breakdown {backend}: {len(steps)} steps x {rounds} rounds")
                out[backend] = await _measure(steps, turns, rounds)
            finally:
                for close in reversed(stack):
                    await close()
                if backend == "postgres" and dsn is not None:
                    await pg_schema(dsn, schema, drop=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from ._run import default_dsn

    parser = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"]
    )
    parser.add_argument("--pg-dsn", default=default_dsn())
    parser.add_argument(
        "--core-cpu-only",
        action="store_true",
        help="measure only the core's own CPU per commit; print it as one JSON line",
    )
    args = parser.parse_args(argv)
    if args.core_cpu_only:
        print(json.dumps(asyncio.run(core_cpu(*((3, 200) if args.quick else ())))))
        return 0

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = asyncio.run(run(args.backends, args.pg_dsn, args.quick, progress))
    result["core_cpu"] = asyncio.run(core_cpu(*((3, 200) if args.quick else ())))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
