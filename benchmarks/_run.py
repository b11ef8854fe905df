"""Orchestration: run every workload on every backend, then write the results."""

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
from collections.abc import Callable
from typing import Any

from . import _env, _report, _workloads, breakdown, peers
from ._config import Config
from ._data import SAME_WORK_ROWS, item_bytes
from ._subjects import Subject, pg_schema, postgres_subjects, sqlite_subjects

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("a", "b", "c", "d", "e", "f", "g")
#: Where in a run the core's own CPU per commit is measured, each time in a fresh process.
CORE_CPU_WHEN = ("before the workloads", "between SQLite and PostgreSQL", "after the workloads")

Result = dict[str, Any]


def default_dsn() -> str:
    return (
        os.environ.get("SESSIONS_BENCH_POSTGRES_DSN")
        or os.environ.get("SESSIONS_TEST_POSTGRES_DSN")
        or DEFAULT_PG_DSN
    )


class Progress:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f}s] {message}", file=sys.stderr, flush=True)


async def _postgres_facts(dsn: str) -> tuple[str | None, dict[str, str]]:
    """``(problem, facts)``: ``problem`` is ``None`` when the server answers and our
    PostgreSQL backend imports."""
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:
        return "asyncpg is not installed", {}
    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except Exception as exc:  # noqa: BLE001 - reported
        return f"no PostgreSQL server: {type(exc).__name__}: {exc}", {}
    try:
        facts: dict[str, Any] = {
            "postgres_server": str(await conn.fetchval("SHOW server_version")),
            "postgres_max_connections": str(await conn.fetchval("SHOW max_connections")),
        }
        try:
            directory = str(await conn.fetchval("SHOW data_directory"))
        except asyncpg.PostgresError:  # needs pg_read_all_settings
            directory = ""
        if directory:
            disk = _env.local_disk(directory)
            if disk is not None:
                facts["postgres_disk"] = disk
    finally:
        await conn.close()
    try:
        from sessions.postgres import PostgresStore  # noqa: F401
    except ImportError as exc:
        return f"sessions.postgres is not available yet ({exc})", facts
    return None, facts


async def _record_durability(subjects: list[Subject], into: dict[str, Any]) -> None:
    """Each subject's durability settings, read back from its own connections (once)."""
    for subject in subjects:
        if subject.key in into:
            continue
        try:
            into[subject.key] = {"label": subject.label, **await subject.durability()}
        except Exception as exc:  # noqa: BLE001 - reported in the results
            into[subject.key] = {"label": subject.label, "error": f"{type(exc).__name__}: {exc}"}


async def _single_session_workloads(
    backend: str,
    make: Callable[[str], list[Subject]],
    cfg: Config,
    which: set[str],
    results: Result,
    progress: Progress,
) -> None:
    durability = results["durability"].setdefault(backend, {})
    steps: list[tuple[str, str, Any]] = []
    if "a" in which:
        steps.append(("a", "commit_per_turn", _workloads.commit_per_turn))
    if "b" in which:
        steps.append(("b", "buffered_run", _workloads.buffered_run))
    for tag, name, fn in steps:
        progress(f"{backend} ({tag}) {name}")
        subjects, failed = await _workloads.open_all(make(tag))
        for key, why in failed.items():
            results["failures"].append(f"{backend} {name} {key}: {why}")
        try:
            results[name][backend] = await fn(subjects, cfg, progress)
            await _record_durability(subjects, durability)
        finally:
            await _workloads.close_all(subjects)
    if "c" in which:
        progress(f"{backend} (c) concurrency {cfg.concurrency}")
        results["concurrency"][backend] = await _workloads.concurrency(
            lambda: make("c"), cfg, progress, lambda s: _record_durability(s, durability)
        )
    if "d" in which:
        progress(f"{backend} (d) reads vs history {cfg.history} and sessions {cfg.sessions}")
        subjects, failed = await _workloads.open_all(make("d"))
        for key, why in failed.items():
            results["failures"].append(f"{backend} reads {key}: {why}")
        try:
            results["history"][backend] = await _workloads.history_growth(subjects, cfg, progress)
            results["sessions"][backend] = await _workloads.sessions_growth(subjects, cfg, progress)
            await _record_durability(subjects, durability)
        finally:
            await _workloads.close_all(subjects)


