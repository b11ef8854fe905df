"""Failover, measured: the primary SIGKILLed and its standby promoted under load.

``python -m benchmarks.failover`` runs ``scripts/pg_standby.sh up`` (two PostgreSQL
clusters of our own, ports 5434 and 5435, never the main one), then for each round and
replication mode (synchronous, asynchronous):

1. writer processes open a ``PostgresStore`` on the multi-host DSN
   ``postgresql://postgres@127.0.0.1:5434,127.0.0.1:5435/postgres?target_session_attrs=read-write``
   and commit 3-item batches to sessions of their own, several tasks each (so group
   commit is in play); every commit that returns is reported ("acknowledged"); a commit
   that raises is reported and committed again (the staged batch keeps its id);
2. the primary's postmaster and every process of its cluster are SIGKILLed at once;
3. the standby is promoted (``pg_ctlcluster promote``) right away;
4. the writers go on until their time is up; then every session is read back from the
   new primary and compared with what was acknowledged;
5. the dead primary is rebuilt as the new primary's standby (``pg_basebackup``).

Figures per round: acknowledged commits lost (must be 0 with synchronous replication),
duplicated or torn batches (must be 0), seconds from the kill until the first commit
and until every writer's commit succeeds again, and the errors ``commit()`` raised to
callers meanwhile (with whether their outcome was known). Results go to
``benchmarks/results/failover.json`` and, through ``python -m benchmarks.docs``, to
docs/RELIABILITY.md. ``--quick`` (what the test suite runs) is one short round per
mode and writes to a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import _env

Result = dict[str, Any]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "pg_standby.sh")
RESULTS = os.path.join(ROOT, "benchmarks", "results", "failover.json")
PORTS = {"txs_fo1": 5434, "txs_fo2": 5435}
DSN = "postgresql://postgres@127.0.0.1:5434,127.0.0.1:5435/postgres?target_session_attrs=read-write"
SCHEMA = "txs_failover"
ITEMS_PER_BATCH = 3
GIVE_UP = 120.0  # seconds past its time a writer keeps retrying before it fails the run


# ----------------------------------------------------------------------------- clusters


def cluster(*args: str) -> str:
    """Run ``scripts/pg_standby.sh ARGS``; its output. Raises with its stderr on failure."""
    proc = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pg_standby.sh {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def roles() -> dict[str, str]:
    """``cluster name -> primary | standby | down``."""
    found = {}
    for line in cluster("status").splitlines():
        name, _port, role, _state = line.split()
        found[name] = role
    return found


def primary() -> str:
    current = [name for name, role in roles().items() if role == "primary"]
    if len(current) != 1:
        raise RuntimeError(f"expected one primary, found {current}")
    return current[0]


def kill_cluster(name: str) -> tuple[int, float]:
    """SIGKILL the cluster's postmaster and every process of it at once: how many, and
    when the last signal was sent."""
    import psutil  # type: ignore[import-untyped]

    with open(f"/var/lib/postgresql/15/{name}/postmaster.pid", encoding="utf-8") as fh:
        pid = int(fh.readline())
    postmaster = psutil.Process(pid)
    victims = [postmaster, *postmaster.children(recursive=True)]
    for process in victims:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    sent = time.time()
    psutil.wait_procs(victims, timeout=10)
    return len(victims), sent


def available() -> str | None:
    """``None`` when this machine can run the experiment, else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (pg_createcluster, pg_ctlcluster)"
    for tool in ("pg_createcluster", "pg_ctlcluster", "runuser"):
        if subprocess.run(["which", tool], capture_output=True, check=False).returncode:
            return f"{tool} not found"
    if not os.path.exists("/usr/lib/postgresql/15/bin/pg_basebackup"):
        return "PostgreSQL 15 binaries not found"
    return None


# ----------------------------------------------------------------------------- writer


