"""How long ``sessions doctor`` takes on a SQLite store of 10,000 sessions.

``python -m benchmarks.doctor [--sessions N] [--rounds R] [--out FILE]`` writes a store
with bulk SQL through the backend's own schema (a 4-item tool-call turn per session;
every 100th session also holds an orphan tool output), then times, in this process:
the scan (:func:`sessions._tools.doctor.check_store`, best and median of ``rounds``), the
repair (once: it moves 1% of the sessions' orphans into their quarantine) and the scan
of the repaired store; and ``python -m sessions doctor --json`` as a child process
(wall time, interpreter start included). Figures go to
``benchmarks/results/doctor.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import _env

RESULTS = os.path.join(_env.REPO_ROOT, "benchmarks", "results", "doctor.json")
ORPHAN_EVERY = 100


def _rows(i: int) -> list[str]:
    items: list[Any] = [
        {"role": "user", "content": f"weather {i}?"},
        {"type": "function_call", "name": "weather", "arguments": "{}", "call_id": f"c{i}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": "sunny"},
        {"type": "message", "role": "assistant", "id": f"m{i}", "content": "It is sunny."},
    ]
    if i % ORPHAN_EVERY == 0:
        items.insert(3, {"type": "function_call_output", "call_id": "lost", "output": "?"})
    return [json.dumps(item, separators=(",", ":")) for item in items]


async def build(path: str, sessions: int) -> int:
    """A store of ``sessions`` sessions; returns how many rows it holds."""
    from sessions import open_store

    store = await open_store(f"sqlite:///{path}")
    await store.close()
    now = time.time()
    data = {f"s-{i:06d}": _rows(i) for i in range(sessions)}
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO txs_sessions (session_id, created_at, updated_at, item_count, next_seq) "
            "VALUES (?, ?, ?, ?, ?)",
            ((sid, now, now, len(rows), len(rows) + 1) for sid, rows in data.items()),
        )
        conn.executemany(
            "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES (?, ?, 'seed', ?)",
            ((sid, k, text) for sid, rows in data.items() for k, text in enumerate(rows, 1)),
        )
    conn.close()
    return sum(len(rows) for rows in data.values())


async def _scan(url: str, repair: bool = False) -> tuple[float, int]:
    from sessions import open_store
    from sessions._tools.doctor import check_store

    store = await open_store(url, create=False)
    try:
        started = time.perf_counter()
        problems = 0
        async for check in check_store(store, repair=repair):
            problems += len(check.problems)
        return time.perf_counter() - started, problems
    finally:
        await store.close()


def _cli(url: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sessions", "doctor", "--json", "--db", url],
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.decode(errors="replace"))
    return elapsed


async def measure(sessions: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "doctor.db")
        rows = await build(path, sessions)
        url = f"sqlite:///{path}"
        scans = [await _scan(url) for _ in range(rounds)]
        seconds = [elapsed for elapsed, _ in scans]
        cli_seconds = _cli(url)
        repair_seconds, repaired = await _scan(url, repair=True)
        clean_seconds, left = await _scan(url)
    return {
        "sessions": sessions,
        "rows": rows,
        "problems_found": scans[0][1],
        "scan_seconds_best": round(min(seconds), 3),
        "scan_seconds_median": round(statistics.median(seconds), 3),
        "scan_sessions_per_second": round(sessions / min(seconds)),
        "cli_scan_seconds": round(cli_seconds, 3),
        "repair_seconds": round(repair_seconds, 3),
        "problems_repaired": repaired,
        "scan_after_repair_seconds": round(clean_seconds, 3),
        "problems_after_repair": left,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.doctor", description=__doc__)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=RESULTS, help="JSON file to write ('-': stdout only)")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.sessions, args.rounds))
    result = {
        "benchmark": "doctor",
        "backend": "sqlite",
        "machine": _env.machine(),
        "source": _env.source(),
        **figures,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out != "-":
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


def claim(result: dict[str, Any]) -> str:
    """docs/cli.md's sentence on how long a scan takes, as the committed results say (an
    inline fragment of ``python -m benchmarks.docs``: no trailing newline)."""
    source = result.get("source") or {}
    commit = str(source.get("commit", "unknown"))[:12]
    machine = result["machine"]
    return (
        f"a SQLite store of {result['sessions']:,} sessions ({result['rows']:,} rows) was "
        f"checked in {result['scan_seconds_best']:.2f} s at best and "
        f"{result['scan_seconds_median']:.2f} s as the median of the scans in one process, "
        f"{result['cli_scan_seconds']:.2f} s as `python -m sessions doctor --json` "
        f"(interpreter start included), on a {machine['cores']}-core machine "
        f"(`python -m benchmarks.doctor`, run {machine['date']} at commit `{commit}`; "
        "`benchmarks/results/doctor.json`)"
    )


def _register() -> None:
    from . import docs

    docs.register("doctor-speed", "doctor.json", claim, "python -m benchmarks.doctor")


_register()

if __name__ == "__main__":
    sys.exit(main())
