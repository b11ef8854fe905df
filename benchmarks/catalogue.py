"""Listing one user's sessions: a store of 100,000 sessions against one of 1,000.

``python -m benchmarks.catalogue`` makes, per backend, two stores with ``open_store``
(SQLite: two files in a temporary directory; PostgreSQL: two schemas of their own,
dropped at the end), each with 100 sessions per user (small: 10 users, large: 1,000
users) and one of 20 tags per session. The catalogue rows (what the listing reads) are
loaded with plain ``INSERT``s into the tables the store made, in a shuffled order, so
that the indexes grow by scattered inserts; then ``ANALYZE`` (PostgreSQL: ``VACUUM ANALYZE``, as autovacuum would).

Then, small and large store taking turns: ``list_sessions(user_id=U, limit=50)`` of
a random user (the first page), the next page after it, ``list_sessions(user_id=U,
tag=T, limit=50)``, and ``count_sessions(user_id=U)``. Each figure is a median over
rounds of ``--reps`` calls; the verdict is large ÷ small (target: at most 1.5).
Results go to ``benchmarks/results/catalogue.json`` and ``.md``; the verdict per backend
to the README's catalogue table and docs/catalogue.md (``claim``, through
``python -m benchmarks.docs``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from . import _env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "catalogue")
PER_USER = 100
TAGS = 20
PAGE = 50
#: The verdict: a query's time in the large store at most this many times the small one's.
TARGET = 1.5

Result = dict[str, Any]


def _rows(count: int, seed: int) -> list[tuple[str, str, str, float]]:
    """``(session_id, user_id, tag, updated_at)`` in a shuffled (insertion) order."""
    rng = random.Random(seed)
    now = time.time()
    rows = [
        (
            f"s-{i:07d}",
            f"user-{i // PER_USER:05d}",
            f"tag-{i % TAGS:02d}",
            now - rng.random() * 86400,
        )
        for i in range(count)
    ]
    rng.shuffle(rows)
    return rows


def _load_sqlite(path: str, rows: list[tuple[str, str, str, float]]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq, "
            "user_id, tags, version) VALUES (?, ?, ?, 4, 5, ?, ?, 1)",
            [(sid, at, at, user, json.dumps([tag])) for sid, user, tag, at in rows],
        )
        conn.executemany(
            "INSERT INTO txs_session_tags (tag, session_id, user_id) VALUES (?, ?, ?)",
            [(tag, sid, user) for sid, user, tag, _ in rows],
        )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def _load_postgres(dsn: str, schema: str, rows: list[tuple[str, str, str, float]]) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(dsn)
    try:
        stamps = [datetime.fromtimestamp(at, timezone.utc) for _, _, _, at in rows]
        async with conn.transaction():
            await conn.execute(
                f'INSERT INTO "{schema}".txs_sessions (session_id, created_at, updated_at, '
                "item_count, next_seq, user_id, tags, version) "
                "SELECT s, t, t, 4, 5, u, ARRAY[g], 1 "
                "FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[]) AS x(s, t, u, g)",
                [r[0] for r in rows],
                stamps,
                [r[1] for r in rows],
                [r[2] for r in rows],
            )
            await conn.execute(
                f'INSERT INTO "{schema}".txs_session_tags (tag, session_id, user_id) '
                "SELECT g, s, u FROM unnest($1::text[], $2::text[], $3::text[]) AS x(g, s, u)",
                [r[2] for r in rows],
                [r[0] for r in rows],
                [r[1] for r in rows],
            )
        await conn.execute(f'VACUUM ANALYZE "{schema}".txs_sessions')
        await conn.execute(f'VACUUM ANALYZE "{schema}".txs_session_tags')
    finally:
        await conn.close()


async def _timed(reps: int, op: Callable[[], Awaitable[Any]]) -> float:
    """Median seconds of ``reps`` calls of ``op``."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        await op()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _round(store: Any, users: int, reps: int, rng: random.Random) -> dict[str, float]:
    def user() -> str:
        return f"user-{rng.randrange(users):05d}"

    async def first() -> None:
        page = await store.list_sessions(user_id=user(), limit=PAGE)
        assert len(page) == PAGE

    async def second() -> None:
        u = user()
        page = await store.list_sessions(user_id=u, limit=PAGE)
        assert len(await store.list_sessions(user_id=u, limit=PAGE, after=page[-1].session_id))

    async def tagged() -> None:
        await store.list_sessions(user_id=user(), tag=f"tag-{rng.randrange(TAGS):02d}", limit=PAGE)

    async def count() -> None:
        assert await store.count_sessions(user_id=user()) == PER_USER

    return {
        "first_page": await _timed(reps, first),
        "first_and_next_page": await _timed(reps, second),
        "user_and_tag_page": await _timed(reps, tagged),
        "count_user": await _timed(reps, count),
    }