async def _writer(prefix: str, tasks: int, seconds: float) -> None:
    from sessions import RetryPolicy
    from sessions.errors import CommitError
    from sessions.postgres import PostgresStore

    def say(**fields: Any) -> None:
        print(json.dumps({"t": time.time(), **fields}), flush=True)

    store = await PostgresStore.open(
        DSN, schema=SCHEMA, min_size=1, max_size=4, command_timeout=10, retry=RetryPolicy()
    )
    say(ready=True)
    deadline = time.monotonic() + seconds

    async def task(n: int) -> None:
        sid = f"{prefix}-{n}"
        session = store.session(sid)
        batch = 0
        while time.monotonic() < deadline:
            await session.add_items(
                [{"s": sid, "b": batch, "i": i} for i in range(ITEMS_PER_BATCH)]
            )
            while True:
                began = time.time()
                try:
                    await session.commit()
                except CommitError as exc:
                    say(err=sid, b=batch, known=exc.outcome_known, what=str(exc)[:200])
                    if time.monotonic() > deadline + GIVE_UP:
                        raise SystemExit(f"{sid}: no commit succeeded for {GIVE_UP:g} s") from exc
                    await asyncio.sleep(0.05)
                else:
                    say(ack=sid, b=batch, began=began)
                    break
            batch += 1

    try:
        await asyncio.gather(*(task(n) for n in range(tasks)))
    finally:
        await store.close()
    say(done=True)


# ----------------------------------------------------------------------------- one round


@dataclass
class Round:
    mode: str
    primary: str
    standby: str
    acks: list[tuple[float, str, int, float]] = field(default_factory=list)
    errors: list[tuple[float, str, bool, str]] = field(default_factory=list)
    killed_at: float = 0.0
    promoted_at: float = 0.0
    processes_killed: int = 0


async def _read_lines(proc: asyncio.subprocess.Process, round_: Round, ready: list[bool]) -> None:
    assert proc.stdout is not None
    async for raw in proc.stdout:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if "ack" in line:
            round_.acks.append((line["t"], line["ack"], line["b"], line["began"]))
        elif "err" in line:
            round_.errors.append((line["t"], line["err"], line["known"], line["what"]))
        elif line.get("ready"):
            ready.append(True)


async def _run_round(
    mode: str, n: int, writers: int, tasks: int, before: float, after: float
) -> Round:
    old = primary()
    round_ = Round(mode, old, next(name for name in PORTS if name != old))
    prefix = f"r{n}-{mode}-{os.getpid()}"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.failover",
            "--writer",
            f"{prefix}-w{w}",
            "--tasks",
            str(tasks),
            "--seconds",
            str(before + after),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for w in range(writers)
    ]
    ready: list[bool] = []
    readers = [asyncio.ensure_future(_read_lines(p, round_, ready)) for p in procs]
    stderrs = [asyncio.ensure_future(p.stderr.read()) for p in procs if p.stderr is not None]
    while len(ready) < writers:
        if any(p.returncode is not None for p in procs):
            raise RuntimeError("a writer died before it was ready")
        await asyncio.sleep(0.05)
    await asyncio.sleep(before)
    round_.processes_killed, round_.killed_at = await asyncio.to_thread(kill_cluster, old)
    await asyncio.to_thread(cluster, "promote", round_.standby)
    round_.promoted_at = time.time()
    await asyncio.wait_for(
        asyncio.gather(*(p.wait() for p in procs), *readers), timeout=before + after + 300
    )
    failures = [
        err.decode(errors="replace")[-800:]
        for proc, err in zip(procs, await asyncio.gather(*stderrs), strict=True)
        if proc.returncode != 0
    ]
    if failures:
        raise RuntimeError(f"writer failed: {failures[0]}")
    return round_


async def _stored(name: str, prefix: str) -> dict[str, list[tuple[int, int]]]:
    """``session -> [(batch, index), ...]`` in stored order, read from cluster ``name``."""
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{PORTS[name]}/postgres")
    try:
        rows = await conn.fetch(
            f'SELECT session_id, data FROM "{SCHEMA}".txs_items '
            "WHERE session_id LIKE $1 ORDER BY session_id, seq",
            prefix + "%",
        )
    finally:
        await conn.close()
    out: dict[str, list[tuple[int, int]]] = {}
    for sid, data in rows:
        item = json.loads(data)
        out.setdefault(sid, []).append((item["b"], item["i"]))
    return out