async def _memory(backend: str, cfg: Config, dsn: str, schema: str) -> Result:
    command = [
        sys.executable,
        "-m",
        "benchmarks._memory",
        "--backend",
        backend,
        "--turns",
        str(cfg.mem_turns),
        "--warmup",
        str(cfg.mem_warmup),
        "--sessions",
        str(cfg.mem_sessions),
        "--agent-runs",
        str(cfg.agent_runs),
        "--dsn",
        dsn,
        "--schema",
        schema,
    ]
    return await _json_from(command, timeout=600, what="memory benchmark")


async def _core_cpu(cfg: Config, when: str) -> Result:
    """``breakdown.core_cpu`` in a fresh process: what the workloads before it leave in
    this one (objects for the collector to walk, threads) must not weigh on it. ``when``
    says where in the run it was measured; the load average at its start is kept."""
    command = [sys.executable, "-m", "benchmarks.breakdown", "--core-cpu-only"]
    if cfg.quick:
        command.append("--quick")
    load = _env.loadavg()
    found = await _json_from(command, timeout=None, what="core CPU measurement")
    return {**found, "when": when, "loadavg": load}


def merge_core_cpu(processes: list[Result]) -> Result:
    """The core-CPU figure of a run from its fresh processes (:data:`CORE_CPU_WHEN`): the
    median of their medians, each process kept. The same code in two processes has been
    seen to run 18.5 and 30 µs on this kind of machine, so one process is not a figure."""
    measured = [p for p in processes if "us" in p]
    if not measured:
        return {"error": "; ".join(str(p.get("error")) for p in processes), "processes": processes}
    return {
        "us": statistics.median(p["us"] for p in measured),
        "processes": processes,
        "goal_us": measured[0]["goal_us"],
        "turns_per_round": measured[0]["turns_per_round"],
        "clock": measured[0]["clock"],
    }


