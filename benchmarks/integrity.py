"""What the integrity check costs: commit throughput with ``integrity="off"`` against the
default (``"quarantine"``), in the same run; and a limited read with and without its trim.

``python -m benchmarks.integrity [--quick] [--backends sqlite postgres] [--out DIR]``
writes ``integrity.json`` and ``integrity.md`` to ``DIR`` (``benchmarks/results``).

Workloads, each on every backend given, SDK-shaped turns (a user message, a function
call, its output, an assistant message):

* ``transaction``: one commit per turn (the whole turn staged, then ``commit()``); the
  batch answers its own calls, so the check reads nothing.
* ``autocommit``: the SDK's order on an autocommit session, three commits per turn
  (input; model output with the call; tool output and answer): the output's commit
  reads the stored tail to find its call.
* ``core``: the ``transaction`` workload on a backend that stores nothing: the core's
  cost alone, where the check's share is largest.
* ``read``: ``get_items(limit=20)`` over a 200-item history whose window cuts a call
  from its output.

Within a round the modes take turns operation by operation (order alternating), each
on fresh sessions of its own, and each mode's time is summed apart: a slow spell of the
disk falls on both modes alike. The figure per mode is the median round; ``default /
off`` is the median of the rounds' own ratios of throughputs (1.0: no cost; 0.95: 5%
slower). Other processes share the machine: read ratios with the spread of the rounds
(recorded) in mind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from . import _env
from ._report import write_report

MODES = ("off", "quarantine")


def _turn(n: int) -> list[list[dict[str, Any]]]:
    """One turn as the SDK writes it (three writes)."""
    key = f"call_{n}"
    return [
        [{"role": "user", "content": f"question {n}: what is the weather in Paris?"}],
        [
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": key,
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            }
        ],
        [
            {"type": "function_call_output", "call_id": key, "output": '{"temp": 21}'},
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "21 degrees", "annotations": []}],
            },
        ],
    ]


Step = Callable[[int], Awaitable[None]]  # one operation (turn ``n``)


def _transaction_step(store: Any, mode: str) -> Step:
    sids = [f"b-{uuid.uuid4().hex}" for _ in range(8)]

    async def step(n: int) -> None:
        session = store.session(sids[n % len(sids)], integrity=mode)
        for write in _turn(n):
            await session.add_items(write)
        await session.commit()

    return step


def _autocommit_step(store: Any, mode: str) -> Step:
    sids = [f"b-{uuid.uuid4().hex}" for _ in range(8)]

    async def step(n: int) -> None:
        session = store.session(sids[n % len(sids)], integrity=mode, autocommit=True)
        for write in _turn(n):
            await session.add_items(write)

    return step


def _read_step(store: Any, mode: str, sid: str) -> Step:
    session = store.session(sid, integrity=mode)

    async def step(n: int) -> None:
        await session.get_items(limit=20)

    return step


async def _seed(store: Any) -> str:
    """A 200-item history whose latest 20 items start right after a call."""
    sid = f"r-{uuid.uuid4().hex}"
    session = store.session(sid, integrity="off")
    n = 0
    items: list[Any] = []
    while len(items) < 199:
        for write in _turn(n):
            items.extend(write)
        n += 1
    await session.add_items(items[:199] + [{"role": "user", "content": "last"}])
    await session.commit()
    return sid


async def _round(make: Callable[[str], Step], operations: int) -> dict[str, float]:
    """Operations per second of each mode, the modes taking turns operation by
    operation (order alternating), each on fresh sessions of its own: a slow spell of
    the disk falls on both."""
    steps = {mode: make(mode) for mode in MODES}
    spent = dict.fromkeys(MODES, 0.0)
    for n in range(operations):
        for mode in MODES if n % 2 == 0 else tuple(reversed(MODES)):
            start = time.perf_counter()
            await steps[mode](n)
            spent[mode] += time.perf_counter() - start
    return {mode: operations / spent[mode] for mode in MODES}


async def _rounds(make: Callable[[str], Step], operations: int, rounds: int) -> dict[str, Any]:
    """Medians and every round per mode, and the median of the rounds' own ratios."""
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, value in (await _round(make, operations)).items():
            results[mode].append(value)
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    paired = [q / o for q, o in zip(results["quarantine"], results["off"], strict=True)]
    return {
        "per_second": {mode: round(value, 1) for mode, value in medians.items()},
        "rounds": {mode: [round(v, 1) for v in values] for mode, values in results.items()},
        "ratio_of_medians": round(medians["quarantine"] / medians["off"], 4),
        "ratio_default_to_off": round(statistics.median(paired), 4),
    }


