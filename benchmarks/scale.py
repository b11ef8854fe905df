"""A PostgreSQL store of a million sessions against one of ten thousand.

``python -m benchmarks.scale`` creates a database of its own (``txs_scale``; dropped at
the end unless ``--keep``), and in it two stores made by ``PostgresStore`` itself: a
small one (10,000 sessions) and a large one (1,000,000 sessions), 20 items per session
in 5 four-item turns. Rows are loaded with ``COPY`` in the order real traffic would
write them (turn 1 of every session, then turn 2, ...; session ids hash-ordered), so
indexes grow by scattered inserts as they would in service; then ``VACUUM ANALYZE``
and ``CHECKPOINT`` (the test cluster runs without autovacuum).

Then, small and large store taking turns: a commit of one 4-item turn into a random
existing session, ``get_items(limit=20)`` of a random session, a ``list_sessions``
page (100 after a random id); once per store: ``prune_batch_records`` of the oldest
10% of batch records and ``purge`` of the oldest 10% of sessions (per row deleted).
Each figure is given as large ÷ small (target: at most 1.5). Table and index bytes per
item come from ``pg_relation_size`` and ``pg_indexes_size``.

Needs about 700 bytes of disk per item for the large store (checked first).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from . import _env
from ._data import TurnSource
from ._subjects import _dumps

Result = dict[str, Any]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "scale.json")
TURNS = 5
ITEMS_PER_TURN = 4
DAYS = 60  # sessions were last updated uniformly over this many days
BYTES_PER_ITEM_NEEDED = 700
CHUNK = 100_000


def session_id(i: int) -> str:
    return "user-" + hashlib.blake2b(i.to_bytes(8, "big"), digest_size=8).hexdigest()


def _ages(count: int, seed: int) -> list[float]:
    """Age in seconds of each session's last update, uniform over ``DAYS``."""
    rng = random.Random(seed)
    return [rng.random() * DAYS * 86400 for _ in range(count)]


# ----------------------------------------------------------------------------- loading


def _turn_time(now: float, age: float, turn: int) -> _dt.datetime:
    # turn TURNS-1 is the last update; earlier turns a minute apart before it
    return _dt.datetime.fromtimestamp(now - age - (TURNS - 1 - turn) * 60, _dt.timezone.utc)


def _rows(count: int, now: float, ages: list[float]) -> Iterator[tuple[str, list[Any]]]:
    """``(table, rows)`` chunks in the order service traffic would write them."""
    texts = [_dumps(turn) for turn in (TurnSource(seed=7).next() for _ in range(64))]
    rng = random.Random(11)
    sessions: list[Any] = []
    for i in range(count):
        sid = session_id(i)
        sessions.append(
            (
                sid,
                _turn_time(now, ages[i], 0),
                _turn_time(now, ages[i], TURNS - 1),
                TURNS * ITEMS_PER_TURN,
                TURNS * ITEMS_PER_TURN + 1,
            )
        )
        if len(sessions) == CHUNK:
            yield "sessions", sessions
            sessions = []
    if sessions:
        yield "sessions", sessions
    for turn in range(TURNS):
        items: list[Any] = []
        batches: list[Any] = []
        for i in range(count):
            sid = session_id(i)
            batch_id = rng.getrandbits(128).to_bytes(16, "big").hex()
            batches.append((sid, batch_id, _turn_time(now, ages[i], turn)))
            for k, text in enumerate(texts[(i + turn) % len(texts)]):
                items.append((sid, turn * ITEMS_PER_TURN + k + 1, batch_id, text))
            if len(items) >= CHUNK:
                yield "items", items
                yield "batches", batches
                items, batches = [], []
        if items:
            yield "items", items
            yield "batches", batches


COLUMNS = {
    "sessions": ("session_id", "created_at", "updated_at", "item_count", "next_seq"),
    "items": ("session_id", "seq", "batch_id", "data"),
    "batches": ("session_id", "batch_id", "committed_at"),
}


async def load(dsn: str, schema: str, count: int, progress: Callable[[str], None]) -> Result:
    """Create the store (our migrations) and load ``count`` sessions; what took how long."""
    import asyncpg  # type: ignore[import-untyped]

    from sessions.postgres import PostgresStore

    store = await PostgresStore.open(dsn, schema=schema, min_size=1, max_size=1)
    await store.close()
    now = time.time()
    ages = _ages(count, seed=count)
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        rows = 0
        for table, chunk in _rows(count, now, ages):
            await conn.copy_records_to_table(
                f"txs_{table}", records=chunk, columns=COLUMNS[table], schema_name=schema
            )
            rows += len(chunk)
            if rows % (CHUNK * 20) < len(chunk):
                progress(f"  {schema}: {rows:,} rows loaded")
        loaded = time.perf_counter() - started
        for table in COLUMNS:
            await conn.execute(f'VACUUM ANALYZE "{schema}"."txs_{table}"')
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return {
        "sessions": count,
        "items": count * TURNS * ITEMS_PER_TURN,
        "batches": count * TURNS,
        "load_s": round(loaded, 1),
        "vacuum_s": round(time.perf_counter() - started - loaded, 1),
        "now": now,
    }