async def _json_from(command: list[str], *, timeout: float | None, what: str) -> Result:
    """Run ``command`` (a benchmark module) in a fresh process from the repository root;
    its last line of output, as JSON, or ``{"error": ...}``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return {"error": f"{what} timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.decode(errors='replace')[-800:]}"}
    result: Result = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def _memory_all(
    backends: list[str], cfg: Config, dsn: str, schema: str, results: Result, progress: Progress
) -> None:
    """(e) in fresh processes: one after the other (full runs), at once (quick runs)."""
    progress(f"(e) memory in subprocesses: {', '.join(backends)}")
    if cfg.quick:
        found = await asyncio.gather(*(_memory(b, cfg, dsn, schema) for b in backends))
        results["memory"].update(zip(backends, found, strict=True))
        return
    for backend in backends:
        results["memory"][backend] = await _memory(backend, cfg, dsn, schema)
        progress(f"  (e) {backend} done")


async def run(args: argparse.Namespace, argv: list[str]) -> Result:
    cfg = Config.quick_() if args.quick else Config.full()
    which = set(args.only) if args.only else set(WORKLOADS)
    progress = Progress()
    started = time.perf_counter()
    results: Result = {
        "meta": {
            "quick": cfg.quick,
            "command": " ".join(["python -m benchmarks", *argv]),
            "source": _env.source(),
            "machine": _env.machine(),
            "item_bytes": item_bytes(),
            "pool": cfg.pool,
            "same_work_rows": list(SAME_WORK_ROWS),
            "config": {k: v for k, v in vars(cfg).items() if k != "rounds_note"},
            "notes": [],
        },
        "failures": [],
        "durability": {},
        "commit_per_turn": {},
        "buffered_run": {},
        "concurrency": {},
        "history": {},
        "sessions": {},
        "memory": {},
    }
    meta = results["meta"]
    backends = args.backends
    dsn = args.pg_dsn
    pg_problem: str | None = None
    if "postgres" in backends:
        pg_problem, facts = await _postgres_facts(dsn)
        meta.update(facts)
        if pg_problem is not None:
            if args.require_postgres:
                raise SystemExit(f"--require-postgres: {pg_problem}")
            meta["notes"].append(f"PostgreSQL half skipped: {pg_problem}")
            backends = [b for b in backends if b != "postgres"]
    schema = f"txs_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"

    cores: list[Result] = []

    async def core_cpu(when: str) -> None:
        progress(f"the core's own CPU per commit, {when} (a fresh process)")
        cores.append(await _core_cpu(cfg, when))

    await core_cpu(CORE_CPU_WHEN[0])
    with tempfile.TemporaryDirectory(prefix="txs-bench-") as tmp:
        meta["sqlite_disk"] = _env.disk(tmp)
        meta["fsync"] = _env.fsync_latency(tmp)
        if "sqlite" in backends:
            progress("SQLite: databases under a temporary directory")
            await _single_session_workloads(
                "sqlite",
                lambda tag: sqlite_subjects(tmp, tag),
                cfg,
                which,
                results,
                progress,
            )
        await core_cpu(CORE_CPU_WHEN[1])
        if "postgres" in backends:
            progress(f"PostgreSQL: schema {schema}")
            await pg_schema(dsn, schema, drop=False)
            try:

                def make_pg(tag: str) -> list[Subject]:
                    pool = cfg.pool if tag == "c" else 2
                    return postgres_subjects(dsn, schema, pool, tag)

                await _single_session_workloads("postgres", make_pg, cfg, which, results, progress)
                if "e" in which:
                    await _memory_all(backends, cfg, dsn, schema, results, progress)
            finally:
                await pg_schema(dsn, schema, drop=True)
        elif "e" in which:
            await _memory_all(backends, cfg, dsn, schema, results, progress)
        if "g" in which:
            results["peers"] = await peers.run(
                backends,
                cfg,
                directory=tmp,
                dsn=dsn,
                schema=schema,
                require=bool(getattr(args, "require_peers", False)),
                progress=progress,
            )

    await core_cpu(CORE_CPU_WHEN[2])
    results["core_cpu"] = merge_core_cpu(cores)
    if "f" in which:
        progress("(f) step-by-step breakdown of one commit")
        results["breakdown"] = await breakdown.run(
            backends, dsn if "postgres" in backends else None, cfg.quick, progress
        )

    meta["seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = _env.loadavg()
    results["targets"] = _report.check_targets(results)

    return results


def write_results(results: Result, out: str | None) -> tuple[str, str]:
    """Write ``latest.*`` (full runs) or ``quick.*`` (quick runs) and the plots;
    returns ``(directory, markdown)``."""
    quick = bool(results["meta"]["quick"])
    out_dir = out or (tempfile.mkdtemp(prefix="txs-bench-quick-") if quick else RESULTS_DIR)
    os.makedirs(out_dir, exist_ok=True)
    stem = "quick" if quick else "latest"
    with open(os.path.join(out_dir, f"{stem}.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=str)
    text = _report.markdown(results)
    with open(os.path.join(out_dir, f"{stem}.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    _report.plots(results, out_dir)
    return out_dir, text


async def profile(args: argparse.Namespace) -> str:
    """Profile our commit-per-turn path with pyinstrument; returns the text report."""
    from pyinstrument import Profiler

    from ._data import TurnSource

    source = TurnSource()
    with tempfile.TemporaryDirectory(prefix="txs-bench-prof-") as tmp:
        subject: Subject
        schema = ""
        if args.profile == "sqlite":
            subject = sqlite_subjects(tmp, "p", only={"ours_sqlite"})[0]
        else:
            schema = f"txs_bench_prof_{os.getpid()}"
            await pg_schema(args.pg_dsn, schema, drop=False)
            subject = postgres_subjects(args.pg_dsn, schema, 2, "p", only={"ours_pg"})[0]
        await subject.open()
        try:
            for _ in range(50):
                await subject.turn("p", source.next())
            profiler = Profiler(interval=0.0002, async_mode="disabled")
            profiler.start()
            for _ in range(args.profile_turns):
                await subject.turn("p", source.next())
            profiler.stop()
        finally:
            await subject.close()
            if schema:
                await pg_schema(args.pg_dsn, schema, drop=True)
    text: str = profiler.output_text(unicode=True, color=False, show_all=False)
    return text
