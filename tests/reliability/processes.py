"""Scenarios with real child processes: SIGKILL mid-commit, many writers, many poppers,
concurrent first use of a fresh database."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import uuid
from typing import Any

from .harness import TargetLike, new_db, open_url, read_history, spawn
from .invariant import Ledger, check_history, make_batch, tag_of

CHILD_TIMEOUT = 60.0


async def _ready(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), CHILD_TIMEOUT)
    if line.strip() != b"ready":
        err = b""
        if proc.stderr is not None:
            proc.kill()
            err = await proc.stderr.read()
        raise RuntimeError(f"child did not start: {line!r} {err.decode(errors='replace')[-2000:]}")


async def start_together(children: list[asyncio.subprocess.Process]) -> None:
    for child in children:
        await _ready(child)
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
    await asyncio.gather(*(c.stdin.drain() for c in children if c.stdin is not None))


async def crash_scenario(
    target: TargetLike, kills: int, *, seed: int | None = None, max_delay: float = 0.08
) -> tuple[int, list[str], dict[str, Any]]:
    """SIGKILL a committing child ``kills`` times; check the database after each kill.

    Returns ``(kills, violations, figures)``.
    """
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    sid = f"crash-{uuid.uuid4().hex[:12]}"
    ledger = Ledger()
    problems: list[str] = []
    committed_total = 0
    in_commit = 0  # kills that landed while commit() was running
    for writer in range(kills):
        proc = await spawn("crash-writer", target.url, sid, str(writer))
        await _ready(proc)
        await asyncio.sleep(rng.uniform(0.0, max_delay))
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        assert proc.stdout is not None and proc.stderr is not None
        out, err = await asyncio.wait_for(
            asyncio.gather(proc.stdout.read(), proc.stderr.read()), CHILD_TIMEOUT
        )
        code = await proc.wait()
        if code != -signal.SIGKILL:
            problems.append(
                f"kill {writer}: child exited with {code} before the kill: "
                f"{err.decode(errors='replace')[-1000:]}"
            )
        lines = out.split()
        reported = [int(x) for x in lines if not x.startswith(b"+")]
        if reported != list(range(len(reported))):
            problems.append(f"kill {writer}: child reported {reported[:20]}")
        in_commit += bool(lines) and lines[-1].startswith(b"+")
        for b in reported:
            ledger.confirm(writer, b)
        ledger.maybe(writer, len(reported))  # in flight when killed: may or may not be stored
        committed_total += len(reported)
        problem = await target.integrity_problem()
        if problem is not None:
            problems.append(f"kill {writer}: {problem}")
        history = await read_history(target, sid)
        problems += [f"kill {writer} (seed {seed}): {p}" for p in check_history(history, ledger)]
        if problems:
            break
    figures = {"seed": seed, "batches confirmed": committed_total, "kills in commit()": in_commit}
    return kills, problems, figures


async def _collect(proc: asyncio.subprocess.Process) -> tuple[int, bytes, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = await asyncio.wait_for(
        asyncio.gather(proc.stdout.read(), proc.stderr.read()), CHILD_TIMEOUT * 3
    )
    return await proc.wait(), out, err


def _last_json(out: bytes) -> Any:
    lines = [x for x in out.decode().splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


async def concurrent_writers(
    target: TargetLike, procs: int, tasks: int, batches: int
) -> tuple[int, list[str]]:
    """``procs`` processes x ``tasks`` tasks commit to one shared session and to their own."""
    shared = f"many-{uuid.uuid4().hex[:12]}"
    children = [
        await spawn(
            "writer", target.url, shared, str(p * 100), str(tasks), str(batches), stdin=True
        )
        for p in range(procs)
    ]
    await start_together(children)
    results = await asyncio.gather(*(_collect(c) for c in children))
    problems: list[str] = []
    ledger = Ledger()
    for p, (code, out, err) in enumerate(results):
        if code != 0 or _last_json(out) is None:
            problems.append(f"process {p} failed ({code}): {err.decode(errors='replace')[-1500:]}")
            continue
        for t in range(tasks):
            for b in range(batches):
                ledger.confirm(p * 100 + t, b)
    problems += [
        f"shared session: {x}" for x in check_history(await read_history(target, shared), ledger)
    ]
    for w in ledger.confirmed:
        own = Ledger({w: list(range(batches))})
        history = await read_history(target, f"{shared}-own-{w}")
        problems += [f"session of writer {w}: {x}" for x in check_history(history, own)]
    return procs * tasks * batches * 2, problems


async def concurrent_poppers(
    target: TargetLike, procs: int, items: int
) -> tuple[int, list[str], dict[str, Any]]:
    """``procs`` processes autocommit-pop one session empty: each item exactly once."""
    sid = f"pop-{uuid.uuid4().hex[:12]}"
    store = await open_url(target.url)
    try:
        session = store.session(sid)
        await session.add_items(make_batch(0, 0, size=items))
        await session.commit()
        await session.close()
    finally:
        await store.close()
    children = [await spawn("popper", target.url, sid, stdin=True) for _ in range(procs)]
    await start_together(children)
    results = await asyncio.gather(*(_collect(c) for c in children))
    problems: list[str] = []
    popped: list[tuple[int, ...]] = []
    per_process: list[int] = []
    conflicts = 0
    for p, (code, out, err) in enumerate(results):
        data = _last_json(out)
        if code != 0 or data is None:
            problems.append(f"popper {p} failed ({code}): {err.decode(errors='replace')[-1500:]}")
            continue
        popped += [tuple(t) for t in data["popped"]]
        per_process.append(len(data["popped"]))
        conflicts += data["conflicts"]
    indexes = sorted(t[2] for t in popped)
    if indexes != list(range(items)):
        dup = sorted({i for i in indexes if indexes.count(i) > 1})
        missing = sorted(set(range(items)) - set(indexes))
        problems.append(f"items popped twice: {dup[:20]}; never popped: {missing[:20]}")
    left = await read_history(target, sid)
    if left:
        problems.append(f"{len(left)} item(s) left after every popper saw an empty session")
    problems += left.problems
    return items, problems, {"conflicts surfaced": conflicts, "popped per process": per_process}


async def concurrent_first_use(
    kind: str, procs: int, directory: str | None = None
) -> tuple[int, list[str]]:
    """``procs`` processes open a database (SQLite file / PG schema) that does not exist yet,
    at the same moment, and each commits one batch."""
    db = new_db(kind, directory, prefix="txs_rel_fresh")
    sid = "first-use"
    problems: list[str] = []
    try:
        children = [await spawn("first-use", db.url, sid, str(w), stdin=True) for w in range(procs)]
        await start_together(children)
        results = await asyncio.gather(*(_collect(c) for c in children))
        ledger = Ledger()
        for w, (code, out, err) in enumerate(results):
            if code != 0 or b"ok" not in out:
                problems.append(
                    f"process {w} failed on first use ({code}): {err.decode(errors='replace')[-1500:]}"
                )
            else:
                ledger.confirm(w, 0)
        history = await read_history(db, sid)
        problems += check_history(history, ledger)
        problem = await db.integrity_problem()
        if problem is not None:
            problems.append(problem)
    finally:
        await db.drop()
    return procs, problems


def tags(items: list[Any]) -> list[Any]:
    return [tag_of(i) for i in items]