async def sizes(dsn: str, schema: str, items: int) -> Result:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        out: Result = {}
        total = 0
        for table in COLUMNS:
            name = f'"{schema}"."txs_{table}"'
            heap = await conn.fetchval(
                "SELECT pg_relation_size($1::regclass) + "
                "coalesce(pg_relation_size((SELECT reltoastrelid FROM pg_class "
                "WHERE oid = $1::regclass AND reltoastrelid <> 0)), 0)",
                name,
            )
            indexes = await conn.fetchval("SELECT pg_indexes_size($1::regclass)", name)
            out[table] = {"table_bytes": int(heap), "index_bytes": int(indexes)}
            total += int(heap) + int(indexes)
        out["bytes_per_item"] = {
            "items_table": out["items"]["table_bytes"] / items,
            "items_indexes": out["items"]["index_bytes"] / items,
            "all_tables_and_indexes": total / items,
        }
        return out
    finally:
        await conn.close()


# ----------------------------------------------------------------------------- measuring


class Store:
    """One store under test and the ids of its sessions."""

    def __init__(self, name: str, schema: str, count: int) -> None:
        self.name, self.schema, self.count = name, schema, count
        self.store: Any = None
        self.rng = random.Random(count)

    def some_id(self) -> str:
        return session_id(self.rng.randrange(self.count))


async def _timed(n: int, op: Callable[[], Any]) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await op()
        times.append(time.perf_counter() - t0)
    return times


async def _round(s: Store, reps: int, source: TurnSource) -> dict[str, list[float]]:
    async def commit() -> None:
        session = s.store.session(s.some_id())
        await session.add_items(source.next())
        await session.commit()

    async def read() -> None:
        items = await s.store.session(s.some_id()).get_items(20)
        assert len(items) == 20

    async def page() -> None:
        found = await s.store.list_sessions(limit=100, after=s.some_id())
        assert found or s.count < 200

    return {
        "commit": await _timed(reps, commit),
        "get_items_20": await _timed(reps, read),
        "list_sessions_page": await _timed(reps, page),
    }


async def measure(dsn: str, stores: list[Store], reps: int, rounds: int) -> Result:
    from sessions.postgres import PostgresStore

    source = TurnSource(seed=5)
    samples: dict[str, dict[str, list[float]]] = {s.name: {} for s in stores}
    for s in stores:
        s.store = await PostgresStore.open(dsn, schema=s.schema, min_size=1, max_size=2)
    try:
        for s in stores:  # warm-up: connections, prepared statements
            await _round(s, max(5, reps // 20), source)
        for r in range(rounds):
            for s in stores[r % 2 :] + stores[: r % 2]:
                for op, times in (await _round(s, reps, source)).items():
                    samples[s.name].setdefault(op, []).extend(times)
        out: Result = {}
        for s in stores:
            out[s.name] = {
                op: {"median_ms": statistics.median(t) * 1e3, "samples": len(t)}
                for op, t in samples[s.name].items()
            }
            out[s.name]["list_page_buffers"] = await _page_buffers(s, 100)
            out[s.name].update(await _deletes(s))
        return out
    finally:
        for s in stores:
            await s.store.close()


async def _page_buffers(s: Store, pages: int) -> Result:
    """Where a ``list_sessions`` page's blocks come from: PostgreSQL's own buffer cache
    (hit) or outside it (read: the OS page cache or the disk), by ``EXPLAIN (ANALYZE,
    BUFFERS)`` of the store's own listing statement on ``pages`` random pages."""
    sql = s.store.backend._sql.list
    hit = read = 0
    async with s.store.pool.acquire() as conn:
        shared_buffers = str(await conn.fetchval("SHOW shared_buffers"))
        for _ in range(pages):
            plan = await conn.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", s.some_id(), 100
            )
            top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            hit += int(top["Shared Hit Blocks"])
            read += int(top["Shared Read Blocks"])
    return {
        "pages": pages,
        "shared_buffers": shared_buffers,
        "hit_per_page": hit / pages,
        "read_per_page": read / pages,
    }


async def _deletes(s: Store) -> Result:
    """prune then purge, each of the oldest tenth (destructive: once per store)."""
    cutoff = timedelta(days=DAYS * 0.9)
    t0 = time.perf_counter()
    pruned = await s.store.prune_batch_records(older_than=cutoff)
    prune_s = time.perf_counter() - t0
    before = await _server_counters(s)
    t0 = time.perf_counter()
    purged = await s.store.purge(cutoff)
    purge_s = time.perf_counter() - t0
    after = await _server_counters(s)
    items = sum(info.item_count for info in purged)
    return {
        "prune": {"rows": pruned, "seconds": prune_s, "us_per_row": prune_s * 1e6 / max(pruned, 1)},
        "purge": {
            "sessions": len(purged),
            "items": items,
            "seconds": purge_s,
            "us_per_session": purge_s * 1e6 / max(len(purged), 1),
            "us_per_item": purge_s * 1e6 / max(items, 1),
            "wal_bytes_per_item": (after["wal"] - before["wal"]) / max(items, 1),
            "checkpoints": after["checkpoints"] - before["checkpoints"],
            "blocks_read_per_item": (after["read"] - before["read"]) / max(items, 1),
        },
    }


async def _server_counters(s: Store) -> dict[str, int]:
    """WAL position, checkpoints so far and blocks read from outside PostgreSQL's buffer
    cache in this database: what a purge costs the engine."""
    async with s.store.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal, "
            "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) AS checkpoints, "
            "(SELECT blks_read FROM pg_stat_database WHERE datname = current_database()) AS read"
        )
    return {
        "wal": int(row["wal"]),
        "checkpoints": int(row["checkpoints"]),
        "read": int(row["read"]),
    }