def check(round_: Round, stored: dict[str, list[tuple[int, int]]]) -> Result:
    """Lost, duplicated, torn and unacknowledged batches of one round."""
    acked: dict[str, set[int]] = {}
    for _, sid, batch, _ in round_.acks:
        acked.setdefault(sid, set()).add(batch)
    lost = duplicated = torn = extra = 0
    for sid in set(acked) | set(stored):
        items = stored.get(sid, [])
        batches: list[int] = []
        for k in range(0, len(items), ITEMS_PER_BATCH):
            chunk = items[k : k + ITEMS_PER_BATCH]
            whole = [c[1] for c in chunk] == list(range(ITEMS_PER_BATCH)) and len(
                {c[0] for c in chunk}
            ) == 1
            if not whole:
                torn += 1
                continue
            batches.append(chunk[0][0])
        duplicated += len(batches) - len(set(batches))
        present = set(batches)
        lost += len(acked.get(sid, set()) - present)
        extra += len(present - acked.get(sid, set()))
        if batches != sorted(batches):
            torn += 1  # out of commit order
    return {"lost": lost, "duplicated": duplicated, "torn": torn, "unacknowledged": extra}


def summarize(round_: Round, verdict: Result) -> Result:
    """One round's figures. "Again" counts only commits begun after the kill: a commit
    acknowledged by the old primary a moment before it died proves nothing."""
    kill = round_.killed_at
    sessions = {sid for _, sid, _, _ in round_.acks}
    again: dict[str, float] = {}
    for t, sid, _, began in round_.acks:
        if began > kill:
            again[sid] = min(again.get(sid, t), t)
    during = [e for e in round_.errors if e[0] > kill]
    return {
        "mode": round_.mode,
        "killed": round_.primary,
        "promoted": round_.standby,
        "processes_killed": round_.processes_killed,
        "acknowledged": len(round_.acks),
        "acknowledged_before_kill": sum(1 for t, _, _, _ in round_.acks if t <= kill),
        **verdict,
        "promotion_s": round(round_.promoted_at - kill, 3),
        "first_commit_after_kill_s": round(min(again.values()) - kill, 3) if again else None,
        "every_writer_again_s": round(max(again.values()) - kill, 3)
        if again and set(again) == sessions
        else None,
        "errors_raised": len(during),
        "errors_outcome_unknown": sum(1 for e in during if not e[2]),
        "error_examples": sorted({e[3][:160] for e in during})[:3],
    }


