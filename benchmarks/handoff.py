"""Where the wall time of one SQLite commit goes, between the event loop and the worker.

``python -m benchmarks.handoff [--quick] [--out DIR]`` writes ``handoff.json`` and
``handoff.md`` to ``DIR`` (``benchmarks/results``).

One session, one commit per turn (4 items): our ``SQLiteStore`` against the one-hop
aiosqlite floor writing the same rows (``RawAiosqliteOneHopSame`` of the main run), in
rounds that alternate their order. Every turn is cut at six instants, stamped with
``time.perf_counter()``: the items staged (ours: ``add_items`` returned; the floor: its
rows encoded); the job handed to the worker thread; the transaction function starting
and ending there; the call that waited for it returning on the event loop's thread; the
turn returning. The phases:

* **staging**: ours ``add_items`` (validate, encode, stage); the floor encodes its rows.
* **commit, up to the hop**: ours ``commit()`` up to the job queued for the worker (lock,
  seal, history rules, write marks, the group); the floor: nothing (its call makes its
  future and queues the job within the next phase).
* **to the worker**: job queued to transaction started. The worker thread's wake-up,
  plus whatever the event loop's thread still does before it lets go of the GIL.
* **transaction**: the transaction function on the worker thread (same statements, same
  ``synchronous=FULL`` fsync for both).
* **back to the loop**: transaction ended to the waiting call returning on the event
  loop's thread (ours: ``SQLiteBackend.apply``; the floor: aiosqlite's call). The wake-up
  of the loop's thread and the steps that hand the outcome to the waiting coroutine.
* **after**: the rest of the turn (ours: the outcome recorded, the staging settled, the
  lock released; the floor: nothing).

Each phase is the median over a round's turns, then the median of rounds; the phases'
medians need not add up to the total's. The main thread's CPU time per turn
(``time.thread_time``) is given beside. The stamps come from wrappers this command puts
around the worker's queue, the transaction functions and our backend's ``apply`` for
its own run (ours: ``sessions.sqlite.worker.Worker.submit``,
``sessions.sqlite.group.apply_group`` and ``sessions.sqlite.SQLiteBackend.apply``;
restored after): a few tenths of a microsecond per stamp, and one coroutine frame
around our ``apply``.
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
from collections.abc import Callable, Sequence
from typing import Any

from . import _env
from ._data import TurnSource
from ._report import source_line, write_report
from ._subjects import OursSQLite, RawAiosqliteOneHopSame, _dumps, _same_work_sqlite

PHASES = (
    "staging",
    "commit, up to the hop",
    "to the worker",
    "transaction",
    "back to the loop",
    "after",
    "total",
)
SUBJECTS = ("ours", "floor")


class _Stamps:
    """The instants of the turn in flight (one turn at a time)."""

    def __init__(self) -> None:
        self.staged = self.queued = self.started = self.ended = self.returned = 0.0


def _timed(stamps: _Stamps, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (run on the worker thread) with its start and end stamped."""

    def run(*args: Any) -> Any:
        stamps.started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            stamps.ended = time.perf_counter()

    return run


def _phases(t0: float, stamps: _Stamps, t1: float) -> tuple[float, ...]:
    return (
        stamps.staged - t0,
        stamps.queued - stamps.staged,
        stamps.started - stamps.queued,
        stamps.ended - stamps.started,
        stamps.returned - stamps.ended,
        t1 - stamps.returned,
        t1 - t0,
    )