# ----------------------------------------------------------------------------- run


async def _database(admin_dsn: str, name: str, *, create: bool) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        if create:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _data_directory(admin_dsn: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        return str(await conn.fetchval("SHOW data_directory"))
    finally:
        await conn.close()


def _with_database(dsn: str, name: str) -> str:
    base, _, query = dsn.partition("?")
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}" + (f"?{query}" if query else "")


def _check_disk(directory: str, needed: int) -> None:
    """Refuse to start without room for the large store (when the server is local)."""
    if not os.path.isdir(directory):
        return
    free = shutil.disk_usage(directory).free
    if free < needed * 1.2:
        raise SystemExit(
            f"not enough disk under {directory}: {free / 2**30:.1f} GiB free, "
            f"about {needed / 2**30:.1f} GiB needed"
        )


async def run(args: argparse.Namespace, progress: Callable[[str], None]) -> Result:
    directory = await _data_directory(args.dsn)
    _check_disk(directory, args.sessions * TURNS * ITEMS_PER_TURN * BYTES_PER_ITEM_NEEDED)
    started = time.perf_counter()
    result: Result = {
        "meta": {
            "command": "python -m benchmarks.scale " + " ".join(sys.argv[1:]),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "source": _env.source(),
            "machine": _env.machine(),
            "disk": _env.local_disk(directory),
            "reps": args.reps,
            "rounds": args.rounds,
        }
    }
    db = _with_database(args.dsn, args.database)
    await _database(args.dsn, args.database, create=True)
    try:
        stores = [
            Store("small", "scale_small", args.small),
            Store("large", "scale_large", args.sessions),
        ]
        result["loaded"] = {}
        result["sizes"] = {}
        for s in stores:
            progress(f"scale: loading {s.count:,} sessions into {s.schema}")
            result["loaded"][s.name] = await load(db, s.schema, s.count, progress)
            result["sizes"][s.name] = await sizes(db, s.schema, s.count * TURNS * ITEMS_PER_TURN)
        progress("scale: measuring")
        result["measured"] = await measure(db, stores, args.reps, args.rounds)
    finally:
        if not args.keep:
            await _database(args.dsn, args.database, create=False)
    result["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    result["ratios"] = ratios(result)
    return result


def ratios(result: Result) -> Result:
    small, large = result["measured"]["small"], result["measured"]["large"]
    out = {
        op: large[op]["median_ms"] / small[op]["median_ms"]
        for op in ("commit", "get_items_20", "list_sessions_page")
    }
    out["prune_per_row"] = large["prune"]["us_per_row"] / small["prune"]["us_per_row"]
    out["purge_per_item"] = large["purge"]["us_per_item"] / small["purge"]["us_per_item"]
    return out


# ----------------------------------------------------------------------------- docs


def render(result: Result) -> str:
    from ._report import _table, source_line

    meta = result["meta"]
    small, large = result["measured"]["small"], result["measured"]["large"]
    ls, ll = result["loaded"]["small"], result["loaded"]["large"]
    r = result["ratios"]

    def ms(entry: Result) -> str:
        return f"{entry['median_ms']:.2f}"

    def verdict(x: float) -> str:
        return f"{x:.2f}x" + ("" if x <= 1.5 else " (**over 1.5**)")

    rows = [
        [
            "commit of one 4-item turn (ms, median)",
            ms(small["commit"]),
            ms(large["commit"]),
            verdict(r["commit"]),
        ],
        [
            "`get_items(limit=20)` (ms)",
            ms(small["get_items_20"]),
            ms(large["get_items_20"]),
            verdict(r["get_items_20"]),
        ],
        [
            "`list_sessions` page of 100 (ms)",
            ms(small["list_sessions_page"]),
            ms(large["list_sessions_page"]),
            verdict(r["list_sessions_page"]),
        ],
        [
            "`prune_batch_records`, oldest tenth (µs per record)",
            f"{small['prune']['us_per_row']:.1f} ({small['prune']['rows']:,} rows)",
            f"{large['prune']['us_per_row']:.1f} ({large['prune']['rows']:,} rows)",
            verdict(r["prune_per_row"]),
        ],
        [
            "`purge`, oldest tenth (µs per item)",
            f"{small['purge']['us_per_item']:.1f} ({small['purge']['sessions']:,} sessions)",
            f"{large['purge']['us_per_item']:.1f} ({large['purge']['sessions']:,} sessions)",
            verdict(r["purge_per_item"]),
        ],
    ]
    sz = result["sizes"]["large"]["bytes_per_item"]
    lines = [
        f"Run: {meta['date']}, `{meta['command']}`, took {meta['seconds']:.0f} s. "
        f"{source_line(meta)} Stores: {ls['sessions']:,} sessions ({ls['items']:,} items) "
        f"and {ll['sessions']:,} sessions ({ll['items']:,} items), loaded with COPY in "
        f"{ls['load_s']:.0f} s and {ll['load_s']:.0f} s. Medians of {meta['rounds']} rounds × "
        f"{meta['reps']} operations per store, stores taking turns.",
        "",
    ]
    lines += _table(
        [
            "operation",
            f"{ls['sessions']:,} sessions",
            f"{ll['sessions']:,} sessions",
            "large ÷ small",
        ],
        rows,
    )
    buffers = [small.get("list_page_buffers"), large.get("list_page_buffers")]
    if all(buffers):
        bs, bl = buffers
        lines += [
            "",
            f"Where a `list_sessions` page's blocks come from (`EXPLAIN (ANALYZE, BUFFERS)` of "
            f"the store's listing statement, {bl['pages']} random pages per store, "
            f"`shared_buffers` = {bl['shared_buffers']}): small store {bs['hit_per_page']:.1f} "
            f"blocks from PostgreSQL's buffer cache and {bs['read_per_page']:.1f} read from "
            f"outside it per page; large store {bl['hit_per_page']:.1f} and "
            f"{bl['read_per_page']:.1f}.",
        ]
    ps, pl = small["purge"], large["purge"]
    if "wal_bytes_per_item" in pl:
        lines += [
            "",
            f"What `purge` cost the engine, per item deleted: WAL {ps['wal_bytes_per_item']:,.0f} "
            f"bytes (small store) and {pl['wal_bytes_per_item']:,.0f} (large); blocks read from "
            f"outside PostgreSQL's buffer cache {ps['blocks_read_per_item']:.2f} and "
            f"{pl['blocks_read_per_item']:.2f}; checkpoints during it {ps['checkpoints']} and "
            f"{pl['checkpoints']}.",
        ]
    lines += [
        "",
        f"Bytes per item in the large store: items table {sz['items_table']:.0f}, its "
        f"indexes {sz['items_indexes']:.0f}; all tables and indexes together "
        f"{sz['all_tables_and_indexes']:.0f} (items are {_item_bytes()} bytes of JSON on "
        "average).",
    ]
    return "\n".join(lines) + "\n"


def _item_bytes() -> str:
    from ._data import item_bytes

    return f"{item_bytes():.0f}"


def _register() -> None:
    from . import docs

    docs.register("scale", "scale.json", render, "python -m benchmarks.scale")


_register()


def main(argv: list[str] | None = None) -> int:
    from ._run import default_dsn

    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--dsn", default=default_dsn(), help="a superuser DSN of the server")
    parser.add_argument("--database", default="txs_scale", help="created, then dropped")
    parser.add_argument("--sessions", type=int, default=1_000_000, help="the large store")
    parser.add_argument("--small", type=int, default=10_000, help="the small store")
    parser.add_argument("--reps", type=int, default=300, help="operations per round and kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--out", help="results file (default: benchmarks/results/scale.json)")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    result = asyncio.run(run(args, progress))
    out = args.out or RESULTS
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1, default=str)
    print(render(result))
    if out == RESULTS:
        from . import docs

        docs.update(progress)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
