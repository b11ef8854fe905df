"""Soak: the reliability scenarios, for minutes instead of seconds.

    python -m tests.reliability.soak [--backend sqlite|postgres] [--minutes N]
                                     [--only SCENARIO ...] [--restart] [--no-write]

Runs every scenario of the fast suite in rounds until its share of ``--minutes``
(per backend) is used up, counts tries and invariant violations, prints them, and
writes them to ``docs/RELIABILITY.md`` (between the soak markers; figures of other
backends and scenarios already there are kept) with the command that reproduces each.

``--restart`` (PostgreSQL only) adds one scenario that restarts the server
(``pg_ctlcluster --skip-systemctl-redirect 15 main restart``) while writers commit.
It disturbs everything else using that server: run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
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
from sessions.errors import CommitError

from .cancellation import run_sweep
from .harness import REPO, Db, new_db, pg_execute, read_history
from .invariant import Ledger, check_history, make_batch
from .lost_connection import lost_ack_scenario, terminate_storm, terminate_sweep
from .memory import run_turns
from .processes import concurrent_first_use, concurrent_poppers, concurrent_writers, crash_scenario

DOC = REPO / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"
DATA = re.compile(r"<!-- soak-data (.*?) -->", re.S)

Round = Callable[[Db, random.Random, float], Awaitable[tuple[int, list[str], dict[str, Any]]]]


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
    date: str = ""
    notes: dict[str, Any] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- rounds


async def r_cancel(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    results = await run_sweep(db)
    tries = sum(t for t, _ in results.values())
    problems = [f"{name}: {p}" for name, (_, ps) in results.items() for p in ps]
    return tries, problems, {}


async def r_crash(db: Db, rng: random.Random, left: float) -> tuple[int, list[str], dict[str, Any]]:
    kills, problems, figures = await crash_scenario(db, 25, seed=rng.randrange(2**32))
    return kills, problems, {"batches confirmed": figures["batches confirmed"]}


async def r_writers(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    commits, problems = await concurrent_writers(db, procs=4, tasks=4, batches=15)
    return commits, problems, {}


async def r_poppers(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    items, problems, figures = await concurrent_poppers(db, procs=4, items=120)
    return items, problems, {"conflicts surfaced": figures["conflicts surfaced"]}


async def r_first_use(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    procs, problems = await concurrent_first_use(db.kind, procs=8)
    return procs, problems, {}


async def r_terminate(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    sweep_tries, sweep_problems = await terminate_sweep(db)
    count, problems, figures = await terminate_storm(
        db, writers=4, batches=25, seed=rng.randrange(2**32)
    )
    return (
        count + sweep_tries,
        sweep_problems + problems,
        {
            "backends terminated": figures["backends terminated"],
            "commits that gave up": figures["commits that gave up (retried)"],
        },
    )


async def r_lost_ack(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    rounds, problems = await lost_ack_scenario(db, rounds=20)
    return rounds, problems, {}


async def r_memory(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    # tracemalloc makes a turn ~25 ms: size the run to the time left.
    turns = max(500, min(20_000, int(left / 0.03)))
    figures = await run_turns(db, turns, warmup=200, allowance=256 * 1024)
    return (
        turns,
        figures.problems,
        {
            "held after measured turns (bytes)": figures.growth_bytes,
            "bytes/turn": round(figures.per_turn_bytes, 1),
        },
    )


async def r_restart(
    db: Db, rng: random.Random, left: float
) -> tuple[int, list[str], dict[str, Any]]:
    """Writers commit while the PostgreSQL server restarts; commits that give up are
    committed again (safe); afterwards nothing is lost or duplicated."""
    store = await db.open(retry=RetryPolicy(attempts=30, initial_delay=0.05, max_delay=1.0))
    sid = f"restart-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    gave_up = 0
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        nonlocal gave_up
        s = store.session(sid)
        b = 0
        while not stop.is_set() and b < 10_000:
            await s.add_items(make_batch(w, b))
            for _ in range(100):
                try:
                    await s.commit()
                    break
                except CommitError:
                    gave_up += 1
                    await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"writer {w}: batch {b} never committed")
            ledger.confirm(w, b)
            b += 1
        await s.close()

    tasks = [asyncio.ensure_future(writer(w)) for w in range(4)]
    await asyncio.sleep(1.0)
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
    await asyncio.sleep(2.0)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    problems = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    if proc.returncode != 0:
        problems.append(f"restart failed ({proc.returncode}): {err.decode(errors='replace')}")
    problems += check_history(await read_history(db, sid), ledger)
    await store.close()
    return (
        ledger.count(),
        problems,
        {"restart seconds": round(restart_seconds, 2), "commits that gave up": gave_up},
    )


SCENARIOS: dict[str, tuple[str, str, Round, float, tuple[str, ...]]] = {
    # name: (unit of "tries", description, round, weight, backends)
    "cancellation sweep": (
        "interruptions",
        "cancel / cancel twice / timeout at every suspension point of commit, autocommit add/pop/clear, staged pop/clear, get_items, and after an unknown outcome",
        r_cancel,
        2.0,
        ("sqlite", "postgres"),
    ),
    "SIGKILL mid-commit": (
        "kills",
        "child process committing in a loop, SIGKILLed at a random moment; integrity check + invariant after each kill",
        r_crash,
        3.0,
        ("sqlite", "postgres"),
    ),
    "many writers": (
        "commits",
        "4 processes x 4 tasks, each committing to one shared session and to its own",
        r_writers,
        1.0,
        ("sqlite", "postgres"),
    ),
    "concurrent pop": (
        "items",
        "4 processes autocommit-pop one session empty: each item exactly once",
        r_poppers,
        1.0,
        ("sqlite", "postgres"),
    ),
    "fresh-database race": (
        "processes",
        "8 processes open a database/schema that does not exist yet at the same moment",
        r_first_use,
        0.5,
        ("sqlite", "postgres"),
    ),
    "pg_terminate_backend": (
        "commits",
        "our backends terminated before/during/after a commit, then at random moments under 4 writers",
        r_terminate,
        1.5,
        ("postgres",),
    ),
    "lost acknowledgement": (
        "commits",
        "a proxy drops the server's answer to a committed write; the retry must not duplicate",
        r_lost_ack,
        0.5,
        ("postgres",),
    ),
    "memory": (
        "turns",
        "Runner.run turns (ScriptedModel) through one process; no Agent/RunResult retained, tracemalloc flat",
        r_memory,
        1.5,
        ("sqlite", "postgres"),
    ),
    "server restart": (
        "commits",
        "4 writers commit while the PostgreSQL server restarts",
        r_restart,
        0.0,
        ("postgres",),
    ),
}


async def soak_backend(
    kind: str, minutes: float, only: list[str], restart: bool, command: str
) -> list[Figure]:
    names = [
        n
        for n, spec in SCENARIOS.items()
        if kind in spec[4] and (not only or n in only) and (n != "server restart" or restart)
    ]
    weights = {n: SCENARIOS[n][3] or 0.5 for n in names}
    total = sum(weights.values())
    figures: list[Figure] = []
    for name in names:
        unit, _, round_fn, _, _ = SCENARIOS[name]
        budget = minutes * 60 * weights[name] / total
        fig = Figure(
            kind, name, unit, command=command, date=datetime.now(timezone.utc).strftime("%Y-%m-%d")
        )
        rng = random.Random()
        start = time.monotonic()
        db = new_db(kind, prefix="txs_soak")
        try:
            while True:
                left = budget - (time.monotonic() - start)
                tries, problems, notes = await round_fn(db, rng, left)
                fig.rounds += 1
                fig.tries += tries
                fig.violations += len(problems)
                fig.examples += problems[: max(0, 5 - len(fig.examples))]
                for key, value in notes.items():
                    if isinstance(value, (int, float)) and key in fig.notes and "bytes" not in key:
                        fig.notes[key] += value
                    else:
                        fig.notes[key] = value
                if name in ("server restart", "memory") or time.monotonic() - start >= budget:
                    break
        except Exception as exc:  # noqa: BLE001 - a crashed scenario is reported, not hidden
            fig.violations += 1
            fig.examples.append(f"scenario crashed: {type(exc).__name__}: {exc}")
        finally:
            await db.drop()
        fig.seconds = round(time.monotonic() - start, 1)
        figures.append(fig)
        print(
            f"{kind:8} {name:22} {fig.tries:7} {unit:13} violations={fig.violations} "
            f"rounds={fig.rounds} {fig.seconds}s {fig.notes}",
            flush=True,
        )
        for example in fig.examples:
            print(f"    ! {example[:300]}", flush=True)
    return figures


# --------------------------------------------------------------------------- document


def _load(doc: str) -> dict[str, dict[str, Any]]:
    match = DATA.search(doc)
    return json.loads(match.group(1)) if match else {}


def _render(data: dict[str, dict[str, Any]]) -> str:
    lines = [
        BEGIN,
        "",
        "| backend | scenario | tries | violations | duration | command | date | notes |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    order = list(SCENARIOS)
    for key in sorted(
        data,
        key=lambda k: (
            data[k]["backend"],
            order.index(data[k]["scenario"]) if data[k]["scenario"] in order else 99,
        ),
    ):
        f = data[key]
        notes = "; ".join(f"{k}: {v}" for k, v in f["notes"].items())
        lines.append(
            f"| {f['backend']} | {f['scenario']} | {f['tries']} {f['unit']} | {f['violations']} | "
            f"{f['seconds']} s | `{f['command']}` | {f['date']} | {notes} |"
        )
    examples = [(k, e) for k, f in data.items() for e in f.get("examples", [])]
    if examples:
        lines += ["", "Violations seen (first few per scenario):", ""]
        lines += [f"- {k}: {e[:300]}" for k, e in examples]
    # "--" may not appear inside an HTML comment; a JSON escape keeps the value exact.
    blob = json.dumps(data, sort_keys=True).replace("--", "-\\u002d")
    lines += ["", f"<!-- soak-data {blob} -->", "", END]
    return "\n".join(lines)


def write_doc(figures: list[Figure]) -> None:
    doc = DOC.read_text() if DOC.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    data = _load(doc)
    for fig in figures:
        data[f"{fig.backend}/{fig.scenario}"] = asdict(fig)
    block = _render(data)
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc = head + block + tail
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability.soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--backend", choices=["sqlite", "postgres"], action="append", help="default: both"
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="per backend (default 5)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=list(SCENARIOS),
        help="run only these scenarios",
    )
    parser.add_argument(
        "--restart", action="store_true", help="also restart the PostgreSQL server mid-run"
    )
    parser.add_argument(
        "--no-write", action="store_true", help=f"do not update {DOC.relative_to(REPO)}"
    )
    args = parser.parse_args(argv)
    backends = args.backend or ["sqlite", "postgres"]
    command = shlex.join(
        ["python", "-m", "tests.reliability.soak", *(sys.argv[1:] if argv is None else argv)]
    )
    figures: list[Figure] = []
    for kind in backends:
        if kind == "postgres":
            try:
                asyncio.run(pg_execute("SELECT 1"))
            except Exception as exc:  # noqa: BLE001
                print(f"postgres: skipped, no server: {exc}")
                continue
        figures += asyncio.run(
            soak_backend(kind, args.minutes, args.only, args.restart, command.strip())
        )
    if not args.no_write and figures:
        write_doc(figures)
        print(f"figures written to {DOC}")
    return 1 if any(f.violations for f in figures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
