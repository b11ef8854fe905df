"""Soak: the reliability scenarios, for minutes instead of seconds.

    python -m tests.reliability.soak [--backend sqlite|postgres] [--minutes N | --full]
                                     [--only SCENARIO ...] [--restart] [--no-write]

Runs every scenario of the fast suite in rounds, counts tries and invariant violations,
prints them, and writes them to ``docs/generated/reliability.md`` (figures of other
backends and scenarios already there are kept), from which ``docs/RELIABILITY.md`` and
``README.md`` include them (:mod:`tests.reliability.report`). Each figure names the
command and the commit that measured it.

``--minutes N``: each backend's scenarios share N minutes. ``--full``: each scenario
runs until it reaches at least the counts of the published soak (``FULL``), however
long that takes: ``python -m tests.reliability.soak --full --restart`` is the whole
soak for publication.

What "tries" counts, per scenario: interruptions (cancellations and timeouts) that hit
a running operation; SIGKILLs; commits; items popped; processes; for
``pg_terminate_backend`` only the commit attempts that a termination cut while they
were in flight (their database call failed with a lost connection); for the memory
scenario turns. The notes say how many of the interruptions and kills landed while a
commit was in flight.

``--restart`` (PostgreSQL only) adds one scenario that restarts the server
(``pg_ctlcluster --skip-systemctl-redirect 15 main restart``) while writers commit.
It disturbs everything else using that server: run it on a quiet machine, alone.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from sessions import RetryPolicy
from tests.provision import PROVISIONS

from . import report
from .cancellation import run_sweep
from .harness import Db, new_db, read_history
from .invariant import Ledger, check_history
from .lost_connection import (
    lost_ack_scenario,
    persistent_writer,
    terminate_storm,
    terminate_sweep,
)
from .memory import run_turns
from .processes import concurrent_first_use, concurrent_poppers, concurrent_writers, crash_scenario

#: ``(tries, violations, notes)`` of one round. A round gets the database, a random
#: source, the seconds left in its budget and how many tries are still wanted (``None``
#: when the run is timed).
RoundResult = tuple[int, list[str], dict[str, Any]]
Round = Callable[[Db, random.Random, float, "int | None"], Awaitable[RoundResult]]


@dataclass
class Figure:
    backend: str
    scenario: str
    unit: str
    tries: int = 0
    violations: int = 0
    rounds: int = 0
    seconds: float = 0.0
    command: str = ""
    source: str = ""
    date: str = ""
    notes: dict[str, Any] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- rounds


async def r_cancel(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    stats: dict[str, int] = {}
    results = await run_sweep(db, stats=stats)
    tries = sum(t for t, _ in results.values())
    problems = [f"{name}: {p}" for name, (_, ps) in results.items() for p in ps]
    return tries, problems, {"commit in flight": stats["commit in flight"]}


async def r_crash(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    kills, problems, figures = await crash_scenario(db, 25, seed=rng.randrange(2**32))
    notes = {k: figures[k] for k in ("kills in commit()", "batches confirmed")}
    return kills, problems, notes


async def r_writers(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    commits, problems = await concurrent_writers(db, procs=4, tasks=4, batches=15)
    return commits, problems, {}


async def r_poppers(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    items, problems, figures = await concurrent_poppers(db, procs=4, items=120)
    return items, problems, {"conflicts surfaced": figures["conflicts surfaced"]}


async def r_first_use(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    procs, problems = await concurrent_first_use(db.kind, procs=8)
    return procs, problems, {}


async def r_terminate(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    """Commit attempts cut by a termination while in flight: the sweep's (blocked in
    the server) and the storm's (4 writers, a killer at random moments)."""
    _, sweep_problems, sweep_hits = await terminate_sweep(db)
    count, problems, figures = await terminate_storm(
        db, writers=4, batches=25, seed=rng.randrange(2**32)
    )
    return (
        sweep_hits + figures["commit attempts interrupted"],
        sweep_problems + problems,
        {
            "commits": count,
            "outcome unknown": figures["of which outcome unknown"],
            "backends terminated": figures["backends terminated"],
            "commits that gave up (committed again)": figures["commits that gave up (retried)"],
        },
    )


