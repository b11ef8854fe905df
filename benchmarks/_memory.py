"""(e) Memory: run in a fresh process so nothing else skews the figures.

``python -m benchmarks._memory --backend sqlite --turns 10000 --warmup 1000`` prints
one JSON object:

* RSS growth over ``turns`` turns after ``warmup`` turns (no tracing),
* tracemalloc growth over the same number of turns after a traced warm-up, with the
  lines that grew most,
* how many ``Agent`` objects survive ``Runner.run`` turns (``agents.testing.ScriptedModel``,
  offline) once the caller dropped them: must be 0.

Each turn is what a server does per request: take ``store.session(sid)`` (a new,
cheap session object), read the last 20 items, stage four items, commit, drop the
session. Sessions rotate over ``--sessions`` ids.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
import tracemalloc
import weakref
from typing import Any

import psutil  # type: ignore[import-untyped]

from ._data import TurnSource


async def _open_store(args: argparse.Namespace, directory: str) -> Any:
    if args.backend == "sqlite":
        from sessions import SQLiteStore

        return await SQLiteStore.open(os.path.join(directory, "memory.db"))
    from sessions.postgres import PostgresStore

    return await PostgresStore.open(args.dsn, schema=args.schema, min_size=2, max_size=4)


async def _turns(store: Any, source: TurnSource, n: int, sessions: int, offset: int) -> None:
    for i in range(n):
        session = store.session(f"mem-{(offset + i) % sessions}")
        await session.get_items(20)
        await session.add_items(source.next())
        await session.commit()
        del session


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def _agent_check(store: Any, runs: int) -> dict[str, Any]:
    """Run tool-using turns through ``Runner.run``; count Agents still alive after."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"Sunny in {city}, 21C"

    refs: list[weakref.ref[Any]] = []
    models: list[weakref.ref[Any]] = []

    async def one(i: int) -> int:
        model = ScriptedModel(
            [
                [function_call("get_weather", {"city": "Lisbon"}, call_id=f"call_{i}")],
                [assistant_message(f"It is sunny (run {i}).")],
            ]
        )
        agent = Agent(name=f"bench-{i}", instructions="Answer.", model=model, tools=[get_weather])
        refs.append(weakref.ref(agent))
        models.append(weakref.ref(model))
        session = store.session(f"agent-{i % 3}")
        result = await Runner.run(agent, f"Weather in Lisbon? ({i})", session=session)
        await session.commit()
        stored = len(await session.get_items())
        del result, session, agent, model
        return stored

    stored = 0
    for i in range(runs):
        stored = await one(i)
    # each run stores 4 items: user message, function_call, its output, the answer
    expected = 4 * len(range((runs - 1) % 3, runs, 3))
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    holders: list[str] = []
    for agent in alive[:1]:
        holders = [type(ref).__name__ for ref in gc.get_referrers(agent)][:10]
    return {
        "runs": runs,
        "agents_alive": len(alive),
        "models_alive": sum(1 for r in models if r() is not None),
        "items_in_last_session": stored,
        "expected_items_in_last_session": expected,
        "alive_referrers": holders,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    source = TurnSource(size=128, seed=9)
    with tempfile.TemporaryDirectory(prefix="txs-bench-mem-") as directory:
        store = await _open_store(args, directory)
        try:
            # Pass 1: RSS, no tracing.
            await _turns(store, source, args.warmup, args.sessions, 0)
            rss0 = _rss()
            t0 = time.perf_counter()
            await _turns(store, source, args.turns, args.sessions, args.warmup)
            seconds = time.perf_counter() - t0
            rss1 = _rss()
            # Pass 2: tracemalloc over the same number of turns, after a traced warm-up.
            tracemalloc.start(5)
            await _turns(store, source, args.warmup, args.sessions, 0)
            gc.collect()
            snap0 = tracemalloc.take_snapshot()
            cur0, _ = tracemalloc.get_traced_memory()
            await _turns(store, source, args.turns, args.sessions, args.warmup)
            gc.collect()
            cur1, peak = tracemalloc.get_traced_memory()
            snap1 = tracemalloc.take_snapshot()
            tracemalloc.stop()
            top = [
                {
                    "where": str(stat.traceback[0]),
                    "size_diff": stat.size_diff,
                    "count_diff": stat.count_diff,
                }
                for stat in snap1.compare_to(snap0, "lineno")[:5]
            ]
            del snap0, snap1
            agent = await _agent_check(store, args.agent_runs)
        finally:
            await store.close()
    return {
        "backend": args.backend,
        "turns": args.turns,
        "warmup": args.warmup,
        "sessions": args.sessions,
        "turns_per_s_untraced": args.turns / seconds,
        "rss_start_mb": rss0 / 2**20,
        "rss_end_mb": rss1 / 2**20,
        "rss_growth_mb": (rss1 - rss0) / 2**20,
        "traced_growth_mb": (cur1 - cur0) / 2**20,
        "traced_peak_mb": peak / 2**20,
        "traced_top": top,
        "agent": agent,
    }


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._memory")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--agent-runs", type=int, default=30)
    parser.add_argument("--dsn", default="")
    parser.add_argument("--schema", default="")
    args = parser.parse_args(argv)
    result = asyncio.run(main(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