async def _measure(turns: int, rounds: int, directory: str) -> dict[str, Any]:
    import sessions.sqlite as sqlite_module
    import sessions.sqlite.group as group_module
    import sessions.sqlite.worker as worker_module

    stamps = _Stamps()
    ours = OursSQLite(os.path.join(directory, "ours.db"))
    floor = RawAiosqliteOneHopSame(os.path.join(directory, "floor.db"))
    await ours.open()
    await floor.open()
    session = ours._session("s")
    floor_tx = _timed(stamps, _same_work_sqlite)

    async def our_turn(items: list[dict[str, Any]]) -> None:
        await session.add_items(items)
        stamps.staged = time.perf_counter()
        await session.commit()

    async def floor_turn(items: list[dict[str, Any]]) -> None:
        texts = _dumps(items)
        stamps.staged = time.perf_counter()
        conn = floor.conn
        stamps.queued = time.perf_counter()
        await conn._execute(floor_tx, conn._conn, "s", texts)
        stamps.returned = time.perf_counter()

    submit = worker_module.Worker.submit
    apply_group = group_module.apply_group
    apply = sqlite_module.SQLiteBackend.apply

    def stamped_submit(self: Any, job: Any) -> None:
        stamps.queued = time.perf_counter()
        submit(self, job)

    async def stamped_apply(self: Any, session_id: str, batches: Any) -> None:
        try:
            await apply(self, session_id, batches)
        finally:
            stamps.returned = time.perf_counter()

    run = {"ours": our_turn, "floor": floor_turn}
    samples: dict[str, list[list[float]]] = {s: [[] for _ in PHASES] for s in SUBJECTS}
    cpu: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    source = TurnSource(seed=11)
    worker_module.Worker.submit = stamped_submit  # type: ignore[method-assign]
    group_module.apply_group = _timed(stamps, apply_group)
    sqlite_module.SQLiteBackend.apply = stamped_apply  # type: ignore[method-assign]
    try:
        for name in SUBJECTS:  # warm-up
            for _ in range(max(3, turns // 10)):
                await run[name](source.next())
        for r in range(rounds):
            for name in SUBJECTS if r % 2 == 0 else SUBJECTS[::-1]:
                per: list[list[float]] = [[] for _ in PHASES]
                c0 = time.thread_time()
                for _ in range(turns):
                    items = source.next()
                    t0 = time.perf_counter()
                    await run[name](items)
                    t1 = time.perf_counter()
                    for i, value in enumerate(_phases(t0, stamps, t1)):
                        per[i].append(value)
                cpu[name].append((time.thread_time() - c0) / turns)
                for i, values in enumerate(per):
                    samples[name][i].append(statistics.median(values))
    finally:
        worker_module.Worker.submit = submit  # type: ignore[method-assign]
        group_module.apply_group = apply_group
        sqlite_module.SQLiteBackend.apply = apply  # type: ignore[method-assign]
        await ours.close()
        await floor.close()
    return {
        name: {
            "phases_us": {
                phase: round(statistics.median(samples[name][i]) * 1e6, 1)
                for i, phase in enumerate(PHASES)
            },
            "rounds_us": {
                phase: [round(v * 1e6, 1) for v in samples[name][i]]
                for i, phase in enumerate(PHASES)
            },
            "main_thread_cpu_us": round(statistics.median(cpu[name]) * 1e6, 1),
        }
        for name in SUBJECTS
    }


def _markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    machine = report["machine"]
    lines = [
        "# One SQLite commit, phase by phase: ours against the one-hop floor",
        "",
        f"{source_line(report)} Command: `python -m benchmarks.handoff`.",
        "",
        f"{machine['date']}, {machine['cpu']}, SQLite {machine['sqlite']}, load at start "
        f"{machine['loadavg_start']}, at end {report['loadavg_end']}; one session, 4 items "
        f"per commit, {report['turns']} turns per round, median of {report['rounds']} rounds"
        f"{' (quick run)' if report['quick'] else ''}.",
        "",
        "| phase (µs per turn) | ours | floor | ours − floor |",
        "|---|---|---|---|",
    ]
    for phase in PHASES:
        a = results["ours"]["phases_us"][phase]
        b = results["floor"]["phases_us"][phase]
        lines.append(f"| {phase} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    a = results["ours"]["main_thread_cpu_us"]
    b = results["floor"]["main_thread_cpu_us"]
    lines += [
        f"| main thread CPU (not a phase) | {a:.1f} | {b:.1f} | {a - b:+.1f} |",
        "",
        "Phases: *staging* ends when `add_items` returns (the floor: its rows encoded); "
        "*commit, up to the hop* when the job is queued for the worker thread; *to the "
        "worker* when its transaction function starts; *transaction* is that function "
        "(same rows, same fsync); *back to the loop* ends when the call that waited for it "
        "returns on the event loop's thread (ours: the backend's `apply`); *after* when the "
        "turn returns. Every round is in `handoff.json`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handoff")
    parser.add_argument("--quick", action="store_true", help="few turns and rounds")
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "results"))
    args = parser.parse_args(argv)
    turns, rounds = (50, 2) if args.quick else (400, 11)
    report: dict[str, Any] = {
        "machine": _env.machine(),
        "source": _env.source(),
        "quick": args.quick,
        "turns": turns,
        "rounds": rounds,
    }
    with tempfile.TemporaryDirectory() as directory:
        report["results"] = asyncio.run(_measure(turns, rounds, directory))
    report["loadavg_end"] = _env.loadavg()
    print(json.dumps(report["results"], indent=1), file=sys.stderr)
    write_report(args.out, "handoff", report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