async def _backend(kind: str, args: argparse.Namespace, progress: Callable[[str], None]) -> Result:
    from sessions import open_store

    sizes = {"small": args.small, "large": args.large}
    stores: dict[str, Any] = {}
    cleanup: list[Callable[[], Awaitable[None]]] = []
    tmp = tempfile.mkdtemp(prefix="txs-catalogue-")
    load_s: dict[str, float] = {}
    try:
        for name, count in sizes.items():
            progress(f"{kind}: loading {count:,} sessions ({name})")
            rows = _rows(count, seed=count)
            start = time.perf_counter()
            if kind == "sqlite":
                path = os.path.join(tmp, f"{name}.db")
                made = await open_store(f"sqlite:///{path}")  # the schema
                await made.close()
                await asyncio.to_thread(_load_sqlite, path, rows)
                stores[name] = await open_store(f"sqlite:///{path}")
            else:
                schema = f"txs_bench_cat_{name}_{uuid.uuid4().hex[:6]}"
                store = await open_store(f"{args.dsn}?schema={schema}")
                await _load_postgres(args.dsn, schema, rows)
                stores[name] = store
                cleanup.append(functools.partial(_drop, args.dsn, schema))
            load_s[name] = time.perf_counter() - start
        rng = random.Random(5)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in sizes}
        for number in range(args.rounds):
            progress(f"{kind}: round {number + 1}/{args.rounds}")
            for name, count in sizes.items():
                rounds[name].append(await _round(stores[name], count // PER_USER, args.reps, rng))
        medians = {
            name: {op: statistics.median(r[op] for r in rs) for op in rs[0]}
            for name, rs in rounds.items()
        }
        ratios = {op: medians["large"][op] / medians["small"][op] for op in medians["small"]}
        return {"sizes": sizes, "load_s": load_s, "median_s": medians, "large_over_small": ratios}
    finally:
        for store in stores.values():
            await store.close()
        for drop in cleanup:
            await drop()


async def _drop(dsn: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def render(result: Result) -> str:
    meta = result["meta"]
    lines = [
        f"Run: {meta['date']}, `{meta['command']}`, took {meta['seconds']:.0f} s, load average "
        f"before {meta['loadavg'][0]:.2f}. Medians of {meta['rounds']} rounds × {meta['reps']} "
        f"calls per store, stores taking turns; {PER_USER} sessions per user, pages of {PAGE}.",
        "",
        f"| backend | operation | small (ms) | large (ms) | large ÷ small | ≤ {TARGET} |",
        "|---|---|---|---|---|---|",
    ]
    for kind, r in result["backends"].items():
        small, large = r["sizes"]["small"], r["sizes"]["large"]
        for op, ratio in r["large_over_small"].items():
            lines.append(
                f"| {kind} ({small:,} / {large:,} sessions) | `{op}` | "
                f"{r['median_s']['small'][op] * 1000:.3f} | {r['median_s']['large'][op] * 1000:.3f} "
                f"| {ratio:.2f} | {'yes' if ratio <= TARGET else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def claim(result: Result) -> str:
    """The README's catalogue table, txsessions' cell of "page cost independent of store
    size": yes or no per backend, as the committed results say (an inline fragment of
    ``python -m benchmarks.docs``: no trailing newline)."""
    parts = []
    for kind, r in result["backends"].items():
        over = {op: ratio for op, ratio in r["large_over_small"].items() if ratio > TARGET}
        name = _NAMES.get(kind, kind)
        if over:
            missed = ", ".join(f"`{op}`: {ratio:.2f}x" for op, ratio in over.items())
            parts.append(f"no on {name} ({missed})")
        else:
            parts.append(f"yes on {name}")
    sizes = next(iter(result["backends"].values()))["sizes"]
    return (
        "; ".join(parts)
        + f". Measured, not tested: each listing query takes at most {TARGET}x as long in a "
        f"store of {sizes['large']:,} sessions as in one of {sizes['small']:,} "
        f"(`benchmarks/catalogue.py`, run {result['meta']['date']}; every figure in "
        "`benchmarks/results/catalogue.md`)"
    )


def _register() -> None:
    from . import docs

    docs.register("catalogue-claim", "catalogue.json", claim, "python -m benchmarks.catalogue")


async def run(args: argparse.Namespace, progress: Callable[[str], None]) -> Result:
    start = time.perf_counter()
    loadavg = _env.loadavg()
    backends = {kind: await _backend(kind, args, progress) for kind in args.backends}
    return {
        "meta": {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python -m benchmarks.catalogue " + " ".join(args.argv),
            "seconds": time.perf_counter() - start,
            "rounds": args.rounds,
            "reps": args.reps,
            "loadavg": loadavg,
            "machine": _env.machine(),
        },
        "backends": backends,
    }


def main(argv: list[str] | None = None) -> int:
    from ._run import default_dsn

    parser = argparse.ArgumentParser(prog="python -m benchmarks.catalogue", description=__doc__)
    parser.add_argument("--dsn", default=default_dsn(), help="PostgreSQL DSN")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--out", default=RESULTS, help="results path without extension")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(run(args, lambda text: print(text, file=sys.stderr, flush=True)))
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    text = render(result)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    if args.out == RESULTS:  # the committed results: bring the docs' claim up to date
        from . import docs

        docs.update(print)
    return 0


_register()

if __name__ == "__main__":
    raise SystemExit(main())