async def _open(kind: str, directory: str, dsn: str | None) -> Any:
    if kind == "sqlite":
        from sessions import SQLiteStore

        return await SQLiteStore.open(os.path.join(directory, f"{uuid.uuid4().hex}.db"))
    if kind == "postgres":
        from sessions import PostgresStore

        assert dsn is not None
        return await PostgresStore.open(dsn, schema="bench_integrity")
    from .breakdown import _noop_store

    return _noop_store()


async def _backend(kind: str, directory: str, dsn: str | None, quick: bool) -> dict[str, Any]:
    store = await _open(kind, directory, dsn)
    # Per round and mode: 400 turns on a database (the rounds' ratios spread by about
    # 0.045 at 200: the disk's noise), 2,000 on the core (its spread is under 0.005).
    turns, rounds = (20, 3) if quick else (400, 21)
    if kind == "core":
        turns *= 5
    result: dict[str, Any] = {}
    try:
        result["transaction"] = await _rounds(
            lambda mode: _transaction_step(store, mode), turns, rounds
        )
        if kind != "core":
            result["autocommit"] = await _rounds(
                lambda mode: _autocommit_step(store, mode), turns // 2, rounds
            )
            sid = await _seed(store)
            result["read"] = await _rounds(lambda mode: _read_step(store, mode, sid), turns, rounds)
    finally:
        await store.close()
        if kind == "postgres":
            from ._subjects import pg_schema

            assert dsn is not None
            await pg_schema(dsn, "bench_integrity", drop=True)
    return result


def _markdown(report: dict[str, Any]) -> str:
    from ._report import source_line

    lines = [
        '# Integrity check: commit throughput, `integrity="off"` vs the default',
        "",
        f"{source_line(report)} Command: `python -m benchmarks.integrity`.",
        "",
        f"{report['machine']['date']}, {report['machine']['cpu']}, "
        f"load at start {report['machine']['loadavg_start']}, at end {report['loadavg_end']}"
        f"{' (quick run)' if report['quick'] else ''}.",
        "",
        "| backend | workload | off /s | default /s | default / off |",
        "|---|---|---|---|---|",
        # default / off: the median of the rounds' own ratios (see the note below)
    ]
    for backend, workloads in report["results"].items():
        for name, figures in workloads.items():
            per = figures["per_second"]
            lines.append(
                f"| {backend} | {name} | {per['off']} | {per['quarantine']} | "
                f"{figures['ratio_default_to_off']} |"
            )
    lines += [
        "",
        "Throughputs are medians of rounds (every round in `integrity.json`); within a "
        "round the two modes take turns operation by operation, each timed apart, so a "
        "slow spell of the disk falls on both; `default / off` is the median of the "
        "rounds' own ratios (the ratio of the two medians is in the JSON too). `core` is a "
        "backend that stores nothing (the core's cost alone); `read` is "
        "`get_items(limit=20)` whose window cuts a call from its output (the default "
        "trims it). Target: the check costs under 5% of commit throughput (ratio >= 0.95 "
        "for `transaction` and `autocommit` on SQLite and PostgreSQL).",
        "",
    ]
    return "\n".join(lines)


async def _measure(backends: Sequence[str], dsn: str, quick: bool) -> dict[str, Any]:
    report: dict[str, Any] = {
        "machine": _env.machine(),
        "source": _env.source(),
        "quick": quick,
        "results": {},
    }
    with tempfile.TemporaryDirectory() as directory:
        for kind in backends:
            report["results"][kind] = await _backend(kind, directory, dsn, quick)
            print(kind, json.dumps(report["results"][kind]), file=sys.stderr)
    report["loadavg_end"] = _env.loadavg()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.integrity")
    parser.add_argument("--quick", action="store_true", help="few turns and rounds")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["core", "sqlite", "postgres"],
        choices=["core", "sqlite", "postgres"],
    )
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "results"))
    args = parser.parse_args(argv)
    dsn = os.environ.get("SESSIONS_BENCH_POSTGRES_DSN") or os.environ.get(
        "SESSIONS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    report = asyncio.run(_measure(args.backends, dsn, args.quick))
    write_report(args.out, "integrity", report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