async def experiment(
    modes: list[str],
    rounds: int,
    writers: int,
    tasks: int,
    before: float,
    after: float,
    progress: Callable[[str], None],
) -> Result:
    started = time.perf_counter()
    results: Result = {
        "meta": {
            "command": "python -m benchmarks.failover " + " ".join(sys.argv[1:]),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "source": _env.source(),
            "machine": _env.machine(),
            "writers": writers,
            "tasks_per_writer": tasks,
            "seconds_before_kill": before,
            "seconds_after_kill": after,
            "items_per_batch": ITEMS_PER_BATCH,
            "dsn": DSN,
        },
        "rounds": [],
    }
    n = 0
    for mode in modes:
        progress(f"failover: clusters up, {mode} replication")
        await asyncio.to_thread(cluster, "up", mode)
        for _ in range(rounds):
            n += 1
            round_ = await _run_round(mode, n, writers, tasks, before, after)
            prefix = f"r{n}-{mode}-{os.getpid()}"
            verdict = check(round_, await _stored(round_.standby, prefix))
            summary = summarize(round_, verdict)
            results["rounds"].append(summary)
            progress(f"  round {n} ({mode}): {json.dumps(summary)}")
            await asyncio.to_thread(cluster, "rebuild", round_.primary)
            await asyncio.to_thread(cluster, "mode", mode)
    results["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    return results


# ----------------------------------------------------------------------------- docs


def render(results: Result) -> str:
    """docs/RELIABILITY.md: the failover figures."""
    meta = results["meta"]
    from ._report import _table, source_line

    rows = []
    for r in results["rounds"]:
        rows.append(
            [
                r["mode"],
                f"{r['killed']} → {r['promoted']}",
                f"{r['acknowledged']:,}",
                str(r["lost"]),
                str(r["duplicated"] + r["torn"]),
                "–" if r["promotion_s"] is None else f"{r['promotion_s']:.2f}",
                "–"
                if r["first_commit_after_kill_s"] is None
                else f"{r['first_commit_after_kill_s']:.2f}",
                "–" if r["every_writer_again_s"] is None else f"{r['every_writer_again_s']:.2f}",
                f"{r['errors_raised']} ({r['errors_outcome_unknown']} unknown)",
            ]
        )
    lines = [
        f"Run: {meta['date']}, `{meta['command']}`, took {meta.get('seconds', 0):.0f} s. "
        f"{source_line(meta)} {meta['writers']} writer processes × "
        f"{meta['tasks_per_writer']} sessions each, {meta['items_per_batch']}-item commits; "
        f"primary SIGKILLed (postmaster and every process of its cluster) "
        f"{meta['seconds_before_kill']:g} s into the load, standby promoted at once; "
        f"load went on for {meta['seconds_after_kill']:g} s in all after the kill.",
        "",
    ]
    lines += _table(
        [
            "replication",
            "killed → promoted",
            "commits acknowledged",
            "acknowledged, then lost",
            "duplicated or torn",
            "promotion s",
            "first commit again s",
            "every writer again s",
            "errors raised to callers",
        ],
        rows,
    )
    examples = sorted({e for r in results["rounds"] for e in r["error_examples"]})[:2]
    if examples:
        lines += ["", "Errors raised, for example: " + "; ".join(f"`{e}`" for e in examples)]
    return "\n".join(lines) + "\n"


def _register() -> None:
    from . import docs

    docs.register("failover", "failover.json", render, "python -m benchmarks.failover")
    docs.register(
        "failover-summary", "failover.json", docs.failover_summary, "python -m benchmarks.failover"
    )


_register()


# ----------------------------------------------------------------------------- main

LOCK = "/tmp/txsessions-failover.lock"


@contextlib.contextmanager
def _exclusive(progress: Callable[[str], None]) -> Iterator[None]:
    """One experiment at a time on this machine: the clusters and ports are shared by
    every checkout (several test suites may run at once)."""
    with open(LOCK, "a", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"failover: waiting for another run to finish ({LOCK})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.failover", description=__doc__)
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--tasks", type=int, default=8, help="sessions per writer process")
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--writers", type=int, default=4, help="writer processes")
    parser.add_argument("--rounds", type=int, default=3, help="failovers per mode")
    parser.add_argument("--modes", nargs="+", choices=["sync", "async"], default=["sync", "async"])
    parser.add_argument("--before", type=float, default=4.0, help="seconds of load before the kill")
    parser.add_argument("--after", type=float, default=8.0, help="seconds of load after it")
    parser.add_argument("--quick", action="store_true", help="one short round per mode")
    parser.add_argument("--out", help="results file (default: benchmarks/results/failover.json)")
    parser.add_argument("--keep", action="store_true", help="leave the two clusters running")
    args = parser.parse_args(argv)
    if args.writer:
        asyncio.run(_writer(args.writer, args.tasks, args.seconds))
        return 0
    problem = available()
    if problem:
        print(f"cannot run the failover experiment here: {problem}", file=sys.stderr)
        return 2
    if args.quick:
        args.rounds, args.writers, args.tasks, args.before, args.after = 1, 2, 4, 1.5, 4.0
    out = args.out or (
        os.path.join(tempfile.mkdtemp(prefix="txs-failover-"), "failover.json")
        if args.quick
        else RESULTS
    )

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with _exclusive(progress):
        try:
            results = asyncio.run(
                experiment(
                    args.modes,
                    args.rounds,
                    args.writers,
                    args.tasks,
                    args.before,
                    args.after,
                    progress,
                )
            )
        finally:
            if not args.keep:
                cluster("down")
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(render(results))
    print(f"results written to {out}", file=sys.stderr)
    if out == RESULTS:
        from . import docs

        docs.update(progress)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