async def r_lost_ack(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    rounds, problems = await lost_ack_scenario(db, rounds=20)
    return rounds, problems, {}


async def r_memory(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    # tracemalloc makes a turn ~25 ms: a timed run sizes the run to the time left.
    turns = want if want is not None else max(500, min(20_000, int(left / 0.03)))
    figures = await run_turns(db, turns, warmup=200, allowance=256 * 1024)
    return (
        turns,
        figures.problems,
        {
            "held after measured turns (bytes)": figures.growth_bytes,
            "bytes/turn": round(figures.per_turn_bytes, 1),
        },
    )


async def r_restart(db: Db, rng: random.Random, left: float, want: int | None) -> RoundResult:
    """Writers commit while the PostgreSQL server restarts; commits that give up are
    committed again (safe); afterwards nothing is lost or duplicated."""
    store = await db.open(retry=RetryPolicy(attempts=30, initial_delay=0.05, max_delay=1.0))
    sid = f"restart-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    stop = asyncio.Event()

    def more(b: int) -> bool:
        return not stop.is_set() and b < 10_000

    async def until(count: int, at_least: float) -> None:
        """Let the writers go on for ``at_least`` seconds and until ``count`` commits
        (bounded: two minutes, or a writer that stopped)."""
        floor = time.monotonic() + at_least
        for _ in range(int(max(at_least, 120.0) / 0.05)):
            enough = ledger.count() >= count or any(task.done() for task in tasks)
            if enough and time.monotonic() >= floor:
                return
            await asyncio.sleep(0.05)

    # ``want`` (--full): the restart lands halfway through that many commits.
    tasks = [
        asyncio.ensure_future(persistent_writer(store, sid, w, ledger, more, tries=100, pause=0.2))
        for w in range(4)
    ]
    await until((want or 0) // 2, 1.0)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "pg_ctlcluster",
        "--skip-systemctl-redirect",
        "15",
        "main",
        "restart",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    restart_seconds = time.monotonic() - started
    await until(want or 0, 2.0)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    problems = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    gave_up = sum(r for r in results if isinstance(r, int))
    if proc.returncode != 0:
        problems.append(f"restart failed ({proc.returncode}): {err.decode(errors='replace')}")
    problems += check_history(await read_history(db, sid), ledger)
    await store.close()
    return (
        ledger.count(),
        problems,
        {"restart seconds": round(restart_seconds, 2), "commits that gave up": gave_up},
    )


@dataclass(frozen=True)
class Scenario:
    unit: str
    description: str
    round: Round
    weight: float  # share of a timed run's minutes
    #: backend -> tries a ``--full`` run reaches at least (the published soak's counts)
    full: dict[str, int]
    once: bool = False  # one round is the scenario (its size comes from ``want``)


SCENARIOS: dict[str, Scenario] = {
    "cancellation sweep": Scenario(
        "interruptions",
        "cancel / cancel twice / timeout at every suspension point of commit, autocommit "
        "add/pop/clear, staged pop/clear, get_items, and after an unknown outcome",
        r_cancel,
        2.0,
        {"sqlite": 16_637, "postgres": 4_416},
    ),
    "SIGKILL mid-commit": Scenario(
        "kills",
        "child process committing in a loop, SIGKILLed at a random moment; integrity "
        "check + invariant after each kill",
        r_crash,
        3.0,
        {"sqlite": 550, "postgres": 350},
    ),
    "many writers": Scenario(
        "commits",
        "4 processes x 4 tasks, each committing to one shared session and to its own",
        r_writers,
        1.0,
        {"sqlite": 23_520, "postgres": 11_040},
    ),
    "concurrent pop": Scenario(
        "items",
        "4 processes autocommit-pop one session empty: each item exactly once",
        r_poppers,
        1.0,
        {"sqlite": 14_880, "postgres": 10_440},
    ),
    "fresh-database race": Scenario(
        "processes",
        "8 processes open a database/schema that does not exist yet at the same moment",
        r_first_use,
        0.5,
        {"sqlite": 168, "postgres": 88},
    ),
    "pg_terminate_backend": Scenario(
        "commit attempts interrupted",
        "our backends terminated while commits are in flight (blocked in the server), then "
        "at random moments under 4 writers; only attempts whose connection was cut count",
        r_terminate,
        1.5,
        {"postgres": 4_770},
    ),
    "lost acknowledgement": Scenario(
        "commits",
        "a proxy drops the server's answer to a committed write; the retry must not duplicate",
        r_lost_ack,
        0.5,
        {"postgres": 400},
    ),
    "memory": Scenario(
        "turns",
        "Runner.run turns (ScriptedModel) through one process; no Agent/RunResult "
        "retained, tracemalloc flat",
        r_memory,
        1.5,
        {"sqlite": 6_000, "postgres": 6_000},
        once=True,
    ),
    "server restart": Scenario(
        "commits",
        "4 writers commit while the PostgreSQL server restarts",
        r_restart,
        0.5,
        {"postgres": 7_464},
        once=True,
    ),
}


def _merge_notes(fig: Figure, notes: dict[str, Any]) -> None:
    for key, value in notes.items():
        if isinstance(value, (int, float)) and key in fig.notes and "bytes" not in key:
            fig.notes[key] += value
        else:
            fig.notes[key] = value


async def run_scenario(kind: str, name: str, budget: float | None, run: Figure) -> Figure:
    """Rounds of one scenario until ``budget`` seconds are used (``None``: until the
    ``--full`` count is reached)."""
    spec = SCENARIOS[name]
    fig = Figure(kind, name, spec.unit, command=run.command, source=run.source, date=run.date)
    target = spec.full[kind] if budget is None else None
    rng = random.Random()
    start = time.monotonic()
    db = new_db(kind, prefix="txs_soak")
    try:
        while True:
            left = math.inf if budget is None else budget - (time.monotonic() - start)
            want = None if target is None else max(1, target - fig.tries)
            tries, problems, notes = await spec.round(db, rng, left, want)
            fig.rounds += 1
            fig.tries += tries
            fig.violations += len(problems)
            fig.examples += problems[: max(0, 5 - len(fig.examples))]
            _merge_notes(fig, notes)
            if spec.once or tries == 0:
                break
            if target is not None and fig.tries >= target:
                break
            if budget is not None and time.monotonic() - start >= budget:
                break
    except Exception as exc:  # noqa: BLE001 - a crashed scenario is reported, not hidden
        fig.violations += 1
        fig.examples.append(f"scenario crashed: {type(exc).__name__}: {exc}")
    finally:
        await db.drop()
    fig.seconds = round(time.monotonic() - start, 1)
    return fig


async def soak_backend(
    kind: str, minutes: float | None, only: list[str], restart: bool, run: Figure
) -> list[Figure]:
    names = [
        n
        for n, spec in SCENARIOS.items()
        if kind in spec.full and (not only or n in only) and (n != "server restart" or restart)
    ]
    total = sum(SCENARIOS[n].weight for n in names)
    figures: list[Figure] = []
    for name in names:
        budget = None if minutes is None else minutes * 60 * SCENARIOS[name].weight / total
        fig = await run_scenario(kind, name, budget, run)
        figures.append(fig)
        print(
            f"{kind:8} {name:22} {fig.tries:7} {fig.unit:13} violations={fig.violations} "
            f"rounds={fig.rounds} {fig.seconds}s {fig.notes}",
            flush=True,
        )
        for example in fig.examples:
            print(f"    ! {example[:300]}", flush=True)
    return figures


def write_figures(figures: list[Figure]) -> list[str]:
    """Merge ``figures`` into the soak's figures and re-render every document."""
    data = report.load()
    for fig in figures:
        data[f"{fig.backend}/{fig.scenario}"] = asdict(fig)
    return report.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability.soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--backend", choices=["sqlite", "postgres"], action="append", help="default: both"
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, default=5.0, help="per backend (default 5)")
    length.add_argument(
        "--full", action="store_true", help="each scenario until the published counts"
    )
    parser.add_argument(
        "--only", action="append", default=[], choices=list(SCENARIOS), help="only these"
    )
    parser.add_argument(
        "--restart", action="store_true", help="also restart the PostgreSQL server mid-run"
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help=f"do not update {report.TABLE.relative_to(report.REPO)}",
    )
    args = parser.parse_args(argv)
    backends = args.backend or ["sqlite", "postgres"]
    words = sys.argv[1:] if argv is None else argv
    run = Figure(
        "",
        "",
        "",
        command=shlex.join(["python", "-m", "tests.reliability.soak", *words]),
        source=report.source(),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    )
    figures: list[Figure] = []
    for kind in backends:
        problem = PROVISIONS[kind].problem()
        if problem is not None:
            print(f"{kind}: skipped, {problem}")
            continue
        minutes = None if args.full else args.minutes
        figures += asyncio.run(soak_backend(kind, minutes, args.only, args.restart, run))
    if not args.no_write and figures:
        for path in write_figures(figures):
            print(f"updated {path}")
    return 1 if any(f.violations for f in figures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
